"""The capacity planner's verdict on one simulated configuration: SLOs, rate, memory.

Per request (the simulator's request table): TTFT = first_token − arrival, e2e = finish −
arrival, TPOT = (e2e − TTFT) / (tokens − 1) (0 for a one-token output). A configuration
**meets the SLOs** when, for every SLO given (``--slo-ttft``, ``--slo-tpot``, ``--slo-e2e``,
seconds), the ``percentile`` (p99 by default) of that quantity is within it, and the share of
requests meeting every given SLO at once is at least the goodput target (0.99 by default).

Two more limits are checked whatever the SLOs:

- **rate not sustained** (:func:`queue_growth`): the offered load outruns the deployment, so
  its queue grows through the run. Test: the median TTFT of the last quarter of requests (by
  arrival) exceeds that of the first quarter by more than a tenth of the arrival window
  (under an overload ρ > 1 the difference grows like 0.75 (1 − 1/ρ) of the window; a stable
  queue's stays at its noise). Not applied when every request arrives at once (burst).
- **memory (KV)**: the simulator's paged KV cache ran out and preempted requests
  (recomputing them), unless preemption is allowed (``allow_preemption``). The memory plan
  (:func:`memory_plan`) says why: the KV tokens needed at the concurrency reached
  (:func:`peak_concurrency`, capped at ``max_num_seqs``, times the mean footprint prompt +
  output + K + 1) against the pool each replica has. A sliding-window model under vLLM's
  hybrid KV cache manager counts both in tokens of one KV cache group: a request's footprint
  is the blocks it holds over all groups at its last step (a sliding group's at most its
  window's) times the block size.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from specbatch.simulator.engine.stop_limits import StopLimits
from specbatch.simulator.metrics import column as table_column
from specbatch.simulator.metrics import rows

if TYPE_CHECKING:
    from specbatch.simulator.metrics import Table

#: The SLO'd quantities, in report order.
SLO_NAMES = ("ttft", "tpot", "e2e")


@dataclass(frozen=True)
class Slos:
    """Latency bounds in seconds (None = not constrained) at ``percentile``, the goodput
    target (share of requests meeting all of them) and whether preemption is tolerated."""

    ttft: float | None = None
    tpot: float | None = None
    e2e: float | None = None
    percentile: float = 99.0
    goodput: float = 0.99
    allow_preemption: bool = False

    def bounds(self) -> dict[str, float]:
        """The SLOs given: name -> seconds."""
        return {n: getattr(self, n) for n in SLO_NAMES if getattr(self, n) is not None}

    def describe(self) -> str:
        """``p99 TPOT <= 0.1 s, goodput >= 0.99`` (the SLOs as the report states them)."""
        p = f"p{self.percentile:g}"
        parts = [f"{p} {n.upper()} <= {v:g} s" for n, v in self.bounds().items()]
        if parts:
            parts.append(f"goodput >= {self.goodput:g}")
        return ", ".join(parts) or "no latency SLO (the rate sustained without preemption)"


@dataclass(frozen=True)
class Verdict:
    """Whether a configuration meets every limit, what limits it, and its latencies."""

    passed: bool
    limits: tuple[str, ...]  # e.g. "TPOT p99 0.21 s > 0.1 s"; empty when passed
    latency: dict  # ttft/tpot/e2e at the percentile (seconds), goodput share, sustained


def column(requests: Table, name: str, dtype=None) -> np.ndarray:
    """One column of a request table # [N]: a DataFrame or its columns (simulator.metrics
    Columns, what the planner's runs hand back, so that a run is judged without building a
    DataFrame: ~1.5 ms a run, ~200 runs a question)."""
    return np.asarray(table_column(requests, name), dtype=dtype)


def per_request(requests: Table) -> dict[str, np.ndarray]:
    """TTFT, TPOT and e2e of every request (module docstring), seconds. # [N] each"""
    arrival = column(requests, "arrival", np.float64)
    e2e = column(requests, "finish", np.float64) - arrival
    ttft = column(requests, "first_token", np.float64) - arrival
    tokens = column(requests, "tokens", np.float64)
    tpot = np.where(tokens > 1, (e2e - ttft) / np.maximum(tokens - 1, 1), 0.0)
    return {"ttft": ttft, "tpot": tpot, "e2e": e2e}


def queue_growth(requests: Table) -> float | None:
    """Median TTFT of the last quarter of arrivals minus that of the first quarter, as a share
    of the arrival window; None when the window is 0 (a burst) or there are < 8 requests."""
    if rows(requests) < 8:
        return None
    order = np.argsort(column(requests, "arrival"), kind="stable")
    arrival = column(requests, "arrival", np.float64)[order]
    window = float(arrival[-1] - arrival[0])
    if window <= 0:
        return None
    ttft = per_request(requests)["ttft"][order]
    q = len(order) // 4
    return float(np.median(ttft[-q:]) - np.median(ttft[:q])) / window


