"""Copy a trained drafter into the repo's ``drafters/`` folder, small: float weights stored as bf16.

The frozen embedding and lm_head are never stored (they come from the target at load time); the
trainable weights are halved to bf16 (the loader casts them to the config's compute dtype), and
the calibration written by ``minispark calibrate`` comes along. The model card (README.md) is
written by hand from the measured figures.

    python scripts/ship_drafter.py runs/draft-smollm2-dspark/drafter drafters/smollm2-135m-dspark
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file

FILES = ("config.json", "calibration.json")
LIMIT = 32 * 1024 * 1024


def ship(source: Path, dest: Path) -> int:
    """Write ``dest`` (config, bf16 weights, calibration); returns its size in bytes."""
    dest.mkdir(parents=True, exist_ok=True)
    with safe_open(str(source / "model.safetensors"), framework="pt") as handle:
        metadata = handle.metadata()
        weights = {k: handle.get_tensor(k) for k in handle.keys()}
    small = {k: v.to(torch.bfloat16) if v.is_floating_point() else v for k, v in weights.items()}
    with tempfile.TemporaryDirectory(dir=dest) as tmp:
        save_file(small, str(Path(tmp) / "model.safetensors"), metadata=metadata)
        for name in FILES:
            if (source / name).is_file():
                shutil.copy2(source / name, Path(tmp) / name)
        for path in Path(tmp).iterdir():
            path.replace(dest / path.name)
    size = sum(p.stat().st_size for p in dest.iterdir() if p.is_file())
    if size > LIMIT:
        raise SystemExit(f"{dest}: {size} bytes, over the {LIMIT}-byte limit for a shipped drafter")
    return size


if __name__ == "__main__":
    src, dst = (Path(a) for a in sys.argv[1:3])
    print(f"{dst}: {ship(src, dst) / 1e6:.1f} MB")
