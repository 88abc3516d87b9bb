"""Tables and figures for a sweep output directory: ``specbatch report DIR``.

Reads ``DIR/sweep.json`` and ``DIR/results.parquet`` (written by :mod:`analysis.sweep.runner`,
checked on reading: a damaged file is a one-line error) and writes ``DIR/report/`` as a
whole (:func:`specbatch.io.result_dir`: a kill leaves the old report or the new one): PNG
figures (matplotlib Agg backend, seaborn), ``headline.csv`` and ``report.md`` or
``report.html`` linking them. Which figures appear depends on what the sweep
varied:

- throughput vs k and e2e latency vs k per policy (the TETRIS paper's figure shapes), when
  ``num_speculative_tokens`` varies; policies with one k (``ar``, ``dsd``) are drawn as
  horizontal reference lines;
- VSR and MAL of each policy's best setting;
- e2e latency CDFs of each policy's best setting (needs stored per-request tables);
- throughput vs latency across load, when ``rate``, ``max_num_seqs`` or ``requests`` varies;
- BV over TV gain vs γ (the block paper's figure), when both verifiers ran at several k.

A spec's ``[report] replicate = "tetris" | "block"`` adds our numbers beside the papers' (THEORY.md
§4-5) and a note on how the settings differ. A sweep that ran TETRIS with a fitted predictor adds
its out-of-sample quality and gains (analysis.report.predictor_quality); one over ``acceptance``
adds how far each acceptance model moves the results (analysis.report.acceptance_vs_replay). Metric
definitions: THEORY.md §6, repeated at the end of every report.
"""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd

from specbatch.analysis.report.acceptance_vs_replay import acceptance_blocks
from specbatch.analysis.report.compare import (
    base_context,
    best_settings,
    context_columns,
    facets,
    headline,
    label,
    open_load,
    ranking_metric,
    select,
)
from specbatch.analysis.report.engine_comparison import engine_blocks, has_engine_policies
from specbatch.analysis.report.figures import (
    figure_bv_gain,
    figure_latency_cdf,
    figure_load,
    figure_vs_k,
    figure_vsr_mal,
    load_column,
)
from specbatch.analysis.report.predictor_quality import predictor_blocks
from specbatch.analysis.report.pressure import kv_pressure, kv_summary
from specbatch.analysis.report.render import context_note, headline_display, render
from specbatch.analysis.report.replication import (
    PAPER_BLOCK,
    block_note,
    bv_gain_table,
    setting_summary,
    tetris_by_context,
    tetris_note,
    tetris_replication,
)
from specbatch.analysis.sweep.points import read_manifest
from specbatch.analysis.sweep.runner import read_results
from specbatch.errors import require
from specbatch.io import atomic_write, result_dir

__all__ = ["METRIC_DEFINITIONS", "build_report", "bv_gain_table", "headline_display", "render"]

METRIC_DEFINITIONS = """\
- **Throughput**: output tokens / makespan (tokens/s); makespan = last finish - first arrival.
- **Speedup**: throughput / the `ar` (autoregressive) throughput on the same workload, cost
  model and seed (mean of per-seed ratios).
- **E2E latency**: finish - arrival per request (mean, p50, p99; seconds). **TTFT**: first
  token - arrival. **TPOT**: (e2e - TTFT) / (output tokens - 1).
- **VSR** (verification success rate): accepted draft tokens / verified draft tokens.
- **MAL** (mean accepted length): mean of tau + 1 over request-steps (the correction or bonus
  token counts); the block paper's *block efficiency*.
- **Draft efficiency**: accepted / drafted draft tokens (TETRIS drafts k + e, verifies fewer).
- **Verify share**: seconds of the rejection sampler / seconds of all steps (draft, target,
  verification, overhead).
- **Goodput** (serving sense): requests per second finishing within the SLO, when one is set.
- Confidence intervals: Student-t on per-seed paired differences (common random numbers)."""


#: What a report folder holds (one written before reports carried a marker holds only these).
REPORT_FILES = ("*.png", "headline.csv", "report.md", "report.html")


#: Columns every report reads besides analysis.sweep.runner.RESULT_COLUMNS (the setting line and the
#: headline's latency): a table without them is refused before anything is drawn.
REPORT_COLUMNS = ("trace", "requests", "max_num_seqs", "cost", "hardware", "target", "draft",
                  "tp", "e2e_mean")