#: Queue growth (a share of the arrival window) above which the rate is not sustained.
MAX_QUEUE_GROWTH = 0.1


def judge(requests: Table, preemptions: int, slos: Slos) -> Verdict:
    """The :class:`Verdict` of one run from its request table and preemption count."""
    values = per_request(requests)
    p = slos.percentile
    latency = {n: float(np.percentile(values[n], p)) for n in SLO_NAMES}
    limits = []
    ok = np.ones(rows(requests), dtype=bool)
    for name, bound in slos.bounds().items():
        ok &= values[name] <= bound
        if latency[name] > bound:
            limits.append(f"{name.upper()} p{p:g} {latency[name]:.3g} s > {bound:g} s")
    share = float(ok.mean()) if len(ok) else 0.0
    if slos.bounds() and share < slos.goodput:
        limits.append(f"goodput {share:.3f} < {slos.goodput:g}")
    growth = queue_growth(requests)
    sustained = growth is None or growth <= MAX_QUEUE_GROWTH
    if not sustained:
        limits.insert(0, f"rate not sustained (queue grows: TTFT +{growth:.1%} of the arrival "
                         "window)")
    if preemptions and not slos.allow_preemption:
        limits.insert(0, f"memory: KV cache ran out ({preemptions} preemptions)")
    latency.update(goodput=share, sustained=sustained, queue_growth=growth)
    return Verdict(passed=not limits, limits=tuple(limits), latency=latency)


def peak_concurrency(requests: Table, max_num_seqs: int) -> int:
    """The most requests one replica had in the system at once (arrived, not finished),
    capped at ``max_num_seqs``: the batch the replica would run if memory allowed."""
    best = 0
    replica = (column(requests, "replica") if "replica" in requests
               else np.zeros(rows(requests)))
    arrival, finish = column(requests, "arrival"), column(requests, "finish")  # [N]
    for r in np.unique(replica):
        mine = replica == r
        times = np.concatenate([arrival[mine], finish[mine]])
        k = int(np.count_nonzero(mine))
        steps = np.concatenate([np.ones(k), -np.ones(k)])
        order = np.lexsort((steps, times))  # at equal times, finishes (-1) first
        best = max(best, int(np.cumsum(steps[order]).max(initial=0)))
    return min(best, int(max_num_seqs))


def memory_plan(requests: Table, summary: dict, max_num_seqs: int, depth: int,
                weights_gb: float, kv_bytes_per_token: int, layout=None,
                block_size: int = 16) -> dict:
    """Weights, KV tokens needed at the concurrency reached vs available per replica, and the
    preemptions the run had (module docstring). ``layout``: a sliding-window model's KV cache
    groups under vLLM's hybrid manager (simulator.cost.analytic.kv_groups), whose pool counts tokens
    of one group (``kv_bytes_per_token`` then the bytes of one such token): a request's footprint
    is its blocks over all groups at its last step times ``block_size``
    (simulator.engine.group_tables.request_blocks)."""
    concurrency = peak_concurrency(requests, max_num_seqs)
    if layout is None:
        footprint = float(np.mean(column(requests, "prompt_len")
                                  + column(requests, "output_len"))) + depth + 1
    else:
        from specbatch.simulator.engine.group_tables import request_blocks

        last = (column(requests, "prompt_len")
                + column(requests, "output_len")).astype(np.int64) - 2
        blocks = request_blocks(layout, np.maximum(last, 0), last + 2 + depth)  # [N]
        footprint = float(blocks.mean()) * block_size if blocks.shape[0] else 0.0
    needed = int(round(concurrency * footprint))
    available = summary.get("kv_capacity")
    return {
        "weights_gb": round(weights_gb, 2),
        "kv_bytes_per_token": int(kv_bytes_per_token),
        "concurrency": concurrency,
        "footprint_tokens": round(footprint, 1),
        "kv_needed_tokens": needed,
        "kv_needed_gb": round(needed * kv_bytes_per_token / 1e9, 2),
        "kv_available_tokens": available,
        "kv_available_gb": (None if available is None
                            else round(available * kv_bytes_per_token / 1e9, 2)),
        "preemptions": int(summary.get("preemptions", 0)),
        "recomputed_tokens": int(summary.get("recomputed_tokens", 0)),
    }


# ------------------------------------------------------------------ early stop

