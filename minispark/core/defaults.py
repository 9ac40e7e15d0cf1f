"""The defaults the library and the CLI share (serving and profiling), kept free of heavy imports so
the CLI can show them in ``--help`` without loading torch. ``serving.builder.build_serving`` applies the
serving ones, ``measuring.profiler.ProfileConfig`` the profiling ones.

    python -c "from minispark.core.defaults import DEFAULT_GAMMA; print(DEFAULT_GAMMA)"
"""

import os
from pathlib import Path

#: Sampling temperature where none is given (``SamplingConfig``, generate, chat, bench): greedy.
DEFAULT_TEMPERATURE = 0.0
#: The highest sampling temperature any command takes (``checks.temperature``): the logits a model
#: produces span some tens of nats, which T 100 already shrinks to under one (near-uniform draws);
#: a larger value (1e308) is a typo, not a setting.
MAX_TEMPERATURE = 100.0
#: The lowest positive one: float32 logits divided by a temperature under ~1e-37 overflow (one under ~1e-45
#: rounds to 0), so the softmax is NaN. 1e-30 leaves room for logits up to 1e8; the draw is the argmax long before.
MIN_TEMPERATURE = 1e-30
#: The short dtype spellings the CLI, recipes and records use → torch's names (``identity.DTYPES`` maps those to
#: torch dtypes): the one table of dtype spellings.
DTYPE_SPELLINGS = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}
#: Weight files that unpickle arbitrary Python objects when loaded (hashed like safetensors, loaded only on opt-in).
PICKLE_WEIGHTS = ("*.bin", "*.pt", "*.pth", "*.ckpt", "*.pkl")
#: The project's checkout (the package is installed editable beside its data).
PROJECT_ROOT = Path(__file__).resolve().parents[2]
#: Drafters shipped with minispark (found by ``generate.default_drafter``; never written by a command).
SHIPPED_DRAFTERS = PROJECT_ROOT / "drafters"
#: The project's prompt files: the training corpora and the held-out split.
PROMPTS_DIR = PROJECT_ROOT / "examples" / "prompts"
#: The fixed held-out evaluation split: no training cache may contain one of its prompts.
HELDOUT_FILE = PROMPTS_DIR / "heldout.jsonl"
#: What a calibration is fitted on: the corpus (calibrate rolls out its last N prompts, which the shipped drafters
#: never trained on), never the held-out split the benchmarks measure.
CALIBRATION_PROMPTS = PROMPTS_DIR / "corpus.jsonl"
#: A calibration fitted within this of the request's temperature is served without a notice.
CALIBRATION_NEAR = 0.2
#: Training recipes shipped with minispark (``--recipe NAME`` reads NAME.toml here).
RECIPE_DIR = PROJECT_ROOT / "recipes"
#: SPS tables shipped with minispark (looked up after the user's; never written by a command).
SHIPPED_TABLES = PROJECT_ROOT / "sps_tables"
#: Overrides :func:`user_dir`.
USER_DIR_ENV = "MINISPARK_CACHE"
#: Overrides the user's SPS table directory (``serving.sps.user_tables_dir``; ``sps_tables/`` in :func:`user_dir`).
SPS_TABLES_ENV = "MINISPARK_SPS_TABLES"
#: γ for drafters that record no block size (the n-gram lookup drafter); a checkpoint's wins.
DEFAULT_GAMMA = 7
#: The fewest tokens per step ``profile --max-tokens`` takes: the verify of the default γ (γ + 1), so a table
#: serves every drafter up to that γ.
PROFILE_MIN_TOKENS = DEFAULT_GAMMA + 1
#: The most samples one cache or answer set may ask for: every sample's plan (its prompt, its seed, whether
#: it is done) is held in memory from the start, and ten million answers are weeks of a GPU already.
MAX_SAMPLES = 10_000_000
#: The longest draft block γ (``cache --block``, a recipe's ``block_size``; γ + 1 tokens are verified per
#: step, SPS tables profile 16 by default) and the deepest drafter a recipe may ask for (deeper than any
#: target's decoder: a typo, which would build that many layers before anything else fails).
MAX_BLOCK_SIZE = 1024
MAX_DRAFT_LAYERS = 128
#: The smallest learning rate a recipe takes: an Adam step of a smaller one changes no fp32 weight (lr=1e-320
#: trained nothing, without a word).
MIN_LR = 1e-10
#: The largest: an Adam step moves every weight by about lr, so above 1 each step is larger than the weights
#: themselves (lr=1e308 passed --dry-run and the run diverged at its first step).
MAX_LR = 1.0
#: Monte Carlo draws of `minispark simulate --appendix-a` (the peeking-scheduler counterexample) by default.
APPENDIX_A_DRAWS = 100_000
APPENDIX_A_MAX_DRAWS = 10_000_000  # ~0.5 GB of vectorised rounds; 2**31 - 1 asked for 16 GiB
BENCH_MAX_REPEATS = 100  # `bench --repeats`: passes over every prompt and mode (a day's run is a handful)
#: How answers are regenerated unless told otherwise (``cache`` and ``answers`` alike): the Qwen-style
#: sampling a chat model is served with, so the drafter learns the distribution it will be verified on.
REGEN_MAX_NEW_TOKENS, REGEN_TEMPERATURE, REGEN_TOP_P, REGEN_TOP_K = 512, 0.7, 0.8, 20
#: Confidence threshold of the threshold length policy.
DEFAULT_THRESHOLD = 0.5
#: The hybrid drafter (``serving/drafters/hybrid.py``). Its lookup side tries trailing n-grams of
#: ``HYBRID_MAX_NGRAM`` down to ``HYBRID_MIN_NGRAM`` tokens over the whole conversation and prompt
#: (chosen by measurement on held-out prompts: docs/how-it-works.md, "Hybrid drafting"). Priors of the conditional acceptance
#: q_k of draft position k (the chance x_k survives given x_1..x_{k−1} did), measured at T 0 on
#: held-out chat and code prompts the bench does not use: the lookup's by matched n-gram length, the
#: DSpark block's (q_1 only serves a drafter without a confidence head); each is worth
#: ``HYBRID_PRIOR_ROUNDS`` rounds against the counts of the generation's own rounds.
HYBRID_MAX_NGRAM, HYBRID_MIN_NGRAM = 3, 1
HYBRID_LOOKUP_PRIOR = {1: (0.18, 0.54, 0.65, 0.75), 2: (0.45, 0.55, 0.6, 0.8), 3: (0.9,)}
HYBRID_DSPARK_PRIOR = (0.3, 0.35, 0.35, 0.3, 0.4)
HYBRID_PRIOR_ROUNDS = 4.0
#: The most draft nodes a tree round verifies (``serving/draft_tree.py``); the Θ rule admits fewer where the
#: SPS curve says a wider verify does not pay.
DEFAULT_TREE_DRAFTS = 12
#: The tree `bench --modes tree-flat` grows on a flat cost curve: what a GPU verifies at about the cost of one step
#: (a batch-1 forward of up to ~32 tokens), simulated on any machine.
FLAT_TREE_DRAFTS = 31
#: Rounds ``minispark calibrate`` must roll out at every draft position before it fits and stores a
#: calibration: fewer (1 prompt × 1 token) would replace a good fit with noise, so it refuses instead.
CALIBRATION_MIN_ROUNDS = 100
#: Weights of a served DSpark drafter: ``auto`` = int8 where the CPU kernel runs (a proposal there is
#: memory-bound; see ``model/draft_quant.py``), the checkpoint's float dtype elsewhere.
DRAFT_PRECISIONS = ("auto", "float", "int8")
#: ``minispark --draft-precision``'s variable (read by ``core.settings``).
DRAFT_PRECISION_ENV = "MINISPARK_DRAFT_PRECISION"
#: A fixed count of torch CPU threads (``minispark --threads N``; ``OMP_NUM_THREADS``, the user's own setting, fixes
#: it too). Unset: the count follows the cores other processes leave free (``target/threads.py``).
THREADS_ENV = "MINISPARK_THREADS"
#: ``minispark --allow-pickle-weights``'s variable: "1" lets target weights stored as pickle load.
ALLOW_PICKLE_ENV = "MINISPARK_ALLOW_PICKLE_WEIGHTS"
#: Where ``serve --api-key`` may come from instead.
API_KEY_ENV = "MINISPARK_API_KEY"

