"""Confidence calibration: prefix-survival metrics and Sequential Temperature Scaling (STS).

The scheduler needs calibrated *absolute* survival probabilities a_k = ∏_{i≤k} c_i, not just a
ranking (design notes §7.2). Input is a set of rollouts: per round the raw confidences of the
proposed positions, ``confidences`` (rounds, γ) with NaN where a position was not proposed, and the
observed number of accepted draft tokens, ``accepted`` (rounds,). For position k the label is
1[accepted ≥ k] and the prediction is a_k, over the rounds that proposed position k.

Metrics per position: ECE with 15 equal-width bins on [0, 1] (a prediction of exactly 1 falls in
the last bin; each bin weighted by its share of rounds), rank-based AUC (Mann–Whitney, tied scores
get their average rank; NaN when only one class is present), and the Brier score.

STS fits one temperature per position, left to right: positions < k are fixed at their fitted
temperatures and T_k is grid-searched to minimise the ECE of the cumulative product at k. The
calibrated confidence is σ(logit(c)/T), which preserves each position's ranking (AUC at position 1
is unchanged; later positions' products can reorder slightly).

    python -m minispark.measuring.calibrate    # fit STS on synthetic overconfident scores, print the table
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from minispark.measuring.figures import save_figure
from minispark.model.calibration import DEFAULT_BINS, Calibration, temperature_scale

if TYPE_CHECKING:
    from rich.table import Table

#: Temperatures tried per position: log-spaced 0.1..10, plus exactly 1 (so the fit can keep raw).
DEFAULT_GRID = np.unique(np.concatenate([np.geomspace(0.1, 10.0, 193), [1.0]]))
#: Per-position logit shifts searched with the temperatures (0 included: plain temperature scaling).
DEFAULT_SHIFTS = np.linspace(-4.0, 4.0, 33)


# -- inputs ---------------------------------------------------------------------------------------


def check_rollouts(confidences: Any, accepted: Any) -> tuple[np.ndarray, np.ndarray]:
    """Validate and convert rollout arrays: confidences (rounds, γ) in [0, 1] or NaN as a suffix,
    accepted (rounds,) integers in 0..(proposed count)."""
    conf = np.asarray(confidences, dtype=np.float64)
    acc = np.asarray(accepted)
    if conf.ndim != 2:
        raise ValueError(f"confidences must be (rounds, γ), got shape {conf.shape}")
    if acc.shape != (conf.shape[0],):
        raise ValueError(f"accepted must be ({conf.shape[0]},), got shape {acc.shape}")
    if not np.all(np.mod(acc, 1) == 0):
        raise ValueError("accepted must hold integer counts")
    acc = acc.astype(np.int64)
    proposed = ~np.isnan(conf)
    if np.any(proposed[:, 1:] & ~proposed[:, :-1]):
        raise ValueError(
            "confidences: NaN (not proposed) must only appear after the proposed prefix"
        )
    values = conf[proposed]
    if values.size and (values.min() < 0 or values.max() > 1):
        raise ValueError("confidences must lie in [0, 1]")
    if np.any(acc < 0) or np.any(acc > proposed.sum(axis=1)):
        raise ValueError("accepted must be between 0 and the number of proposed positions")
    return conf, acc


def survival(confidences: np.ndarray, calibration: Calibration | None = None) -> np.ndarray:
    """Prefix survival a_k = ∏_{i≤k} c_i per round, (rounds, γ), calibrated first if given."""
    conf = np.asarray(confidences, dtype=np.float64)
    if calibration is not None:
        conf = calibration.apply(conf)
    return np.cumprod(conf, axis=1)  # NaN propagates to the unproposed suffix


def prefix_labels(accepted: np.ndarray, gamma: int) -> np.ndarray:
    """(rounds, γ) bool: label[r, k-1] = accepted[r] >= k."""
    return np.asarray(accepted)[:, None] >= np.arange(1, gamma + 1)[None, :]


# -- metrics --------------------------------------------------------------------------------------


def ece(predictions: np.ndarray, labels: np.ndarray, n_bins: int = DEFAULT_BINS) -> float:
    """Expected calibration error with ``n_bins`` equal-width bins on [0, 1]."""
    return float(_ece_grid(np.asarray(predictions, dtype=np.float64)[None, :], labels, n_bins)[0])


def _ece_grid(predictions: np.ndarray, labels: np.ndarray, n_bins: int) -> np.ndarray:
    """ECE of each row of ``predictions`` (G, N) against ``labels`` (N,) → (G,)."""
    rows, n = predictions.shape
    if n == 0:
        return np.full(rows, np.nan)
    bins = np.minimum((predictions * n_bins).astype(np.int64), n_bins - 1)  # (G, N)
    flat = (bins + n_bins * np.arange(rows)[:, None]).ravel()  # bin id unique per grid row
    size = rows * n_bins
    pred_sum = np.bincount(flat, weights=predictions.ravel(), minlength=size)
    label_sum = np.bincount(
        flat, weights=np.broadcast_to(labels, predictions.shape).ravel(), minlength=size
    )
    gap = np.abs(pred_sum - label_sum).reshape(rows, n_bins)  # = count·|mean pred − mean label|
    return gap.sum(axis=1) / n


def auc(scores: np.ndarray, labels: np.ndarray) -> float:
    """ROC AUC by ranks (Mann–Whitney U); ties share their average rank. NaN for one class."""
    scores = np.asarray(scores, dtype=np.float64)
    labels = np.asarray(labels, dtype=bool)
    positives = int(labels.sum())
    negatives = labels.size - positives
    if positives == 0 or negatives == 0:
        return float("nan")
    order = np.argsort(scores, kind="mergesort")
    _, inverse, counts = np.unique(scores[order], return_inverse=True, return_counts=True)
    # Rank of a tie group = mean of the 1-based positions it occupies.
    ends = np.cumsum(counts)
    average_rank = ends - (counts - 1) / 2.0
    ranks = np.empty_like(scores)
    ranks[order] = average_rank[inverse]
    u = ranks[labels].sum() - positives * (positives + 1) / 2.0
    return float(u / (positives * negatives))


def brier(predictions: np.ndarray, labels: np.ndarray) -> float:
    predictions = np.asarray(predictions, dtype=np.float64)
    return (
        float(np.mean((predictions - np.asarray(labels, dtype=np.float64)) ** 2))
        if predictions.size
        else float("nan")
    )


@dataclass
class PositionMetrics:
    """Calibration quality of a_k at one draft position (over rounds that proposed it)."""

    position: int
    rounds: int
    accept_rate: float  # observed Pr(accepted >= k)
    mean_prediction: float  # mean a_k
    ece: float
    auc: float
    brier: float


def position_metrics(
    confidences: Any,
    accepted: Any,
    calibration: Calibration | None = None,
    n_bins: int = DEFAULT_BINS,
) -> list[PositionMetrics]:
    """ECE/AUC/Brier of the (optionally calibrated) prefix survival at each position."""
    conf, acc = check_rollouts(confidences, accepted)
    pred = survival(conf, calibration)
    labels = prefix_labels(acc, conf.shape[1])
    out = []
    for k in range(conf.shape[1]):
        mask = ~np.isnan(pred[:, k])
        p, y = pred[mask, k], labels[mask, k]
        out.append(
            PositionMetrics(
                position=k + 1,
                rounds=int(mask.sum()),
                accept_rate=float(y.mean()) if y.size else float("nan"),
                mean_prediction=float(p.mean()) if p.size else float("nan"),
                ece=ece(p, y, n_bins),
                auc=auc(p, y),
                brier=brier(p, y),
            )
        )
    return out


# -- Sequential Temperature Scaling ---------------------------------------------------------------


def fit_sts(
    confidences: Any,
    accepted: Any,
    grid: np.ndarray | None = None,
    n_bins: int = DEFAULT_BINS,
    drafter: str = "",
    target: str = "",
    shifts: np.ndarray | None = None,
) -> Calibration:
    """Fit (T_k, b_k) left to right, each minimising the ECE of the cumulative product at k.

    The search is a grid over ``grid`` temperatures × ``shifts`` logit shifts (``shifts=(0.0,)``
    is plain temperature scaling). Ties in ECE go to the simplest map (T closest to 1 in log
    scale, then the smallest |b|); positions never proposed keep the identity.
    """
    conf, acc = check_rollouts(confidences, accepted)
    grid = DEFAULT_GRID if grid is None else np.asarray(grid, dtype=np.float64)
    if grid.ndim != 1 or grid.size == 0 or np.any(grid <= 0):
        raise ValueError("temperature grid must be a non-empty 1D array of positive values")
    shifts = DEFAULT_SHIFTS if shifts is None else np.asarray(shifts, dtype=np.float64)
    temps_flat = np.repeat(grid, shifts.size)  # (G·S,): every (T, b) pair
    shifts_flat = np.tile(shifts, grid.size)
    simplicity = np.abs(np.log(temps_flat)) + 1e-3 * np.abs(shifts_flat)
    labels = prefix_labels(acc, conf.shape[1]).astype(np.float64)
    prefix = np.ones(conf.shape[0])  # calibrated ∏_{i<k} per round (NaN once unproposed)
    temperatures, fitted_shifts = [], []
    for k in range(conf.shape[1]):
        mask = ~np.isnan(conf[:, k])
        if not mask.any():
            temperatures.append(1.0)
            fitted_shifts.append(0.0)
            continue
        candidates = prefix[mask][None, :] * temperature_scale(
            conf[mask, k][None, :], temps_flat[:, None], shifts_flat[:, None]
        )  # (G·S, N)
        errors = _ece_grid(candidates, labels[mask, k], n_bins)  # (G·S,)
        near_best = np.flatnonzero(errors <= errors.min() + 1e-12)
        best = near_best[np.argmin(simplicity[near_best])]
        temperatures.append(float(temps_flat[best]))
        fitted_shifts.append(float(shifts_flat[best]))
        prefix = prefix * temperature_scale(conf[:, k], temps_flat[best], shifts_flat[best])
    calibration = Calibration(
        temperatures, fitted_shifts, drafter=drafter, target=target, rounds=int(conf.shape[0]), n_bins=n_bins
    )
    calibration.metrics = {
        name: [_json_safe(asdict(m)) for m in position_metrics(conf, acc, cal, n_bins)]
        for name, cal in (("before", None), ("after", calibration))
    }
    return calibration


def _json_safe(row: dict[str, Any]) -> dict[str, Any]:
    """NaN (e.g. AUC with one class) → None, so the saved file is strict JSON."""
    return {k: None if isinstance(v, float) and math.isnan(v) else v for k, v in row.items()}


# -- reliability diagrams and rendering -----------------------------------------------------------


def reliability(
    confidences: Any,
    accepted: Any,
    position: int,
    calibration: Calibration | None = None,
    n_bins: int = DEFAULT_BINS,
) -> list[dict[str, float]]:
    """Reliability-diagram bins for a_position: lo, hi, count, mean_prediction, accept_rate."""
    conf, acc = check_rollouts(confidences, accepted)
    if not 1 <= position <= conf.shape[1]:
        raise ValueError(f"position must be in 1..{conf.shape[1]}, got {position}")
    pred = survival(conf, calibration)[:, position - 1]
    labels = prefix_labels(acc, conf.shape[1])[:, position - 1]
    mask = ~np.isnan(pred)
    pred, labels = pred[mask], labels[mask]
    bins = np.minimum((pred * n_bins).astype(np.int64), n_bins - 1)
    out = []
    for b in range(n_bins):
        in_bin = bins == b
        count = int(in_bin.sum())
        out.append(
            {
                "lo": b / n_bins,
                "hi": (b + 1) / n_bins,
                "count": count,
                "mean_prediction": float(pred[in_bin].mean()) if count else float("nan"),
                "accept_rate": float(labels[in_bin].mean()) if count else float("nan"),
            }
        )
    return out


def render_metrics(
    before: list[PositionMetrics], after: list[PositionMetrics] | None = None
) -> Table:
    """A rich table of per-position metrics; with ``after``, a raw and an STS row per position."""
    from rich.table import Table

    table = Table(title="prefix survival a_k vs 1\\[accepted ≥ k]")
    for name in ("k", "rounds", "", "accept", "mean a_k", "ECE", "AUC", "Brier"):
        table.add_column(name, justify="right")
    variants = [("raw", before)] + ([("STS", after)] if after is not None else [])
    for i in range(len(before)):
        for name, metrics in variants:
            m = metrics[i]
            first = name == "raw"
            table.add_row(
                str(m.position) if first else "",
                str(m.rounds) if first else "",
                name,
                f"{m.accept_rate:.3f}",
                f"{m.mean_prediction:.3f}",
                f"{m.ece:.4f}",
                f"{m.auc:.3f}",
                f"{m.brier:.4f}",
                end_section=not first or after is None,
            )
    return table


def render_reliability(bins: list[dict[str, float]], title: str = "reliability") -> Table:
    """A rich table of reliability bins with a text bar of the observed acceptance rate."""
    from rich.table import Table

    table = Table(title=title)
    for name in ("bin", "count", "mean pred", "observed", ""):
        table.add_column(name, justify="right" if name else "left")
    for b in bins:
        observed = b["accept_rate"]
        bar = "" if math.isnan(observed) else "█" * round(20 * observed)
        table.add_row(
            f"{b['lo']:.2f}–{b['hi']:.2f}",
            str(b["count"]),
            "" if math.isnan(b["mean_prediction"]) else f"{b['mean_prediction']:.3f}",
            "" if math.isnan(observed) else f"{observed:.3f}",
            bar,
        )
    return table


def plot_reliability(
    path: str | Path,
    confidences: Any,
    accepted: Any,
    calibration: Calibration | None = None,
    n_bins: int = DEFAULT_BINS,
) -> Path:
    """Write a PNG with one reliability diagram per position (raw, and STS when given)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    conf, acc = check_rollouts(confidences, accepted)
    gamma = conf.shape[1]
    fig, axes = plt.subplots(1, gamma, figsize=(2.6 * gamma, 2.8), squeeze=False)
    variants = [("raw", None)] + ([("STS", calibration)] if calibration is not None else [])
    for k, ax in enumerate(axes[0], start=1):
        ax.plot([0, 1], [0, 1], color="grey", linewidth=0.8, linestyle="--")
        for name, cal in variants:
            bins = [b for b in reliability(conf, acc, k, cal, n_bins) if b["count"]]
            ax.plot(
                [b["mean_prediction"] for b in bins],
                [b["accept_rate"] for b in bins],
                marker="o",
                markersize=3,
                label=name,
            )
        ax.set_title(f"a_{k}")
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1)
        ax.set_xlabel("predicted")
        if k == 1:
            ax.set_ylabel("observed")
            ax.legend(fontsize=7)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    save_figure(fig, path, dpi=120)
    return path


def synthetic_rollouts(
    rounds: int = 4000, gamma: int = 5, overconfidence: float = 2.0, seed: int = 0
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rollouts with known truth: true conditional survival p ~ U(0.2, 0.98), raw confidence
    σ(logit(p)·overconfidence), and accepted = leading Bernoulli(p) successes.

    Returns (confidences, accepted, true_probabilities); all γ positions are proposed.
    """
    rng = np.random.default_rng(seed)
    true = rng.uniform(0.2, 0.98, size=(rounds, gamma))
    raw = temperature_scale(true, 1.0 / overconfidence)
    survived = rng.random((rounds, gamma)) < true
    accepted = np.cumprod(survived, axis=1).sum(axis=1)
    return raw, accepted, true


if __name__ == "__main__":
    from minispark.core.console import make_console

    conf_, acc_, _ = synthetic_rollouts()
    fitted = fit_sts(conf_, acc_)
    print("temperatures:", [round(t, 3) for t in fitted.temperatures])
    make_console().print(
        render_metrics(position_metrics(conf_, acc_), position_metrics(conf_, acc_, fitted))
    )


