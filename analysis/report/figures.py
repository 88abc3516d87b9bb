"""The report's figures: each draws one PNG from a sweep's results table, or declines.

Each ``figure_*`` returns the PNG file name, or None when the sweep cannot show it (the axis it
needs did not vary, or the columns are absent). Figures use the matplotlib Agg backend and
seaborn; lines are means over seeds with 95 % confidence bars (Student-t over seeds where the
figure pairs settings, bootstrap in seaborn's line plots, seed 0).
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402

from specbatch.analysis.report.compare import (  # noqa: E402
    base_context,
    best_settings,
    config_columns,
    context_columns,
    label,
    open_load,
    ranking_metric,
    select,
    setting_of,
)
from specbatch.analysis.report.replication import PAPER_BLOCK  # noqa: E402
from specbatch.analysis.sweep.runner import read_requests  # noqa: E402


def save_figure(fig: plt.Figure, path: Path, layout: bool = True, context: str = "") -> str:
    """Lay out (unless the figure did), write ``path`` (110 dpi), close; returns the file name
    for the report's link. ``context`` (e.g. ``tp = 2``) is written in the top-left corner, so
    a figure of one context of a sweep says which one on its own."""
    if context:
        fig.text(0.005, 0.995, f"at {context}", ha="left", va="top", fontsize=8, color="0.3")
    if layout:
        fig.tight_layout(rect=(0, 0, 1, 0.97) if context else None)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path.name


def figure_vs_k(df: pd.DataFrame, metric: str, path: Path, context: str = "") -> str | None:
    """Metric vs window k per policy, one panel per verifier (mean over seeds, 95% CI bars).

    Colour = policy, line style = e (extra drafted tokens); policies run at a single k
    (``ar``, ``dsd``) are horizontal reference lines.
    """
    sub, _ = base_context(df)
    if metric not in sub or sub.num_speculative_tokens.nunique() < 2:
        return None
    multi = sub.groupby("policy").num_speculative_tokens.transform("nunique") > 1
    lines, flat = sub[multi], sub[~multi]
    if lines.empty:
        return None
    lines = lines.assign(e=lines.extra.astype(int).map(lambda e: f"e={e}"))
    verifies = [v for v in ("token", "block") if v in set(lines.verify)] or sorted(
        set(lines.verify)
    )
    fig, axes = plt.subplots(1, len(verifies), figsize=(6.2 * len(verifies), 4.6), sharey=True,
                             squeeze=False)
    policies = list(dict.fromkeys(lines.policy))
    palette = dict(zip(policies, sns.color_palette("tab10", len(policies))))
    styles = sorted(lines.e.unique())
    for ax, verify in zip(axes[0], verifies):
        part = lines[lines.verify == verify]
        sns.lineplot(data=part, x="num_speculative_tokens", y=metric, hue="policy",
                     hue_order=policies, palette=palette,
                     style="e" if len(styles) > 1 else None, style_order=styles, markers=True,
                     err_style="bars", errorbar=("ci", 95), n_boot=200, seed=0, ax=ax)
        shades = iter(["0.2", "0.45", "0.65", "0.35", "0.75"])
        for policy, rows in flat.groupby("policy", sort=False):
            # a policy run under this verifier; ar (which verifies nothing) in every panel
            if (rows.verify == verify).any():
                rows = rows[rows.verify == verify]
            elif policy != "ar":
                continue
            ax.axhline(rows[metric].mean(), color=next(shades, "0.5"), linestyle="--",
                       linewidth=1.2, label=f"{policy} (k = "
                                            f"{int(rows.num_speculative_tokens.iloc[0])})"
                       if policy != "ar" else "ar")
        name = {"token": "token verification (TV)", "block": "block verification (BV)"}
        ax.set_title(name.get(verify, verify), fontsize=10)
        ax.set_xlabel("Window k (draft tokens verified per request; budget C = k x running)",
                      fontsize=9)
        ax.set_ylabel(label(metric))
        ax.set_xticks(sorted(part.num_speculative_tokens.unique()))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, ncol=2)
    return save_figure(fig, path, context=context)


def figure_vsr_mal(df: pd.DataFrame, path: Path, context: str = "") -> str | None:
    """VSR and MAL of each (policy, verifier)'s best setting (by
    :func:`analysis.report.compare.ranking_metric`: throughput, or e2e mean under open load) at the
    first context (the report draws one per context and its caption names it).

    One bar per policy (labelled with its window k and extra e), one colour per verifier with
    the legend above the panels, each bar's value printed on it; the x label says which
    metric picked the settings, in the words of the report's caption.
    """
    sub, _ = base_context(df)
    if not {"vsr", "mal"} <= set(sub.columns):
        return None
    rank = ranking_metric(df)
    best = best_settings(sub, rank)
    best = best[best.policy != "ar"]
    if best.empty:
        return None
    return save_figure(draw_vsr_mal(best, rank), path, layout=False, context=context)


def draw_vsr_mal(best: pd.DataFrame, rank: str) -> plt.Figure:
    """The :func:`figure_vsr_mal` figure of ``best`` (best settings, ``ar`` excluded)."""
    best = best.assign(bar=[_bar_label(row) for _, row in best.iterrows()])
    bars = list(dict.fromkeys(best.bar))
    verifies = [v for v in ("token", "block") if v in set(best.verify)] or sorted(set(best.verify))
    palette = dict(zip(verifies, sns.color_palette("tab10", len(verifies))))
    width = max(8.0, 1.5 * len(bars) * max(1, len(verifies)) + 3.0)
    fig, axes = plt.subplots(1, 2, figsize=(width, 4.6))
    for ax, metric, name in zip(axes, ("vsr", "mal"),
                                ("VSR (accepted / verified\ndraft tokens)",
                                 "MAL (tokens per\nrequest-step)")):
        sns.barplot(data=best, x="bar", y=metric, order=bars, hue="verify", hue_order=verifies,
                    palette=palette, ax=ax, errorbar=None, legend=False)
        for container in ax.containers:
            ax.bar_label(container, fmt="%.2f", fontsize=8, padding=2)
        ax.set_xlabel(f"Policy (best setting by {label(rank).lower()})", fontsize=9)
        ax.set_ylabel(name, fontsize=9)
        ax.tick_params(axis="x", labelsize=8, rotation=30 if len(bars) > 4 else 0)
        ax.grid(axis="y", alpha=0.3)
        ax.margins(y=0.15)
    axes[0].set_ylim(0, 1.1)
    handles = [plt.Rectangle((0, 0), 1, 1, color=palette[v]) for v in verifies]
    fig.legend(handles, [f"{v} verification" for v in verifies], loc="upper center",
               ncol=len(verifies), fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0, 1, 0.93))
    return fig


def _bar_label(row) -> str:
    """The policy over its window on a second line: ``fixed`` / ``k = 3``, ``tetris`` /
    ``k = 3, e = 1``."""
    text = f"{row.policy}\nk = {int(row.num_speculative_tokens)}"
    return text + (f", e = {int(row.extra)}" if int(row.extra or 0) else "")


def figure_latency_cdf(out: Path, df: pd.DataFrame, path: Path,
                       context: str = "") -> str | None:
    """ECDF of per-request e2e latency for each (policy, verifier)'s best setting, first seed.

    Best by :func:`analysis.report.compare.ranking_metric`. Under open-loop load one panel per
    arrival rate (each titled with its rate); otherwise the first context only.
    """
    load = load_column(df)
    if open_load(df) and load == "rate":
        panels = [({"rate": r}, select(df, {"rate": r})) for r in sorted(df.rate.unique())]
    else:
        sub, ctx = base_context(df)
        panels = [(ctx, sub)]
    metric = ranking_metric(df)
    seed = int(df.seed.min())
    drawn = [(ctx, curves) for ctx, curves in
             ((ctx, _cdf_curves(out, sub, metric, seed)) for ctx, sub in panels) if curves]
    if not drawn:
        return None
    policies = list(dict.fromkeys(c[0] for _, curves in drawn for c in curves))
    colours = dict(zip(policies, sns.color_palette("tab10", len(policies))))
    two = len({c[1] for _, curves in drawn for c in curves}) > 1
    cols = min(3, len(drawn))
    rows = -(-len(drawn) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(7.5 if cols == 1 else 5.2 * cols,
                                                  4.6 if rows == 1 else 3.8 * rows),
                             squeeze=False)
    for ax, (ctx, curves) in zip(axes.flat, drawn):
        for policy, verify, e2e in curves:
            frac = np.arange(1, e2e.size + 1) / e2e.size
            ax.step(e2e, frac, where="post", color=colours[policy],
                    linestyle=":" if verify == "block" else "-", linewidth=1.4,
                    label=f"{policy} ({verify})" if two and policy != "ar" else policy)
        ax.legend(fontsize=8, title="dotted: block verification" if two else None,
                  title_fontsize=8)
        ax.set_xlabel("End-to-end latency per request (s)")
        ax.set_ylabel("Fraction of requests")
        where = ", ".join(f"{k} = {v:g}" if isinstance(v, (float, np.floating)) else f"{k} = {v}"
                          for k, v in ctx.items())
        ax.set_title(f"Best setting of each policy, seed {seed}" + (f"; {where}" if where else ""),
                     fontsize=10)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(drawn):]:
        ax.set_visible(False)
    return save_figure(fig, path, context=context)


def _cdf_curves(out: Path, sub: pd.DataFrame, metric: str, seed: int) -> list[tuple]:
    """(policy, verify, sorted e2e) of each (policy, verify)'s best setting in ``sub``."""
    best = best_settings(sub, metric)
    cfg = [c for c in config_columns(sub) if c != "seed"]
    curves = []
    for _, row in best.iterrows():
        runs = select(sub, {**setting_of(row, cfg), "seed": seed})
        if runs.empty:
            continue
        requests = read_requests(out, runs.run.iloc[0])
        if requests is None or "e2e" not in requests:
            continue
        curves.append((row.policy, row.verify, np.sort(requests.e2e.to_numpy())))  # [requests]
    return curves


