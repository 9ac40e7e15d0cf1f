"""Tree verification on the target: one forward over a draft tree gives every node the logits and
features of a forward over its own root-to-node path, and compacting the cache to the accepted path
leaves what a prefill of the committed tokens would have written.

    .venv/bin/python -m pytest -q tests/target/test_tree_verify.py
"""

from __future__ import annotations

import warnings

import pytest
import torch
from transformers.cache_utils import DynamicSlidingWindowLayer

from minispark.core.errors import MinisparkError
from minispark.target import kv_cache
from minispark.target.loading import Target, load_target
from minispark.target.session import PromptInputs, TargetSession

FAMILIES = ["llama", "qwen2", "qwen2_5_vl"]
RUNTIMES = ["packed", "eager"]
CLOSE = {"rtol": 1e-4, "atol": 1e-4}  # fp32 sums over differently shaped blocks: ~1e-5 apart
CAPTURE = [0, 2]


@pytest.fixture(scope="module")
def targets(tiny_dir):
    """One loaded target per (family, runtime, attention), loaded on first use."""
    loaded: dict[tuple[str, str, str], Target] = {}

    def get(family: str, runtime: str, attention: str = "") -> Target:
        key = (family, runtime, attention)
        if key not in loaded:
            target = load_target(str(tiny_dir(family)), runtime=runtime)
            if attention:
                target.model.set_attn_implementation(attention)
            loaded[key] = target
        return loaded[key]

    return get


def _prompt(target: Target, test_image) -> PromptInputs:
    # An image makes the VLM's rope delta non-zero: tree positions must carry it like a step's.
    images = [test_image] if target.is_vlm else []
    return target.encode(prompt="Describe the picture, then count to ten.", images=images)


