"""KV-cache pressure of a sweep: the mode, the capacity each run had, its preemptions and the
tokens it recomputed, for the report.

A run under a limited KV cache (``kv_mode = "paged"``, or a ``kv_capacity`` in reserve mode)
can be slow for a reason the throughput table does not show: paged mode preempts the newest
running request when the block pool runs out and recomputes its prompt and output so far
when it is readmitted (vLLM V1); reserve mode holds requests in the queue until their whole
footprint fits. :func:`kv_pressure` gives, for each policy's best setting per context (the
headline's settings), the capacity and the mean and largest preemption and recomputation
counts over seeds; :func:`kv_summary` one sentence for the whole sweep.
"""

from __future__ import annotations

import pandas as pd

from specbatch.analysis.report.compare import best_settings, context_columns, ranking_metric
from specbatch.simulator.config.sim_config import NO_K_POLICIES

__all__ = ["kv_limited", "kv_pressure", "kv_summary"]


def _column(df: pd.DataFrame, name: str) -> pd.Series | None:
    """A run's own value (``<name>_result``, the summary's) else the config column."""
    for col in (f"{name}_result", name):
        if col in df:
            return df[col]
    return None


def kv_limited(df: pd.DataFrame) -> bool:
    """Whether any run of ``df`` had a limited KV cache (paged mode or a set capacity)."""
    mode, capacity = _column(df, "kv_mode"), _column(df, "kv_capacity")
    paged = mode is not None and bool((mode == "paged").any())
    return paged or (capacity is not None and bool(capacity.notna().any()))


def kv_pressure(df: pd.DataFrame) -> pd.DataFrame:
    """Per best setting of each policy (by the ranking metric, per context): KV mode,
    capacity (tokens per replica), preemptions and recomputed tokens per run (mean and max
    over seeds). Empty when no run had a limited KV cache."""
    if not kv_limited(df):
        return pd.DataFrame()
    ctx = context_columns(df)
    best = best_settings(df, ranking_metric(df))
    rows = []
    for _, row in best.iterrows():
        runs = df[df.setting == row.setting]
        capacity = _column(runs, "kv_capacity")
        out = {c: row[c] for c in ctx}
        out.update({"policy": row.policy, "verify": row.verify,
                    "k": "-" if row.policy in NO_K_POLICIES else row.num_speculative_tokens,
                    "KV mode": _column(runs, "kv_mode").iloc[0],
                    "KV capacity (tokens)": capacity.iloc[0] if capacity is not None else None})
        for name, col in (("preemptions", "preemptions"), ("recomputed tokens",
                                                           "recomputed_tokens")):
            values = runs[col] if col in runs else pd.Series(dtype=float)
            out[f"{name} (mean)"] = float(values.mean()) if len(values) else None
            out[f"{name} (max)"] = int(values.max()) if len(values) else None
        rows.append(out)
    return pd.DataFrame(rows)


def kv_summary(df: pd.DataFrame) -> str:
    """One paragraph: KV mode(s), capacities per context, how many runs preempted and the
    worst run; empty when no run had a limited KV cache."""
    if not kv_limited(df):
        return ""
    modes = sorted(set(_column(df, "kv_mode").astype(str)))
    capacity = _column(df, "kv_capacity")
    ctx = [c for c in context_columns(df) if c in ("tp", "hardware", "target", "draft",
                                                   "gpu_memory_utilization", "kv_capacity",
                                                   "block_size", "kv_mode")]
    caps = df.assign(_cap=capacity).drop_duplicates(ctx + ["_cap"] if ctx else ["_cap"])
    cap_text = "; ".join(
        (", ".join(f"{c} = {r[c]}" for c in ctx) + ": " if ctx else "")
        + ("unlimited" if pd.isna(r["_cap"]) else f"{int(r['_cap']):,} tokens")
        for _, r in caps.iterrows())
    text = (f"KV cache: {' and '.join(modes)} mode"
            + (f" (blocks of {int(df.block_size.iloc[0])} tokens, gpu_memory_utilization "
               f"{df.gpu_memory_utilization.iloc[0]:g} unless kv_capacity is set)"
               if "paged" in modes and "block_size" in df else "")
            + f"; capacity per replica: {cap_text}.")
    if "preemptions" in df:
        hit = df[df.preemptions > 0]
        text += (f" {len(hit)} of {len(df)} runs preempted requests"
                 + (f" (at most {int(hit.preemptions.max()):,} preemptions and "
                    f"{int(hit.recomputed_tokens.max()):,} recomputed tokens in one run)"
                    if len(hit) and "recomputed_tokens" in df else "")
                 + ": a preempted request frees its blocks and recomputes its prompt and "
                   "output so far when readmitted, and that recomputation is in the step "
                   "times above.")
    if "reserve" in modes:
        text += (" Reserve mode holds each request's whole footprint from admission: requests "
                 "wait in the queue instead of being preempted.")
    return text