def load_column(df: pd.DataFrame) -> str | None:
    """The context column that sets the load, if the sweep varies one."""
    ctx = context_columns(df)
    if "rate" in ctx and (df.arrival != "burst").any():
        return "rate"
    for col in ("max_num_seqs", "requests"):
        if col in ctx:
            return col
    return None


LOAD_UNITS = {"rate": "arrival rate, requests/s", "max_num_seqs": "max running requests",
              "requests": "requests"}


def figure_load(df: pd.DataFrame, path: Path, context: str = "") -> str | None:
    """Throughput vs mean e2e latency across load, best setting per policy at each load.

    Under open-loop load (analysis.report.compare.open_load) throughput is the offered rate, so
    this draws :func:`figure_latency_vs_rate` instead.
    """
    load = load_column(df)
    if load is None:
        return None
    if open_load(df) and load == "rate":
        return figure_latency_vs_rate(df, path, context)
    best = best_settings(df, "throughput")
    best = best.assign(policy_label=best.policy if best.verify.nunique() == 1
                       else best.policy + " (" + best.verify + ")").sort_values(load)
    fig, ax = plt.subplots(figsize=(7.5, 4.6))
    sns.lineplot(data=best, x="throughput", y="e2e_mean", hue="policy_label",
                 style="policy_label", markers=True, dashes=False, sort=False, estimator=None,
                 ax=ax)
    first = best[best.policy_label == best.policy_label.iloc[0]]
    for lab in (best, first)[int(best.policy_label.nunique() > 2)].itertuples():
        value = getattr(lab, load)
        text = f"{value:g}" if isinstance(value, (float, np.floating)) else str(value)
        ax.annotate(text, (lab.throughput, lab.e2e_mean), fontsize=7,
                    textcoords="offset points", xytext=(3, 3))
    ax.set_xlabel(label("throughput"))
    ax.set_ylabel(label("e2e_mean"))
    ax.legend(title="policy", fontsize=8, title_fontsize=8)
    ax.set_title(f"Across load (labels: {LOAD_UNITS.get(load, load)})", fontsize=10)
    ax.grid(alpha=0.3)
    return save_figure(fig, path, context=context)