def check_report_table(path: Path, df: pd.DataFrame, manifest: dict) -> None:
    """Refuse, in one line naming ``path``, a results table a report cannot be drawn from:
    missing :data:`REPORT_COLUMNS`, a non-numeric ``e2e_mean``, or rows that are not the runs
    the manifest lists (a table copied from another sweep, or edited)."""
    missing = [c for c in REPORT_COLUMNS if c not in df.columns]
    require(not missing, f"file {path}: expected a sweep results table, missing column(s) "
            f"{', '.join(missing)}")
    require(pd.api.types.is_numeric_dtype(df["e2e_mean"]),
            f"file {path}: column 'e2e_mean': expected numbers, got {df['e2e_mean'].dtype}")
    runs = manifest["runs"]
    rows = df["run"].astype(str).tolist()
    require(sorted(rows) == sorted(runs),
            f"file {path}: expected one row per run of {path.parent / 'sweep.json'} ("
            f"{len(runs)} runs), got {len(rows)} rows of which {len(set(rows) - set(runs))} "
            "are not its runs; rerun specbatch sweep to rewrite it")


def build_report(out: str | os.PathLike, fmt: str = "md") -> str:
    """Write DIR/report/ (figures, headline.csv, report.md|html), replacing any earlier
    report as a whole; return the report's path."""
    out = Path(out)
    manifest = read_manifest(out)
    df = read_results(out)
    check_report_table(out / "results.parquet", df, manifest)
    with result_dir(out / "report", "report", "", "report", force=True,
                    legacy=REPORT_FILES) as rep:
        write_report(out, manifest, df, rep, fmt)
    return str(out / "report" / f"report.{fmt}")


def write_report(out: Path, manifest: dict, df: pd.DataFrame, rep: Path, fmt: str) -> None:
    """The figures, headline.csv and report.{fmt} of sweep ``out`` into folder ``rep``."""
    options = manifest.get("report", {})
    replicate = options.get("replicate")
    gains = bv_gain_table(df)
    blocks = (intro_blocks(manifest, df) + headline_blocks(df, rep) + kv_blocks(df)
              + verify_blocks(df))
    blocks += figure_blocks(out, df, rep)
    if replicate == "tetris" or (replicate is None and {"tetris", "fixed"} <= set(df.policy)):
        blocks += tetris_blocks(df, replicate == "tetris")
    if not gains.empty:
        blocks += block_blocks(df, gains, replicate == "block")
    if has_engine_policies(df):
        blocks += engine_blocks(df, rep)
    blocks += predictor_blocks(df) + acceptance_blocks(df)
    blocks += [("h2", "Metric definitions"), ("list", METRIC_DEFINITIONS)]
    atomic_write(rep / f"report.{fmt}", render(blocks, fmt))


def intro_blocks(manifest: dict, df: pd.DataFrame) -> list[tuple]:
    """The title and one paragraph: runs, settings x seeds, version, setting, axes."""
    title = manifest.get("report", {}).get("title") or f"specbatch sweep: {manifest['name']}"
    return [("h1", title),
            ("p", f"{len(df)} runs ({df.setting.nunique()} settings x "
                  f"{df.seed.nunique()} seeds), specbatch {manifest.get('version')}. "
                  f"Setting: {setting_summary(df)}. Axes: "
                  f"{', '.join(manifest.get('axes', [])) or 'none'}." + _contexts_sentence(df))]


def _contexts_sentence(df: pd.DataFrame) -> str:
    """Which context columns vary (the setting above names their first values only)."""
    ctx = context_columns(df)
    if not ctx:
        return ""
    values = "; ".join(f"{c} = {', '.join(str(v) for v in dict.fromkeys(df[c]))}" for c in ctx)
    return (f" Varying context ({values}): tables compare policies within each context and "
            "figures are drawn per context.")


