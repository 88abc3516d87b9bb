"""Result tables and the summary (metric definitions: THEORY.md §6).

Per-request table (one row per simulated request ``uid``): arrival, first_token, finish
(seconds), tokens (emitted output tokens), steps (decode steps taken part in), drafted,
verified, accepted (draft tokens), plus replica, trace_index, prompt_len, output_len,
preemptions (times preempted, paged KV mode) and recomputed_tokens (Σ prompt + t over its
preemptions: the tokens its re-admissions prefilled again; simulator.engine.kv).

Per-step table (one row per engine step of any replica): time (start), end, batch (decode
requests), prefill_tokens, drafted, verified, accepted (Σ τ), emitted (tokens emitted, first
tokens of completed prompts included), depth (draft passes), draft_time, target_time,
verify_time (the rejection sampler, simulator.cost.verify_cost; 0 in prefill-only steps and in a
live run, whose verification is in its overhead), overhead_time (seconds), scheduled_tokens
(prefill_tokens + Σ (s_i + 1)) and decode_requests (= batch).

Summary:

- ``throughput`` = output tokens / makespan, makespan = last finish − first arrival.
- ``e2e_mean/p50/p99`` of e2e = finish − arrival; ``ttft_mean`` of TTFT = first_token −
  arrival; ``tpot_mean`` of TPOT = (e2e − TTFT) / (tokens − 1) over requests with > 1 token.
- ``vsr`` (verification success rate) = Σ accepted / Σ verified draft tokens.
- ``mal`` (mean accepted length) = mean of τ + 1 over decode request-steps
  = (Σ accepted + Σ request-steps) / Σ request-steps (τ + 1 uncapped by the output end).
- ``draft_efficiency`` = Σ accepted / Σ drafted (TETRIS drafts more than it verifies).
- ``target_efficiency`` = output tokens / Σ target_time (tokens per second of target work).
- ``draft_time``, ``target_time``, ``verify_time``, ``overhead_time`` = the step table's
  columns summed over every step of every replica (seconds); ``verify_share`` = verify_time /
  their sum (the fraction of step time spent verifying).
- ``goodput`` (serving sense) = requests with e2e ≤ ``slo`` per second of makespan (None
  when no SLO is set); ``slo_attainment`` = that fraction of requests.
- ``preemptions`` = Σ preemptions, ``recomputed_tokens`` = Σ recomputed_tokens (0 in
  reserve mode).
- ``speedup_vs_ar`` = makespan of ``ar`` on the same workload and cost model / makespan
  (= throughput ratio, same tokens), added by :func:`simulator.run.simulate` on request.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from specbatch.simulator.engine.request_state import FLOAT_STEP_COLUMNS, STEP_COLUMNS, Records
from specbatch.simulator.engine.steplog import StepLog

if TYPE_CHECKING:
    from specbatch.simulator.workload.arrivals import Workload

#: The columns of every per-request table (the simulator's and a live run's, live.record).
REQUEST_COLUMNS = ("uid", "trace_index", "replica", "prompt_len", "output_len", "arrival",
                   "first_token", "finish", "tokens", "steps", "drafted", "verified", "accepted")
#: The simulator's KV columns after them (0 in reserve mode; simulator.engine.kv).
KV_REQUEST_COLUMNS = ("preemptions", "recomputed_tokens")


def request_table(rec: Records, workload: Workload) -> pd.DataFrame:
    """One row per simulated request (REQUEST_COLUMNS, then KV_REQUEST_COLUMNS)."""
    n = workload.n
    return pd.DataFrame({
        "uid": np.arange(n, dtype=np.int64), "trace_index": workload.trace_index,
        "replica": rec.replica, "prompt_len": workload.prompt_len,
        "output_len": workload.output_len, "arrival": workload.arrival,
        "first_token": rec.first_token, "finish": rec.finish, "tokens": rec.tokens,
        "steps": rec.steps, "drafted": rec.drafted, "verified": rec.verified,
        "accepted": rec.accepted, "preemptions": rec.preemptions,
        "recomputed_tokens": rec.recomputed,
    }, copy=False)  # the run's arrays (never written after it), not a consolidated copy


#: The simulator's step-table columns after STEP_COLUMNS, vLLM's view of a step:
#: ``scheduled_tokens`` = prefill_tokens + Σ (s_i + 1) (never above max_num_batched_tokens
#: under vllm-v1) and ``decode_requests`` = batch.
SCHEDULE_STEP_COLUMNS = ("scheduled_tokens", "decode_requests")


def step_table(rec: Records) -> pd.DataFrame:
    """One row per engine step: STEP_COLUMNS (the fields of state.StepRecord), then
    SCHEDULE_STEP_COLUMNS."""
    return add_schedule_columns(step_frame(rec.step_rows))


def add_schedule_columns(steps):
    """Append SCHEDULE_STEP_COLUMNS to ``steps`` (a step frame, or a dict of its columns
    # [rows], as simulator.step_stream writes them row group by row group); returns it."""
    batch = np.asarray(steps["batch"], dtype=np.int64)
    steps["scheduled_tokens"] = (np.asarray(steps["prefill_tokens"], dtype=np.int64)
                                 + np.asarray(steps["verified"], dtype=np.int64) + batch)
    steps["decode_requests"] = batch
    return steps


def step_frame(step_rows: list | StepLog) -> pd.DataFrame:
    """The step table of recorded :class:`~simulator.engine.request_state.StepRecord` rows (the
    simulator's :class:`~simulator.engine.steplog.StepLog`, the live loop's list), float and int
    columns typed."""
    if not len(step_rows):
        return pd.DataFrame({c: np.zeros(0) for c in STEP_COLUMNS})
    if isinstance(step_rows, StepLog):
        return pd.DataFrame(step_rows.columns(), copy=False)  # the columns, not a copy
    return pd.DataFrame({
        name: np.asarray(values, dtype=np.float64 if name in FLOAT_STEP_COLUMNS else np.int64)
        for name, values in zip(STEP_COLUMNS, zip(*step_rows))})


def _ratio(a: float, b: float) -> float:
    return float(a) / float(b) if b else float("nan")


#: The step-table columns the summary sums (seconds); verify_time may be absent (0).
SUMMED_STEP_COLUMNS = ("draft_time", "target_time", "verify_time", "overhead_time")


@dataclass(frozen=True)
class StepTotals:
    """What the summary reads of the step table: its rows and SUMMED_STEP_COLUMNS' sums."""

    steps: int
    draft_time: float
    target_time: float
    verify_time: float
    overhead_time: float


def step_totals(steps: pd.DataFrame) -> StepTotals:
    """The step table's :class:`StepTotals` (a column's sum is pandas' ``Series.sum``, so a
    column read back whole from a file sums to the same float; simulator.step_stream)."""
    return StepTotals(
        steps=int(steps.shape[0]), draft_time=float(steps["draft_time"].sum()),
        target_time=float(steps["target_time"].sum()),
        verify_time=float(steps["verify_time"].sum()) if "verify_time" in steps else 0.0,
        overhead_time=float(steps["overhead_time"].sum()))


def makespan(requests: pd.DataFrame) -> float:
    """Last finish − first arrival, seconds (0 without requests)."""
    arrival = requests["arrival"].to_numpy()
    return float(requests["finish"].to_numpy().max() - arrival.min()) if arrival.shape[0] else 0.0


def summarize(requests: pd.DataFrame, steps: pd.DataFrame | StepTotals,
              slo: float | None = None) -> dict[str, Any]:
    """The summary dict (definitions in the module docstring) of the request table and the
    step table (or its :class:`StepTotals`, when the table was streamed to a file)."""
    totals = steps if isinstance(steps, StepTotals) else step_totals(steps)
    arrival = requests["arrival"].to_numpy()
    finish = requests["finish"].to_numpy()
    first = requests["first_token"].to_numpy()
    tokens = requests["tokens"].to_numpy()
    n = int(arrival.shape[0])
    span = makespan(requests)
    total = int(tokens.sum())
    e2e = finish - arrival
    ttft = first - arrival
    multi = tokens > 1
    tpot = (e2e[multi] - ttft[multi]) / (tokens[multi] - 1)
    accepted = int(requests["accepted"].sum())
    verified = int(requests["verified"].sum())
    drafted = int(requests["drafted"].sum())
    request_steps = int(requests["steps"].sum())
    draft_time, target_time = totals.draft_time, totals.target_time
    verify_time, overhead_time = totals.verify_time, totals.overhead_time
    summary: dict[str, Any] = {
        "throughput": _ratio(total, span),
        "e2e_mean": float(e2e.mean()) if n else float("nan"),
        "e2e_p50": float(np.percentile(e2e, 50)) if n else float("nan"),
        "e2e_p99": float(np.percentile(e2e, 99)) if n else float("nan"),
        "ttft_mean": float(ttft.mean()) if n else float("nan"),
        "tpot_mean": float(tpot.mean()) if tpot.size else float("nan"),
        "vsr": _ratio(accepted, verified),
        "mal": _ratio(accepted + request_steps, request_steps),
        "draft_efficiency": _ratio(accepted, drafted),
        "target_efficiency": _ratio(total, target_time),
        "goodput": None,
        "slo_attainment": None,
        "tokens": total,
        "requests": n,
        "makespan": span,
        "steps": totals.steps,
        "decode_request_steps": request_steps,
        "drafted": drafted,
        "verified": verified,
        "accepted": accepted,
        "draft_time": draft_time,
        "target_time": target_time,
        "verify_time": verify_time,
        "overhead_time": overhead_time,
        "verify_share": _ratio(verify_time, draft_time + target_time + verify_time
                               + overhead_time),
        "preemptions": int(requests["preemptions"].sum()) if "preemptions" in requests else 0,
        "recomputed_tokens": (int(requests["recomputed_tokens"].sum())
                              if "recomputed_tokens" in requests else 0),
    }
    if slo is not None and n:
        met = int((e2e <= slo).sum())
        summary["goodput"] = _ratio(met, span)
        summary["slo_attainment"] = met / n
    return summary
