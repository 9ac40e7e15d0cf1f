"""Calibration metrics and Sequential Temperature Scaling on synthetic rollouts with known truth."""

import io
import itertools
import math

import numpy as np
import pytest

from minispark.measuring.calibrate import (
    auc,
    brier,
    ece,
    fit_sts,
    plot_reliability,
    position_metrics,
    reliability,
    render_metrics,
    render_reliability,
    synthetic_rollouts,
)
from minispark.model.calibration import Calibration, CalibrationError, temperature_scale


def test_ece_hand_worked():
    # bin 0: mean pred 0.05 vs 0.5 observed, weight 2/4; bin 9: 0.95 vs 1.0, weight 2/4
    assert ece(
        np.array([0.05, 0.05, 0.95, 0.95]), np.array([0, 1, 1, 1]), n_bins=10
    ) == pytest.approx(0.25)
    assert ece(np.array([1.0, 1.0]), np.array([1, 1])) == 0.0  # p = 1 lands in the last bin


def test_ece_of_calibrated_scores_is_small():
    rng = np.random.default_rng(0)
    p = rng.random(200_000)
    assert ece(p, rng.random(p.size) < p) < 0.01


def test_auc_ranks_with_ties_against_pairwise_count():
    rng = np.random.default_rng(1)
    scores = rng.integers(0, 5, 300) / 4.0  # many ties
    labels = rng.random(300) < scores
    pos, neg = scores[labels], scores[~labels]
    pairwise = np.mean([(p > n) + 0.5 * (p == n) for p, n in itertools.product(pos, neg)])
    assert auc(scores, labels) == pytest.approx(pairwise)
    assert auc(np.array([0.5, 0.5]), np.array([1, 0])) == 0.5
    assert math.isnan(auc(np.array([0.2, 0.4]), np.array([1, 1])))


def test_brier():
    assert brier(np.array([0.8, 0.3]), np.array([1, 0])) == pytest.approx((0.04 + 0.09) / 2)


def test_temperature_scale_edges_and_scalar_agreement():
    c = np.array([0.0, 0.2, 0.5, 0.97, 1.0, np.nan])
    out = temperature_scale(c, 2.0)
    assert out[0] == 0.0 and out[4] == 1.0 and out[2] == 0.5 and np.isnan(out[5])
    cal = Calibration([2.0, 0.5])
    for x in (0.0, 1e-9, 0.2, 0.5, 0.97, 1.0 - 1e-12, 1.0):
        assert cal.scale(1, x) == pytest.approx(
            float(temperature_scale(np.array(x), 2.0)), abs=1e-12
        )
        assert cal.scale(2, x) == pytest.approx(
            float(temperature_scale(np.array(x), 0.5)), abs=1e-12
        )


@pytest.mark.parametrize("rounds, gamma", [(6_000, 3), pytest.param(20_000, 5, marks=pytest.mark.slow)])
def test_sts_reduces_ece_and_keeps_auc_on_held_out_rollouts(rounds: int, gamma: int):
    """Fitted on ``rounds`` rollouts of ``gamma`` positions (the grid search costs rounds × 6,402 (T, b) pairs a
    position), scored on 20,000 others."""
    conf, accepted, _ = synthetic_rollouts(rounds=rounds, gamma=gamma, overconfidence=2.0, seed=0)
    calibration = fit_sts(conf, accepted)
    assert all(t > 1.0 for t in calibration.temperatures)  # overconfident → T > 1
    assert calibration.temperatures[0] == pytest.approx(2.0, rel=0.1)  # truth is T = 2
    test_conf, test_accepted, _ = synthetic_rollouts(rounds=20_000, gamma=gamma, overconfidence=2.0, seed=1)
    before = position_metrics(test_conf, test_accepted)
    after = position_metrics(test_conf, test_accepted, calibration)
    for b, a in zip(before, after):
        assert a.ece < 0.5 * b.ece, (b, a)
        assert a.brier < b.brier
        # Temperature scaling keeps each c_k's ranking; products a_k (k >= 2) may reorder slightly
        # (exact calibration, T = 2 everywhere, moves these AUCs by up to ~0.01).
        assert a.auc == pytest.approx(b.auc, abs=0.02)
    # position 1 is a monotone map of one score: the ranking, hence AUC, is exactly unchanged
    assert after[0].auc == before[0].auc


@pytest.mark.slow  # a negative control: its positive case runs in make test, both in make test-all
def test_sts_negative_control_wrong_temperature_raises_ece():
    conf, accepted, _ = synthetic_rollouts(rounds=20_000, gamma=3, overconfidence=2.0, seed=6)
    fitted = position_metrics(conf, accepted, fit_sts(conf, accepted))
    sharpened = position_metrics(conf, accepted, Calibration([0.5, 0.5, 0.5]))  # the wrong way
    assert all(w.ece > 2 * f.ece for w, f in zip(sharpened, fitted))


def test_sts_keeps_calibrated_scores_near_identity():
    conf, accepted, _ = synthetic_rollouts(rounds=4000, gamma=3, overconfidence=1.0, seed=2)
    calibration = fit_sts(conf, accepted)
    assert calibration.temperatures[0] == pytest.approx(1.0, rel=0.25)
    before = position_metrics(conf, accepted)
    after = position_metrics(conf, accepted, calibration)
    assert all(a.ece <= b.ece + 1e-12 for a, b in zip(after, before))  # T = 1 is in the grid