@dataclass(frozen=True)
class StopRule:
    """When a planner's run may end before its last request finishes (:class:`EarlyStop`):
    its SLOs (``slos``) and, for a setting that only matters if it beats the frontier, the
    e2e at the percentile it must beat (``beat``, of the passing entry ``beat_label``; None:
    no such threshold). Part of the stored run's key (:meth:`identity`)."""

    slos: Slos
    beat: float | None = None
    beat_label: str = ""

    def identity(self) -> dict:
        return {"slos": [self.slos.ttft, self.slos.tpot, self.slos.e2e, self.slos.percentile,
                         self.slos.goodput, self.slos.allow_preemption],
                "beat": self.beat, "beat_label": self.beat_label}


def over_needed(n: int, percentile: float) -> int:
    """How many of n samples above a bound prove their ``percentile`` (np.percentile's linear
    interpolation) is above it: n − ⌊h⌋ with h = (n − 1)·p/100, the virtual index, taken a
    hair lower so that numpy's rounded h never makes it ask for fewer (an integral h asks
    for one sample more than needed).

    Why: with c ≥ n − ⌊h⌋ samples above B, the sorted x[⌊h⌋] > B and x[⌊h⌋+1] ≥ x[⌊h⌋]; the
    interpolation lies between them (numpy's lerp never undershoots its lower end), so the
    percentile is > B."""
    return n - math.floor((n - 1) * (percentile / 100.0) - 1e-9)


def latency_floors(time: float, arrival: np.ndarray, first_token: np.ndarray,
                   finish: np.ndarray, output_len: np.ndarray) -> dict[str, np.ndarray]:
    """Each request's TTFT, TPOT and e2e as :func:`per_request` will compute them, or a lower
    bound where the run has not recorded them yet at ``time``: a NaN first token (finish)
    comes at ``time`` or later (simulator.engine.core's stop), so ``time`` stands in for it, and
    the same float operations, each monotone, bound the final values from below. TPOT uses the
    output length, the tokens a finished request emitted. # [N] each"""
    e2e = np.where(np.isnan(finish), time, finish) - arrival
    ttft = np.where(np.isnan(first_token), time, first_token) - arrival
    tokens = output_len.astype(np.float64)
    tpot = np.where(tokens > 1, (e2e - ttft) / np.maximum(tokens - 1, 1), 0.0)
    return {"ttft": ttft, "tpot": tpot, "e2e": e2e}


def stop_reason(rule: StopRule, floors: dict[str, np.ndarray], preempted: bool,
                time: float) -> tuple[str, str] | None:
    """``("fails", why)`` when the run must fail its limits whatever happens after ``time``,
    ``("cannot beat", why)`` when its e2e at the percentile must exceed ``rule.beat``, or
    None. ``floors``: :func:`latency_floors` at ``time``.

    - memory: a preemption (not allowed) is a limit, and preemptions never go away;
    - an SLO: :func:`over_needed` requests over it, by their floors (so by their final
      values too), fix the percentile above it;
    - goodput: with v requests over some SLO the share meeting all is ≤ (N − v)/N;
    - beat: as an SLO, against ``rule.beat``.
    """
    slos, at = rule.slos, f"at t = {time:.4g} s; run stopped there"
    if preempted and not slos.allow_preemption:
        return "fails", f"memory: KV cache ran out (a preemption {at})"
    n = floors["e2e"].shape[0]
    if not n:
        return None
    need, p = over_needed(n, slos.percentile), slos.percentile
    bad = np.zeros(n, dtype=bool)
    for name, bound in slos.bounds().items():
        over = floors[name] > bound
        bad |= over
        count = int(np.count_nonzero(over))
        if count >= need:
            low = float(np.percentile(floors[name], p))
            return "fails", (f"{name.upper()} p{p:g} >= {low:.3g} s > {bound:g} s ({count} of "
                             f"{n} requests over {at})")
    if slos.bounds():
        v = int(np.count_nonzero(bad))
        share = (n - v) / n
        if share < slos.goodput:
            return "fails", (f"goodput <= {share:.3f} < {slos.goodput:g} ({v} of {n} requests "
                             f"over a bound {at})")
    if rule.beat is not None:
        over = floors["e2e"] > rule.beat
        if int(np.count_nonzero(over)) >= need:
            low = float(np.percentile(floors["e2e"], p))
            return "cannot beat", (f"cannot beat the frontier: e2e p{p:g} >= {low:.3g} s > "
                                   f"{rule.beat:.3g} s of {rule.beat_label} ({at})")
    return None