#: How the target's linear layers run (``target/runtime.py`` says what each does), and the variable
#: ``minispark --runtime`` sets (read where targets load, here and in subprocesses).
TARGET_RUNTIMES = ("auto", "eager", "packed", "blocks", "int8", "compiled")
TARGET_RUNTIME_ENV = "MINISPARK_RUNTIME"
#: Positions a ``compiled``-runtime session's static KV cache holds at first (it doubles when a
#: conversation outgrows it, up to the target's context): 4096 × 30 layers × 2 × 3 KV heads × 64 × 4 B
#: = 377 MB for the embedded target, 151 MB for Qwen2.5-VL-3B in bf16.
STATIC_CACHE_TOKENS = 4096

#: Pixel budget of one image given to a vision-language target: a larger image is downscaled (aspect kept,
#: with a one-line notice) to at most this many pixels before the processor sees it. 1280 × 28² ≈ 1.0 MP is
#: 1,280 visual tokens for Qwen2.5-VL, which a 6 GB card's vision tower takes beside a 4-bit 3B target;
#: qwen-vl-utils' own cap (16,384 tokens, ~12.8 MP) is ~2 GB of vision-tower transients. ``minispark
#: --max-pixels N`` (or its variable, read where images are encoded, here and in subprocesses) changes it.
IMAGE_MAX_PIXELS = 1280 * 28 * 28
IMAGE_MAX_PIXELS_ENV = "MINISPARK_MAX_PIXELS"
#: The largest count or size a flag takes (a C int): a token count, window, budget or batch this large is a
#: typo (``core.checks`` refuses past it; torch and numpy would overflow a C long instead of refusing).
MAX_INT = 2**31 - 1
#: The smallest budget accepted: qwen-vl-utils' floor of 4 visual tokens (4 × 28²).
IMAGE_MIN_PIXELS = 4 * 28 * 28


