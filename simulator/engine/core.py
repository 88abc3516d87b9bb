"""Discrete-event engine: replicas with iteration-level continuous batching (vLLM style).

Events live in one heap keyed ``(time, kind, seq)``. **Tie-break at equal timestamps:**
arrivals (kind 0) are processed first, then step completions (kind 1), then step starts
(kind 2); within a kind, insertion order (``seq``). So every request arriving at t — a burst
at t = 0 included — is routed and queued before any replica whose step ends at t composes
its next step, and that next step may admit it. A replica composes a step only when idle.
Under vLLM's async scheduling (vllm-v1) an arrival while the replica is busy waits in
``Replica.pending`` until the step after next, and the requests a step finished keep their
slots and blocks while the next step is composed (simulator.engine.async_lag).

Per replica (one per data-parallel copy; a router sends each arrival to one), a step is
composed by ``config.scheduler``'s composer (simulator.engine.composers: the event loop calls
its ``step`` only): ``"vllm-v1"`` (the default) spends one token budget on the running
requests, then on waiting prompt chunks, with vLLM V1's KV slot accounting in paged mode
(simulator.engine.v1.compose, simulator.engine.v1.step; ``reference=True`` composes with the
per-request twin simulator.engine.v1.reference). ``"vllm-v0"`` is simulator.engine.v0's
composer, kept byte-identical:

- Admission, FCFS (head-of-line blocking): while ``running < max_num_seqs`` and the KV
  cache allows (simulator.engine.kv). ``kv_mode = "reserve"``: a request reserves its whole
  footprint ``prompt + output + K + 1`` tokens (K + 1 lookahead slots for the last verify
  pass) within ``kv_capacity`` at admission and frees it at finish, so no preemption is ever
  needed. ``kv_mode = "paged"`` (vLLM V1): before each step the decoding requests grow their
  KV blocks by the step's lookahead, preempting the newest running requests by recomputation
  when the block pool runs out; admission (only in a step without preemption) needs the
  blocks of the prefill and its first token; a preempted request re-prefills prompt + t
  tokens and continues from position t (simulator.engine.kv, steps 1-4).
- Prefill first (vLLM V0): without chunked prefill, a step that admits requests is a
  prefill-only step over their whole prompts (at most ``max_num_batched_tokens`` prompt tokens,
  one request always fits); the target (and, when the policy speculates, the draft) runs
  ``step_time(role, prompt, 0)``. With ``enable_chunked_prefill`` every step is mixed: the
  decode batch plus FCFS prompt chunks filling ``max_num_batched_tokens − Σ(s_i + 1)``.
  Completing a prompt emits the request's first token (TTFT) at the step's end (a
  recomputed prefill emits none: its tokens were emitted before the preemption).
- Decode step (THEORY.md §5, simulator.engine.decode): the policy's plan
  (:func:`simulator.policies.step_plan.plan_step`, shared with the live loop) gives drafted and
  verified lengths; the draft runs ``max(drafted)`` sequential passes over the requests still
  drafting (query 1 each, KV ``kv + d``); the target runs one verify pass with query ``s_i + 1``;
  the rejection
  sampler reads its probability rows (``verify_cost``, simulator.cost.verify_cost); plus the cost
  model's fixed overhead. τ is sampled from the trace (simulator.replay.chain, common random
  numbers). A request emits ``min(τ + 1, remaining)`` and moves to position ``t + τ + 1``;
  it finishes at its recorded output length.

State changes are applied when a step starts (its outcome is fixed then) and time-stamped
with the step's end; only the router's outstanding count drops at the step end event, which
is the only state observable while a step runs. The decode hot path is vectorised over the
batch (numpy arrays for the running batch, no Python loop per request per step);
``reference=True`` swaps in a per-request loop twin for parity tests and benchmarks. Every
step is recorded as one :class:`simulator.engine.request_state.StepRecord`.
"""

from __future__ import annotations

