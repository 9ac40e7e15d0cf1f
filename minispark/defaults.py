"""The defaults the library and the CLI share (serving and profiling), kept free of heavy imports so
the CLI can show them in ``--help`` without loading torch. ``serving.builder.build_serving`` applies the
serving ones, ``measuring.profiler.ProfileConfig`` the profiling ones.

    python -c "from minispark.defaults import DEFAULT_GAMMA; print(DEFAULT_GAMMA)"
"""

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from rich.console import Console

#: Drafters shipped with minispark (found by ``generate.default_drafter``; never written by a command).
SHIPPED_DRAFTERS = Path(__file__).resolve().parents[1] / "drafters"
#: SPS tables shipped with minispark (looked up after the user's; never written by a command).
SHIPPED_TABLES = Path(__file__).resolve().parents[1] / "sps_tables"
#: γ for drafters that record no block size (the n-gram lookup drafter); a checkpoint's wins.
DEFAULT_GAMMA = 7
#: How answers are regenerated unless told otherwise (``cache`` and ``answers`` alike): the Qwen-style
#: sampling a chat model is served with, so the drafter learns the distribution it will be verified on.
REGEN_MAX_NEW_TOKENS, REGEN_TEMPERATURE, REGEN_TOP_P, REGEN_TOP_K = 512, 0.7, 0.8, 20
#: Confidence threshold of the threshold length policy.
DEFAULT_THRESHOLD = 0.5
#: Rounds ``minispark calibrate`` must roll out at every draft position before it fits and stores a
#: calibration: fewer (1 prompt × 1 token) would replace a good fit with noise, so it refuses instead.
CALIBRATION_MIN_ROUNDS = 100
#: Weights of a served DSpark drafter: ``auto`` = int8 where the CPU kernel runs (a proposal there is
#: memory-bound; see ``model/draft_quant.py``), the checkpoint's float dtype elsewhere.
DRAFT_PRECISIONS = ("auto", "float", "int8")
#: Set by ``minispark --draft-precision`` (read where drafters are loaded, here and in subprocesses).
DRAFT_PRECISION_ENV = "MINISPARK_DRAFT_PRECISION"

#: How the target's linear layers run (``serving/runtime.py`` says what each does), and the variable
#: ``minispark --runtime`` sets (read where targets load, here and in subprocesses).
TARGET_RUNTIMES = ("auto", "eager", "packed")
TARGET_RUNTIME_ENV = "MINISPARK_RUNTIME"


def draft_precision() -> str:
    """The drafter precision asked for by ``minispark --draft-precision`` or its environment variable."""
    value = os.environ.get(DRAFT_PRECISION_ENV, "auto") or "auto"
    if value not in DRAFT_PRECISIONS:
        raise ValueError(f"--draft-precision / ${DRAFT_PRECISION_ENV}: {value!r} is not one of "
                         f"{', '.join(DRAFT_PRECISIONS)}")
    return value


#: `minispark profile` / ``ProfileConfig``: KV-cache lengths, tokens per step 1..N, shuffled rounds
#: per context, untimed warm-up passes, drift bound that re-measures a round, re-measurements per
#: round, cool-down seconds before one.
PROFILE_CONTEXTS = (256, 1024, 4096)
PROFILE_MAX_TOKENS = 16
PROFILE_ROUNDS = 10
PROFILE_WARMUP = 2
PROFILE_DRIFT_BOUND = 0.10
PROFILE_MAX_REMEASURE = 2
PROFILE_COOLDOWN_S = 5.0


#: Width of rich output written to a pipe or a file: rich's 80 columns would cut the bench table's cells
#: and wrap every training log line.
PIPED_WIDTH = 160


def make_console(stderr: bool = False) -> "Console":
    """The one way minispark makes a rich Console: the width rule below, and no ``:name:`` emoji
    substitution, which rich applies even with ``markup=False`` and which turns a model's
    ``a[start:end:step]`` into ``a[start🔚step]`` on screen."""
    from rich.console import Console

    return Console(stderr=stderr, width=console_width(sys.stderr if stderr else sys.stdout), emoji=False)


def console_width(stream: TextIO) -> int | None:
    """Width for a rich Console writing to ``stream``: rich's own (the terminal, or ``$COLUMNS``) on a
    terminal or when ``$COLUMNS`` is set, else ``PIPED_WIDTH``."""
    return None if stream.isatty() or "COLUMNS" in os.environ else PIPED_WIDTH
