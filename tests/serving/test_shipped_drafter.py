"""The drafter shipped for the embedded target: found by default, loads with its calibration, small,
and exact in the loop (greedy parity against target-only decoding).

    .venv/bin/python -m pytest -q tests/serving/test_shipped_drafter.py
"""

from __future__ import annotations

from minispark.model.checkpoint import load_calibration
from minispark.serving.generate import SHIPPED_DRAFTERS, default_drafter, generate
from minispark.core.identity import target_id
from minispark.serving.schedule import FixedLength
from minispark.serving.builder import build_serving
from tests.helpers import assert_parity, hf_greedy

SHIPPED = SHIPPED_DRAFTERS / "smollm2-135m-dspark"
PROMPTS = ["Give me two tips for a rainy day.", "Write a Python function that returns the square of a number."]


def test_shipped_drafter_is_the_default_and_stays_exact(embedded_target):
    assert default_drafter(embedded_target) == SHIPPED
    assert sum(p.stat().st_size for p in SHIPPED.iterdir()) < 32 * 1024 * 1024
    setup = build_serving(embedded_target, sps=None)
    assert setup.drafter_spec == str(SHIPPED) and setup.drafter.config.draft_vocab == 8192
    assert setup.drafter.precision == "int8"  # the CPU default: parity below is the served drafter's
    assert load_calibration(SHIPPED, target_id(embedded_target.identity()))[0] is not None
    policies = {"fixed": FixedLength(7), setup.mode: setup.policy}
    for prompt in PROMPTS:
        inputs = embedded_target.encode(prompt=prompt)
        want = hf_greedy(embedded_target, inputs, 32)
        for policy in policies.values():
            out = generate(embedded_target, prompt, drafter=setup.drafter, policy=policy, max_new_tokens=32)
            assert_parity(embedded_target, inputs, out.result.token_ids, want)
