"""Shared test helpers: a synthetic target and drafters for the distribution tests, greedy-parity
checks against HF ``generate``, a random DSpark drafter, file snapshots. Imported by test modules;
no test module imports another.

    .venv/bin/python -m pytest -q tests/serving/test_accept.py tests/serving/test_engine.py
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import shutil
import struct
import zlib
from collections.abc import Iterable
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from scipy.stats import chi2, chisquare, poisson

from minispark.model.draft_model import DraftConfig, DraftModel
from minispark.serving.draft_block import DraftBlock, FixedBlock
from minispark.serving.draft_tree import TreeDrafts
from minispark.serving.drafters.base import Drafter
from minispark.serving.drafters.dspark import DSparkDrafter, SequentialBlock
from minispark.serving.engine import speculative_generate
from minispark.target.sampling import SamplingConfig, make_generator, probabilities, sample

#: The project's checkout (tests read its shipped files: prompts, answers, tables, the README).
REPO = Path(__file__).resolve().parent.parent
from minispark.serving.schedule import FixedLength
from minispark.target.loading import Target
from minispark.target.session import PromptInputs, StepOutput, TargetSession
from minispark.training.recipes import load_recipe


# ---- a synthetic 5-token target and drafter (the distribution tests) ----------------

VOCAB = 5
PROMPT = [3, 1]


def _table(seed: int, scale: float) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(VOCAB, VOCAB, VOCAB, generator=generator) * scale  # (prev2, prev1, next)


TARGET_TABLE = _table(1, 1.5)


DRAFT_TABLE = _table(2, 1.5)


def target_logits(prefix: list[int]) -> torch.Tensor:
    return TARGET_TABLE[prefix[-2], prefix[-1]]


class FakeSession:
    """A target whose next-token logits depend on the last two tokens; tracks a fake KV cache."""

    supports_trees = True

    def __init__(self) -> None:
        self.tokens: list[int] = []
        self.target = SimpleNamespace(device=torch.device("cpu"))

    @property
    def cache_length(self) -> int:
        return len(self.tokens)

    def prefill(self, prompt: PromptInputs, length: int, start: int = 0) -> StepOutput:
        assert start == len(self.tokens) == 0  # a fresh session: the engine prefills from the start
        self.tokens = prompt.input_ids[0, :length].tolist()
        return StepOutput(logits=torch.zeros(1, VOCAB))  # the engine never reads prefill logits

    def step(self, block: torch.Tensor) -> StepOutput:
        rows = []
        for token in block.tolist():
            self.tokens.append(token)
            rows.append(target_logits(self.tokens))
        return StepOutput(logits=torch.stack(rows))  # (n, V)

    def crop(self, length: int) -> None:
        del self.tokens[length:]

    def step_tree(self, tokens: torch.Tensor, parents: torch.Tensor) -> StepOutput:
        """Row i: the logits after the committed tokens and node i's root-to-node path."""
        committed, tokens, parents = list(self.tokens), tokens.tolist(), parents.tolist()
        rows = []
        for node in range(len(tokens)):
            path, at = [], node
            while at >= 0:
                path.append(tokens[at])
                at = parents[at]
            rows.append(target_logits(committed + path[::-1]))
        self.tokens.extend(tokens)
        return StepOutput(logits=torch.stack(rows))  # (n, V)

    def keep_rows(self, start: int, rows: list[int]) -> None:
        self.tokens = self.tokens[:start] + [self.tokens[start + r] for r in rows]

    def text_positions(self, start: int, n: int) -> torch.Tensor:
        return torch.arange(start, start + n)