def verify_blocks(df: pd.DataFrame) -> list[tuple]:
    """One paragraph: the share of step time the rejection sampler took (summary
    ``verify_share``, simulator.cost.verify_cost) per verification rule, when any run priced it."""
    if "verify_share" not in df or not (df.verify_share.fillna(0) > 0).any():
        return []
    rules = df.groupby("verify", sort=True).verify_share if "verify" in df else None
    parts = ([f"{rule} {100 * g.min():.2f}-{100 * g.max():.2f} %" for rule, g in rules]
             if rules is not None else [])
    samplers = ", ".join(str(v) for v in dict.fromkeys(df.verify_cost)) if (
        "verify_cost" in df) else "fused"
    return [("h2", "Verification time"),
            ("p", f"Share of step time spent in the rejection sampler (verify_cost = "
                  f"{samplers}), lowest-highest over runs: {'; '.join(parts)}.")]


def kv_blocks(df: pd.DataFrame) -> list[tuple]:
    """KV mode, capacity, preemptions and recomputed tokens (analysis.report.pressure), when any
    run had a limited KV cache."""
    summary = kv_summary(df)
    if not summary:
        return []
    return [("h2", "KV cache pressure"), ("p", summary),
            ("p", "Each policy's best setting (as in the table above), over its seeds:"),
            ("table", kv_display(kv_pressure(df)))]


def kv_display(table: pd.DataFrame) -> pd.DataFrame:
    """:func:`kv_pressure` with counts as ``12,345`` and means as ``12,345.5``."""
    out = table.copy()
    for col in out.columns:
        if col.endswith("(mean)"):
            out[col] = [f"{v:,.1f}" if pd.notna(v) else "-" for v in out[col]]
        elif col.endswith("(max)") or col == "KV capacity (tokens)":
            out[col] = [f"{int(v):,}" if pd.notna(v) else "unlimited" for v in out[col]]
    return out


def headline_blocks(df: pd.DataFrame, rep: Path) -> list[tuple]:
    """The best setting of each policy (also written to ``rep/headline.csv``).

    Under open-loop load (Poisson/gamma arrivals at a fixed rate) throughput is pinned to the
    offered rate, so settings are ranked by mean e2e latency within each rate, with p99, TPOT
    and the paired e2e change against ``ar``; an extra table gives the best setting overall
    at each rate. Closed/burst load ranks by throughput.
    """
    table = headline(df)
    table.to_csv(rep / "headline.csv", index=False)
    if not open_load(df):
        return [("h2", "Best setting of each policy (by throughput)"),
                ("p", "Speedup: mean of per-seed throughput ratios against `ar` with a 95% "
                      "t-interval. k = window, e = extra drafted tokens (TETRIS drafts k + e)."
                      + _context_sentence(df)),
                ("table", headline_display(table))]
    ctx = context_columns(df)
    per = f" at each {', '.join(ctx)}" if ctx else ""
    blocks = [("h2", f"Best setting of each policy{per} (by mean e2e latency)"),
              ("p", "Open-loop arrivals (" + ", ".join(sorted(set(df.arrival))) + "): requests "
                    "arrive at the offered rate whatever the server does, so every setting "
                    "that keeps up has throughput = offered rate, and throughput cannot rank "
                    "settings. Each policy's best setting is chosen by mean e2e latency within "
                    "each rate; e2e vs ar: per-seed paired relative change with a 95% "
                    "t-interval (negative = lower latency); served / offered: throughput over "
                    "rate x mean output tokens (below 1: the setting does not keep up). "
                    "k = window, e = extra drafted tokens (TETRIS drafts k + e)."),
              ("table", headline_display(table, open_load=True))]
    overall = best_settings(df, "e2e_mean", by=())
    if ctx and not overall.empty:
        cols = ctx + ["policy", "verify", "num_speculative_tokens", "extra", "e2e_mean",
                      "e2e_p99", "tpot_mean", "n_seeds"]
        shown = overall[[c for c in cols if c in overall]].sort_values(ctx, kind="stable")
        shown = shown.rename(columns={"num_speculative_tokens": "k", "extra": "e",
                                      "e2e_mean": "e2e mean (s)", "e2e_p99": "e2e p99 (s)",
                                      "tpot_mean": "TPOT (s/token)", "n_seeds": "seeds"})
        blocks += [("p", f"Best setting overall{per} (lowest mean e2e latency), with its p99 "
                         "and TPOT:"), ("table", shown)]
    return blocks


