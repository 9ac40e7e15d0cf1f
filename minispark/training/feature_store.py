"""A store of the target's features per answer: online training prefills an answer once, later epochs read it.

Online training (``training/online.py``) runs one teacher-forced prefill of prompt + answer each time an answer
enters the shuffle buffer, i.e. once an epoch. With sparse anchors that prefill is most of a step (two thirds of
the time of a 64-anchors-an-answer run here), so a run of several epochs spends most of its time recomputing the
same numbers. ``online_store=DIR`` keeps every answer's captured features (every position, the feature layers
and the final-norm hidden) in ``DIR`` as one safetensors file an answer, in the dtype the target computed them
in, so what is read back is bit-equal to what the prefill gave (tested) and the run's batches and losses do not
change. About 6 × hidden × 2 bytes a position for a bf16 target with 5 feature layers: ~2.2 MB a SmolLM2 answer.

The store's ``feature_store.json`` names what its features are of (the target's identity, the answer set's
config hash, the layers, the cut, the target's dtype and device); a store of anything else is refused, never
mixed in. Each file is written atomically and holds the answer's token ids, checked on every read; a damaged or
mismatched file, or a symbolic link planted in a file's place, is not read but computed again and replaced (and
what killed writes left goes when the store is next opened). The store grows across runs and
resumes after any interruption; runs over the same answers may share one at once
(the rows of the data-scaling curve do, one after another).

    minispark train --recipe smollm2-dspark --answers data/answers/smollm2-135m-instruct \
        --out runs/draft-online max_anchors_per_sample=64 online_store=runs/features
    .venv/bin/python -m pytest -q tests/training/test_online.py -k store
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import safetensors.torch
import torch
from safetensors import SafetensorError

from minispark.core.atomic import sweep_abandoned, write_bytes_atomic, write_json_atomic
from minispark.data.cache_format import config_difference
from minispark.core.errors import MinisparkError, json_reason

MANIFEST = "feature_store.json"
FORMAT, FORMAT_VERSION = "minispark-feature-store", 1


class FeatureStore:
    """``get`` and ``put`` of one answer's captured features, keyed by its sample index."""

    def __init__(self, directory: str | Path, facts: dict[str, Any], dtype: torch.dtype) -> None:
        self.directory, self.facts, self.dtype = Path(directory), facts, dtype
        where = f"online_store {self.directory}"
        if self.directory.exists() and not self.directory.is_dir():
            raise MinisparkError(f"{where}: is a file, not a directory")
        manifest = self.directory / MANIFEST
        if manifest.is_symlink():
            raise MinisparkError(f"{manifest}: is a symbolic link, not something minispark wrote; remove it first")
        if manifest.exists():
            self._check(manifest)
        elif self.directory.is_dir() and any(self.directory.iterdir()):
            raise MinisparkError(f"{where}: not empty and not a minispark feature store (no {MANIFEST}); choose an "
                                 "empty or new directory")
        else:
            write_json_atomic(manifest, {"format": FORMAT, "format_version": FORMAT_VERSION, "facts": facts})
        # What killed writes left goes once, here: a sweep per put would list thousands of files every time.
        sweep_abandoned(self.directory)

    def _check(self, manifest: Path) -> None:
        try:
            data = json.loads(manifest.read_text())
        except (OSError, ValueError, RecursionError) as exc:
            raise MinisparkError(f"{manifest}: unreadable ({json_reason(exc)}); the store only caches the target's "
                                 "features: delete its directory, or use another online_store") from None
        if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("facts"), dict):
            raise MinisparkError(f"{manifest}: not a {FORMAT} manifest")
        if data.get("format_version") != FORMAT_VERSION:
            raise MinisparkError(f"{manifest}: format version {data.get('format_version')!r} (this minispark reads "
                                 f"{FORMAT_VERSION}); use another online_store")
        if (differs := config_difference(data["facts"], self.facts)) is not None:
            key, was, now = differs
            raise MinisparkError(f"online_store {self.directory}: holds features of another {key} ({was!r}, now "
                                 f"{now!r}); use another online_store, or delete that one")

    def path(self, sample_index: int) -> Path:
        return self.directory / f"{sample_index:08d}.safetensors"

    def get(self, sample_index: int, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
        """(features (P, m, d), final hidden (P, d)) in fp32 on the CPU, as ``Target.capture`` gives them, for the
        answer whose whole sequence is ``ids`` (P,); None when the store has no sound file of exactly these ids."""
        path = self.path(sample_index)
        if path.is_symlink() or not path.is_file():
            return None
        try:
            tensors = safetensors.torch.load_file(str(path))
        except (SafetensorError, OSError, ValueError, RuntimeError):  # damaged: computed again and replaced
            return None
        stored, features, final = (tensors.get(k) for k in ("ids", "features", "final"))
        if stored is None or features is None or final is None or not torch.equal(stored, ids.cpu().to(stored.dtype)):
            return None
        if features.dim() != 3 or final.dim() != 2 or len(features) != len(ids) or final.shape != (len(ids),
                                                                                                  features.shape[2]):
            return None
        return features.float(), final.float()

    def put(self, sample_index: int, ids: torch.Tensor, features: torch.Tensor, final: torch.Tensor) -> None:
        """Keep one answer's capture; in the target's dtype, which holds its values exactly."""
        tensors = {"ids": ids.cpu().to(torch.int32).contiguous(),
                   "features": features.to(self.dtype).contiguous(), "final": final.to(self.dtype).contiguous()}
        write_bytes_atomic(self.path(sample_index), safetensors.torch.save(tensors), sweep=False)

    def __len__(self) -> int:
        return sum(1 for _ in self.directory.glob("*.safetensors"))
