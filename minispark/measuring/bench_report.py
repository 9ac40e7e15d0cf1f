"""How ``minispark bench`` shows its report: the rich table (a row per mode) and the PNG plot.

    minispark bench --modes target,lookup --num-prompts 2 --max-new-tokens 32 --plot bench.png
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from minispark.measuring.figures import save_figure

if TYPE_CHECKING:
    from rich.table import Table


def _fmt(value: float | None, digits: int = 2) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def _by_source(by_source: dict | None) -> str:
    """``lookup 31 · 2.10, dspark 12 · 1.25``: rounds and τ of each source (skipped rounds: no τ)."""
    if not by_source:
        return "–"
    return ", ".join(f"{source} {row['rounds']}" + ("" if source == "skipped" else f" · {row['tau']:.2f}")
                     for source, row in by_source.items())


def _repeats(report: dict) -> str:
    """``3``, or ``2 of 3 (interrupted)`` for a bench cut short (``bench.BenchInterrupted``)."""
    cut = report.get("interrupted")
    return str(report["settings"]["repeats"]) if cut is None else \
        f"{cut['repeats_done']} of {cut['repeats_asked']} (interrupted)"


def render_bench(report: dict) -> Table:
    """The one rich table: a row per mode."""
    from rich.table import Table
    from rich.text import Text

    settings, hardware = report["settings"], report["hardware"]
    greedy = settings["temperature"] == 0
    first = next(iter(report["summary"].values()))
    # Text, not markup: a "[v2]" in the target's or drafter's path is shown as it is
    table = Table(title=Text(f"{report['target']} · drafter {report['drafter'] or '–'} · {settings['num_prompts']} prompts × "
                             f"{_repeats(report)} · T={settings['temperature']:g} · γ={settings['gamma']} · "
                             f"{hardware['device']} · {hardware.get('runtime', 'eager')} runtime (hf modes: eager) · target-only {first['target_ms_per_token']:.1f} ms/token",
                             style="table.title"))
    columns = ("mode", "tok/s", "median", "× target", "worst ×", "τ", "drafts/round", "skipped",
               "acceptance per position", "rounds · τ by source", "propose ms", "verify ms", "acc+commit ms", "draft share",
               "parity" if greedy else "outputs")
    for column in columns:
        table.add_column(column, justify="left" if column in ("mode", "acceptance per position",
                                                               "rounds · τ by source") else "right")
    for name, row in report["summary"].items():
        acceptance = row.get("acceptance_per_position")
        table.add_row(
            name, _fmt(row["tokens_per_s"]), _fmt(row["median_tokens_per_s"]), _fmt(row["speedup_vs_target"], 3),
            _fmt(row["worst_prompt_speedup"], 3), _fmt(row.get("tau")), _fmt(row.get("drafts_per_round")),
            "–" if row.get("skipped_rounds") is None else f"{row['skipped_rounds']}/{row['rounds']}",
            " ".join(f"{a:.2f}" for a in acceptance) if acceptance else "–",
            _by_source(row.get("by_source")),
            _fmt(row["propose_ms"], 1), _fmt(row["verify_ms"], 1), _fmt(row["accept_commit_ms"], 1),
            "–" if row["draft_share"] is None else f"{row['draft_share']:.0%}",
            ("yes" if row["parity"] else "[red]no[/red]") if greedy else "samples",
        )
    return table


def plot_bench(report: dict, path: str | Path) -> Path:
    """PNG: tok/s per mode (speedup over target on each bar) and acceptance per draft position."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    summary = report["summary"]
    fig, (ax_rate, ax_acc) = plt.subplots(1, 2, figsize=(11, 4.2))
    names = list(summary)
    bars = ax_rate.bar(names, [summary[n]["tokens_per_s"] for n in names], color="tab:blue")
    for bar, name in zip(bars, names):
        ax_rate.annotate(f"{summary[name]['speedup_vs_target']:.2f}×", (bar.get_x() + bar.get_width() / 2,
                         bar.get_height()), ha="center", va="bottom", fontsize=8)
    ax_rate.set(ylabel="tokens / s (total)", title="throughput (× target on each bar)")
    ax_rate.tick_params(axis="x", rotation=30)
    for name in names:
        acceptance = summary[name].get("acceptance_per_position")
        if acceptance:
            ax_acc.plot(range(1, len(acceptance) + 1), acceptance, marker="o", ms=3, label=name)
    ax_acc.set(xlabel="draft position k", ylabel="acceptance rate", title="acceptance per position", ylim=(0, 1.02))
    if ax_acc.lines:
        ax_acc.legend(fontsize=8)
    for ax in (ax_rate, ax_acc):
        ax.grid(alpha=0.3)
    settings = report["settings"]
    fig.suptitle(f"{report['target']} · T={settings['temperature']:g} · {settings['num_prompts']} prompts × "
                 f"{_repeats(report)} · {report['hardware']['device']}", fontsize=9)
    fig.tight_layout()
    save_figure(fig, path, dpi=110)
    return path
