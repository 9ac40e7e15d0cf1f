"""Copy a trained drafter into the repo's ``drafters/`` folder, small: float weights stored as bf16.

The frozen embedding and lm_head are never stored (they come from the target at load time); the
trainable weights are halved to bf16 (the loader casts them to the config's compute dtype), and
the calibration written by ``minispark calibrate`` comes along (``checkpoint.copy_drafter``). The
model card (README.md) is written by hand from the measured figures and kept.

    python scripts/ship_drafter.py runs/draft-smollm2-dspark/drafter drafters/smollm2-135m-dspark
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

import torch

from minispark.core.atomic import WRITTEN_MANIFEST
from minispark.model.checkpoint import copy_drafter

CARD = "README.md"
LIMIT = 32 * 1024 * 1024


def ship(source: Path, dest: Path) -> int:
    """Replace ``dest`` (config, bf16 weights, calibration, the existing model card); returns its size in bytes.

    The copy is staged beside ``dest`` and renamed over it: ``copy_drafter`` itself only replaces directories
    minispark wrote, and a shipped one (with its hand-written card) is not, on purpose."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest.parent) as keep:
        staged = Path(keep) / dest.name
        copy_drafter(source, staged, weight_dtype=torch.bfloat16)
        (staged / WRITTEN_MANIFEST).unlink()  # shipped files are never replaced by a command
        if (dest / CARD).is_file():
            shutil.copy2(dest / CARD, staged / CARD)
        if dest.exists():
            shutil.rmtree(dest)
        staged.rename(dest)
    size = sum(p.stat().st_size for p in dest.iterdir() if p.is_file())
    if size > LIMIT:
        raise SystemExit(f"{dest}: {size} bytes, over the {LIMIT}-byte limit for a shipped drafter")
    return size


if __name__ == "__main__":
    src, dst = (Path(a) for a in sys.argv[1:3])
    print(f"{dst}: {ship(src, dst) / 1e6:.1f} MB")