def figure_latency_vs_rate(df: pd.DataFrame, path: Path, context: str = "") -> str | None:
    """Mean e2e, p99 e2e and TPOT vs the arrival rate, best setting per policy (by mean e2e)
    at each rate; bars: 95% CI over seeds of that setting."""
    if "rate" not in df or df.rate.nunique() < 2:
        return None
    best = best_settings(df, "e2e_mean")
    cfg = [c for c in config_columns(df) if c != "seed"]
    picked = pd.concat([select(df, setting_of(row, cfg)) for _, row in best.iterrows()])
    picked = picked.assign(policy_label=picked.policy if picked.verify.nunique() == 1
                           else picked.policy + " (" + picked.verify + ")")
    metrics = [m for m in ("e2e_mean", "e2e_p99", "tpot_mean") if m in picked]
    fig, axes = plt.subplots(1, len(metrics), figsize=(5.0 * len(metrics), 4.3), squeeze=False)
    for ax, metric in zip(axes[0], metrics):
        sns.lineplot(data=picked, x="rate", y=metric, hue="policy_label", style="policy_label",
                     markers=True, dashes=False, err_style="bars", errorbar=("ci", 95),
                     n_boot=200, seed=0, ax=ax)
        ax.set_xlabel("Offered load: arrival rate (requests/s)")
        ax.set_ylabel(label(metric))
        ax.set_xticks(sorted(picked.rate.unique()))
        ax.grid(alpha=0.3)
        ax.legend(title="policy", fontsize=8, title_fontsize=8)
    fig.suptitle("Latency vs offered load (open-loop arrivals: throughput tracks the offered rate "
                 "until a setting saturates; "
                 "best setting per policy at each rate by mean e2e)"
                 + (f"; at {context}" if context else ""), fontsize=10)
    return save_figure(fig, path)


