"""Result tables and the summary (metric definitions: THEORY.md §6).

Per-request table (one row per simulated request ``uid``): arrival, first_token, finish
(seconds, as the client sees them: the engine's times + ``client_ttft_s``, :func:`client_view`),
tokens (emitted output tokens), steps (decode steps taken part in), drafted,
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

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from specbatch.simulator.engine.request_state import FLOAT_STEP_COLUMNS, STEP_COLUMNS, Records
from specbatch.simulator.engine.steplog import StepLog

if TYPE_CHECKING:
    import pandas as pd

    from specbatch.simulator.workload.arrivals import Workload

    #: A table the summary functions read: a DataFrame or its :data:`Columns`.
    Table = pd.DataFrame | Mapping[str, np.ndarray]

#: A table as its columns, name -> array # [rows], in the table's column order: what a run
#: holds until a DataFrame is asked for (pandas costs ~0.3 s of start-up, more than a small
#: run), and what :func:`summarize` reads as well as a DataFrame.
Columns = dict[str, np.ndarray]

#: The columns of every per-request table (the simulator's and a live run's, live.record).
REQUEST_COLUMNS = ("uid", "trace_index", "replica", "prompt_len", "output_len", "arrival",
                   "first_token", "finish", "tokens", "steps", "drafted", "verified", "accepted")
#: The simulator's KV columns after them (0 in reserve mode; simulator.engine.kv).
KV_REQUEST_COLUMNS = ("preemptions", "recomputed_tokens")


def frame(columns: Mapping[str, np.ndarray]) -> pd.DataFrame:
    """The DataFrame of a table's :data:`Columns`: the same arrays, not a consolidated copy
    (the run's arrays are never written after it)."""
    import pandas as pd

    return pd.DataFrame(columns, copy=False)


class FrameField:
    """A dataclass field that holds a table as a DataFrame or as its :data:`Columns` and reads
    as a DataFrame, built from the columns (the same arrays) on the first read and kept: a run
    asked only for its summary (``simulate --json``) never imports pandas. ``None`` stays None.
    A field without a default (class access raises AttributeError, which dataclasses read as
    "required")."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name, self.slot = name, f"_{name}_table"

    def __get__(self, obj: object, owner: type | None = None) -> pd.DataFrame | None:
        if obj is None:
            raise AttributeError(self.name)
        value = obj.__dict__[self.slot]
        if isinstance(value, dict):
            value = frame(value)
            obj.__dict__[self.slot] = value
        return value

    def __set__(self, obj: object, value: pd.DataFrame | Columns | None) -> None:
        obj.__dict__[self.slot] = value

    def held(self, obj: object) -> pd.DataFrame | Columns | None:
        """What ``obj`` holds: the DataFrame once built, else the columns (no pandas)."""
        return obj.__dict__[self.slot]


def client_view(engine_s: np.ndarray, client_s: float) -> np.ndarray:
    """A request's first-token or finish time as its client sees it: the engine's time +
    ``client_s`` (SimConfig ``client_ttft_s``: the API server, tokenisation, the trip into
    the engine core and the streamed chunk back, which vLLM's serving benchmark times from the
    client; simulator.cost.features.host.CLIENT_TTFT_S). Added to both stamps, so TTFT and
    e2e grow by ``client_s`` and TPOT = (e2e − TTFT) / (tokens − 1) does not change; NaN (a
    request a stopped run never reached) stays NaN; 0 returns the engine's array itself.
    The one place the term is applied: every reporter (summary, plan's SLO judgement,
    ``validate``) reads the request table. # [requests]"""
    return engine_s if client_s == 0.0 else engine_s + client_s


def request_table(rec: Records, workload: Workload, client_s: float = 0.0) -> pd.DataFrame:
    """One row per simulated request (REQUEST_COLUMNS, then KV_REQUEST_COLUMNS); first_token
    and finish as the client sees them (:func:`client_view`; 0: the engine's own stamps, as
    the engine-level tests compare them)."""
    return frame(request_columns(rec, workload, client_s))


def request_columns(rec: Records, workload: Workload, client_s: float = 0.0) -> Columns:
    """:func:`request_table`'s columns # [requests], without pandas."""
    n = workload.n
    return {
        "uid": np.arange(n, dtype=np.int64), "trace_index": workload.trace_index,
        "replica": rec.replica, "prompt_len": workload.prompt_len,
        "output_len": workload.output_len, "arrival": workload.arrival,
        "first_token": client_view(rec.first_token, client_s),
        "finish": client_view(rec.finish, client_s), "tokens": rec.tokens,
        "steps": rec.steps, "drafted": rec.drafted, "verified": rec.verified,
        "accepted": rec.accepted, "preemptions": rec.preemptions,
        "recomputed_tokens": rec.recomputed,
    }


#: The simulator's step-table columns after STEP_COLUMNS, vLLM's view of a step:
#: ``scheduled_tokens`` = prefill_tokens + Σ (s_i + 1) (never above max_num_batched_tokens
#: under vllm-v1) and ``decode_requests`` = batch.
SCHEDULE_STEP_COLUMNS = ("scheduled_tokens", "decode_requests")


def step_table(rec: Records) -> pd.DataFrame:
    """One row per engine step: STEP_COLUMNS (the fields of state.StepRecord), then
    SCHEDULE_STEP_COLUMNS."""
    return frame(step_columns(rec))


def step_columns(rec: Records) -> Columns:
    """:func:`step_table`'s columns # [steps], without pandas."""
    return add_schedule_columns(step_frame_columns(rec.step_rows))


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
    return frame(step_frame_columns(step_rows))


def step_frame_columns(step_rows: list | StepLog) -> Columns:
    """:func:`step_frame`'s columns # [rows] (an empty table's are float64)."""
    if not len(step_rows):
        return {c: np.zeros(0) for c in STEP_COLUMNS}
    if isinstance(step_rows, StepLog):
        return step_rows.columns()  # the log's columns, not a copy
    return {name: np.asarray(values, dtype=np.float64 if name in FLOAT_STEP_COLUMNS else np.int64)
            for name, values in zip(STEP_COLUMNS, zip(*step_rows))}


def column(table: Table, name: str) -> np.ndarray:
    """Column ``name`` of a DataFrame or of its :data:`Columns` as a numpy array # [rows]."""
    return np.asarray(table[name])


def rows(table: Table) -> int:
    """The rows of a DataFrame or of its :data:`Columns` (0 for a table without columns)."""
    if hasattr(table, "shape"):
        return int(table.shape[0])
    return int(next((np.shape(values)[0] for values in table.values()), 0))


def column_sum(values: np.ndarray) -> float | int:
    """The sum pandas' ``Series.sum`` gives of a numpy column # [rows] (NaN counted as 0,
    then numpy's pairwise sum of the contiguous values: the same float), without pandas."""
    if values.dtype.kind == "f":
        nan = np.isnan(values)
        if nan.any():
            values = np.where(nan, 0.0, values)
    return values.sum()


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


def step_totals(steps: Table) -> StepTotals:
    """The step table's :class:`StepTotals` (a column's sum is pandas' ``Series.sum``,
    :func:`column_sum`, so a column read back whole from a file sums to the same float;
    simulator.step_stream)."""

    def total(name: str) -> float:
        return float(column_sum(column(steps, name)))

    return StepTotals(
        steps=rows(steps), draft_time=total("draft_time"), target_time=total("target_time"),
        verify_time=total("verify_time") if "verify_time" in steps else 0.0,
        overhead_time=total("overhead_time"))


def makespan(requests: Table) -> float:
    """Last finish − first arrival, seconds (0 without requests)."""
    arrival = column(requests, "arrival")
    return float(column(requests, "finish").max() - arrival.min()) if arrival.shape[0] else 0.0


def summarize(requests: Table, steps: Table | StepTotals,
              slo: float | None = None) -> dict[str, Any]:
    """The summary dict (definitions in the module docstring) of the request table and the
    step table (or its :class:`StepTotals`, when the table was streamed to a file); each
    table a DataFrame or its :data:`Columns` (the same numbers)."""
    totals = steps if isinstance(steps, StepTotals) else step_totals(steps)
    arrival = column(requests, "arrival")
    finish = column(requests, "finish")
    first = column(requests, "first_token")
    tokens = column(requests, "tokens")
    n = int(arrival.shape[0])
    span = makespan(requests)
    total = int(tokens.sum())
    e2e = finish - arrival
    ttft = first - arrival
    multi = tokens > 1
    tpot = (e2e[multi] - ttft[multi]) / (tokens[multi] - 1)
    accepted = int(column_sum(column(requests, "accepted")))
    verified = int(column_sum(column(requests, "verified")))
    drafted = int(column_sum(column(requests, "drafted")))
    request_steps = int(column_sum(column(requests, "steps")))
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
        "preemptions": (int(column_sum(column(requests, "preemptions")))
                        if "preemptions" in requests else 0),
        "recomputed_tokens": (int(column_sum(column(requests, "recomputed_tokens")))
                              if "recomputed_tokens" in requests else 0),
    }
    if slo is not None and n:
        met = int((e2e <= slo).sum())
        summary["goodput"] = _ratio(met, span)
        summary["slo_attainment"] = met / n
    return summary
