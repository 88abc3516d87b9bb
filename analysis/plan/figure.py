"""The planner's figure: every simulated configuration's cost against its e2e latency at the
SLO percentile, those meeting every limit filled, the cost-latency frontier drawn through
them (analysis.plan.entry.pareto). Drawn on matplotlib's Figure and Agg canvas directly, not
pyplot (its import and backend machinery cost ~0.3 s of the plan, and no window is ever shown).
"""

from __future__ import annotations

from pathlib import Path

from specbatch.analysis.plan.entry import Entry
from specbatch.analysis.plan.slo import Slos


def frontier_figure(entries: tuple[Entry, ...], slos: Slos, priced: bool, path: Path
                    ) -> str | None:
    """Write the figure to ``path`` (PNG); None when nothing was simulated."""
    if not entries:
        return None
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from specbatch.analysis.plan.entry import pareto

    p = f"p{slos.percentile:g}"
    fig = Figure(figsize=(6.4, 4.2))
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    for passed, marker, name in ((False, "x", "misses a limit"), (True, "o", "meets every limit")):
        group = [e for e in entries if e.verdict.passed == passed]
        if group:
            ax.scatter([e.deployment.cost for e in group],
                       [e.verdict.latency["e2e"] for e in group], marker=marker, s=22,
                       alpha=0.6, label=name, color="tab:green" if passed else "tab:red")
    front = pareto(entries)
    if front:
        ax.step([e.deployment.cost for e in front], [e.verdict.latency["e2e"] for e in front],
                where="post", color="tab:blue", label="frontier")
        for e in front:
            ax.annotate(e.speculation.label, (e.deployment.cost, e.verdict.latency["e2e"]),
                        fontsize=7, xytext=(3, 3), textcoords="offset points")
    if slos.e2e is not None:
        ax.axhline(slos.e2e, color="0.4", linestyle="--", linewidth=0.8, label="e2e SLO")
    ax.set_xlabel("cost ($ per hour)" if priced else "GPUs")
    ax.set_ylabel(f"e2e latency {p} (s)")
    readable_ticks(ax, [e.verdict.latency["e2e"] for e in entries], priced)
    ax.legend(fontsize=8)
    ax.set_title("specbatch plan: cost vs latency", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return str(path)


def readable_ticks(ax, latencies: list[float], priced: bool) -> None:
    """Latency ticks written as plain numbers (0.5, 2, 20, never 2x10^1): a log axis with
    ticks at 1, 2 and 5 per decade (every digit within one decade) when the latencies span
    3x or more, else a linear axis; a GPU axis has whole-number ticks only."""
    from matplotlib.ticker import FuncFormatter, LogLocator, MaxNLocator, NullFormatter

    plain = FuncFormatter(lambda v, _: f"{v:g}")
    finite = [v for v in latencies if v is not None and 0 < v < float("inf")]
    if finite and max(finite) / min(finite) >= 3:
        ax.set_yscale("log")
        decades = max(finite) / min(finite) >= 10
        ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0) if decades
                                              else tuple(float(d) for d in range(1, 10))))
        ax.yaxis.set_major_formatter(plain)
        ax.yaxis.set_minor_formatter(NullFormatter())
    else:
        ax.yaxis.set_major_locator(MaxNLocator(nbins=6))
        ax.yaxis.set_major_formatter(plain)
    if not priced:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