def _context_sentence(df: pd.DataFrame) -> str:
    ctx = context_columns(df)
    return (f" One best setting per policy at each {', '.join(ctx)} (a column of the table)."
            if ctx else "")


#: Most contexts (combinations of varying context columns) drawn as their own figures; the
#: report names the contexts it leaves out.
MAX_FACETS = 6


def figure_blocks(out: Path, df: pd.DataFrame, rep: Path) -> list[tuple]:
    """Every figure the sweep's axes allow, drawn into ``rep`` once per context (every
    combination of the varying context columns, :func:`analysis.report.compare.facets`), each
    caption naming its context and how best settings were chosen.

    A figure that draws an axis itself (the load figures: the load column; the open-load
    latency CDF: one panel per rate) is faceted over the other columns only. At most
    :data:`MAX_FACETS` contexts are drawn; the report lists those it leaves out.
    """
    opened = open_load(df)
    load = load_column(df)
    by = f", best by {label(ranking_metric(df)).lower()}"
    figures: list[tuple[str, str]] = []
    omitted: list[dict] = []
    per_rate = opened and "rate" in context_columns(df)
    for kind, keep in (("context", ()), ("cdf", ("rate",) if per_rate else ()),
                       ("load", (load,) if load else None)):
        if keep is None:
            continue
        contexts = facets(df, keep)
        for ctx in contexts[:MAX_FACETS]:
            sub = select(df, ctx) if ctx else df
            tag = facet_tag(ctx) if len(contexts) > 1 else ""
            note = f" (at {context_note(ctx)})" if ctx else ""
            figures += _figures_of(kind, out, sub, rep, (tag, ctx), note, by, opened)
        if kind == "context":
            omitted = contexts[MAX_FACETS:]
    if not figures:
        return []
    blocks = [("h2", "Figures")]
    if omitted:
        blocks.append(("p", f"The sweep has {len(omitted) + MAX_FACETS} contexts; figures are "
                            f"drawn for the first {MAX_FACETS} only, not for: "
                            + "; ".join(context_note(c) for c in omitted)
                            + ". The tables above cover every context."))
    return blocks + [("img", f, caption) for f, caption in figures]


def facet_tag(ctx: dict) -> str:
    """``_tp-2_rate-4`` for a context: a file-name suffix naming its values."""
    def text(v) -> str:
        return f"{v:g}" if isinstance(v, float) else str(v)
    raw = "".join(f"_{k}-{text(v)}" for k, v in ctx.items())
    return "".join(ch if ch.isalnum() or ch in "-_." else "-" for ch in raw)


def _figures_of(kind: str, out: Path, sub: pd.DataFrame, rep: Path, facet: tuple[str, dict],
                note: str, by: str, opened: bool) -> list[tuple[str, str]]:
    """(file, caption) of the figures of one kind drawn at one context ``sub``; ``facet``:
    the file-name suffix and the context (written on the figure when it is one of several)."""
    tag, ctx = facet
    where = context_note(ctx) if tag else ""
    per_rate = opened and "rate" in context_columns(sub)  # one panel or curve per rate
    if kind == "cdf":
        made = figure_latency_cdf(out, sub, rep / f"latency_cdf{tag}.png", where)
        rates = " at each arrival rate (one panel per rate)" if per_rate else ""
        return [(made, f"E2E latency CDF of each policy's best setting{rates}{note}{by}")] \
            if made else []
    if kind == "load":
        name = "latency_vs_rate" if opened else "throughput_latency"
        made = figure_load(sub, rep / f"{name}{tag}.png", where)
        caption = (
            "Mean e2e latency, p99 e2e latency and TPOT vs the offered arrival rate (best "
            "setting per policy at each rate by mean e2e; open-loop arrivals make throughput "
            "equal the offered rate, so it is not plotted)" if per_rate
            else "Throughput vs mean e2e latency across load (best setting per policy at each "
                 "load, by throughput)")
        return [(made, caption + note)] if made else []
    figures = []
    metrics = (("e2e_mean", "e2e_vs_k"),) if opened else (
        ("throughput", "throughput_vs_k"), ("e2e_mean", "e2e_vs_k"))
    for metric, name in metrics:  # under open load throughput is the offered rate: not drawn
        made = figure_vs_k(sub, metric, rep / f"{name}{tag}.png", where)
        if made:
            figures.append((made, f"{label(metric)} vs window k per policy{note}; bars: 95% CI "
                                  "over seeds"))
    for made, caption in (
        (figure_vsr_mal(sub, rep / f"vsr_mal{tag}.png", where),
         f"VSR and MAL of each policy's best setting{note}{by}"),
        (figure_bv_gain(bv_gain_table(sub), rep / f"bv_gain_vs_gamma{tag}.png", where),
         "Gain of block verification over token verification vs draft length gamma (paired "
         f"over seeds, 95% CI){note}; crosses: the block paper's published gains"),
    ):
        if made:
            figures.append((made, caption))
    return figures