class TableBlock(DraftBlock):
    """Draws x_k from DRAFT_TABLE given the two tokens before it. ``confidence(prev)`` gives c_k
    from x_{k-1} (like the Markov confidence head); ``support`` restricts the draws to a draft
    vocabulary, and ``honest=False`` then reports the unrestricted softmax (a wrong p_d)."""

    def __init__(self, context: list[int], generator: torch.Generator, confidence=None, support=None,
                 honest: bool = True) -> None:
        super().__init__(BLOCK)
        self.context, self.generator, self.confidence_of = context, generator, confidence
        self.support, self.honest = support, honest

    def _prefix(self) -> list[int]:
        return self.context + [int(token) for token in self.tokens]

    def _confidence(self, k: int) -> torch.Tensor | None:
        return None if self.confidence_of is None else torch.tensor(self.confidence_of(self._prefix()[-1]))

    def _draw(self, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        prefix = self._prefix()
        logits = DRAFT_TABLE[prefix[-2], prefix[-1]]
        reported = probabilities(logits, SamplingConfig(1.0))
        if self.support is not None:
            outside = torch.ones(VOCAB, dtype=torch.bool)
            outside[list(self.support)] = False
            p = probabilities(logits.masked_fill(outside, float("-inf")), SamplingConfig(1.0))
            reported = p if self.honest else reported
        else:
            p = reported
        return sample(p, self.generator), reported


BLOCK = 4  # draft positions per block (≥ every γ below)


class FakeDrafter(Drafter):
    """Samples each draft token from its own context-dependent distribution and reports it."""

    name = "fake"

    def propose(self, ids, anchor_position, sampling, generator) -> DraftBlock:
        return TableBlock(ids.tolist(), generator)


class DraftVocabFakeDrafter(Drafter):
    """A drafter with a draft vocabulary: it only ever proposes tokens of ``SUPPORT`` and reports p_d
    over the whole vocabulary, exactly zero elsewhere (as DraftModel does with ``draft_vocab``).
    ``honest=False`` reports the unrestricted distribution instead: the negative control."""

    name = "fake-draft-vocab"
    SUPPORT = (0, 2, 4)

    def __init__(self, honest: bool = True) -> None:
        self.honest = honest

    def propose(self, ids, anchor_position, sampling, generator) -> DraftBlock:
        return TableBlock(ids.tolist(), generator, support=self.SUPPORT, honest=self.honest)


class ConfidentFakeDrafter(FakeDrafter):
    """Reports a confidence c_k that depends on x_{k-1} (like the Markov confidence head), asked
    before x_k is drawn, so a scheduler's admission can vary with the realized draft prefix."""

    has_confidence = True

    def propose(self, ids, anchor_position, sampling, generator) -> DraftBlock:
        return TableBlock(ids.tolist(), generator, confidence=self.confidence)

    def confidence(self, prev: int) -> float:
        return 0.95 if prev % 2 == 0 else 0.35


class TableTreeDrafts(TreeDrafts):
    """A tree's children from DRAFT_TABLE given the two tokens before them (the committed context's last
    token where the path is the anchor alone); a confidence from the parent's token like ConfidentFakeDrafter's."""

    depth_limit = BLOCK

    def __init__(self, context: list[int], sampling: SamplingConfig) -> None:
        self.context, self.sampling = context, sampling

    def distribution(self, path) -> torch.Tensor:
        before = (self.context[:-1] + list(path))[-2:]
        logits = DRAFT_TABLE[before[0], before[1]]
        return torch.softmax(logits, -1) if self.sampling.greedy else probabilities(logits, self.sampling)

    def confidence(self, path) -> float:
        return 0.9 if path[-1] % 2 == 0 else 0.4


class TreeFakeDrafter(ConfidentFakeDrafter):
    """ConfidentFakeDrafter that also drafts trees (``TableTreeDrafts``)."""

    def propose_tree(self, ids, anchor_position, sampling, generator) -> TreeDrafts:
        return TableTreeDrafts(ids.tolist(), sampling)


#: Engine runs of a joint (χ²) test in the default run: each negative control fails at this count by far (a missing
#: residual or a wrong p_d: p below 1e-140); make test-all repeats the positive cases at JOINT_DRAWS_ALL, for power
#: against small biases.
JOINT_DRAWS = 4_000
JOINT_DRAWS_ALL = 20_000
joint_draws = pytest.mark.parametrize("draws", [JOINT_DRAWS, pytest.param(JOINT_DRAWS_ALL, marks=pytest.mark.slow)])


def exact_joint(sampling: SamplingConfig, length: int = 3) -> dict[tuple[int, ...], float]:
    joint = {}
    for seq in itertools.product(range(VOCAB), repeat=length):
        prefix, prob = list(PROMPT), 1.0
        for token in seq:
            prob *= float(probabilities(target_logits(prefix), sampling)[token])
            prefix.append(token)
        joint[seq] = prob
    return joint


def empirical_joint(sampling: SamplingConfig, draws: int, gamma: int, drafter: Drafter | None = None,
                    policy_factory=None) -> dict[tuple[int, ...], int]:
    generator = torch.Generator().manual_seed(1234)
    prompt = PromptInputs(input_ids=torch.tensor([PROMPT]), text_positions=torch.arange(len(PROMPT)))
    counts: dict[tuple[int, ...], int] = {}
    for _ in range(draws):
        policy = policy_factory() if policy_factory else FixedLength(gamma)
        result = speculative_generate(FakeSession(), prompt, drafter or FakeDrafter(), sampling=sampling,
                                      policy=policy, max_new_tokens=3, generator=generator)
        key = tuple(result.token_ids)
        counts[key] = counts.get(key, 0) + 1
    return counts


def chi_square_pvalue(counts: dict, joint: dict) -> float:
    total = sum(counts.values())
    assert all(joint[key] > 0 for key in counts), "a token outside the target's support was emitted"
    observed, expected = [], []
    small_obs, small_exp = 0, 0.0
    for key, prob in joint.items():
        if prob == 0:
            continue
        if prob * total < 5:  # pool sparse cells so the chi-square approximation holds
            small_obs += counts.get(key, 0)
            small_exp += prob * total
        else:
            observed.append(counts.get(key, 0))
            expected.append(prob * total)
    if small_exp > 0:
        observed.append(small_obs)
        expected.append(small_exp)
    scale = total / sum(expected)  # float rounding: scipy wants equal sums
    return float(chisquare(observed, [e * scale for e in expected]).pvalue)


# ---- greedy parity against HF generate ------------------------------------------------

class OracleDrafter(Drafter):
    """Proposes the reference continuation (always right) or a corrupted one (always wrong)."""

    def __init__(self, reference: list[int], prompt_length: int, right: bool, vocab: int) -> None:
        self.reference, self.prompt_length, self.right, self.vocab = reference, prompt_length, right, vocab
        self.name = "always-right" if right else "always-wrong"

    def propose(self, ids, anchor_position, sampling, generator) -> FixedBlock:
        done = ids.numel() - self.prompt_length
        tokens = [token if self.right else (token + 1) % self.vocab for token in self.reference[done:]]
        return FixedBlock(torch.tensor(tokens, dtype=torch.long))


class OracleTreeDrafts(TreeDrafts):
    """A tree drafter that knows the reference continuation: its best child is the reference's next token
    (``right``) or a wrong one, and every node has wrong siblings too, so trees branch; an always-wrong one
    never puts mass on the reference token."""

    depth_limit = 4

    def __init__(self, reference: list[int], done: int, right: bool, vocab: int) -> None:
        self.reference, self.done, self.right, self.vocab = reference, done, right, vocab

    def distribution(self, path) -> torch.Tensor:
        k = self.done + len(path) - 1  # the reference index of the children's token
        want = self.reference[k] if k < len(self.reference) else 0
        p = torch.zeros(self.vocab)
        p[(want + 1) % self.vocab], p[(want + 2) % self.vocab] = 0.25, 0.15
        p[want if self.right else (want + 3) % self.vocab] = 0.6
        return p


class TreeOracleDrafter(OracleDrafter):
    def propose_tree(self, ids, anchor_position, sampling, generator) -> TreeDrafts:
        return OracleTreeDrafts(self.reference, ids.numel() - self.prompt_length, self.right, self.vocab)


def hf_greedy(target: Target, inputs: PromptInputs, max_new_tokens: int) -> list[int]:
    kwargs = dict(inputs.model_kwargs)
    out = target.model.generate(inputs.input_ids, attention_mask=torch.ones_like(inputs.input_ids),
                                max_new_tokens=max_new_tokens, do_sample=False,
                                eos_token_id=sorted(target.eos_token_ids), pad_token_id=0, **kwargs)
    return out[0, inputs.length:].tolist()


def assert_steps_agree(got: TargetSession, want: TargetSession, tokens: torch.Tensor, widths: Iterable[int],
                       **close: float) -> None:
    """Two prefilled sessions (two runtimes of one target) step the first w of ``tokens`` for every width w of
    ``widths``, each step cropped away after: logits (and captured features) agree within ``close``."""
    start = got.cache_length
    for width in widths:
        got_out, want_out = got.step(tokens[:width]), want.step(tokens[:width])
        torch.testing.assert_close(got_out.logits, want_out.logits, **close)
        if want_out.features is not None:
            torch.testing.assert_close(got_out.features, want_out.features, **close)
        got.crop(start)
        want.crop(start)


def assert_parity(target: Target, inputs: PromptInputs, got: list[int], want: list[int]) -> None:
    """Equal, or the first divergence is a logit near-tie (then it is not a bug)."""
    if got == want:
        return
    index = next(i for i, (a, b) in enumerate(zip(got + [-1], want + [-2])) if a != b)
    prefix = torch.tensor([want[:index]], dtype=torch.long)
    full = target.extend(inputs, prefix[0])
    with target.session() as session:
        logits = session.prefill(full).logits[-1]
    top2 = logits.topk(2).values
    gap = float(top2[0] - top2[1])
    assert gap < 1e-4, f"divergence at new token {index} with top-2 gap {gap:.3g}: not a near-tie"


def assert_modes_keep_greedy(target: Target, inputs: PromptInputs, max_new_tokens: int = 24) -> None:
    """Target-only, lookup, always-right and always-wrong drafting (γ 4) each decode ``inputs`` to the
    target's own greedy output (up to near-ties)."""
    from minispark.serving.drafters.base import NoDrafter
    from minispark.serving.drafters.lookup import LookupDrafter

    greedy = hf_greedy(target, inputs, max_new_tokens)
    for drafter in [NoDrafter(), LookupDrafter(), OracleDrafter(greedy, inputs.length, True, target.vocab_size),
                    OracleDrafter(greedy, inputs.length, False, target.vocab_size)]:
        with target.session() as session:
            result = speculative_generate(session, inputs, drafter, SamplingConfig(), FixedLength(4),
                                          max_new_tokens=max_new_tokens, eos_ids=target.eos_token_ids)
        assert_parity(target, inputs, result.token_ids, greedy)


# ---- an untrained DSpark drafter on a real (tiny) target ------------------------------

def without_chat_template(source: Path, out: Path) -> Path:
    """A copy of the target directory ``source`` (hard links) without its chat template: a base model."""
    shutil.copytree(source, out, copy_function=os.link)
    (out / "chat_template.jinja").unlink(missing_ok=True)
    config = json.loads((out / "tokenizer_config.json").read_text())
    (out / "tokenizer_config.json").unlink()  # a hard link: the source's own stays whole
    (out / "tokenizer_config.json").write_text(json.dumps({k: v for k, v in config.items() if k != "chat_template"}))
    return out


def random_dspark(target: Target, seed: int = 0, vocab_ids: torch.Tensor | None = None,
                  context_vocab: bool = False, window: int = 0) -> DSparkDrafter:
    """An untrained DSpark drafter on the target's features: wrong most of the time, which is what
    exercises rejections, crops and the draft context's rollback. ``vocab_ids``: a static draft vocabulary
    (with ``context_vocab``, the request's own tokens drafted beside it); ``window``: its context window."""
    torch.manual_seed(seed)
    config = DraftConfig(target="tiny", hidden_size=target.hidden_size, num_heads=4, num_kv_heads=2,
                         head_dim=16, intermediate_size=64, vocab_size=target.vocab_size, feature_layers=(1,),
                         mask_token_id=target.vocab_size - 1, block_size=4, markov_rank=16, dtype="float32",
                         draft_vocab=0 if vocab_ids is None else len(vocab_ids), window=window)
    lm_head = target.lm_head.weight
    model = DraftModel.from_target(config, target.model.get_input_embeddings().weight, lm_head, vocab_ids)
    return DSparkDrafter(model.to(target.device), context_lm_head=lm_head if context_vocab else None)


# ---- user files before and after --------------------------------------------------------

def snapshot(*roots: Path) -> dict[str, str]:
    """sha256 of every file under ``roots`` (symlinks recorded by their target, never followed)."""
    hashes = {}
    for root in roots:
        paths = [root] if not root.is_dir() or root.is_symlink() else sorted(root.rglob("*"))
        for path in paths:
            if path.is_symlink():
                hashes[str(path)] = "link:" + os.readlink(path)
            elif path.is_file():
                hashes[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
    return hashes


# ---- a tiny draft model with weights large enough that every path matters -------------

D, V, GAMMA, M = 32, 97, 4, 3


def make_config(head: str = "vanilla", window: int = 0, vocab: int = V, confidence: bool = True,
                draft_vocab: int = 0, markov_w1: str = "table") -> DraftConfig:
    return DraftConfig(
        draft_vocab=draft_vocab,
        markov_w1=markov_w1,
        target="tiny-test-target@0",
        hidden_size=D,
        num_heads=4,
        num_kv_heads=2,
        head_dim=8,
        intermediate_size=64,
        vocab_size=vocab,
        feature_layers=(0, 2, 3),
        mask_token_id=vocab - 1,
        block_size=GAMMA,
        window=window,
        head=head,
        markov_rank=16,
        confidence_head=confidence,
        dtype="float32",
    )


def target_weights(vocab: int = V, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(vocab, D, generator=g), 0.5 * torch.randn(vocab, D, generator=g)


def subset(vocab: int, n: int) -> torch.Tensor:
    """A draft vocabulary of n ids that is neither a prefix nor contiguous (every other id, from the top)."""
    return torch.arange(vocab - 1, -1, -2)[:n].flip(0)


def make_model(head: str = "vanilla", window: int = 0, vocab: int = V, confidence: bool = True, seed: int = 0,
               draft_vocab: int = 0, markov_w1: str = "table") -> DraftModel:
    """A draft model whose trainable weights are large enough that every path matters."""
    embed, lm_head = target_weights(vocab, seed)
    ids = subset(vocab, draft_vocab) if draft_vocab else None
    config = make_config(head, window, vocab, confidence, draft_vocab, markov_w1)
    model = DraftModel.from_target(config, embed, lm_head, ids)
    torch.manual_seed(seed + 1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.requires_grad and "norm" not in name:
                p.normal_(0.0, 0.5 if "markov" in name else 0.3)
    return model.eval()


def pair_chi_square(tokens: torch.Tensor, probs: torch.Tensor, anchor: int, vocab: int) -> float:
    """Smallest p-value over positions k of a chi-square test of the counts of (x_{k−1}, x_k)
    against Σ_draws 1{x_{k−1}=u}·p_k(v) — the counts the returned distributions predict (valid for
    any prefix dependence). Cells expected below 5 are pooled and tested with a Poisson tail."""
    n, gamma = tokens.shape
    prev = torch.cat([torch.full((n, 1), anchor), tokens[:, :-1]], dim=1)  # (N, γ)
    worst = 1.0
    for k in range(gamma):
        onehot_prev = F.one_hot(prev[:, k], vocab).double()  # (N, V)
        expected = onehot_prev.T @ probs[:, k].double()  # (V_prev, V)
        observed = onehot_prev.T @ F.one_hot(tokens[:, k], vocab).double()
        if (observed[expected == 0] > 0).any():
            return 0.0  # drew a token its own distribution gives no mass
        big = expected >= 5
        stat = ((observed - expected)[big] ** 2 / expected[big]).sum().item()
        dof = max(int(big.sum()) - int(big.any(1).sum()), 1)
        worst = min(worst, float(chi2.sf(stat, dof)))
        rare_expected, rare_observed = expected[~big].sum().item(), observed[~big].sum().item()
        if rare_expected > 0:  # P(Poisson(E) >= O): too many draws of rare tokens
            worst = min(worst, float(poisson.sf(rare_observed - 1, rare_expected)))
    return worst


def draw_many(model: DraftModel, hidden: torch.Tensor, anchor: int, sampling: SamplingConfig, n: int, seed: int):
    generator = make_generator(seed)
    anchor_t = torch.tensor(anchor)
    proposals = [SequentialBlock(model, hidden, anchor_t, sampling, generator).proposal(GAMMA) for _ in range(n)]
    return torch.stack([p.tokens for p in proposals]), torch.stack([p.probs for p in proposals])


SMALL_V = 6


DRAWS = 2500


# ---- the tiny recipe (training tests; its target and cache are fixtures in conftest.py) ------

def recipe(*overrides: str):
    return load_recipe("tiny", list(overrides))


def build_scaled_vl(out: Path, *, hidden: int = 256, vocab: int = 18_944, layers: int = 36) -> Path:
    """A random Qwen2.5-VL target directory in bf16 with Qwen2.5-VL-3B's layout (36 layers, tied embedding,
    intermediate 5.375 × hidden) at a smaller width and vocabulary: the host-memory tests read it as the
    3B checkpoint would be read."""
    from transformers import AutoConfig, AutoModelForImageTextToText

    from tests.tiny_models import build_tiny

    build_tiny("qwen2_5_vl", out)
    config = AutoConfig.from_pretrained(out)
    text = config.text_config
    text.hidden_size, text.intermediate_size, text.num_hidden_layers = hidden, hidden * 43 // 8, layers
    text.num_attention_heads, text.num_key_value_heads, text.head_dim = 4, 2, hidden // 4
    text.vocab_size, text.layer_types = vocab, ["full_attention"] * layers
    config.vision_config.out_hidden_size = hidden
    config.tie_word_embeddings = text.tie_word_embeddings = True
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = AutoModelForImageTextToText.from_config(config, dtype=torch.bfloat16)
    for stale in out.glob("*.safetensors"):
        stale.unlink()
    model.save_pretrained(out)
    return out


# ---- images ------------------------------------------------------------------------------------

def _png_chunk(tag: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF)


def bomb_png(path: Path, side: int = 100_000) -> Path:
    """A valid ~100-byte PNG whose header claims side × side pixels (10 gigapixels)."""
    header = struct.pack(">IIBBBBB", side, side, 8, 0, 0, 0, 0)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + _png_chunk(b"IHDR", header)
                     + _png_chunk(b"IDAT", zlib.compress(b"\0" * 64)) + _png_chunk(b"IEND", b""))
    return path


#: A prompt of more tokens than the tiny models' 4096 positions.
LONG_PROMPT = "word " * 5000


def one_line_error(result) -> str:
    """The one ``error:`` line a refused command printed (exit 2, no traceback, nothing on stdout)."""
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error: ")]
    assert result.exit_code == 2, (result.exit_code, result.output, result.exception)
    # One error line, last; anything before it is a one-line notice of what was loaded.
    assert len(errors) == 1 and lines[-1] == errors[0], result.stderr
    assert "Traceback" not in result.output and "§" not in result.output and not result.stdout.strip()
    return errors[0]


def full_disk(monkeypatch: pytest.MonkeyPatch, where: str = "") -> None:
    """Make every fsync of a file whose path contains ``where`` fail as a full disk does (a filesystem
    with delayed allocation reports ENOSPC there): what the atomic writers must turn into one line."""
    import errno
    import os

    fsync = os.fsync

    def failing(fd: int) -> None:
        if where in os.readlink(f"/proc/self/fd/{fd}"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        fsync(fd)

    monkeypatch.setattr(os, "fsync", failing)