def _random_tree(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(n,) tokens and (n,) parents of a random tree, parents before children, branching somewhere."""
    generator = torch.Generator().manual_seed(seed)
    parents = [-1] + [int(torch.randint(max(0, i - 3), i, (1,), generator=generator)) for i in range(1, n)]
    assert max(parents.count(i) for i in range(n)) >= 2, parents  # a tree, not a chain
    tokens = torch.randint(10, 500, (n,), generator=generator)  # plain text ids (no image placeholders)
    return tokens, torch.tensor(parents)


def _path(parents: torch.Tensor, node: int) -> list[int]:
    """Block rows from the root to ``node`` (ascending: parents come before children)."""
    path = [node]
    while parents[path[-1]] >= 0:
        path.append(int(parents[path[-1]]))
    return path[::-1]


def _last_row(target: Target, inputs: PromptInputs) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Logits (V,), features (m·d,) and final hidden (d,) of a fresh prefill's last token."""
    with target.session(CAPTURE, capture_final=True) as fresh:
        out = fresh.prefill(inputs)
    return out.logits[-1], out.features[-1], out.final_hidden[-1]


@pytest.mark.parametrize("runtime", RUNTIMES)
@pytest.mark.parametrize("family", FAMILIES)
def test_tree_forward_equals_per_path_prefills(targets, test_image, family: str, runtime: str) -> None:
    target = targets(family, runtime)
    prompt = _prompt(target, test_image)
    tokens, parents = _random_tree(9, seed=len(family))
    with target.session(CAPTURE, capture_final=True) as session:
        assert session.supports_trees
        session.prefill(prompt)
        out = session.step_tree(tokens, parents)
        assert out.logits.shape == (9, target.vocab_size) and out.logits.dtype == torch.float32
        assert session.cache_length == prompt.length + 9 and torch.equal(session.ids[prompt.length:], tokens)
    for node in range(len(tokens)):
        logits, features, final = _last_row(target, target.extend(prompt, tokens[_path(parents, node)]))
        torch.testing.assert_close(out.logits[node], logits, **CLOSE)
        torch.testing.assert_close(out.features[node], features, **CLOSE)
        torch.testing.assert_close(out.final_hidden[node], final, **CLOSE)


def test_eager_attention_reads_the_tree_as_an_additive_mask(targets, test_image) -> None:
    """transformers' eager attention adds its mask to the scores: the tree reaches it as 0 / -inf."""
    target = targets("llama", "eager", "eager")
    prompt = _prompt(target, test_image)
    tokens, parents = _random_tree(8, seed=3)
    with target.session(CAPTURE) as session:
        session.prefill(prompt)
        out = session.step_tree(tokens, parents)
    for node in range(len(tokens)):
        logits, features, _ = _last_row(target, target.extend(prompt, tokens[_path(parents, node)]))
        torch.testing.assert_close(out.logits[node], logits, **CLOSE)
        torch.testing.assert_close(out.features[node], features, **CLOSE)


@pytest.mark.parametrize("runtime", RUNTIMES)
@pytest.mark.parametrize("family", ["llama", "qwen2_5_vl"])
def test_keep_rows_equals_a_prefill_of_the_committed_tokens(targets, test_image, monkeypatch, family: str,
                                                            runtime: str) -> None:
    monkeypatch.setattr(kv_cache, "INITIAL_SPARE", 2)  # the tree forward outgrows the prefill's buffers
    target = targets(family, runtime)
    prompt = _prompt(target, test_image)
    tokens, parents = _random_tree(10, seed=7)
    depth = [len(_path(parents, node)) for node in range(len(tokens))]
    path = _path(parents, max(range(len(tokens)), key=lambda node: (depth[node], node)))
    assert path != list(range(len(path)))  # columns must move, not just a crop
    following = torch.tensor([42])
    committed = target.extend(prompt, tokens[path])
    with target.session(CAPTURE) as session, target.session() as reference:
        session.prefill(prompt)
        start = session.cache_length
        session.step_tree(tokens, parents)
        session.keep_rows(start, path)
        assert session.cache_length == start + len(path)
        assert torch.equal(session.ids, committed.input_ids[0])
        reference.prefill(committed)
        for got, want in zip(session.cache.layers, reference.cache.layers):
            assert got.keys.shape == want.keys.shape
            torch.testing.assert_close(got.keys, want.keys, **CLOSE)
            torch.testing.assert_close(got.values, want.values, **CLOSE)
        out = session.step(following)
    logits, features, _ = _last_row(target, target.extend(committed, following))
    torch.testing.assert_close(out.logits[-1], logits, **CLOSE)
    torch.testing.assert_close(out.features[-1], features, **CLOSE)


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_keep_rows_of_a_prefix_is_a_crop_and_refuses_a_non_path(targets, test_image, runtime: str) -> None:
    target = targets("llama", runtime)
    prompt = _prompt(target, test_image)
    tokens, parents = _random_tree(9, seed=5)
    child = next(i for i in range(2, len(tokens)) if parents[i] != i - 1)  # row 0..child is not a path
    with target.session() as session:
        session.prefill(prompt)
        start = session.cache_length
        session.step_tree(tokens, parents)
        with pytest.raises(ValueError, match="not a root-to-node path"):
            session.keep_rows(start, [0, child - 1, child])
        session.keep_rows(start, [0, 1])  # node 1's parent is always the root
        assert session.cache_length == start + 2 and torch.equal(session.ids[start:], tokens[:2])
        out = session.step(tokens[2:3])
    logits, _, _ = _last_row(target, target.extend(prompt, tokens[:3]))
    torch.testing.assert_close(out.logits[-1], logits, **CLOSE)


@pytest.mark.parametrize("runtime", RUNTIMES)
@pytest.mark.parametrize("family", ["llama", "qwen2_5_vl"])
def test_a_chain_through_step_tree_equals_step(targets, test_image, family: str, runtime: str) -> None:
    target = targets(family, runtime)
    prompt = _prompt(target, test_image)
    tokens = torch.tensor([5, 17, 9, 33, 2])
    with target.session(CAPTURE, capture_final=True) as tree, target.session(CAPTURE, capture_final=True) as chain:
        tree.prefill(prompt)
        chain.prefill(prompt)
        for n in (1, 5):  # a lone anchor too
            got = tree.step_tree(tokens[:n], torch.arange(-1, n - 1))
            want = chain.step(tokens[:n])
            torch.testing.assert_close(got.logits, want.logits, **CLOSE)
            torch.testing.assert_close(got.features, want.features, **CLOSE)
            torch.testing.assert_close(got.final_hidden, want.final_hidden, **CLOSE)
            tree.keep_rows(prompt.length, list(range(n)))
            chain.crop(prompt.length + n)
            assert torch.equal(tree.ids, chain.ids)


def test_malformed_trees_are_refused(targets, test_image) -> None:
    target = targets("llama", "packed")
    with target.session() as session:
        session.prefill(_prompt(target, test_image))
        for parents in ([0, 0], [-1, 1], [-1, 0, 3]):
            with pytest.raises(ValueError, match="not a tree"):
                session.step_tree(torch.tensor([5, 6, 7][:len(parents)]), torch.tensor(parents))


def test_trees_need_a_plain_kv_cache(targets, tiny_dir, test_image) -> None:
    target = targets("llama", "eager")
    with target.session() as session:
        session.cache.layers[0] = DynamicSlidingWindowLayer(sliding_window=4)
        assert not session.supports_trees
        with pytest.raises(MinisparkError, match="plain KV cache .*special layers") as info:
            session.step_tree(torch.tensor([5, 6]), torch.tensor([-1, 0]))
        assert "\n" not in str(info.value)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # where nothing compiles it runs eager: no refusal to see then
        compiled = load_target(str(tiny_dir("llama")), runtime="compiled")
    if compiled.runtime != "compiled":
        return
    with compiled.session() as session:
        assert not session.supports_trees
        with pytest.raises(MinisparkError, match="plain KV cache .*compiled runtime"):
            session.step_tree(torch.tensor([5, 6]), torch.tensor([-1, 0]))
