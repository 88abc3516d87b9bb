"""Paired comparisons across seeds, best setting per policy, and the headline table.

Every run of a sweep is one (setting, seed); two settings run with the same seed see the same
workload and the same uniforms (common random numbers), so their difference is measured per
seed and the seed-to-seed noise mostly cancels. For settings A and B with per-seed metric
values ``a_s``, ``b_s`` (s = 1..n) the paired difference is ``d_s = a_s − b_s`` and the
relative one ``ρ_s = a_s / b_s − 1``; we report the mean and a Student-t interval
``mean ± t_{n−1, (1+c)/2} · sd / √n`` (undefined, NaN, for n = 1).

Metric definitions (THEORY.md §6), as the simulator's ``summary`` computes them:

- throughput: output tokens / makespan (tokens/s); speedup: against ``ar`` on the same
  workload, cost model and seed;
- e2e latency (mean, p50, p99), TTFT, TPOT = (e2e − TTFT) / (output tokens − 1), seconds;
- VSR: Σ accepted draft tokens / Σ verified draft tokens;
- MAL: mean of τ + 1 per request-step (the correction/bonus token counts), tokens;
- draft efficiency: accepted / drafted (TETRIS drafts more than it verifies).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields

import numpy as np
import pandas as pd

from specbatch.analysis.report.ties import t_interval  # noqa: F401 - re-exported
from specbatch.errors import SpecbatchError
from specbatch.simulator.config.sim_config import SimConfig

#: metric -> (label, unit, higher is better)
METRICS: dict[str, tuple[str, str, bool]] = {
    "throughput": ("Throughput", "tokens/s", True),
    "speedup_vs_ar": ("Speedup vs AR", "x", True),
    "e2e_mean": ("Mean e2e latency", "s", False),
    "e2e_p50": ("Median e2e latency", "s", False),
    "e2e_p99": ("p99 e2e latency", "s", False),
    "ttft_mean": ("Mean TTFT", "s", False),
    "tpot_mean": ("Mean TPOT", "s/token", False),
    "vsr": ("VSR: accepted / verified draft tokens", "fraction", True),
    "mal": ("MAL: mean accepted length", "tokens per request-step", True),
    "draft_efficiency": ("Draft efficiency: accepted / drafted", "fraction", True),
    "makespan": ("Makespan", "s", False),
}

#: Config fields that describe how a policy speculates (a "setting" of the policy); every
#: other varying config field is the *context* (load, hardware, trace, ...), compared within.
POLICY_KNOBS = ("policy", "verify", "num_speculative_tokens", "extra", "budget", "threshold",
                "threshold_mode", "dsd_interval", "num_speculative_tokens_per_batch_size",
                "draft_len_schedule", "speculative_adaptive_config", "specdec_threshold",
                "entropy_threshold", "predictor")


#: Open-loop arrivals: requests arrive at a given rate whatever the server does, so every
#: setting that keeps up serves the offered load and throughput ≈ offered rate: it cannot
#: rank settings (a faster policy finishes the same requests over the same arrival window).
OPEN_ARRIVALS = ("poisson", "gamma", "trace")


def open_load(df: pd.DataFrame) -> bool:
    """Whether any run of ``df`` had open-loop arrivals (OPEN_ARRIVALS)."""
    return "arrival" in df.columns and bool(df.arrival.isin(OPEN_ARRIVALS).any())


def ranking_metric(df: pd.DataFrame) -> str:
    """What "best setting" means for ``df``: mean e2e latency under open-loop load (throughput
    is pinned to the offered rate there), throughput under closed/burst load."""
    return "e2e_mean" if open_load(df) else "throughput"


def label(metric: str) -> str:
    """Axis/table label with unit, e.g. ``Throughput (tokens/s)``."""
    name, unit, _ = METRICS.get(metric, (metric, "", True))
    return f"{name} ({unit})" if unit else name


def higher_is_better(metric: str) -> bool:
    return METRICS.get(metric, ("", "", True))[2]


def config_columns(df: pd.DataFrame) -> list[str]:
    """The table's config-field columns (SimConfig fields present in ``df``), in order."""
    names = [f.name for f in fields(SimConfig)]
    return [c for c in names if c in df.columns]


