"""``minispark bench`` on a tiny target with a tiny trained drafter: the JSON schema, interleaving,
the time breakdown, and the parity column — which must say "no" for a deliberately broken mode."""

from __future__ import annotations

import json
import math
from unittest import mock

import pytest
import torch
from typer.testing import CliRunner

from minispark.serving import engine
from minispark.measuring.bench import (
    MODES,
    BenchConfig,
    Mode,
    build_modes,
    builtin_prompts,
    minispark_mode,
    run_bench,
)
from minispark.measuring.bench_report import plot_bench, render_bench
from minispark.cli import app
from minispark.serving.draft_block import FixedBlock
from minispark.serving.drafters.base import Drafter
from minispark.core.errors import MinisparkError
from minispark.target.sampling import SamplingConfig
from minispark.serving.schedule import FixedLength
from minispark.serving.sps import SPSTable
from minispark.target.loading import load_target

GAMMA = 4  # the tiny drafter's block size
BREAKDOWN = ("propose_ms", "verify_ms", "accept_commit_ms", "target_ms_per_token", "draft_share")


@pytest.fixture(scope="module")
def setup(tiny_trained_drafter, tmp_path_factory):
    target_dir, drafter_dir = tiny_trained_drafter
    # Jagged on purpose: 2..4 tokens cost ~3 steps, 5 tokens about one. Algorithm 1 on the raw table
    # never drafts (Θ(1) ≤ 2 · 0.3 < Θ(0)); on its envelope it verifies up to γ drafts.
    sps = tmp_path_factory.mktemp("sps") / "jagged.json"
    SPSTable.from_inline([1.0, 0.3, 0.35, 0.4, 0.95]).save(sps)
    return load_target(str(target_dir)), str(drafter_dir), sps


class JunkDrafter(Drafter):
    """Proposes γ copies of (anchor + 1): nearly always wrong."""

    name = "junk"

    def __init__(self, vocab: int) -> None:
        self.vocab = vocab

    def propose(self, ids, anchor_position, sampling, generator) -> FixedBlock:
        return FixedBlock(torch.full((GAMMA,), (int(ids[-1]) + 1) % self.vocab, dtype=torch.long))


def broken_mode(target) -> Mode:
    """Junk drafts with the acceptance rule bypassed: every draft is committed. Output equality
    with the target must break, and bench's parity column must say so."""

    def accept_everything(tree, verified, sampling, generator):  # a chain: every node, then the target's token
        return list(range(1, len(tree))), int(verified.logits[len(tree) - 1].argmax())

    inner = minispark_mode("broken", target, JunkDrafter(target.vocab_size), lambda: FixedLength(GAMMA),
                           SamplingConfig())

    def run(inputs, max_new_tokens, seed):
        with mock.patch.object(engine, "accept_tree", accept_everything):
            return inner.run(inputs, max_new_tokens, seed)

    return Mode("broken", run, drafting=True)


def recording(modes: list[Mode], order: list[str]) -> list[Mode]:
    def wrap(mode: Mode) -> Mode:
        def run(*args):
            order.append(mode.name)
            return mode.run(*args)

        return Mode(mode.name, run, mode.drafting, mode.precision)

    return [wrap(m) for m in modes]


