"""Discrete-event engine: replicas with iteration-level continuous batching (vLLM style).

Events live in one heap keyed ``(time, kind, seq)``. **Tie-break at equal timestamps:**
arrivals (kind 0) are processed first, then step completions (kind 1), then step starts
(kind 2); within a kind, insertion order (``seq``). So every request arriving at t — a burst
at t = 0 included — is routed and queued before any replica whose step ends at t composes
its next step, and that next step may admit it. A replica composes a step only when idle.

Per replica (one per data-parallel copy; a router sends each arrival to one):

- Admission, FCFS (head-of-line blocking): while ``running < max_num_seqs`` and the KV
  reservation fits ``kv_capacity``. A request reserves its whole footprint
  ``prompt + output + K + 1`` tokens (K + 1 lookahead slots for the last verify pass) at
  admission and frees it at finish, so no preemption is ever needed (documented choice;
  vLLM allocates lazily and preempts instead).
- Prefill first (vLLM V0): without chunked prefill, a step that admits requests is a
  prefill-only step over their whole prompts (at most ``max_num_batched_tokens`` prompt tokens,
  one request always fits); the target (and, when the policy speculates, the draft) runs
  ``step_time(role, prompt, 0)``. With ``enable_chunked_prefill`` every step is mixed: the
  decode batch plus FCFS prompt chunks filling ``max_num_batched_tokens − Σ(s_i + 1)``.
  Completing a prompt emits the request's first token (TTFT) at the step's end.
- Decode step (THEORY.md §5): the policy returns drafted and verified lengths; the draft
  runs ``max(drafted)`` sequential passes over the requests still drafting (query 1 each,
  KV ``kv + d``); the target runs one verify pass with query ``s_i + 1``; plus the cost
  model's fixed overhead. τ is sampled from the trace (simulator.verify, common random
  numbers). A request emits ``min(τ + 1, remaining)`` and moves to position ``t + τ + 1``;
  it finishes at its recorded output length.

State changes are applied when a step starts (its outcome is fixed then) and time-stamped
with the step's end; only the router's outstanding count drops at the step end event, which
is the only state observable while a step runs. The decode hot path is vectorised over the
batch (numpy arrays for the running batch, no Python loop per request per step);
``reference=True`` swaps in a per-request loop twin for parity tests and benchmarks.
"""

from __future__ import annotations

import copy
import gc
import heapq
from collections import deque
from dataclasses import dataclass
from typing import Any

import numpy as np
from specbatch.simulator.policies import Policy, StepView
from specbatch.simulator.verify import (
    VerifyTables,
    request_keys,
    sample_tau,
    uniforms,
    uniforms_scalar,
)

from specbatch.errors import SpecbatchError

ARRIVAL, STEP_END, SCHEDULE = 0, 1, 2  # event kinds, in tie-break order at equal times

#: Columns of the per-step table, in order (one tuple per step).
STEP_COLUMNS = (
    "replica", "time", "end", "batch", "prefill_tokens", "drafted", "verified", "accepted",
    "emitted", "depth", "draft_time", "target_time", "overhead_time",
)
_I64 = np.int64


@dataclass
class Records:
    """Raw engine output: per-request arrays # [N] and per-step rows (STEP_COLUMNS)."""

    replica: np.ndarray
    first_token: np.ndarray
    finish: np.ndarray
    tokens: np.ndarray
    steps: np.ndarray
    drafted: np.ndarray
    verified: np.ndarray
    accepted: np.ndarray
    step_rows: list


class Replica:
    """One engine copy. The running batch is one int64 matrix ``state`` # [F, n] whose rows
    are the per-request fields (:data:`FIELDS`), so admission and retirement are a single
    concatenate / column selection; the properties below are row views (writes go through).
    """

    FIELDS = ("uid", "prefilled", "out", "key", "prompt", "base", "pos", "n_steps",
              "n_drafted", "n_verified", "n_accepted")
    # pos: tokens emitted so far = current output position t; prefilled: prompt tokens in
    # the KV cache; base: trace row of output position 0; key: verifier stream key (uint64
    # bits); n_*: decode steps taken and draft tokens drafted / verified / accepted.
    # Order matters to the decode step: (prompt, base) + pos gives (kv, trace row) in one
    # add, and pos..n_accepted take one step's increments, and are the per-request record,
    # in one add / one copy.

    def __init__(self, index: int) -> None:
        self.index = index
        self.waiting: deque[int] = deque()
        self.state = np.zeros((len(self.FIELDS), 0), dtype=_I64)
        self.n_prefilling = 0
        self.kv_reserved = 0
        self.busy = False
        self.scheduled = False
        self.finishing = 0

    @property
    def n_running(self) -> int:
        return int(self.state.shape[1])

    def keep(self, mask: np.ndarray) -> None:
        """Drop running requests where ``mask`` is False.  mask # [n] bool"""
        self.state = self.state[:, mask]