def varying(df: pd.DataFrame, columns: Sequence[str]) -> list[str]:
    """Columns of ``columns`` that take more than one value in ``df`` (None counts as a value)."""
    return [c for c in columns if df[c].astype(str).nunique() > 1]


def context_columns(df: pd.DataFrame) -> list[str]:
    """Varying config columns other than the seed and the policy knobs."""
    cols = [c for c in config_columns(df) if c != "seed" and c not in POLICY_KNOBS]
    return varying(df, cols)


def select(df: pd.DataFrame, where: Mapping | None = None) -> pd.DataFrame:
    """Rows whose config columns equal ``where``'s values (None matches missing values)."""
    mask = np.ones(len(df), dtype=bool)
    for col, value in (where or {}).items():
        if value is None or (isinstance(value, float) and math.isnan(value)):
            mask &= df[col].isna().to_numpy()
        else:
            mask &= (df[col] == value).to_numpy()
    return df[mask]


@dataclass(frozen=True)
class PairedDiff:
    """Setting A minus setting B on one metric, paired by seed (see the module docstring)."""

    metric: str
    n: int
    mean_a: float
    mean_b: float
    diff: float
    diff_low: float
    diff_high: float
    rel: float  # mean of a_s / b_s - 1
    rel_low: float
    rel_high: float
    confidence: float = 0.95

    def rel_text(self, percent: bool = True) -> str:
        """``+4.10% [+3.80, +4.40]`` (the CI is omitted when it is undefined)."""
        scale, unit = (100.0, "%") if percent else (1.0, "")
        text = f"{self.rel * scale:+.2f}{unit}"
        if math.isfinite(self.rel_low):
            text += f" [{self.rel_low * scale:+.2f}, {self.rel_high * scale:+.2f}]"
        return text


def paired_difference(df: pd.DataFrame, a: Mapping, b: Mapping, metric: str,
                      confidence: float = 0.95) -> PairedDiff:
    """Paired per-seed difference of ``metric`` between the rows selected by ``a`` and ``b``.

    Each selector must pick exactly one run per seed; only seeds present on both sides count.
    """
    sides = []
    for name, where in (("A", a), ("B", b)):
        rows = select(df, where)
        if rows.empty:
            raise SpecbatchError(f"comparison: setting {name} {dict(where)!r} matches no runs")
        if rows.seed.duplicated().any():
            raise SpecbatchError(
                f"comparison: setting {name} {dict(where)!r} matches several runs per seed; "
                "fix more fields")
        sides.append(rows.set_index("seed")[metric].astype(float))
    va, vb = sides[0].align(sides[1], join="inner")
    if va.empty:
        raise SpecbatchError("comparison: the two settings share no seed")
    d, ld, hd = t_interval((va - vb).to_numpy(), confidence)
    r, lr, hr = t_interval((va / vb - 1.0).to_numpy(), confidence)
    return PairedDiff(metric, int(va.size), float(va.mean()), float(vb.mean()), d, ld, hd, r, lr,
                      hr, confidence)


def setting_of(row: Mapping, columns: Sequence[str]) -> dict:
    """The selector (config column -> value) of one row, NaN mapped to None."""
    out = {}
    for c in columns:
        v = row[c]
        out[c] = None if (isinstance(v, float) and math.isnan(v)) or v is None else v
    return out


def means_by_setting(df: pd.DataFrame, metrics: Sequence[str] | None = None) -> pd.DataFrame:
    """One row per setting: its config columns (seed dropped), metric means, ``n_seeds``."""
    cfg = [c for c in config_columns(df) if c != "seed"]
    metrics = [m for m in (metrics or [m for m in METRICS if m in df.columns])]
    grouped = df.groupby("setting", sort=False)
    out = grouped[cfg].first()
    out[metrics] = grouped[metrics].mean()
    out["n_seeds"] = grouped.size()
    return out.reset_index()


