"""Our numbers beside the papers': the TETRIS and block-verification replication tables.

A spec's ``[report] replicate = "tetris" | "block"`` asks for these (THEORY.md §4-5):
:func:`tetris_replication` puts TETRIS's best setting against the best fixed-k SD and DSD
(per-seed paired relative change with a 95 % t-interval, and the best case over k at the same
budget C = k × running, the analogue of the paper's "up to"); :func:`bv_gain_table` gives the
paired gain of block over token verification at each draft length γ. The notes say how our
setting differs from each paper's.
"""

from __future__ import annotations

import math

import pandas as pd

from specbatch.analysis.report.compare import (
    base_context,
    best_settings,
    config_columns,
    context_columns,
    higher_is_better,
    label,
    paired_difference,
    same_budget,
    select,
    setting_of,
)
from specbatch.simulator.config.sim_config import NO_K_POLICIES

#: Published numbers the replication specs are compared with (THEORY.md §4-5).
PAPER_TETRIS = {
    "e2e_vs_sd": -9.32,     # % e2e latency vs standard SD (best case over settings)
    "e2e_vs_best": -6.13,   # % e2e latency vs the best baseline
    "throughput": 9.0,      # % throughput, "up to about"
}


PAPER_BLOCK = {4: 3.5, 6: 6.2, 8: 8.3}  # γ -> % block-efficiency gain of BV over TV


def bv_gain_table(df: pd.DataFrame, confidence: float = 0.95) -> pd.DataFrame:
    """Per policy and γ = k: paired BV-over-TV relative gain of MAL and of throughput (%).

    Policies without a fixed window (``ar``; ``dsd``, which re-plans k = 0..min(6, K)) have
    no γ and no row.
    """
    sub, _ = base_context(df)
    if set(sub.verify) != {"token", "block"}:
        return pd.DataFrame()
    cfg = [c for c in config_columns(sub) if c not in ("seed", "verify")]
    rows = []
    token = sub[sub.verify == "token"].drop_duplicates("setting")
    for _, row in token.iterrows():
        if row.policy in NO_K_POLICIES:
            continue
        where = setting_of(row, cfg)
        if select(sub, {**where, "verify": "block"}).empty:
            continue
        out = {"policy": row.policy, "gamma": int(row.num_speculative_tokens),
               "e": int(row.extra)}
        for metric in ("mal", "throughput"):
            d = paired_difference(sub, {**where, "verify": "block"}, {**where, "verify": "token"},
                                  metric, confidence)
            out.update({f"{metric}_tv": d.mean_b, f"{metric}_bv": d.mean_a,
                        f"{metric}_gain": 100 * d.rel, f"{metric}_low": 100 * d.rel_low,
                        f"{metric}_high": 100 * d.rel_high})
        out["n"] = d.n
        rows.append(out)
    return pd.DataFrame(rows)


def tetris_replication(df: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame] | None:
    """Our TETRIS vs best fixed SD vs DSD numbers beside the paper's (TV, base context)."""
    sub, _ = base_context(df)
    sub = sub[sub.verify == "token"] if (sub.verify == "token").any() else sub
    have = set(sub.policy)
    if not {"tetris", "fixed"} <= have:
        return None
    cfg = [c for c in config_columns(sub) if c != "seed"]

    def best(policy: str, metric: str) -> dict:
        rows = sub[sub.policy == policy]
        return setting_of(best_settings(rows, metric, by=()).iloc[0], cfg)

    rows = []
    baselines = [("standard SD (best fixed k)", "fixed")] + (
        [("DSD", "dsd")] if "dsd" in have else [])
    for metric, paper_sd, paper_best in (("e2e_mean", PAPER_TETRIS["e2e_vs_sd"],
                                          PAPER_TETRIS["e2e_vs_best"]),
                                         ("throughput", None, PAPER_TETRIS["throughput"])):
        tetris = best("tetris", metric)
        diffs = {}
        for name, policy in baselines:
            d = paired_difference(sub, tetris, best(policy, metric), metric)
            diffs[policy] = d
            rows.append({"metric": label(metric), "TETRIS vs": name,
                         "ours (%)": d.rel_text(),
                         "paper (%)": (f"up to {paper_sd:+.2f}" if policy == "fixed" and paper_sd
                                       else "-")})
        # the best baseline is the one TETRIS beats by the least
        worst = max(diffs.values(), key=lambda d: d.rel if metric == "e2e_mean" else -d.rel)
        rows.append({"metric": label(metric), "TETRIS vs": "best baseline",
                     "ours (%)": worst.rel_text(),
                     "paper (%)": f"up to {paper_best:+.2f}"})
    # the paper's "up to" is a best case over settings: our analogue is the largest gain
    # over k of TETRIS against fixed SD at the same budget C = k x running
    for metric in ("e2e_mean", "throughput"):
        per = same_budget(sub, {"policy": "tetris"}, {"policy": "fixed"}, metric)
        if per.empty:
            continue
        pick = per.rel.idxmin() if metric == "e2e_mean" else per.rel.idxmax()
        row = per.loc[pick]
        text = f"{100 * row.rel:+.2f}%"
        if math.isfinite(row.rel_low):
            text += f" [{100 * row.rel_low:+.2f}, {100 * row.rel_high:+.2f}]"
        rows.append({"metric": label(metric),
                     "TETRIS vs": f"fixed SD at the same k (best case, k = {int(row.k)})",
                     "ours (%)": text,
                     "paper (%)": (f"up to {PAPER_TETRIS['e2e_vs_sd']:+.2f}"
                                   if metric == "e2e_mean" else "-")})
    table = pd.DataFrame(rows)
    per_k = same_budget(sub, {"policy": "tetris"}, {"policy": "fixed"}, "throughput")
    if not per_k.empty:
        lat = same_budget(sub, {"policy": "tetris"}, {"policy": "fixed"}, "e2e_mean")
        per_k = pd.DataFrame({
            "k": per_k.k, "TETRIS e": per_k.e,
            "throughput TETRIS": per_k.a, "throughput fixed": per_k.b,
            "throughput gain (%)": 100 * per_k.rel,
            "e2e TETRIS (s)": lat.a, "e2e fixed (s)": lat.b, "e2e change (%)": 100 * lat.rel,
        })
    return table, per_k