for _i, _name in enumerate(Replica.FIELDS):
    setattr(Replica, _name, property(lambda self, _i=_i: self.state[_i],
                                     lambda self, value, _i=_i: self.state.__setitem__(_i, value)))
_UID, _PREFILLED, _OUT, _KEY, _PROMPT, _BASE, _POS, _STEPS, _DRAFTED, _VERIFIED, _ACCEPTED = range(11)
#: Rows of the per-request record matrix (Engine.counts) = state rows _POS.. at finish.
RECORD_ROWS = ("tokens", "steps", "drafted", "verified", "accepted")


class Engine:
    """Run one workload through ``config.replicas`` replicas with one policy and cost model."""

    def __init__(self, config: Any, trace: Any, workload: Any, cost: Any, policy: Policy,
                 reference: bool = False) -> None:
        self.config = config
        self.trace = trace
        self.w = workload
        self.cost = cost
        self.policy = policy
        self.reference = reference
        self.rule = config.verify
        self.depth = int(policy.depth)
        self.chunked = bool(config.enable_chunked_prefill)
        self.max_seqs = int(config.max_num_seqs)
        self.max_batched = config.max_num_batched_tokens
        self.kv_capacity = config.kv_capacity
        self.footprint = workload.prompt_len + workload.output_len + self.depth + 1  # [N]
        self.keys = request_keys(int(config.seed), np.arange(workload.n))  # [N] uint64
        self.from_sums = getattr(cost, "time_from_sums", None)  # optional fast path
        self.pass_index = np.arange(max(self.depth, 1), dtype=_I64)
        self.tables = VerifyTables(trace, self.rule) if self.depth and not reference else None
        n = workload.n
        # every request's state column at admission (uid, prompt, out, base, key; zeros else)
        self.initial = np.zeros((len(Replica.FIELDS), n), dtype=_I64)  # [F, N]
        self.initial[_UID] = np.arange(n)
        self.initial[_PROMPT] = workload.prompt_len
        self.initial[_OUT] = workload.output_len
        self.initial[_BASE] = workload.row_base
        self.initial[_KEY] = self.keys.view(_I64)
        self.counts = np.zeros((len(RECORD_ROWS), n), dtype=_I64)  # [5, N] RECORD_ROWS
        self.rec = Records(
            replica=np.full(n, -1, dtype=_I64), first_token=np.full(n, np.nan),
            finish=np.full(n, np.nan), step_rows=[],
            **{name: self.counts[i] for i, name in enumerate(RECORD_ROWS)},
        )
        self.replicas = [Replica(i) for i in range(int(config.replicas))]
        # one policy instance per replica (stateful policies such as dsd plan per engine)
        self.policies = [policy] + [copy.deepcopy(policy) for _ in self.replicas[1:]]
        self.outstanding = [0] * len(self.replicas)
        self.routed = 0
        self.heap: list = []
        self.seq = 0

    # ---------------------------------------------------------------- events

    def push(self, time: float, kind: int, payload: int) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (time, kind, self.seq, payload))

    def route(self) -> int:
        """round_robin: arrival count mod replicas; least_outstanding: fewest routed-but-not-
        finished requests, ties to the lowest index."""
        if self.config.router == "round_robin":
            r = self.routed % len(self.replicas)
        else:
            r = min(range(len(self.replicas)), key=lambda i: (self.outstanding[i], i))
        self.routed += 1
        return r

    def wake(self, r: int, time: float) -> None:
        rep = self.replicas[r]
        if not rep.busy and not rep.scheduled and (rep.waiting or rep.n_running):
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
        while self.heap:
            time, kind, _, payload = heapq.heappop(self.heap)
            if kind == ARRIVAL:
                uid = int(order[cursor])
                cursor += 1
                r = self.route()
                self.replicas[r].waiting.append(uid)
                self.rec.replica[uid] = r
                self.outstanding[r] += 1
                if cursor < n:
                    self.push(float(arrival[order[cursor]]), ARRIVAL, 0)
                self.wake(r, time)
            elif kind == STEP_END:
                rep = self.replicas[payload]
                rep.busy = False
                self.outstanding[payload] -= rep.finishing
                rep.finishing = 0
                heap = self.heap
                if (not rep.scheduled and (rep.waiting or rep.n_running)
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
        return self.rec

    # ---------------------------------------------------------------- steps

    def admit(self, rep: Replica) -> int:
        """FCFS admission; returns how many requests joined (appended to the running arrays)."""
        room = self.max_seqs - rep.n_running
        take: list[int] = []
        tokens = 0
        prompt = self.w.prompt_len
        capacity = self.kv_capacity  # KV reservations are tracked only under a capacity
        while rep.waiting and len(take) < room:
            u = rep.waiting[0]
            if capacity is not None:
                fp = int(self.footprint[u])
                if rep.kv_reserved + fp > capacity:
                    break
            if (not self.chunked and self.max_batched is not None and take
                    and tokens + int(prompt[u]) > self.max_batched):
                break
            rep.waiting.popleft()
            take.append(u)
            if capacity is not None:
                rep.kv_reserved += fp
            tokens += int(prompt[u])
        if not take:
            return 0
        new = self.initial.take(take, axis=1)  # [F, joined] fresh state columns
        rep.state = np.concatenate([rep.state, new], axis=1)
        rep.n_prefilling += len(take)
        return len(take)

    def start_step(self, rep: Replica, time: float) -> None:
        joined = self.admit(rep)
        if rep.n_running == 0:
            return
        if not self.chunked and joined:
            duration = self.prefill_step(rep, time, joined)
        else:
            duration = self.decode_step(rep, time)
        rep.busy = True
        self.push(time + duration, STEP_END, rep.index)

    def prefill_step(self, rep: Replica, time: float, joined: int) -> float:
        """Prefill-only step over the ``joined`` newest requests' whole prompts."""
        sel = slice(rep.n_running - joined, rep.n_running)
        q = rep.state[_PROMPT, sel]
        total = int(q.sum())
        if self.from_sums is not None:  # kv = 0: the sums are (n, Σq, 0, 0, Σq²), exact integers
            sums = (joined, float(total), 0.0, 0.0, float(int(q @ q)))
            target_t = float(self.from_sums("target", *sums))
            draft_t = float(self.from_sums("draft", *sums)) if self.policy.speculates else 0.0
        else:
            kv0 = np.zeros(joined, dtype=_I64)
            target_t = float(self.cost.step_time("target", q, kv0))
            draft_t = (float(self.cost.step_time("draft", q, kv0)) if self.policy.speculates
                       else 0.0)
        overhead = float(self.cost.overhead)
        end = time + draft_t + target_t + overhead
        rep.state[_PREFILLED, sel] = q
        rep.n_prefilling -= joined
        self.emit_first(rep, sel, end)
        self.rec.step_rows.append((rep.index, time, end, 0, total, 0, 0, 0, joined, 0,
                                   draft_t, target_t, overhead))
        self.finish(rep, end)
        return end - time

    def emit_first(self, rep: Replica, idx: np.ndarray | slice, end: float) -> None:
        """Requests at ``idx`` (indices or a slice of the running batch) completed their
        prompt: the prefill pass emits token 0."""
        state = rep.state
        state[_POS, idx] = 1
        self.rec.first_token[state[_UID, idx]] = end

    def decode_step(self, rep: Replica, time: float) -> float:
        cost = self.cost
        state = rep.state
        if rep.n_prefilling == 0:
            d_idx = None
            sub = state
        else:
            d_idx = np.flatnonzero(state[_PREFILLED] >= state[_PROMPT])
            sub = state[:, d_idx]
        pos = sub[_POS]
        n = pos.shape[0]
        draft_t = target_t = 0.0
        drafted_sum = verified_sum = accepted_sum = emitted_sum = depth_used = 0
        q_len = kv = np.zeros(0, dtype=_I64)
        sums = None
        if n:
            # one int64 matrix for the step's per-request outcome: its rows 0-3 are the
            # increments of state rows n_steps..n_accepted, row 4 the emitted tokens, and one
            # Gram product of it gives every sum the step table and the cost model need
            m = np.empty((7, n), dtype=_I64)  # rows: emitted, 1, drafted, verified, τ, kv, row
            m[1] = 1
            np.add(sub[_PROMPT:_BASE + 1], pos, out=m[5:7])  # (kv, trace row) = (prompt, base) + t
            kv, rows = m[5], m[6]
            key = sub[_KEY].view(np.uint64)
            depth = self.depth
            budget = self.config.budget
            policy = self.policies[rep.index]
            budget = policy.k * n if budget is None else int(budget)
            eta = uniforms(key, pos, depth) if depth else np.zeros((n, 0))
            view = StepView(self.trace, rows, kv, budget, depth, eta, cost)
            drafted, verified = policy.decide(view)
            m[2] = drafted
            m[3] = verified
            if self.reference:
                m[4], m[0] = self.verify_reference(rep, d_idx, view.q, view.pt, view.z,
                                                   verified)
            elif depth:
                self.tables.tau(rows, verified, eta, out=m[4])
                np.minimum(m[4] + 1, sub[_OUT] - pos, out=m[0])
            else:
                m[4] = 0
                np.minimum(1, sub[_OUT] - pos, out=m[0])
            tau = m[4]
            policy.observe(verified, tau)
            (emitted_sum, _, drafted_sum, verified_sum, accepted_sum, skv), \
                (_, _, _, svv, _, svkv) = (m[1:4:2] @ m[:6].T).tolist()  # Σ·1 and Σ·verified
            # passes = max drafted; every request drafting the full depth shows in the sum
            depth_used = depth if drafted_sum == n * depth else int(drafted.max())
            # the verify pass: query s_i + 1, so Σq = Σs + n, Σq·c = Σs·c + Σc, Σq² = Σs² + 2Σs + n
            sums = (n, float(verified_sum + n), float(skv), float(svkv + skv),
                    float(svv + 2 * verified_sum + n))
            if self.from_sums is not None:
                draft_t = self.draft_passes_from_sums(drafted, kv, depth_used, skv,
                                                      drafted_sum == n * depth_used)
            else:
                draft_t = self.draft_passes(drafted, kv, depth_used)
            first = _STEPS if self.reference else _POS  # the reference twin moved pos itself
            if d_idx is None:
                state[first:] += m[first - _POS:5]
            else:
                state[first:, d_idx] += m[first - _POS:5]
        if n and (rep.n_prefilling or self.from_sums is None):
            q_len = verified + 1  # the verify pass's query lengths (the arrays, when needed)
        prefill_tokens = 0
        first_idx = None
        if rep.n_prefilling:  # chunked prefill: FCFS chunks in the leftover token budget
            p_idx = np.flatnonzero(rep.prefilled < rep.prompt)
            left = max(int(self.max_batched) - int(q_len.sum()), 0)
            rem = rep.prompt[p_idx] - rep.prefilled[p_idx]
            chunk = np.clip(left - (np.cumsum(rem) - rem), 0, rem)
            sel = chunk > 0
            if sel.any():
                c_idx, chunk = p_idx[sel], chunk[sel]
                kv_before = rep.prefilled[c_idx]
                q_len = np.concatenate([q_len, chunk])
                kv = np.concatenate([kv, kv_before])
                if self.policy.speculates:
                    draft_t += float(cost.step_time("draft", chunk, kv_before))
                rep.prefilled[c_idx] += chunk
                prefill_tokens = int(chunk.sum())
                done = rep.prefilled[c_idx] >= rep.prompt[c_idx]
                first_idx = c_idx[done]
                rep.n_prefilling -= int(done.sum())
        if sums is not None and prefill_tokens == 0 and self.from_sums is not None:
            target_t = float(self.from_sums("target", *sums))
        else:
            target_t = float(cost.step_time("target", q_len, kv))
        overhead = float(cost.overhead)
        end = time + draft_t + target_t + overhead
        if first_idx is not None and first_idx.shape[0]:
            self.emit_first(rep, first_idx, end)
            emitted_sum += int(first_idx.shape[0])
        self.rec.step_rows.append((rep.index, time, end, n, prefill_tokens, drafted_sum,
                                   verified_sum, accepted_sum, emitted_sum, depth_used, draft_t,
                                   target_t, overhead))
        self.finish(rep, end)
        return end - time

    def draft_passes(self, drafted: np.ndarray, kv: np.ndarray, depth_used: int) -> float:
        """Σ_d of the draft pass d < ``depth_used`` over the requests still drafting (query 1,
        KV ``kv + d``), one ``step_time`` call per pass.  drafted, kv # [n]"""
        cost, n = self.cost, drafted.shape[0]
        draft_t = 0.0
        if depth_used:
            ones = np.ones(n, dtype=_I64)
            uniform = int(drafted.min()) == depth_used  # every request drafts to the end
            for d in range(depth_used):
                if uniform:
                    draft_t += float(cost.step_time("draft", ones, kv + d))
                else:
                    active = drafted > d
                    draft_t += float(cost.step_time("draft", ones[active], kv[active] + d))
        return draft_t

    def draft_passes_from_sums(self, drafted: np.ndarray, kv: np.ndarray, depth_used: int,
                               skv: int, uniform: bool) -> float:
        """:meth:`draft_passes` bit for bit, from the cost model's ``time_from_sums``: pass d
        has n_d = #{i : drafted_i > d} requests with query 1 and Σc = Σ_{drafted_i > d} kv_i +
        n_d·d (integers, exact in float64), summed in the same order.
        drafted, kv # [n];  skv = Σ kv;  uniform: every request drafts ``depth_used``."""
        if not depth_used:
            return 0.0
        f = self.from_sums
        n = drafted.shape[0]
        draft_t = 0.0
        if uniform:
            fn = float(n)
            for d in range(depth_used):
                c = float(skv + n * d)
                draft_t += float(f("draft", n, fn, c, c, fn))
            return draft_t
        active = drafted[:, None] > self.pass_index[None, :depth_used]  # [n, depth_used]
        counts = active.sum(axis=0).tolist()
        kv_sums = (kv @ active).tolist()
        for d in range(depth_used):
            m = counts[d]
            c = float(kv_sums[d] + m * d)
            draft_t += float(f("draft", m, float(m), c, c, float(m)))
        return draft_t

    def verify_reference(self, rep: Replica, d_idx: np.ndarray | None, q: np.ndarray,
                         pt: np.ndarray, z: np.ndarray, verified: np.ndarray
                         ) -> tuple[np.ndarray, np.ndarray]:
        """Per-request loop twin of the vectorised verify + emit (scalar hash, one row at a
        time); updates ``rep.pos`` itself. Returns τ and emitted # [n]."""
        n = verified.shape[0]
        tau = np.zeros(n, dtype=_I64)
        emitted = np.zeros(n, dtype=_I64)
        depth = q.shape[1]
        for i in range(n):
            j = i if d_idx is None else int(d_idx[i])
            p = int(rep.pos[j])
            if depth:
                eta = np.asarray([uniforms_scalar(int(rep.key[j].view(np.uint64)), p, depth)])
                t = int(sample_tau(q[i:i + 1], pt[i:i + 1], z[i:i + 1], verified[i:i + 1], eta,
                                   self.rule)[0])
            else:
                t = 0
            e = min(t + 1, int(rep.out[j]) - p)
            rep.pos[j] = p + e
            tau[i], emitted[i] = t, e
        return tau, emitted

    def finish(self, rep: Replica, end: float) -> None:
        """Retire requests that reached their output length (times stamped ``end``)."""
        state = rep.state
        done = state[_POS] >= state[_OUT]
        if not np.count_nonzero(done):
            return
        gone = state[:, done]
        u = gone[_UID]
        self.rec.finish[u] = end
        self.counts[:, u] = gone[_POS:]  # tokens, steps, drafted, verified, accepted
        if self.kv_capacity is not None:  # the reservation only matters under a capacity
            rep.kv_reserved -= int(self.footprint.take(u).sum())
        rep.finishing += int(u.shape[0])
        rep.state = state[:, ~done]