def best_settings(df: pd.DataFrame, metric: str = "throughput",
                  by: Sequence[str] = ("policy", "verify"),
                  maximize: bool | None = None) -> pd.DataFrame:
    """For each group of ``by`` (plus the context columns), the setting with the best mean.

    Ties go to the first setting in sweep order. Returns :func:`means_by_setting` rows.
    """
    maximize = higher_is_better(metric) if maximize is None else maximize
    means = means_by_setting(df)
    keys = list(by) + [c for c in context_columns(df) if c not in by]
    score = means[metric] if maximize else -means[metric]
    order = means.assign(_score=score.fillna(-np.inf))
    if not keys:
        return means.loc[[order["_score"].idxmax()]].reset_index(drop=True)
    idx = order.groupby(keys, sort=False, dropna=False)["_score"].idxmax()
    return means.loc[idx.to_numpy()].reset_index(drop=True)


def _baseline_for(df: pd.DataFrame, row: Mapping, baseline: Mapping) -> dict | None:
    """The baseline setting with the same context as ``row`` (None if absent)."""
    where = {**{c: row[c] for c in context_columns(df)}, **baseline}
    rows = select(df, where)
    if rows.empty or rows.setting.nunique() != 1:
        return None
    return setting_of(rows.iloc[0], [c for c in config_columns(df) if c != "seed"])


def headline(df: pd.DataFrame, metric: str | None = None,
             baseline: Mapping | None = None, confidence: float = 0.95) -> pd.DataFrame:
    """Best setting of each (policy, verify) by ``metric``, with speedup vs the baseline.

    ``metric`` defaults to :func:`ranking_metric` (e2e mean under open-loop load, where
    best settings are per context, e.g. per arrival rate; throughput otherwise). Columns:
    context columns, policy, verify, k, e, throughput, speedup (mean of per-seed
    throughput ratios against the baseline, default ``policy = "ar"``) and its CI, e2e mean
    and p99, TPOT, e2e change against the baseline (paired, relative) and its CI, VSR, MAL,
    n_seeds, and under open load ``served`` = throughput / offered tokens per second
    (rate x mean output tokens per request; below 1 the setting does not keep up). Sorted by
    throughput (closed load) or by context, then e2e mean (open load).
    """
    metric = metric or ranking_metric(df)
    baseline = dict(baseline or {"policy": "ar"})
    best = best_settings(df, metric)
    cfg = [c for c in config_columns(df) if c != "seed"]
    ctx = context_columns(df)
    opened = open_load(df)
    rows = []
    for _, row in best.iterrows():
        mine = setting_of(row, cfg)
        base = _baseline_for(df, row, baseline)
        speed = paired_difference(df, mine, base, "throughput", confidence) if base else None
        lat = (paired_difference(df, mine, base, "e2e_mean", confidence)
               if base and "e2e_mean" in df else None)
        out = {c: row[c] for c in ctx}
        out.update({
            "policy": row["policy"], "verify": row["verify"],
            "k": row["num_speculative_tokens"], "e": row["extra"],
            "throughput": row["throughput"],
            "speedup": (1 + speed.rel) if speed else math.nan,
            "speedup_low": (1 + speed.rel_low) if speed else math.nan,
            "speedup_high": (1 + speed.rel_high) if speed else math.nan,
        })
        for m in ("e2e_mean", "e2e_p99", "tpot_mean", "vsr", "mal"):
            out[m] = row[m] if m in row else math.nan
        out["e2e_vs_base"] = lat.rel if lat else math.nan
        out["e2e_vs_base_low"] = lat.rel_low if lat else math.nan
        out["e2e_vs_base_high"] = lat.rel_high if lat else math.nan
        if opened:
            out["served"] = _served(df, mine)
        out["n_seeds"] = row["n_seeds"]
        rows.append(out)
    table = pd.DataFrame(rows)
    if opened:
        keys = [c for c in ctx if c in table.columns] + ["e2e_mean"]
        return table.sort_values(keys, kind="stable").reset_index(drop=True)
    return table.sort_values("throughput", ascending=False, kind="stable").reset_index(drop=True)