def user_dir() -> Path:
    """minispark's own directory for this user, in the user cache dir (``$MINISPARK_CACHE`` overrides): the
    converted embedded target (``models/``), the weights-hash memo (``hashes.json``) and the SPS tables
    ``minispark profile`` measures (``sps_tables/``)."""
    import platformdirs

    value = os.environ.get(USER_DIR_ENV)
    if value:
        env_dir(USER_DIR_ENV)
    return Path(value or platformdirs.user_cache_dir("minispark"))


def env_dir(name: str) -> Path | None:
    """The directory environment variable ``name`` names (None when unset): refused with one line when it
    names an existing file, or a symlink that leads nowhere, where minispark would make its directory."""
    from minispark.core.errors import MinisparkError

    value = os.environ.get(name)
    if not value:
        return None
    path = Path(value)
    for place in (path, *path.parents):
        if place.is_symlink() and not place.exists():
            raise MinisparkError(f"${name} {value}: {place} is a symlink to {os.readlink(place)}, which does not "
                                 "exist (or loops); fix the link, or point the variable at a directory")
        if place.exists() and not place.is_dir():
            raise MinisparkError(f"${name} {value}: {place} is a file, not a directory; point the variable at a "
                                 "directory (minispark keeps files there)")
    return path


def image_max_pixels() -> int:
    """The pixel budget asked for by ``minispark --max-pixels`` or its variable, else ``IMAGE_MAX_PIXELS``.
    Every target load reads it (``load_target``, the CLI's target checks), not only a vision target's first
    image, so a bad value is one line on any target, before anything loads."""
    from minispark.core.errors import MinisparkError, option

    value = os.environ.get(IMAGE_MAX_PIXELS_ENV) or str(IMAGE_MAX_PIXELS)
    if not (value.isascii() and value.isdigit()) or not IMAGE_MIN_PIXELS <= int(value) <= MAX_INT:
        raise MinisparkError(f"{option('max_pixels')} / ${IMAGE_MAX_PIXELS_ENV}: {value!r} is not a whole number of pixels "
                             f"in [{IMAGE_MIN_PIXELS}, {MAX_INT}]")
    return int(value)


