"""The compiled vllm-v1 loop's driver: :class:`CompiledEngine` packs a simulation into the
kernel's arrays (simulator.engine.v1.kernel.layout names their slots), runs each replica's
requests through :func:`~simulator.engine.v1.kernel.loop.run_steps` a buffer of steps at a time,
and collects the request records and the step table, merged into the numpy engine's event order
(:func:`event_order`) and, under an early stop, calling the rule at the numpy engine's events
(:meth:`CompiledEngine.check_stop`, :func:`step_events`), or, where the stop gives its rule's
limits (simulator.engine.stop_limits), letting the kernel check them itself (kernel.stop).

Which simulations it runs, and the kernel's loading, are simulator.engine.v1.compiled's; it
runs only where compiled.compiled_gap said it applies.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from specbatch.errors import SpecbatchError
from specbatch.simulator.cost.interface import takes_logit_rows
from specbatch.simulator.engine.async_lag import lags
from specbatch.simulator.engine.request_state import RECORD_ROWS, STEP_COLUMNS, Records
from specbatch.simulator.engine.steplog import CHUNK, StepLog
from specbatch.simulator.engine.v1.compiled import (
    cost_layers,
    drafted_roles,
    drafter_layer,
    host_layer,
    load_kernel,
)
from specbatch.simulator.engine.v1.pack_costs import pack_drafter, pack_host, pack_roofline
from specbatch.simulator.engine.v1.pass_tables import tabulated
from specbatch.simulator.engine.v1.policy_arrays import policy_arrays, policy_state_back
from specbatch.simulator.engine.v1.setup_cache import shared_confidence, shared_pass_tables

if TYPE_CHECKING:
    from specbatch.simulator.config.sim_config import SimConfig
    from specbatch.simulator.cost.interface import CostModel
    from specbatch.simulator.policies.registry import Policy
    from specbatch.simulator.workload.arrivals import Workload
    from specbatch.traces.format.trace import Trace

#: Steps a kernel call records before handing its rows back (a multiple of StepLog's CHUNK).
STEP_BUFFER = 16 * CHUNK


def read_only(a: np.ndarray) -> np.ndarray:
    """``a`` as a read-only view (no copy). numba compiles run_steps once per signature of its
    arguments, and an array's layout (C or strided) and writability are part of it: an input
    that is sometimes read-only (a trace's memory-mapped column) and sometimes not, or a
    replica's arrivals as a strided slice, cost a second cold compile of the whole loop
    (~20 CPU-s each), cached beside the first. The driver hands the kernel one signature:
    its read-only inputs read-only, every array contiguous."""
    view = a.view()
    view.flags.writeable = False
    return view


class CompiledEngine:
    """The compiled vllm-v1 loop with :class:`~simulator.engine.core.Engine`'s outer
    interface (``rec``, :meth:`run`): built with the same arguments, run only where
    compiled.compiled_gap said it applies. ``progress`` is told the requests finished after
    each kernel call (every :data:`STEP_BUFFER` steps), not after each step."""

    def __init__(self, config: SimConfig, trace: Trace, workload: Workload, cost: CostModel,
                 policy: Policy, *, capacity: int | None, progress=None, stop=None) -> None:
        from specbatch.simulator.cost.verify_cost import verify_cost_for
        from specbatch.simulator.defaults import one_hot_drafter
        from specbatch.simulator.engine.v1.compose import v1_lookahead
        from specbatch.simulator.replay.chain import request_keys
        from specbatch.simulator.replay.replay_tables import tables_for

        self.kernel = load_kernel()
        kn = self.kernel
        self.w = workload
        self.progress = progress
        self.stop = stop  # simulator.engine.core's early stop (one replica: compiled_gap)
        n = workload.n
        depth = int(policy.depth)
        ints = np.zeros(kn.N_INTS, dtype=np.int64)
        ints[kn.I_DEPTH] = depth
        ints[kn.I_K] = int(getattr(policy, "k", 0)) if depth else 0
        ints[kn.I_BUDGET] = int(config.token_budget)
        ints[kn.I_MAX_SEQS] = int(config.max_num_seqs)
        ints[kn.I_CHUNKED] = int(bool(config.chunked))
        ints[kn.I_CAPACITY] = -1 if capacity is None else int(capacity)
        ints[kn.I_DRAFTS_CHUNKS] = int(bool(policy.speculates))
        if config.kv_mode == "paged":
            ints[kn.I_PAGED] = 1
            ints[kn.I_BLOCK_SIZE] = int(config.block_size)
            ints[kn.I_LOOKAHEAD] = v1_lookahead(config, policy.speculates, depth)
            ints[kn.I_POOL] = int(capacity) // int(config.block_size)
            ints[kn.I_PREFIX] = int(bool(config.enable_prefix_caching))
        ints[kn.I_THRESHOLD] = int(config.long_prefill_token_threshold)
        ints[kn.I_LAG] = int(lags(config))  # simulator.engine.async_lag
        self.limits = np.zeros(1)  # the stop's rule for the kernel (kernel.stop; I_RULE)
        if stop is not None:
            ints[kn.I_EVERY] = max(int(stop.every), 1)
            limits = getattr(stop, "limits", None)
            limits = limits(workload) if callable(limits) else None
            if limits is not None:
                from specbatch.simulator.engine.stop_limits import pack_limits

                ints[kn.I_RULE] = 1
                self.limits = pack_limits(limits)
        sizes, scale, base = cost_layers(cost)
        kind, _, base = drafter_layer(base)  # a head's, a free drafter's or a V1 draft
        # model's target model
        floats = np.zeros(kn.N_FLOATS + len(sizes))
        floats[kn.F_SCALE] = scale
        floats[kn.F_NSIZES] = len(sizes)
        floats[kn.F_SIZES:] = sizes
        self.passes = shared_pass_tables(  # tab, tlaw (kernel.role_time)
            config, policy, base, sizes, roles=drafted_roles(kind, policy))
        pack_drafter(kn, ints, floats, cost, bool(policy.speculates))
        host, outer, _ = host_layer(cost)
        if not tabulated(base):
            pack_roofline(kn, floats, base)
        floats[kn.F_ROWS] = float(takes_logit_rows(cost))  # as the numpy engine (core.py)
        floats[kn.F_OVERHEAD] = float(cost.overhead)  # HostCost's: a, or 0 under overlap
        floats[kn.F_OUTER] = outer
        pack_host(kn, floats, host)
        vc = verify_cost_for(config, trace, one_hot_drafter(config.draft))
        if vc is not None:
            from specbatch.simulator.cost.gpus.hardware import FUSED_FLOOR

            ints[kn.I_VERIFY] = 1
            ints[kn.I_VOCAB] = int(vc.vocab)
            ints[kn.I_DRAFT_ROWS] = int(bool(vc.draft_rows))
            ints[kn.I_BLOCK] = int(vc.rule == "block")
            floats[kn.F_BANDWIDTH] = float(vc.bandwidth)
            floats[kn.F_VFLOOR] = float(vc.floor)
            floats[kn.F_PER_POSITION] = float(vc.floor_per_position)
            floats[kn.F_FUSED_FLOOR] = float(FUSED_FLOOR)
        thr = thr2 = np.zeros((1, 1))
        if depth:
            tables = tables_for(trace, config.verify)
            ints[kn.I_LEADING] = int(tables.leading)
            if tables.leading:
                thr = thr2 = np.ascontiguousarray(tables.a, dtype=np.float64)
            else:
                thr = np.ascontiguousarray(tables.h, dtype=np.float64)
                thr2 = np.ascontiguousarray(tables.p, dtype=np.float64)
        self.dsd = None
        if policy.name == "dsd":  # its plan's state: k_now, steps, α (DynamicSD)
            if policy.sampler is not None and policy.sampler != vc:  # pragma: no cover
                raise SpecbatchError("simulator: dsd's sampler cost is not the engine's "
                                     "(simulator.run.attach_verify_cost hands it the same)")
            ints[kn.I_DSD] = 1
            ints[kn.I_DSD_VERIFY] = int(policy.sampler is not None)
            ints[kn.I_KMAX] = int(policy.k_max)
            ints[kn.I_INTERVAL] = int(policy.interval)
            self.dsd = (int(policy.k_now), int(policy.steps), float(policy.alpha))
        self.policy = policy
        self.replicas = int(config.replicas)  # round-robin: independent replicas
        conf = np.zeros((1, 1))
        if policy.name == "tetris":
            from specbatch.simulator.policies.view import TraceTables

            ints[kn.I_TETRIS] = 1
            ints[kn.I_POSITIVE] = int(not policy.rule_row.additive)  # BV: monotone_optimum
            ints[kn.I_C] = -1 if policy.budget is None else int(policy.budget)
            conf = shared_confidence(TraceTables, trace, depth)
        self.policy_arrays = policy_arrays(kn, config, policy, cost, trace, ints, n)
        if policy.name == "vllm-adaptive":  # TETRIS's surrogate: the survival S_ij
            from specbatch.simulator.policies.view import TraceTables

            conf = shared_confidence(TraceTables, trace, depth)
        if policy.name == "oracle":  # TV: top-C of the path's true Π min(1, r), K drafted
            ints[kn.I_TETRIS] = 2
            ints[kn.I_C] = -1 if policy.budget is None else int(policy.budget)
            conf = np.ascontiguousarray(trace.accept_tv[:, :depth], dtype=np.float64)
        proposed = getattr(trace, "proposed", None)
        if proposed is not None and depth:
            ints[kn.I_PROPOSED] = 1
            proposed = np.ascontiguousarray(proposed, dtype=np.int64)
        else:
            proposed = np.zeros(1, dtype=np.int64)
        proposed = read_only(proposed)  # one kernel signature (read_only's docstring): a
        # trace's memory-mapped column is read-only, the placeholder was not
        wrap = workload.wrap
        if wrap is not None:
            ints[kn.I_WRAP] = 1
            wrap = np.ascontiguousarray(wrap, dtype=np.int64)
        else:
            wrap = np.ones(1, dtype=np.int64)
        if config.scheduling_policy == "priority":  # the waiting queue by rank
            from specbatch.simulator.engine.admission import priority_rank

            ints[kn.I_PRIORITY] = 1
            rank = priority_rank(workload)  # [N] each request's place
            by_rank = np.empty_like(rank)
            by_rank[rank] = np.arange(workload.n, dtype=np.int64)
            self.ranks = (rank, by_rank, np.zeros(workload.n, dtype=np.int64))
        else:
            self.ranks = tuple(np.zeros(1, dtype=np.int64) for _ in range(3))
        self.ints, self.floats = ints, floats
        self.tables = (thr, thr2, conf, proposed, wrap)
        self.keys = request_keys(int(config.seed), np.arange(n))  # [N] uint64
        i64 = np.int64
        self.prompt = np.ascontiguousarray(workload.prompt_len, dtype=i64)
        self.out = np.ascontiguousarray(workload.output_len, dtype=i64)
        self.base = np.ascontiguousarray(workload.row_base, dtype=i64)
        self.footprint = self.prompt + self.out + depth + 1  # [N] reserve mode's reservation
        self.arrival = np.ascontiguousarray(workload.arrival, dtype=np.float64)
        self.order = np.argsort(self.arrival, kind="stable").astype(i64)
        self.counts = np.zeros((len(RECORD_ROWS), n), dtype=i64)  # [5, N] RECORD_ROWS
        self.rec = Records(
            replica=np.zeros(n, dtype=i64), first_token=np.full(n, np.nan),
            finish=np.full(n, np.nan), step_rows=StepLog(), preemptions=np.zeros(n, dtype=i64),
            recomputed=np.zeros(n, dtype=i64),
            **{name: self.counts[i] for i, name in enumerate(RECORD_ROWS)})

    def run(self) -> Records:
        """Run every replica's requests (round-robin: the r-th of every ``replicas``
        arrivals) through the kernel, handing the step rows to the log in blocks of
        StepLog's CHUNK rows in the numpy engine's event order (one replica: as they come)."""
        rec = self.rec
        replicas = self.replicas
        # contiguous: a strided slice is another kernel signature (read_only's docstring)
        orders = [np.ascontiguousarray(self.order[r::replicas]) for r in range(replicas)]
        kept = []
        for r, order in enumerate(orders):
            rec.replica[order] = r
            kept.append(self.run_replica(r, order, stream=replicas == 1))
        if self.stop is not None and self.stop.stopped_at is not None:
            return rec
        if replicas > 1:
            rows = np.concatenate(kept, axis=1)  # [16, rows] every replica's, in turn
            rows = rows[:, event_order(kept, replicas)]
            for start in range(0, rows.shape[1], CHUNK):
                add_block(rec.step_rows, rows[:len(STEP_COLUMNS), start:start + CHUNK].copy())
        if not np.all(np.isfinite(rec.finish)):  # pragma: no cover - engine invariant
            raise SpecbatchError("simulator: a request never finished (engine invariant broken)")
        return rec

    def run_replica(self, r: int, order: np.ndarray, stream: bool) -> np.ndarray | None:
        """Run replica ``r``'s requests ``order`` (in arrival order) to the end; its step rows
        go to the log (``stream``) or come back # [16, rows] (STEP_COLUMNS, then the kernel's
        W_WOKEN and W_BY: how the step started, for :func:`event_order`)."""
        kn = self.kernel
        rec = self.rec
        n = self.w.n
        i64 = np.int64
        thr, thr2, conf, proposed, wrap = self.tables
        ints = self.ints.copy()
        ints[kn.I_REPLICA] = r
        st = np.zeros((kn.N_ST, max(int(ints[kn.I_MAX_SEQS]), 1)), dtype=i64)
        regs = np.zeros(kn.N_REGS, dtype=i64)
        regs[kn.R_FREE] = ints[kn.I_POOL]  # free blocks (paged); reserved tokens: 0
        clock = np.zeros(4)  # the replica's time; dsd's α; the last step's start (async_lag);
        # the time an early stop ended the run at (STOPPED)
        if self.dsd is not None:  # each replica's own copy of the policy, as it starts
            regs[kn.R_KNOW], regs[kn.R_DSTEPS], clock[1] = self.dsd
        arrays = [a.copy() for a in self.policy_arrays]  # kernelpol: each replica's own state
        steps = np.zeros((kn.N_STEP_ROWS, STEP_BUFFER))  # [16, rows] float64
        # per-request arrays only where read: paged KV's preempted queue, the prefix cache's
        paged, prefix = bool(ints[kn.I_PAGED]), bool(ints[kn.I_PREFIX])
        front = np.zeros(n if paged else 1, dtype=i64)  # preempted uids before the arrivals
        hashed, done_tok = (np.zeros(n if prefix else 1, dtype=i64) for _ in range(2))
        parked_seg = np.full(n if prefix else 1, -1, dtype=i64)
        segments = [np.zeros(4 * int(ints[kn.I_MAX_SEQS]) + 64, dtype=i64)
                    for _ in range(3)]  # uid, blocks, hashed per segment
        log = rec.step_rows
        kept: list[np.ndarray] = []
        told = 0  # finished requests told to ``progress``
        while True:
            code = kn.run_steps(self.arrival, order, self.prompt, self.out, self.base,
                                self.keys, wrap, self.footprint, proposed, thr, thr2, conf,
                                ints, self.floats, self.limits, st, regs, clock, rec.first_token,
                                rec.finish, self.counts, steps, rec.preemptions,
                                rec.recomputed, front, hashed, done_tok, parked_seg,
                                *segments, *self.ranks, *self.passes, *arrays)
            if code == kn.STUCK:  # pragma: no cover - engine invariant
                raise SpecbatchError("simulator: a compiled vllm-v1 step with nothing "
                                     "scheduled (engine invariant broken)")
            if code == kn.STOP:  # an early stop's check falls before the next step
                if not self.check_stop(regs, clock, ints, order):
                    continue
                code = kn.DONE  # stopped: hand back the rows so far
            if code == kn.STOPPED:  # the kernel checked the rule's limits: it ends here
                self.end_at(float(clock[3]), int(regs[kn.R_POPPED]), order)
                code = kn.DONE
            if code == kn.GROW:  # more live prefix-cache segments than the arrays hold
                segments = [np.concatenate([a, np.zeros_like(a)]) for a in segments]
                continue
            finished = int(regs[kn.R_FINISHED])
            if self.progress is not None and finished > told:
                self.progress(finished - told)
                told = finished
            rows = int(regs[kn.R_ROWS])
            if not stream:
                kept.append(steps[:, :rows].copy())
                regs[kn.R_ROWS] = 0
                if code == kn.DONE:
                    break
                continue
            whole = rows if code == kn.DONE else rows - rows % CHUNK
            for start in range(0, whole, CHUNK):
                add_block(log, steps[:len(STEP_COLUMNS), start:min(start + CHUNK, whole)].copy())
            if code == kn.DONE:
                break
            rest = rows - whole
            steps[:, :rest] = steps[:, whole:rows]
            regs[kn.R_ROWS] = rest
        if ints[kn.I_RULE]:  # the stop's interval as its calls leave it (StopLimits)
            self.stop.every = int(ints[kn.I_EVERY])
        if self.dsd is not None and r == 0:  # the run's policy is replica 0's (the engine's)
            p = self.policy
            p.k_now, p.steps, p.alpha = (
                int(regs[kn.R_KNOW]), int(regs[kn.R_DSTEPS]), float(clock[1]))
        if r == 0:
            policy_state_back(kn, self.policy, arrays)
        if stream:
            return None
        return np.concatenate(kept, axis=1) if kept else np.zeros((kn.N_STEP_ROWS, 0))


    def check_stop(self, regs: np.ndarray, clock: np.ndarray, ints: np.ndarray,
                   order: np.ndarray) -> bool:
        """Walk the events the kernel stopped before (:func:`step_events`), calling the early
        stop where simulator.engine.core would (``tick`` reaching ``stop.every``, before the
        event, with the records as they stand then: every step before started; the times and
        ``preemptions`` the rule reads are the numpy engine's, while ``replica`` and the
        counters of requests not yet finished settle only when the run ends). True: the
        run ends before that event, as the numpy engine leaves it (requests not yet arrived
        have replica -1, unfinished ones zero counts, :meth:`Engine.process_events`); False:
        the kernel goes on past these events."""
        kn = self.kernel
        stop, rec = self.stop, self.rec
        tick = int(regs[kn.R_TICK])
        for time, popped in step_events(self.arrival, order, int(regs[kn.R_ARRIVED]),
                                        float(clock[0]), bool(regs[kn.R_STEPPED]),
                                        idle=not (regs[kn.R_RUNNING] or regs[kn.R_FRONT]
                                                  or regs[kn.R_HEAPN]
                                                  or regs[kn.R_ADMITTED] != regs[kn.R_ARRIVED])):
            tick += 1
            if tick >= stop.every:
                tick = 0
                if stop(time, rec, self.w):
                    self.end_at(time, popped, order)
                    return True
        regs[kn.R_TICK] = tick
        regs[kn.R_SKIP] = 1
        ints[kn.I_EVERY] = max(int(stop.every), 1)
        return False

    def end_at(self, time: float, popped: int, order: np.ndarray) -> None:
        """The early stop ended the run at ``time``, before the event after ``popped``
        arrivals of ``order``: the records as the numpy engine leaves them (requests not yet
        arrived have replica -1, unfinished ones zero counts, set at finish)."""
        self.stop.stopped_at = time
        self.rec.replica[order[popped:]] = -1
        self.counts[:, ~np.isfinite(self.rec.finish)] = 0


def step_events(arrival: np.ndarray, order: np.ndarray, arrived: int, t: float,
                stepped: bool, idle: bool) -> list[tuple[float, int]]:
    """The events simulator.engine.core pops between one replica's last step start and its
    next (the kernel's :func:`~simulator.engine.v1.kernel.step_events` counts them), each as
    (its time, the arrivals in ``order`` popped before it): the arrivals while the last step
    ran (``t`` its end), its STEP_END at ``t``; then, when the replica is ``idle`` (nothing
    running or queued after them), the arrivals at the next arrival's time and their
    SCHEDULE event at that time (the first step: those alone)."""
    events = []
    i, n = arrived, order.shape[0]
    if stepped:
        while i < n and arrival[order[i]] <= t:
            events.append((float(arrival[order[i]]), i))
            i += 1
        events.append((t, i))
    if idle and i == arrived and arrived < n:
        a = float(arrival[order[i]])
        while i < n and arrival[order[i]] <= a:
            events.append((float(arrival[order[i]]), i))
            i += 1
        events.append((a, i))
    return events


def event_order(rows: list[np.ndarray], replicas: int) -> np.ndarray:
    """The order in which the numpy engine starts the replicas' steps, as indices into the
    concatenation of ``rows`` (each replica's # [16, m_r] in its own order): by start time;
    at one time, the replicas an arrival woke (their SCHEDULE events, pushed as the arrivals
    come, in arrival order) before those whose last step ended then (SCHEDULE events pushed
    at their STEP_END events, in the order those steps started): simulator.engine.core's
    (time, kind, seq) heap. An arrival's place is local · replicas + r (round-robin)."""
    import heapq

    offsets = np.cumsum([0] + [m.shape[1] for m in rows])
    start = [m[1].tolist() for m in rows]
    woken = [m[14].tolist() for m in rows]
    by = [m[15].tolist() for m in rows]

    def key(r: int, j: int, before: int) -> tuple:
        if woken[r][j]:
            return (start[r][j], 0, int(by[r][j]) * replicas + r)
        return (start[r][j], 1, before)

    heap = [(key(r, 0, -1), r, 0) for r in range(len(rows)) if start[r]]
    heapq.heapify(heap)
    out: list[int] = []
    while heap:
        _, r, j = heapq.heappop(heap)
        out.append(int(offsets[r]) + j)
        if j + 1 < len(start[r]):
            heapq.heappush(heap, (key(r, j + 1, len(out) - 1), r, j + 1))
    return np.asarray(out, dtype=np.int64)


def add_block(log: StepLog, block: np.ndarray) -> None:
    """Append a packed block # [len(STEP_COLUMNS), rows] of step rows to ``log`` (its sink's,
    when it streams), as :meth:`StepLog.pack` would."""
    if not block.shape[1]:
        return
    if log.sink is not None:
        log.sink.add(block)
    else:
        log.blocks.append(block)
    log.packed += block.shape[1]