import copy
import gc
import heapq
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from specbatch.errors import SpecbatchError
from specbatch.simulator.cost.interface import CostModel, sums_path, takes_logit_rows
from specbatch.simulator.cost.verify_cost import verify_cost_for
from specbatch.simulator.defaults import one_hot_drafter
from specbatch.simulator.engine import v0 as _v0  # noqa: F401 - see below
from specbatch.simulator.engine.admission import priority_rank, waiting_queue
from specbatch.simulator.engine.async_lag import lagged_step, lags
from specbatch.simulator.engine.kv import BlockManager, hybrid_layout
from specbatch.simulator.engine.prefix import PrefixCache, prefix_groups
from specbatch.simulator.engine.request_state import RECORD_ROWS, FreshColumns, Records, Replica
from specbatch.simulator.engine.state import EngineState
from specbatch.simulator.engine.steplog import StepLog
from specbatch.simulator.engine.v1 import step as _v1_step  # noqa: F401 - see below
from specbatch.simulator.engine.v1.compose import v1_lookahead
from specbatch.simulator.policies.registry import Policy, is_builtin, user_file
from specbatch.simulator.policies.view import TraceTables
from specbatch.simulator.replay.chain import request_keys
from specbatch.simulator.replay.replay_tables import tables_for
from specbatch.simulator.replay.rules import rule_entry

if TYPE_CHECKING:
    from specbatch.simulator.config.sim_config import SimConfig
    from specbatch.simulator.workload.arrivals import Workload
    from specbatch.traces.format.trace import Trace

ARRIVAL, STEP_END, SCHEDULE = 0, 1, 2  # event kinds, in tie-break order at equal times
#: vLLM's DP coordinator's ``stats_update_interval_ms`` (vllm/v1/engine/coordinator.py), s.
DP_LB_INTERVAL = 0.1

_I64 = np.int64
# The built-in composers (v0, v1.step) are imported with the engine although it builds its
# composer from the catalogue row's ``module:Class``: building a process's first engine then
# imports nothing (~10 ms of a first simulate() call otherwise).