def figure_bv_gain(table: pd.DataFrame, path: Path, context: str = "") -> str | None:
    """BV over TV gain (%) vs γ: block efficiency (MAL) and throughput, paper points overlaid."""
    if table.empty or table.gamma.nunique() < 2:
        return None
    table = table[table.e == table.e.min()]
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.2), sharex=True)
    for ax, metric, title in ((axes[0], "mal", "Block efficiency (MAL)"),
                              (axes[1], "throughput", "Throughput")):
        for policy, rows in table.groupby("policy", sort=False):
            rows = rows.sort_values("gamma")
            err = np.vstack([rows[f"{metric}_gain"] - rows[f"{metric}_low"],
                             rows[f"{metric}_high"] - rows[f"{metric}_gain"]])
            err = np.where(np.isfinite(err), err, 0.0)
            ax.errorbar(rows.gamma, rows[f"{metric}_gain"], yerr=err, marker="o", capsize=3,
                        label=f"ours: {policy}")
        if metric == "mal":
            ax.plot(list(PAPER_BLOCK), list(PAPER_BLOCK.values()), "kx", markersize=9,
                    label="paper (PaLM-2, γ = 4, 6, 8)")
        ax.axhline(0, color="0.6", linewidth=0.8)
        ax.set_xlabel("Draft length γ (tokens)")
        ax.set_ylabel(f"{title} gain of BV over TV (%)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    return save_figure(fig, path, context=context)