def tetris_by_context(df: pd.DataFrame, metric: str = "e2e_mean",
                      confidence: float = 0.95) -> pd.DataFrame:
    """TETRIS vs the best fixed-k SD, DSD and the best baseline at **every** context (e.g. each
    arrival rate under open-loop load), token verification.

    Each policy's best setting is chosen by ``metric`` (lower-is-better latency under open
    load) within the context; the changes are per-seed paired relative differences (%) with a
    ``confidence`` t-interval on mean e2e, p99 e2e and TPOT. Empty when TETRIS or fixed did
    not run.
    """
    sub = df[df.verify == "token"] if (df.verify == "token").any() else df
    if not {"tetris", "fixed"} <= set(sub.policy):
        return pd.DataFrame()
    ctx = context_columns(sub)
    cfg = [c for c in config_columns(sub) if c != "seed"]
    groups = sub.groupby(ctx, sort=True, dropna=False) if ctx else [((), sub)]
    metrics = [m for m in ("e2e_mean", "e2e_p99", "tpot_mean") if m in sub]
    rows = []
    for values, part in groups:
        values = values if isinstance(values, tuple) else (values,)
        have = set(part.policy)
        if not {"tetris", "fixed"} <= have:
            continue

        def best(policy: str, part: pd.DataFrame = part) -> dict:
            rows_ = part[part.policy == policy]
            return setting_of(best_settings(rows_, metric, by=()).iloc[0], cfg)

        tetris = best("tetris")
        picks = [("best fixed k", best("fixed"))] + ([("DSD", best("dsd"))] if "dsd" in have
                                                     else [])
        diffs = [(name, pick, {m: paired_difference(part, tetris, pick, m, confidence)
                               for m in metrics}) for name, pick in picks]
        # the best baseline: the one with the lowest (best) mean of the ranking metric
        sign = -1 if higher_is_better(metric) else 1
        top = min(diffs, key=lambda d: sign * float(select(part, d[1])[metric].mean()))
        for name, pick, d in diffs + [(f"best baseline ({top[0]})", top[1], top[2])]:
            out = dict(zip(ctx, values))
            out.update({"TETRIS (k, e)": f"{int(tetris['num_speculative_tokens'])}, "
                                         f"{int(tetris['extra'])}",
                        "vs": name, "baseline k": int(pick["num_speculative_tokens"])})
            first = d[metrics[0]]
            out.update({"e2e TETRIS (s)": first.mean_a, "e2e baseline (s)": first.mean_b})
            for m in metrics:
                short = {"e2e_mean": "e2e mean", "e2e_p99": "e2e p99", "tpot_mean": "TPOT"}[m]
                out[f"{short} change (%)"] = d[m].rel_text(percent=True)
            out["seeds"] = first.n
            rows.append(out)
    return pd.DataFrame(rows)


def trace_meta(df: pd.DataFrame) -> dict | None:
    name = str(df.trace.iloc[0])
    if name == "synth":
        return None
    try:
        from specbatch.traces.format.files import read_meta

        return read_meta(name)
    except Exception:  # the note is best effort
        return None


def trace_note(df: pd.DataFrame) -> str:
    name = str(df.trace.iloc[0])
    if name == "synth":
        return "a synthetic trace (traces.synth)"
    meta = trace_meta(df)
    if meta is None:
        return f"trace `{name}`"
    from specbatch.traces.format.describe import describe_trace

    return f"trace `{name}` ({describe_trace(meta, int(meta.get('depth', 0)))})"


def setting_summary(df: pd.DataFrame) -> str:
    row = df.iloc[0]
    return (f"{trace_note(df)}; {row.requests} requests ({row.arrival} arrival), "
            f"max_num_seqs {row.max_num_seqs}, {row.cost} cost model on {row.hardware} "
            f"(tp {row.tp}), target {row.target}, draft {row.draft}; "
            f"{df.seed.nunique()} seed(s)")


def tetris_note(df: pd.DataFrame) -> str:
    return (
        "Setting differences: the paper measures a vLLM 0.4.2 fork on real GPUs "
        "(Vicuna-68M -> Vicuna-33B, Llama-3.2-1B -> Llama-3.1-70B/405B; ShareGPT, Chatbot "
        "Arena, tough domain questions; 512 requests at once, 64 running, temperature 0, "
        "3 repeats) and quotes the best case over those settings ('up to'). Here: "
        f"{setting_summary(df)}; step times come from the simulator's cost model, and the "
        "acceptance landscape is the trace's, replayed by output position. TETRIS uses the "
        "draft's own confidence as in the official code; the paper's DSD uses profiled step "
        "times, ours the same cost model as every policy.")


def block_note(df: pd.DataFrame) -> str:
    note = (
        "Setting differences: the paper's numbers are PaLM-2-S with a PaLM-2-XXS drafter, "
        "sampling at temperature 1, one request at a time, averaged over 8 datasets "
        "(block efficiency = MAL). Here: "
        f"{setting_summary(df)}; a batch of requests with a fixed window gamma = k.")
    temp = (trace_meta(df) or {}).get("temperature")
    if temp == 0:
        note += (" This trace was captured at temperature 0, where BV equals TV exactly "
                 "(THEORY.md §3): a zero gain is the correct answer, not a failure.")
    return note
