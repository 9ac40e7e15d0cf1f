"""Weight-only int8 drafter weights: the layer equals a float matmul with the dequantized weights,
the quantized drafter still decodes losslessly (greedy parity with target-only, and the T = 1
joint law through the real loop with a negative control), and the CLI option is checked.

    .venv/bin/python -m pytest -q tests/model/test_draft_quant.py
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from minispark.model.draft_quant import Int8Linear, quantize_int8
from minispark.target.int8 import int8_supported

pytestmark = pytest.mark.skipif(not int8_supported("cpu"), reason="no int8 weight-only kernel in this torch build")


@pytest.mark.parametrize("k", [48, 8, 24, 72])  # 8/24/72: widths the kernel gets wrong unpadded on some CPUs
def test_int8_linear_equals_its_dequantized_weights(k: int):
    torch.manual_seed(0)
    linear = nn.Linear(k, 80, bias=True)
    q = Int8Linear(linear)
    assert not q.weight_int8[:, k:].any()  # the padding columns are zero
    dequantized = q.weight_int8[:, :k].float() * q.scale.float()[:, None]  # (N, K)
    # every weight within half a quantization step of the original
    assert (dequantized - linear.weight).abs().le(q.scale.float()[:, None] / 2 + 1e-6).all()
    x = torch.randn(3, 5, k)
    reference = (x.bfloat16().float() @ dequantized.t() + linear.bias)  # (3, 5, 80)
    outs = [q(x) for _ in range(3)]
    assert outs[0].shape == (3, 5, 80) and outs[0].dtype == x.dtype
    torch.testing.assert_close(outs[0], reference, rtol=2e-2, atol=2e-2)
    assert all(torch.equal(outs[0], out) for out in outs)  # the same product every time


def test_quantize_int8_replaces_the_large_linears_only():
    from tests.helpers import make_model

    model = make_model()
    before = {n for n, m in model.named_modules() if isinstance(m, nn.Linear)}
    count = quantize_int8(model)
    after = {n for n, m in model.named_modules() if isinstance(m, Int8Linear)}
    assert count == len(after) > 0 and after < before
    assert "confidence_proj" not in after and "lm_head" in after and "fc" in after
    assert all(n.rsplit(".", 1)[-1] in ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj",
                                        "fc", "lm_head", "markov_w2") for n in after)


@pytest.mark.parametrize("head", ["vanilla", "rnn"])
def test_int8_sampler_draws_from_the_distributions_it_returns(head: str):
    """p_d of the int8 drafter is exactly what it samples from (the precondition of lossless
    rejection sampling), and it differs from the float drafter's: the test sees the int8 path."""
    from minispark.target.sampling import SamplingConfig, probabilities
    from tests.helpers import D, DRAWS, GAMMA, SMALL_V, draw_many, make_model, pair_chi_square

    model, float_model = make_model(head, vocab=SMALL_V, seed=3), make_model(head, vocab=SMALL_V, seed=3)
    quantize_int8(model)
    hidden = 0.5 * torch.randn(GAMMA, D, generator=torch.Generator().manual_seed(4))
    anchor, sampling = 2, SamplingConfig(1.0)
    with torch.no_grad():
        tokens, probs = draw_many(model, hidden, anchor, sampling, DRAWS, seed=10)
        assert pair_chi_square(tokens, probs, anchor, SMALL_V) > 1e-4
        prev = torch.cat([torch.full((len(tokens), 1), anchor), tokens[:, :-1]], dim=1)
        reference = probabilities(model.head_logits(hidden.expand(len(tokens), -1, -1), prev), sampling)
        torch.testing.assert_close(probs, reference)
        floats = probabilities(float_model.head_logits(hidden.expand(len(tokens), -1, -1), prev), sampling)
        assert not torch.equal(probs, floats)


@pytest.fixture(scope="module")
def served(tiny_trained_drafter):
    from minispark.target.loading import load_target

    target_dir, drafter_dir = tiny_trained_drafter
    return load_target(str(target_dir)), str(drafter_dir)


def test_cpu_default_is_int8_and_float_stays_available(served, monkeypatch):
    from minispark.core.defaults import DRAFT_PRECISION_ENV
    from minispark.core.errors import MinisparkError
    from minispark.serving.generate import make_drafter

    target, drafter_dir = served
    assert make_drafter(drafter_dir, target).precision == "int8"
    assert make_drafter(drafter_dir, target, "float").precision == "float32"
    monkeypatch.setenv(DRAFT_PRECISION_ENV, "float")
    assert make_drafter(drafter_dir, target).precision == "float32"
    monkeypatch.setenv(DRAFT_PRECISION_ENV, "fp8")
    with pytest.raises(MinisparkError, match="draft_precision"):
        make_drafter(drafter_dir, target)


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_int8_drafter_decodes_and_keeps_greedy_parity(served, temperature):
    """The int8 drafter runs through the real loop; at T = 0 its output equals target-only greedy decoding."""
    from minispark.serving.engine import speculative_generate
    from minispark.serving.generate import make_drafter
    from minispark.target.sampling import SamplingConfig
    from minispark.serving.schedule import FixedLength
    from tests.helpers import assert_parity, hf_greedy

    target, drafter_dir = served
    drafter = make_drafter(drafter_dir, target, "int8")
    for prompt in ["Tell me a story.", "List three fruits and a vegetable."]:
        inputs = target.encode(prompt=prompt)
        with target.session(drafter.feature_layers) as session:
            result = speculative_generate(session, inputs, drafter, SamplingConfig(temperature), FixedLength(3),
                                          max_new_tokens=40, eos_ids=target.eos_token_ids,
                                          generator=torch.Generator().manual_seed(0))
        assert result.stats.rounds > 0
        if temperature == 0.0:
            assert_parity(target, inputs, result.token_ids, hf_greedy(target, inputs, 40))


def test_cli_rejects_an_unknown_precision():
    from typer.testing import CliRunner

    from minispark.cli import app

    result = CliRunner().invoke(app, ["--draft-precision", "fp8", "bench", "--help"])
    assert result.exit_code == 2 and "--draft-precision" in result.output
