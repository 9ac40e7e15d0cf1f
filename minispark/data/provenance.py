"""Which prompts a drafter was trained on, recorded beside it, and the check ``minispark calibrate`` makes with it.

``minispark train`` writes ``training_data.json`` into the drafter directory it makes: for every prompt file its
training data came from (the cache's or answer set's, each part of a cache mix, and whatever the warm start's
drafter records) the file's name, its content hash (``prompts.prompt_file_hash``: the file's bytes and those of
every image it names, what a cache or answer-set manifest records as ``prompts.hash``), its number of prompts and
the ranges of prompt indices trained on (sample i of a cache or answer set is made from prompt i mod count, and
``max_samples`` / ``first_sample`` slice the samples).

``calibrate`` rolls out the last N prompts of its --prompts file, which should be held out. It hashes that file the
same way; where the hash equals a recorded one, the rolled-out prompts that lie in a trained range are counted, and
any is one ``notice:`` (the run goes on). A file that shares only some prompts with the training file has another
hash and is not caught: neither caches nor answer sets record per-prompt identities.

    .venv/bin/python -m pytest -q tests/data/test_provenance.py
"""

from __future__ import annotations

import json
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Sequence

from minispark.core.atomic import write_json_atomic
from minispark.data.prompts import PromptSample, prompt_file_hash
from minispark.core.errors import json_reason
from minispark.model.drafter_dir import TRAINING_DATA_FILE
from minispark.core.checks import edited_text


@dataclass(frozen=True)
class PromptSource:
    """One prompt file a drafter's training data was made from: ``trained`` holds [start, stop) prompt indices."""

    file: str
    hash: str
    count: int
    trained: tuple[tuple[int, int], ...]

    def overlap(self, start: int, stop: int) -> int:
        """How many of the prompt indices [start, stop) were trained on."""
        return sum(max(0, min(b, stop) - max(a, start)) for a, b in self.trained)


def trained_ranges(count: int, first: int, stop: int) -> tuple[tuple[int, int], ...]:
    """The prompt indices samples [first, stop) were made from (sample i from prompt i mod ``count``), as ranges."""
    if stop <= first or count <= 0:
        return ()
    if stop - first >= count:
        return ((0, count),)
    start = first % count
    end = start + (stop - first)
    return ((start, end),) if end <= count else ((start, count), (0, end - count))


def sources_of_data(config: dict[str, Any], first: int, stop: int) -> list[PromptSource]:
    """The prompt files of the cache or answer set with manifest ``config`` whose samples [first, stop) were
    trained on; a mix's parts each give their own (a part that is itself a mix records no prompt file)."""
    if config.get("source") == "mix":
        found = []
        for part in config.get("parts") or ():
            start, end = part["mix_samples"]
            lo, hi = max(first, start), min(stop, end)
            found += _source(part.get("prompts"), lo - start, hi - start) if lo < hi else []
        return found
    return _source(config.get("prompts"), first, stop)


def _source(prompts: Any, first: int, stop: int) -> list[PromptSource]:
    if not isinstance(prompts, dict) or not isinstance(prompts.get("hash"), str):
        return []
    count = int(prompts.get("count") or 0)
    ranges = trained_ranges(count, first, stop)
    return [PromptSource(str(prompts.get("file")), prompts["hash"], count, ranges)] if ranges else []


def write_training_data(directory: str | Path, sources: Sequence[PromptSource]) -> Path:
    """``training_data.json`` in ``directory``."""
    return write_json_atomic(Path(directory) / TRAINING_DATA_FILE,
                             {"prompt_files": [asdict(source) for source in sources]})


def read_training_data(directory: str | Path) -> list[PromptSource] | None:
    """What ``training_data.json`` in ``directory`` records; None when there is none (a drafter trained before it
    was written, an import, the shipped one). A damaged one is a notice and reads as none: it only feeds a notice."""
    path = Path(directory) / TRAINING_DATA_FILE
    if not path.is_file():
        return None
    try:
        return [PromptSource(str(row["file"]), str(row["hash"]), int(row["count"]),
                             tuple((int(a), int(b)) for a, b in row["trained"]))
                for row in json.loads(edited_text(path))["prompt_files"]]
    except (OSError, ValueError, TypeError, KeyError, RecursionError) as exc:
        warnings.warn(f"{path}: unreadable ({json_reason(exc)}); the prompts were not checked against the "
                      "drafter's training data", stacklevel=2)
        return None


def warn_if_trained_on(drafter_dir: str | Path, prompts: str | Path, samples: Sequence[PromptSample],
                       num_prompts: int) -> None:
    """One warning when the last ``num_prompts`` prompts of the file ``prompts`` (parsed as ``samples``), the ones
    calibrate rolls out, were in the training data of the drafter in ``drafter_dir`` (see the module docstring)."""
    sources = read_training_data(drafter_dir)
    if not sources or not samples:
        return
    digest = prompt_file_hash(prompts, samples)
    start, stop = max(0, len(samples) - num_prompts), len(samples)
    for source in sources:
        trained = source.overlap(start, stop) if source.hash == digest else 0
        if trained:
            untrained = stop - max(b for _, b in source.trained)  # the file's tail no range reaches
            advice = (f", or --num-prompts {untrained} to roll out only its {untrained} untrained last prompts"
                      if untrained > 0 else "")
            warnings.warn(f"--prompts {prompts}: {trained} of the {stop - start} prompts calibrate rolls out (the "
                          f"file's last) are prompts the drafter was trained on ({source.file} by content, "
                          f"in its training_data.json): a fit on them overstates acceptance on new prompts; give "
                          f"held-out prompts{advice}", stacklevel=2)
            return


def sources_of_run(data_config: dict[str, Any], num_samples: int, first_sample: int, max_samples: int,
                   init_from: str | Path | None = None, replay_samples: int = 0) -> list[PromptSource]:
    """What a training run records: its data's prompt files for the samples it reads ([first_sample,
    max_samples or all), and [0, replay_samples) beside them), and those its warm start's drafter was trained on."""
    stop = min(max_samples, num_samples) if max_samples > 0 else num_samples
    inherited = read_training_data(init_from) if init_from is not None else None
    replayed = sources_of_data(data_config, 0, min(replay_samples, stop)) if replay_samples > 0 else []
    return replayed + sources_of_data(data_config, first_sample, stop) + list(inherited or ())