def _served(df: pd.DataFrame, setting: Mapping) -> float:
    """Mean over seeds of throughput / offered tokens per second (open-loop runs only)."""
    rows = select(df, setting)
    need = {"rate", "tokens", "requests_result", "throughput", "arrival"}
    if (rows.empty or not need <= set(rows.columns)
            or not rows.arrival.isin(("poisson", "gamma")).all()):
        return math.nan
    offered = (
        rows.rate.astype(float) * rows.tokens.astype(float) / rows.requests_result.astype(float)
    )
    return float((rows.throughput.astype(float) / offered).mean())


def compare_best(df: pd.DataFrame, a: Mapping, b: Mapping, metrics: Sequence[str] =
                 ("throughput", "e2e_mean"), select_by: str = "throughput",
                 confidence: float = 0.95) -> list[PairedDiff]:
    """Best setting among rows matching ``a`` vs best among rows matching ``b`` (by
    ``select_by``), paired by seed on each of ``metrics``. Context must not vary (filter first).

    E.g. ``compare_best(df, {"policy": "tetris"}, {"policy": "fixed"})`` is TETRIS vs the
    best fixed k.
    """
    if context_columns(df):
        raise SpecbatchError(f"comparison: context varies ({', '.join(context_columns(df))}); "
                             "select one context first")
    cfg = [c for c in config_columns(df) if c != "seed"]
    picks = []
    for where in (a, b):
        rows = select(df, where)
        if rows.empty:
            raise SpecbatchError(f"comparison: {dict(where)!r} matches no runs")
        best = best_settings(rows, select_by, by=())
        picks.append(setting_of(best.iloc[0], cfg))
    return [paired_difference(df, picks[0], picks[1], m, confidence) for m in metrics]


def best_setting_selector(df: pd.DataFrame, where: Mapping, metric: str = "throughput") -> dict:
    """Selector of the best setting (by ``metric``) among rows matching ``where``."""
    rows = select(df, where)
    if rows.empty:
        raise SpecbatchError(f"comparison: {dict(where)!r} matches no runs")
    cfg = [c for c in config_columns(df) if c != "seed"]
    return setting_of(best_settings(rows, metric, by=()).iloc[0], cfg)


def same_budget(df: pd.DataFrame, a: Mapping, b: Mapping, metric: str = "throughput",
                confidence: float = 0.95) -> pd.DataFrame:
    """Per window k (budget C = k·N), best setting of ``a`` at that k vs ``b`` at that k.

    E.g. TETRIS (best e) vs fixed SD at the same k: the TETRIS paper's equal-target-work
    comparison. One row per k present on both sides, with the paired relative difference.
    """
    rows = []
    ks = sorted(
        set(select(df, a).num_speculative_tokens) & set(select(df, b).num_speculative_tokens)
    )
    for k in ks:
        sa = best_setting_selector(df, {**a, "num_speculative_tokens": k}, metric)
        sb = best_setting_selector(df, {**b, "num_speculative_tokens": k}, metric)
        diff = paired_difference(df, sa, sb, metric, confidence)
        rows.append({"k": k, "e": sa.get("extra"), "metric": metric, "a": diff.mean_a,
                     "b": diff.mean_b, "rel": diff.rel, "rel_low": diff.rel_low,
                     "rel_high": diff.rel_high, "n": diff.n})
    return pd.DataFrame(rows)


def facets(df: pd.DataFrame, keep: Sequence[str] = ()) -> list[dict]:
    """Every combination of the varying context columns (except ``keep``, which a figure
    draws itself, e.g. the load axis) in sweep order; ``[{}]`` when none varies."""
    cols = [c for c in context_columns(df) if c not in keep]
    if not cols:
        return [{}]
    combos = df[cols].drop_duplicates()
    return [setting_of(row, cols) for _, row in combos.iterrows()]


def base_context(df: pd.DataFrame) -> tuple[pd.DataFrame, dict]:
    """Rows at the first value (in sweep order) of every varying context column."""
    ctx = context_columns(df)
    first = {c: df[c].iloc[0] for c in ctx}
    return (select(df, first) if ctx else df), first