def tetris_blocks(df: pd.DataFrame, with_note: bool) -> list[tuple]:
    """TETRIS against standard SD and DSD (and per k at the same budget), when both ran.

    Under open-loop load: one comparison per arrival rate, best settings and paired changes
    by latency (mean e2e, p99, TPOT). Otherwise the paper-shaped table at the first context,
    which the text names.
    """
    if open_load(df):
        return tetris_open_blocks(df, with_note)
    tables = tetris_replication(df)
    if tables is None:
        return []
    summary, per_k = tables
    _, ctx = base_context(df)
    where = (f" Shown at {context_note(ctx)} (the first value of each varying context "
             "column).") if ctx else ""
    blocks = [("h2", "TETRIS vs standard SD and DSD"),
              ("p", "Relative change of TETRIS's best setting against each baseline's "
                    "best setting (per-seed paired, 95% t-interval; negative e2e = "
                    "lower latency). Paper: Wu et al., ACL 2025 (THEORY.md §5)." + where),
              ("table", summary)]
    if not per_k.empty:
        blocks += [("p", "Same budget C = k x running: TETRIS (best e) vs fixed k, "
                         f"token verification{note_suffix(ctx)}."), ("table", per_k)]
    if with_note:
        blocks.append(("p", tetris_note(df)))
    return blocks


def note_suffix(ctx: dict) -> str:
    return f" (at {context_note(ctx)})" if ctx else ""


def tetris_open_blocks(df: pd.DataFrame, with_note: bool) -> list[tuple]:
    """TETRIS vs best fixed k vs DSD at every arrival rate (open-loop load), by latency."""
    table = tetris_by_context(df, "e2e_mean")
    if table.empty:
        return []
    ctx = context_columns(df)
    per = f" at each {', '.join(ctx)}" if ctx else ""
    blocks = [("h2", f"TETRIS vs standard SD and DSD{per} (by latency)"),
              ("p", "Open-loop arrivals: throughput equals the offered rate, so TETRIS and "
                    "each baseline are compared on latency. Each policy's best setting at "
                    "each rate is the one with the lowest mean e2e latency; changes are "
                    "TETRIS relative to the baseline, per-seed paired (common random numbers), "
                    "mean with a 95% t-interval (negative = TETRIS is faster). The TETRIS "
                    "paper's numbers are for 512 requests arriving at once (closed load) and "
                    "are not comparable here."),
              ("table", table)]
    if with_note:
        blocks.append(("p", tetris_note(df)))
    return blocks


def block_blocks(df: pd.DataFrame, gains: pd.DataFrame, with_note: bool) -> list[tuple]:
    """Block vs token verification per γ (smallest e), beside the paper's MAL gains."""
    shown = gains[gains.e == gains.e.min()].copy()
    shown["paper MAL gain (%)"] = [PAPER_BLOCK.get(g) for g in shown.gamma]
    shown = shown[["policy", "gamma", "mal_tv", "mal_bv", "mal_gain", "mal_low", "mal_high",
                   "paper MAL gain (%)", "throughput_gain", "n"]].rename(columns={
                       "mal_tv": "MAL TV", "mal_bv": "MAL BV", "mal_gain": "MAL gain (%)",
                       "mal_low": "CI low", "mal_high": "CI high",
                       "throughput_gain": "throughput gain (%)", "n": "seeds"})
    blocks = [("h2", "Block verification vs token verification"), ("table", shown)]
    if with_note:
        blocks.append(("p", block_note(df)))
    return blocks