def test_every_mode_schema_parity_breakdown_and_order(setup) -> None:
    target, drafter, sps = setup
    config = BenchConfig(modes=list(MODES), max_new_tokens=12, gamma=GAMMA, repeats=2, warmup=False)
    modes, notices = build_modes(target, config, drafter, sps)
    assert [m.name for m in modes] == list(MODES) and notices == []
    order: list[str] = []
    modes = recording(modes + [broken_mode(target)], order)
    report = run_bench(target, modes, builtin_prompts(target, 2), config, drafter=drafter)
    json.dumps(report, allow_nan=False)  # valid JSON, no NaN
    assert report["drafter_precision"] == "int8"  # the CPU default, recorded with the figures

    names = [m.name for m in modes]
    # 2 repeats × 2 prompts, each a full rotation of the modes, starting one later each time
    assert [order[i * len(names)] for i in range(4)] == names[:4]
    assert all(sorted(order[i * len(names):(i + 1) * len(names)]) == sorted(names) for i in range(4))

    summary = report["summary"]
    assert list(summary) == names
    for name, row in summary.items():
        assert {"tokens_per_s", "median_tokens_per_s", "speedup_vs_target", "worst_prompt_speedup",
                "parity", *BREAKDOWN} <= set(row)
        assert row["tokens_per_s"] > 0 and row["runs"] == 4
        assert row["parity"] is (name != "broken"), name
        if name.startswith("hf"):
            assert all(row[key] is None for key in BREAKDOWN if key != "target_ms_per_token")
        else:
            assert all(row[key] >= 0 for key in BREAKDOWN), name
        if name not in ("target", "hf", "hf-lookup"):
            assert row["tau"] >= 1.0 and row["drafts_per_round"] >= 0
            assert all(0.0 <= a <= 1.0 for a in row["acceptance_per_position"])
    assert summary["target"]["speedup_vs_target"] == 1.0
    assert summary["fixed"]["drafts_per_round"] == pytest.approx(GAMMA, abs=0.5)  # only the last round is cut
    assert summary["broken"]["tau"] > 3.0  # "accepted" every junk draft
    # the envelope verifies drafts where the raw table's first bump stops Algorithm 1 cold
    assert summary["schedule-raw"]["drafts_per_round"] == 0
    assert summary["schedule-noskip"]["drafts_per_round"] > 1
    # draft-skip is on in the schedule modes only; a skipped round verifies nothing
    assert summary["schedule-noskip"]["skipped_rounds"] == summary["fixed"]["skipped_rounds"] == 0
    assert 0 <= summary["schedule"]["skipped_rounds"] <= summary["schedule"]["rounds"]
    assert math.isclose(summary["fixed"]["draft_share"],
                        summary["fixed"]["propose_ms"] / summary["target"]["target_ms_per_token"])

    rows = report["prompts"]
    assert len(rows) == 2 and all(set(row["modes"]) == set(names) for row in rows)
    assert all(not row["modes"]["broken"]["parity"] and row["modes"]["fixed"]["parity"] for row in rows)
    assert all(len(row["modes"]["hf"]["tokens"]) == 2 for row in rows)
    assert {"device", "threads", "load_1min_before"} <= set(report["hardware"])
    assert {"torch", "transformers", "minispark"} <= set(report["versions"])
    assert report["settings"]["temperature"] == 0.0 and report["drafter"] == drafter


def test_engine_step_times_add_up_to_at_most_the_wall_time(setup) -> None:
    target, drafter, sps = setup
    config = BenchConfig(modes=["target", "fixed"], max_new_tokens=8, gamma=GAMMA)
    mode = build_modes(target, config, drafter, sps)[0][1]
    _, stats = mode.run(target.encode(prompt="Hi"), 8, 0)
    steps = (stats.propose_s, stats.verify_s, stats.accept_commit_s)
    assert all(s > 0 for s in steps) and sum(steps) + stats.prefill_s <= stats.wall_s


def test_sampling_replaces_parity_with_a_statement(setup, tmp_path) -> None:
    target, drafter, sps = setup
    config = BenchConfig(modes=["target", "lookup", "fixed"], max_new_tokens=6, gamma=GAMMA,
                         sampling=SamplingConfig(0.8), warmup=False)
    modes, _ = build_modes(target, config, drafter, sps)
    report = run_bench(target, modes, builtin_prompts(target, 1), config)
    for row in report["summary"].values():
        assert "parity" not in row and row["outputs"].startswith("samples at T=0.8")
    assert all("parity" not in cell for cell in report["prompts"][0]["modes"].values())
    from rich.console import Console

    console = Console(record=True, width=250)
    console.print(render_bench(report))
    assert "samples" in console.export_text()
    assert plot_bench(report, tmp_path / "bench.png").read_bytes()[:4] == b"\x89PNG"


def test_modes_needing_a_drafter_are_skipped_with_a_notice(setup) -> None:
    target, _, _ = setup
    modes, notices = build_modes(target, BenchConfig(modes=["lookup", "schedule"]))
    assert [m.name for m in modes] == ["target", "lookup"]
    assert notices == ["skipping schedule: it needs a trained drafter (--drafter DIR)"]
    with pytest.raises(MinisparkError, match="modes: unknown mode 'turbo'"):
        BenchConfig(modes=["target", "turbo"])