def draft_precision() -> str:
    """The drafter precision asked for by ``minispark --draft-precision`` or its environment variable."""
    from minispark.core.errors import MinisparkError, option

    value = os.environ.get(DRAFT_PRECISION_ENV, "auto") or "auto"
    if value not in DRAFT_PRECISIONS:
        raise MinisparkError(f"{option('draft_precision')} / ${DRAFT_PRECISION_ENV}: {value!r} is not one of "
                             f"{', '.join(DRAFT_PRECISIONS)}")
    return value


#: The packed runtime's copy of an lm_head tied to the embedding, at most: above it the head stays one tensor,
#: unpacked (memory over the packed kernel's speed; SmolLM2's 113 MB is packed, Gemma 3's 0.67 GB is not).
PACKED_TIED_MAX_BYTES = 256 * 2**20
#: The most rows (tokens) a ``blocks``-runtime linear computes from its 4-/8-bit blocks; a wider forward (a long
#: prefill) runs the prepacked fp32 kernel, which is compute-efficient where the blocks' expansion is not. The
#: embedded target's whole step, one thread, interleaved: 8 rows 49.6 ms against 82.1 prepacked, 16 rows 78.8
#: against 98.8, 24 rows 107.0 against 115.5, 32 rows 140.1 against 135.6, 48 rows 197.2 against 165.1.
BLOCK_MAX_ROWS = 24
#: The most queries a kv head attends with (query heads per kv head × new tokens of a sequence) that run
#: ``attention_kernels.c``: one-token steps and batched rounds (SmolLM2: 3 a token; Qwen2.5-VL-3B: 8), short
#: verifies; more run PyTorch's flash kernel, which is faster there (one sequence, cache hot, 300 keys: 12 queries
#: 60 against 59 µs, 24 queries 93 against 104, 48 queries 160 against 206; 8 queries 43 against 31).
SMALL_ATTENTION_QUERIES = 16
#: A vocabulary larger than this gets a draft vocabulary of ``LARGE_VOCAB_DRAFT`` tokens where a recipe sets none:
#: the Markov tables and logits over 262,144 tokens (Gemma 3) are 77M parameters and a 0.5 GB chunk, against 12M
#: and 17 MB at 8,192; EAGLE-3 and FR-Spec draft 32k-token vocabularies of such targets.
LARGE_VOCAB = 65_536
LARGE_VOCAB_DRAFT = 32_768


def auto_draft_vocab(asked: int | None, vocab_size: int) -> int:
    """A recipe's ``draft_vocab``: as asked, else the whole of a small vocabulary (0) or 32,768 of a large one."""
    if asked is not None:
        return asked
    return LARGE_VOCAB_DRAFT if vocab_size > LARGE_VOCAB else 0


def fixed_threads() -> int | None:
    """The torch CPU threads fixed by ``minispark --threads`` or ``$OMP_NUM_THREADS``; None: chosen as decoding
    goes (``target/threads.py``)."""
    from minispark.core.errors import MinisparkError

    for name in (THREADS_ENV, "OMP_NUM_THREADS"):
        value = os.environ.get(name, "").strip()
        if value:
            first = value.split(",")[0].strip()  # OpenMP's list form, "4,2": the outermost level's count
            if not first.isdigit() or int(first) < 1:
                raise MinisparkError(f"${name}: {value!r} is not a thread count (a whole number >= 1)")
            return int(first)
    return None


#: `minispark profile` / ``ProfileConfig``: KV-cache lengths, tokens per step 1..N, shuffled rounds
#: per context, untimed warm-up passes, drift bound that re-measures a round, re-measurements per
#: round, cool-down seconds before one.
PROFILE_CONTEXTS = (256, 1024, 4096)
PROFILE_MAX_TOKENS = 32  # a tree round verifies up to ~32 tokens (draft_tree.py)
#: The most requests ``profile --batch-requests`` times together (each holds a KV cache of the first context).
PROFILE_MAX_BATCH_REQUESTS = 64
PROFILE_ROUNDS = 10
PROFILE_WARMUP = 2
PROFILE_DRIFT_BOUND = 0.10
PROFILE_MAX_REMEASURE = 2
PROFILE_COOLDOWN_S = 5.0