def test_partial_proposals_and_input_checks():
    nan = np.nan
    conf = np.array([[0.9, 0.8, nan], [0.7, nan, nan], [0.6, 0.5, 0.4]])
    metrics = position_metrics(conf, [2, 0, 1])
    assert [m.rounds for m in metrics] == [3, 2, 1]
    assert metrics[1].accept_rate == 0.5  # rounds 0 and 2 proposed position 2; round 0 accepted it
    calibration = fit_sts(conf, [2, 0, 1])
    assert len(calibration.temperatures) == 3
    with pytest.raises(ValueError, match="after the proposed prefix"):
        position_metrics(np.array([[nan, 0.5]]), [0])
    with pytest.raises(ValueError, match="between 0 and the number of proposed"):
        position_metrics(np.array([[0.5, nan]]), [2])
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        position_metrics(np.array([[1.5]]), [0])


def test_calibration_json_round_trip_and_errors(tmp_path):
    conf, accepted, _ = synthetic_rollouts(rounds=500, gamma=3, seed=3)
    calibration = fit_sts(conf, accepted, drafter="dspark-test", target="tiny")
    path = calibration.save(tmp_path / "calibration.json")
    assert Calibration.load(path) == calibration
    assert [p.name for p in tmp_path.iterdir()] == ["calibration.json"]
    path.write_text('{"version": 1, "temperatures": [1.0, -2.0]}')
    with pytest.raises(CalibrationError, match=r"calibration\.json: field 'temperatures'"):
        Calibration.load(path)
    path.write_text('{"version": 1, "temperatures": [1.0], "temprature": 2}')
    with pytest.raises(CalibrationError, match="field 'temprature': unknown"):
        Calibration.load(path)
    with pytest.raises(CalibrationError, match="not found"):
        Calibration.load(tmp_path / "absent.json")


def test_reliability_and_renderers(tmp_path):
    from rich.console import Console

    conf, accepted, _ = synthetic_rollouts(rounds=1000, gamma=3, seed=4)
    bins = reliability(conf, accepted, 2, n_bins=10)
    assert len(bins) == 10 and sum(b["count"] for b in bins) == 1000
    calibration = fit_sts(conf, accepted)
    console = Console(file=io.StringIO(), width=100)
    console.print(
        render_metrics(
            position_metrics(conf, accepted), position_metrics(conf, accepted, calibration)
        )
    )
    console.print(render_reliability(bins))
    text = console.file.getvalue()
    assert "STS" in text and "[accepted ≥ k]" in text and "0.90–1.00" in text


def test_plot_reliability_writes_png(tmp_path):
    pytest.importorskip("matplotlib")
    conf, accepted, _ = synthetic_rollouts(rounds=300, gamma=2, seed=5)
    path = plot_reliability(tmp_path / "rel.png", conf, accepted, fit_sts(conf, accepted))
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_shift_fixes_a_head_on_the_wrong_side_of_one_half() -> None:
    """Scores ~0.6 where acceptance is ~0.1: a temperature alone cannot cross 0.5, the shift can."""
    rng = np.random.default_rng(0)
    conf = rng.uniform(0.5, 0.7, size=(4000, 1))
    accepted = (rng.random(4000) < (conf[:, 0] - 0.5)).astype(np.int64)  # true rate 0.0–0.2, rising with c
    plain = fit_sts(conf, accepted, shifts=np.array([0.0]))
    shifted = fit_sts(conf, accepted)
    raw = position_metrics(conf, accepted)[0]
    after_plain = position_metrics(conf, accepted, plain)[0]
    after_shift = position_metrics(conf, accepted, shifted)[0]
    assert after_plain.ece > 0.3 and after_shift.ece < 0.03
    assert shifted.shifts[0] < 0 and after_shift.auc == pytest.approx(raw.auc)  # order preserved


def test_the_calibration_fitted_nearest_the_request_temperature_is_served(tmp_path):
    """A drafter keeps one fit per temperature (calibration.json at T 0, calibration-t{T}.json at others); serving
    picks the nearest and says nothing unless even that one is far; the notice never points at the held-out set."""
    from minispark.model.checkpoint import load_calibration
    from minispark.model.drafter_dir import calibration_name
    from minispark.target.sampling import SamplingConfig

    for t in (0.0, 0.7, 1.0):
        Calibration([1.0 + t], sampling={"temperature": t, "top_p": 1.0, "top_k": 0}).save(
            tmp_path / calibration_name(t))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["calibration-t0.7.json", "calibration-t1.json",
                                                         "calibration.json"]
    for asked, served in ((0.0, 1.0), (0.6, 1.7), (0.8, 1.7), (0.9, 2.0), (1.1, 2.0)):
        calibration, warning = load_calibration(tmp_path, sampling=SamplingConfig(asked))
        assert calibration.temperatures == [served] and warning is None
    calibration, warning = load_calibration(tmp_path, sampling=SamplingConfig(1.6))
    assert calibration.temperatures == [2.0]
    assert "corpus.jsonl" in warning and "heldout" not in warning


def test_a_drafter_copy_keeps_every_calibration(tiny_trained_drafter, tmp_path):
    from minispark.model.checkpoint import copy_drafter
    from minispark.model.drafter_dir import calibration_paths

    drafter_dir = tmp_path / "src"
    copy_drafter(tiny_trained_drafter[1], drafter_dir)
    Calibration([1.0], sampling={"temperature": 0.7, "top_p": 1.0, "top_k": 0}).save(drafter_dir / "calibration-t0.7.json")
    copy_drafter(drafter_dir, tmp_path / "copy")
    assert "calibration-t0.7.json" in [p.name for p in calibration_paths(tmp_path / "copy")]