def test_cli_json_alone_on_stdout_and_plot(setup, tiny_trained_drafter, tmp_path) -> None:
    target_dir, _ = tiny_trained_drafter
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text('{"prompt": "Tell me a story.", "id": "story"}\n{"prompt": "Name a fruit."}\n')
    png = tmp_path / "out.png"
    result = CliRunner().invoke(app, ["bench", "--target", str(target_dir), "--modes", "target,hf,fixed",
                                      "--prompts", str(prompts), "--num-prompts", "2", "--max-new-tokens", "6",
                                      "--json", "--plot", str(png)])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert list(report["summary"]) == ["target", "hf"] and report["summary"]["hf"]["parity"] is True
    assert [row["label"] for row in report["prompts"]] == ["story", "line 2"]
    assert "skipping fixed" in result.stderr and png.read_bytes()[:4] == b"\x89PNG"
    bad = CliRunner().invoke(app, ["bench", "--target", str(target_dir), "--modes", "target,turbo"])
    assert bad.exit_code == 2 and "--modes: unknown mode 'turbo'" in bad.stderr


def interrupting(modes: list[Mode], at_call: int) -> list[Mode]:
    """``modes`` with Ctrl-C pressed at the ``at_call``-th run of any mode (1-based)."""
    calls = [0]

    def wrap(mode: Mode) -> Mode:
        def run(*args):
            calls[0] += 1
            if calls[0] == at_call:
                raise KeyboardInterrupt
            return mode.run(*args)

        return Mode(mode.name, run, mode.drafting, mode.precision)

    return [wrap(m) for m in modes]


def test_ctrl_c_keeps_the_finished_repeats(target) -> None:
    """`bench --repeats N` interrupted: every finished repeat was discarded with the one cut short."""
    from minispark.measuring.bench import BenchInterrupted

    config = BenchConfig(modes=["target", "lookup"], max_new_tokens=3, repeats=3, warmup=False)
    modes, _ = build_modes(target, config)
    prompts = builtin_prompts(target, 2)
    per_repeat = len(modes) * len(prompts)
    with pytest.raises(BenchInterrupted) as caught:  # in the second repeat's second run
        run_bench(target, interrupting(modes, per_repeat + 2), prompts, config)
    report = caught.value.report
    assert report["interrupted"] == {"repeats_done": 1, "repeats_asked": 3}
    assert {name: row["runs"] for name, row in report["summary"].items()} == {"target": 2, "lookup": 2}
    assert all(len(row["modes"]["lookup"]["tokens"]) == 1 for row in report["prompts"])
    assert report["summary"]["lookup"]["parity"] is True
    from rich.console import Console

    console = Console(width=400, record=True, file=open("/dev/null", "w"))
    console.print(render_bench(report))
    assert "× 1 of 3 (interrupted)" in console.export_text()
    with pytest.raises(KeyboardInterrupt) as first:  # nothing finished: nothing to report
        run_bench(target, interrupting(modes, 2), prompts, config)
    assert not isinstance(first.value, BenchInterrupted)


def test_cli_ctrl_c_prints_the_finished_repeats(tiny_dir, monkeypatch) -> None:
    from minispark.measuring import bench

    real = bench.build_modes

    def cut_in_repeat_two(*args, **kwargs):
        modes, notices = real(*args, **kwargs)
        return interrupting(modes, 3 * len(modes) + 1), notices  # warm-up, 2 prompts: repeat 2's first run

    monkeypatch.setattr(bench, "build_modes", cut_in_repeat_two)
    result = CliRunner().invoke(app, ["bench", "--target", str(tiny_dir("llama")), "--modes", "target,lookup",
                                      "--num-prompts", "2", "--max-new-tokens", "3", "--repeats", "3", "--json"])
    assert result.exit_code == 130, (result.output, result.exception)
    report = json.loads(result.stdout)
    assert report["interrupted"] == {"repeats_done": 1, "repeats_asked": 3}
    assert "interrupted; the report covers the 1 of 3 repeats that finished" in result.stderr