class Engine(EngineState):
    """Run one workload through ``config.replicas`` replicas with one policy and cost model.

    The engine is the event loop; it holds one step composer, ``composer``, built from the
    configured scheduler's catalogue row (simulator.config.schedulers, the interface
    simulator.engine.composers.StepComposer), a part that shares the state
    simulator.engine.state declares, which ``__init__`` sets.

    policy:   the run's policy (simulator.policies.registry.make_policy; copied once per extra
              replica)
    capacity: KV-cache tokens per replica (simulator.engine.kv.kv_capacity; None = unlimited)
    reference: use the per-request reference twin of verification, and check every plan
    against the policy contract (a user's policy is always checked)
    progress: called with the number of requests that finished, after each step that
    finished some (a progress bar's ``update``); it never changes the run
    stop:     None, or an early stop: called as ``stop(time, records, workload)`` before the
    event at ``time`` every ``stop.every`` events; when it returns True the run ends there
    (``stop.stopped_at = time``; requests not finished keep NaN times). At that call every
    request whose ``finish`` (``first_token``) is NaN finishes (emits its first token) at
    ``time`` or later: a step's outcome is recorded when it starts, and no step starts
    before the event being processed. Runs without it are unchanged (analysis.plan.slo)
    """

    def __init__(self, config: SimConfig, trace: Trace, workload: Workload, cost: CostModel,
                 policy: Policy,
                 *, capacity: int | None, reference: bool = False,
                 progress: Callable[[int], object] | None = None,
                 stop: Callable[..., bool] | None = None) -> None:
        self.config = config
        self.progress = progress
        self.stop = stop
        self.trace = trace
        self.w = workload
        self.cost = cost
        self.policy = policy
        self.reference = reference
        self.rule = config.verify
        self.depth = int(policy.depth)
        self.chunked = config.chunked
        self.max_seqs = int(config.max_num_seqs)
        self.max_batched = config.token_budget  # None = unlimited (vllm-v0 only)
        self.kv_capacity = capacity  # tokens per replica; None = unlimited
        row = config.scheduler_row  # the scheduler's catalogue row (simulator.config.schedulers)
        self.threshold = int(config.long_prefill_token_threshold)
        # vllm-v1's KV lookahead slots: K for a draft model, 0 for n-gram or no speculation
        self.lookahead = v1_lookahead(config, policy.speculates, self.depth)
        #: when a list, every vllm-v1 step's composition is appended (simulator.engine.v1.compose)
        self.compositions: list | None = None
        # paged KV (config.kv_mode "paged"): block accounting; None = reserve at admission
        self.blocks = (BlockManager(capacity=self.kv_capacity, block_size=config.block_size,
                                    depth=self.depth, reference=reference,
                                    layout=hybrid_layout(config))
                       if config.kv_mode == "paged" else None)
        if self.blocks is not None and self.blocks.tables is not None:
            self.fast_paths = False  # hybrid KV groups: every step through the per-request walk
        self.parked: dict[int, np.ndarray] = {}  # preempted uid -> its state column
        self.footprint = workload.prompt_len + workload.output_len + self.depth + 1  # [N]
        self.wrap = workload.wrap  # [N] trace rows L per request (row base + t mod L), or None
        self.keys = request_keys(int(config.seed), np.arange(workload.n))  # [N] uint64
        # the sums fast path when the model has one (SumsCostModel), else one call per pass;
        # sliding-window layers need per-request minima: arrays (simulator.cost.analytic.window)
        self.from_sums = cost.time_from_sums if sums_path(cost) else None
        self.overhead = float(cost.overhead)  # T_overhead, seconds per step
        self.verify_cost = verify_cost_for(config, trace, one_hot_drafter(config.draft))
        # an EAGLE / MTP head (simulator.cost.features.draft_head): its first pass runs over the
        # target's whole pass (simulator.engine.decode.Decode.head_first_pass), so no separate chunk
        # pass
        self.head = policy.speculates and hasattr(cost, "first_pass_time")
        self.drafts_chunks = policy.speculates and not self.head
        self.pass_index = np.arange(max(self.depth, 1), dtype=_I64)
        self.view_tables = TraceTables(trace)  # policies' whole-trace tables, built once per run
        # the rule's replay tables (simulator.replay.rules): a tree rule's recorded trees
        # (shared with the policies' view), a chain rule's thresholds (not for the reference)
        tree_rule = rule_entry(self.rule).tree
        self.tree = tables_for(trace, self.rule, self.view_tables) if tree_rule else None
        self.tables = (tables_for(trace, self.rule)
                       if self.depth and not reference and not tree_rule else None)
        #: uniforms per request and step: one per draft token, or what the tree rule reads
        self.eta_width = (self.depth if self.tree is None
                          else self.tree.uniforms_needed(self.rule))
        self.check_plans = reference or not is_builtin(type(policy))
        self.observes = type(policy).observe is not Policy.observe  # skip the no-op feedback
        n = workload.n
        # every request's state column at admission (uid, prompt, out, base, key; zeros
        # else): # [len(Row), N], read from the workload's arrays rather than held
        self.initial = FreshColumns(prompt=workload.prompt_len, out=workload.output_len,
                                    base=workload.row_base, key=self.keys)
        self.counts = np.zeros((len(RECORD_ROWS), n), dtype=_I64)  # [5, N] RECORD_ROWS
        self.rec = Records(
            replica=np.full(n, -1, dtype=_I64), first_token=np.full(n, np.nan),
            finish=np.full(n, np.nan), step_rows=StepLog(), preemptions=np.zeros(n, dtype=_I64),
            recomputed=np.zeros(n, dtype=_I64),
            **{name: self.counts[i] for i, name in enumerate(RECORD_ROWS)},
        )
        # vLLM's data-parallel ranks are replicas too (simulator.cost.features.expert_parallel)
        ranks = int(config.replicas) * int(config.data_parallel_size)
        rank = priority_rank(workload) if config.scheduling_policy != "fcfs" else None
        self.replicas = [Replica(i, waiting_queue(config.scheduling_policy, rank))
                         for i in range(ranks)]
        self.lockstep = None  # vLLM's DP ranks of an MoE model step together (lockstep.py)
        if int(config.data_parallel_size) > 1 and config.enable_expert_parallel:
            from specbatch.simulator.engine.lockstep import Lockstep

            self.lockstep = Lockstep(self, cost)
            self.cost = self.lockstep.recorder
            if self.from_sums is not None:
                self.from_sums = self.lockstep.recorder.time_from_sums
        # the target pass's LM head at the rows vLLM samples (simulator.cost.analytic.roofline),
        # when the cost model takes them; the DP lockstep's repricing keeps every query token
        self.logit_rows = takes_logit_rows(cost) and self.lockstep is None
        caching = (row.prefix_caching and self.blocks is not None
                   and config.enable_prefix_caching and self.blocks.tables is None)
        group, shared = prefix_groups(workload)
        for rep in self.replicas:
            rep.free_blocks = self.blocks.pool if self.blocks is not None else 0
            if caching:
                rep.prefix = PrefixCache(pool=self.blocks.pool, block_size=self.blocks.block_size,
                                         group=group, shared=shared, lazy=not reference)
        # one policy instance per replica (stateful policies such as dsd plan per engine)
        self.policies = [policy] + [copy_policy(policy, len(self.replicas))
                                    for _ in self.replicas[1:]]
        self.outstanding = [0] * len(self.replicas)
        self.lb_counts: list | None = None  # vllm_dp_lb: the last published [waiting, running]
        self.lb_published = 0.0
        self.routed = 0
        # vLLM's async scheduling lag (simulator.engine.async_lag); DP ranks in lockstep keep
        # the synchronous rule
        self.lag = lags(config) and self.lockstep is None
        self.heap: list = []
        self.seq = 0
        self.composer = row.load()(self)  # a part: it shares the state set above

    # ---------------------------------------------------------------- events

    def push(self, time: float, kind: int, payload: int) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (time, kind, self.seq, payload))

    def route(self, time: float = 0.0) -> int:
        """round_robin: arrival count mod replicas; least_outstanding: fewest routed-but-not-
        finished requests, ties to the lowest index; vllm_dp_lb: :meth:`dp_lb_route`."""
        if self.config.router == "round_robin":
            r = self.routed % len(self.replicas)
        elif self.config.router == "vllm_dp_lb":
            r = self.dp_lb_route(time)
        else:
            r = min(range(len(self.replicas)), key=lambda i: (self.outstanding[i], i))
        self.routed += 1
        return r

    def dp_lb_route(self, time: float) -> int:
        """vLLM's DP load balancer (vllm/v1/engine/core_client.py ``DPLBAsyncMPClient.
        get_core_engine_for_request``): the rank of least ``waiting * 4 + running`` in the
        counts the DP coordinator last published (vllm/v1/engine/coordinator.py, every
        ``stats_update_interval_ms`` = 100 ms), ties to the lowest index (one API server:
        ``eng_start_index`` 0), then the client adds 1 to the chosen rank's waiting count
        until the next publication. Published here at the first arrival 100 ms or more after
        the last publication, from the ranks' queues at that moment."""
        counts = self.lb_counts
        if counts is None or time >= self.lb_published + DP_LB_INTERVAL:
            counts = self.lb_counts = [[len(rep.waiting) + len(rep.pending), rep.n_running]
                                       for rep in self.replicas]
            self.lb_published = time
        r = min(range(len(counts)), key=lambda i: (counts[i][0] * 4 + counts[i][1], i))
        counts[r][0] += 1
        return r

    def wake(self, r: int, time: float) -> None:
        if self.lockstep is not None:
            self.lockstep.wake(time)
            return
        rep = self.replicas[r]
        if not rep.busy and not rep.scheduled and (rep.waiting or rep.n_running or rep.pending):
            rep.scheduled = True
            self.push(time, SCHEDULE, r)

    def run(self) -> Records:
        """Process every event; the cyclic garbage collector is paused meanwhile (the loop
        allocates many small acyclic objects per step, whose gen-0/1 scans cost ~5-10 % of a
        run at batch 64) and restored after."""
        paused = gc.isenabled()
        gc.disable()
        try:
            return self.process_events()
        finally:
            if paused:
                gc.enable()

    def process_events(self) -> Records:
        n = self.w.n
        order = np.argsort(self.w.arrival, kind="stable")
        arrival = self.w.arrival
        cursor = 0
        if n:
            self.push(float(arrival[order[0]]), ARRIVAL, 0)
        stop, tick = self.stop, 0
        while self.heap:
            time, kind, _, payload = heapq.heappop(self.heap)
            if stop is not None:
                tick += 1
                if tick >= stop.every:
                    tick = 0
                    if stop(time, self.rec, self.w):
                        stop.stopped_at = time
                        return self.rec
            if kind == ARRIVAL:
                uid = int(order[cursor])
                cursor += 1
                r = self.route(time)
                rep = self.replicas[r]
                if rep.busy and self.lag:  # seen by the schedule after the next (async_lag)
                    rep.pending.append(uid)
                else:
                    rep.waiting.append(uid)
                self.rec.replica[uid] = r
                self.outstanding[r] += 1
                if cursor < n:
                    self.push(float(arrival[order[cursor]]), ARRIVAL, 0)
                self.wake(r, time)
            elif kind == STEP_END:
                rep = self.replicas[payload]
                rep.busy = False
                if rep.finishing and self.progress is not None:
                    self.progress(rep.finishing)
                self.outstanding[payload] -= rep.finishing
                rep.finishing = 0
                heap = self.heap
                if (not rep.scheduled and (rep.waiting or rep.state.shape[1] or rep.pending)
                        and (not heap or heap[0][0] > time)):
                    # the SCHEDULE event wake() would push is the next one popped (every
                    # queued event is later): start the step now, same order, no heap trip
                    self.start_step(rep, time)
                else:
                    self.wake(payload, time)
            else:
                rep = self.replicas[payload]
                rep.scheduled = False
                self.start_step(rep, time)
        if not np.all(np.isfinite(self.rec.finish)):  # pragma: no cover - engine invariant
            raise SpecbatchError("simulator: a request never finished (engine invariant broken)")
        for rep in self.replicas:  # async_lag: the last step's output is processed, its
            if rep.deferred is not None:  # finished requests' slots and blocks freed
                held, rep.deferred = rep.deferred, None
                self.composer.release(rep, held)
        return self.rec

    # ---------------------------------------------------------------- steps

    def start_step(self, rep: Replica, time: float) -> None:
        """Run ``rep``'s next step through the scheduler's composer; a step that runs
        makes the replica busy until its end event (in lockstep: every rank's step)."""
        if self.lockstep is not None:
            self.lockstep.start(time)
            return
        duration = (lagged_step(self, rep, time) if self.lag
                    else self.composer.step(rep, time))
        if duration is not None:
            rep.busy = True
            self.push(time + duration, STEP_END, rep.index)


def copy_policy(policy: Policy, replicas: int) -> Policy:
    """``copy.deepcopy(policy)``: each replica (and data-parallel rank) plans with its own
    instance. A user's policy that cannot be copied (it holds a lock, a file, a generator) is
    a one-line error saying so, not the ``cannot pickle`` TypeError from deep in copy."""
    try:
        return copy.deepcopy(policy)
    except Exception as exc:  # noqa: BLE001 - whatever its state's __reduce__ raises
        cls = type(policy)
        raise SpecbatchError(
            f"policy {cls.__module__}:{cls.__qualname__} ({user_file(cls)}): {replicas} "
            f"replicas need a copyable (picklable) policy, one instance each, and copy.deepcopy "
            f"raised {type(exc).__name__}: {exc} (keep locks, files and threads out of the "
            "instance, or define __deepcopy__)") from exc