class EarlyStop:
    """The engine's early stop for one planner run (simulator.engine.core ``stop``): ends the run
    as soon as :func:`stop_reason` proves its verdict (it fails), or that it cannot beat the
    frontier, from what happened so far. Checked every :attr:`every` events (a later check
    only stops later). A run it never stops is the full run, bit for bit. :meth:`limits`
    gives the same rule as numbers, which the compiled loop checks itself (this class's
    ``__call__`` is its reference twin)."""

    def __init__(self, rule: StopRule) -> None:
        self.rule = rule
        self.every = 16
        self.stopped_at: float | None = None

    def every_after(self, workload) -> int:
        """The check interval from the first check on: N // 64 events for N > 1024 requests
        (each check is O(N)), else as it is."""
        return workload.n // 64 if self.every == 16 and workload.n > 1024 else self.every

    def limits(self, workload) -> StopLimits:
        """This rule for ``workload`` as simulator.engine.stop_limits states it (what
        :meth:`__call__` decides, evaluated by the compiled loop at the same events)."""
        slos = self.rule.slos
        n = workload.n
        return StopLimits(every_after=self.every_after(workload),
                          first_due=self.first_due(workload),
                          allow_preemption=slos.allow_preemption,
                          need=over_needed(n, slos.percentile) if n else 0,
                          ttft=slos.ttft, tpot=slos.tpot, e2e=slos.e2e, goodput=slos.goodput,
                          beat=self.rule.beat)

    def __call__(self, time: float, rec, workload) -> bool:
        self.every = self.every_after(workload)
        preempted = bool(np.count_nonzero(rec.preemptions))
        if not preempted and time <= self.first_due(workload):
            return False
        return self.stops(time, rec.first_token, rec.finish, preempted, workload)

    def stops(self, time: float, first_token: np.ndarray, finish: np.ndarray,
              preempted: bool, workload) -> bool:
        """``stop_reason(rule, latency_floors(...), preempted, time) is not None`` (the slow
        twin; a test pins the parity), bit for bit: the same float operations on each floor
        the rule reads, with what depends only on the workload and the rule (the output
        lengths' divisor, :func:`over_needed`, the bounds) computed once per run. Why: the
        planner checks ~14,000 times per question."""
        rule, slos = self.rule, self.rule.slos
        if preempted and not slos.allow_preemption:
            return True
        plan = getattr(self, "_plan", None)
        if plan is None or plan[0] is not workload:
            tokens = workload.output_len.astype(np.float64)  # [N]
            n = int(tokens.shape[0])
            plan = (workload, n, over_needed(n, slos.percentile) if n else 0,
                    tuple(slos.bounds().items()), tokens > 1, np.maximum(tokens - 1, 1))
            self._plan = plan
        _, n, need, bounds, multi, divisor = plan
        if not n:
            return False
        arrival = workload.arrival
        e2e = np.where(np.isnan(finish), time, finish) - arrival  # [N]
        ttft = None
        bad = None
        for name, bound in bounds:
            if name == "e2e":
                floor = e2e
            else:
                if ttft is None:
                    ttft = np.where(np.isnan(first_token), time, first_token) - arrival
                floor = ttft if name == "ttft" else np.where(multi, (e2e - ttft) / divisor, 0.0)
            over = floor > bound
            if int(np.count_nonzero(over)) >= need:
                return True
            bad = over if bad is None else bad | over
        if bad is not None and (n - int(np.count_nonzero(bad))) / n < slos.goodput:
            return True
        return rule.beat is not None and int(np.count_nonzero(e2e > rule.beat)) >= need

    def first_due(self, workload) -> float:
        """Before the first arrival plus the smallest bound, no request can be over one."""
        if not hasattr(self, "_due"):
            slos = self.rule.slos
            bounds = [b for n, b in slos.bounds().items() if n != "tpot"]
            if slos.tpot is not None:
                bounds.append(0.0)
            if self.rule.beat is not None:
                bounds.append(self.rule.beat)
            first = float(workload.arrival.min()) if workload.n else 0.0
            self._due = first + min(bounds) if bounds else math.inf
        return self._due


def judge_stopped(requests: Table, summary: dict, rule: StopRule
                  ) -> tuple[str, Verdict]:
    """The verdict of a run :class:`EarlyStop` ended (``summary["stopped_at"]``), from its
    partial request table: ``("fails" | "cannot beat", verdict)``; the latencies are the
    percentiles of :func:`latency_floors` (lower bounds of the full run's), ``goodput`` an
    upper bound."""
    time = float(summary["stopped_at"])
    floors = latency_floors(time, *(column(requests, c, np.float64) for c in
                                    ("arrival", "first_token", "finish", "output_len")))
    preempted = bool(int(summary.get("preemptions") or 0))
    kind, why = stop_reason(rule, floors, preempted, time)
    p = rule.slos.percentile
    latency: dict = {n: float(np.percentile(floors[n], p)) for n in SLO_NAMES}
    ok = np.ones(rows(requests), dtype=bool)
    for name, bound in rule.slos.bounds().items():
        ok &= floors[name] <= bound
    latency.update(goodput=float(ok.mean()) if len(ok) else 0.0, sustained=None,
                   queue_growth=None, stopped_at=time)
    return kind, Verdict(passed=False, limits=(why,), latency=latency)
