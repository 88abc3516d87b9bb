"""One decode step's plan, verification, pricing and commit, over the decoding requests.

The verbs every step composer shares (:class:`Decode`, a part of the engine: simulator.engine.
state), including the step's end: first tokens (:meth:`Decode.emit_first`) and retiring the
requests that finished (:meth:`Decode.finish`). Its methods read the engine's declared state and
write the outcome matrix # [len(Outcome), n]
(simulator.engine.request_state) of the step's decoding requests. The matrix rows are sliced by
the named ranges of simulator.engine.request_state, whose order ``check_layout`` asserts.

A step's decode travels as two named records: :class:`PlannedDecode` (the plan half's
answer, which the verify half and the vllm-v1 composer read) and :class:`PricedDecode` (the
step's totals and seconds).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from specbatch.simulator.cost.draft_cost import draft_seconds, draft_seconds_from_sums
from specbatch.simulator.engine.request_state import (
    COMMITTED_ROWS,
    CONTEXT_ROWS,
    COUNTER_OUTCOMES,
    COUNTER_ROWS,
    INCREMENT_OUTCOMES,
    POSITION_OUTCOMES,
    SUMMED_OUTCOMES,
    WEIGHT_OUTCOMES,
    Outcome,
    Replica,
    Row,
    step_record,
)
from specbatch.simulator.engine.state import EnginePart
from specbatch.simulator.engine.tree_decode import tree_draft_seconds, verify_tree_reference
from specbatch.simulator.policies.registry import call_user, is_builtin
from specbatch.simulator.policies.step_plan import Plan, plan_step
from specbatch.simulator.policies.view import StepView
from specbatch.simulator.replay.chain import sample_tau, uniforms, uniforms_scalar

_I64 = np.int64
# The rows the per-step hot path indexes, as plain ints: numpy indexes an int about twice as
# fast as an IntEnum member looked up on its class (~0.1 µs, paid ~15 times per step).
_UID, _KEY, _OUT, _BASE, _POS = (int(Row.UID), int(Row.KEY), int(Row.OUT), int(Row.BASE),
                                 int(Row.POS))
_M_EMITTED, _M_ONE, _M_DRAFTED, _M_VERIFIED, _M_TAU, _M_KV, _M_ROW = (
    int(Outcome.EMITTED), int(Outcome.ONE), int(Outcome.DRAFTED), int(Outcome.VERIFIED),
    int(Outcome.ACCEPTED), int(Outcome.KV), int(Outcome.ROW))
_BLOCKS = int(Row.BLOCKS)
_N_OUTCOMES = len(Outcome)  # len() of an Enum class costs ~0.3 µs, paid once per step
_sum = np.add.reduce  # ndarray.sum without its Python-level wrapper
try:  # numpy >= 2: the C function without the array-function dispatch (~0.3 µs per call)
    from numpy._core.multiarray import count_nonzero as _count_nonzero
except ImportError:  # pragma: no cover - numpy 1.x
    _count_nonzero = np.count_nonzero
_tuple_new = tuple.__new__  # a NamedTuple from a tuple without its class call (hot path)


class PlannedDecode(NamedTuple):
    """The plan half of a decode step (:meth:`Decode.plan_decode`), for its verify half.

    m:    # [len(Outcome), n] the outcome matrix, its ONE, KV, ROW, DRAFTED, VERIFIED rows
          filled (EMITTED and ACCEPTED by the verify half)
    plan: the policy's :class:`Plan` (d_i, s_i, and a tree run's verified subtrees)
    view: the :class:`StepView` the policy planned from (None: a depth-0 built-in got none)
    eta:  # [n, eta_width] the uniforms η the verifier reads (common random numbers)
    """

    m: np.ndarray
    plan: Plan
    view: StepView | None
    eta: np.ndarray

    @property
    def kv(self) -> np.ndarray:
        """The KV row c_i = prompt + t of the outcome matrix (a view). # [n]"""
        return self.m[_M_KV]

    @property
    def trace_rows(self) -> np.ndarray:
        """The ROW row: each request's trace row this step (a view). # [n]"""
        return self.m[_M_ROW]

    @property
    def drafted(self) -> np.ndarray:
        """The DRAFTED row d_i (a view). # [n]"""
        return self.m[_M_DRAFTED]

    @property
    def verified(self) -> np.ndarray:
        """The VERIFIED row s_i (a view). # [n]"""
        return self.m[_M_VERIFIED]


class PricedDecode(NamedTuple):
    """A decode step's totals and seconds (:meth:`Decode.price_decode`)."""

    emitted: int  # Σ emitted tokens
    drafted: int  # Σ d_i
    verified: int  # Σ s_i
    accepted: int  # Σ τ_i
    passes: int  # the draft passes D
    draft_time: float  # their seconds
    sums: tuple  # the verify pass's (n, Σq, Σc, Σq·c, Σq²) for ``time_from_sums``
    verify_time: float  # the rejection sampler's seconds (0 without a verify cost)


class Decode(EnginePart):
    """Decode-step verbs of the engine, shared by the step composers (module docstring)."""

    def decide_and_verify(self, rep: Replica, sub: np.ndarray, d_idx: np.ndarray | None
                          ) -> tuple[np.ndarray, Plan]:
        """The policy's :class:`Plan` (d_i, s_i) for the decoding requests ``sub``
        # [len(Row), n] (columns ``d_idx`` of the running batch, None = all of them) and the
        verifier's τ_i ≤ s_i (common random numbers η from the request's key and position).

        Returns the step's outcome matrix # [len(Outcome), n] (emitted = min(τ + 1, out − t),
        c = prompt + t, trace row = base + t, or base + t mod L for a wrapped workload) and the
        plan.
        """
        planned = self.plan_decode(rep, sub)
        self.verify_decode(rep, sub, d_idx, planned)
        return planned.m, planned.plan

    def plan_decode(self, rep: Replica, sub: np.ndarray) -> PlannedDecode:
        """The first half of :meth:`decide_and_verify`: the outcome matrix with its ONE, KV,
        ROW, DRAFTED and VERIFIED rows filled, the plan, the policy's view and the uniforms η
        # [n, depth] the verifier will use (:class:`PlannedDecode`).

        A built-in policy of depth 0 (``ar``) plans zeros by the contract (d_i ≤ depth): it
        gets no view (None), no plan call and no trace row read."""
        pos = sub[_POS]
        n = pos.shape[0]
        m = np.empty((_N_OUTCOMES, n), dtype=_I64)
        m[_M_ONE] = 1
        np.add(sub[CONTEXT_ROWS], pos, out=m[POSITION_OUTCOMES])  # (c, row) = (prompt, base) + t
        depth = self.depth
        if not depth and not self.check_plans and not self.observes:
            m[_M_DRAFTED] = 0
            m[_M_VERIFIED] = 0
            plan = _tuple_new(Plan, (m[_M_DRAFTED], m[_M_VERIFIED], 0, None))  # d, s, depth, tree
            return _tuple_new(PlannedDecode, (m, plan, None, np.zeros((n, 0))))
        kv, rows = m[_M_KV], m[_M_ROW]
        if self.wrap is not None:  # imported outputs past their trace request: row base + t mod L
            np.add(sub[_BASE], np.remainder(pos, self.wrap.take(sub[_UID])), out=rows)
        policy = self.policies[rep.index]
        eta = (uniforms(sub[_KEY].view(np.uint64), pos, self.eta_width) if depth
               else np.zeros((n, 0)))
        # positional: a keyword call costs ~0.3-0.6 µs more, paid every step
        view = StepView(self.trace, rows, kv, None, depth, eta, self.cost, self.view_tables)
        plan = plan_step(policy, view, self.check_plans)
        m[_M_DRAFTED] = plan.drafted
        m[_M_VERIFIED] = plan.verified
        return _tuple_new(PlannedDecode, (m, plan, view, eta))

    def verify_decode(self, rep: Replica, sub: np.ndarray, d_idx: np.ndarray | None,
                      planned: PlannedDecode) -> None:
        """The second half of :meth:`decide_and_verify`: τ_i ≤ s_i into the ACCEPTED row of
        ``planned.m`` and min(τ + 1, out − t) into EMITTED, then the policy's feedback."""
        m, plan, view, eta = planned
        verified = plan.verified
        depth = self.depth
        if plan.tree is not None:  # a verified subtree per request (simulator.engine.tree_decode)
            if self.reference:
                m[_M_TAU], m[_M_EMITTED] = verify_tree_reference(
                    self.trace, self.tree, self.rule, rep.state, d_idx, m[_M_ROW], plan.tree)
            else:
                m[_M_TAU] = self.tree.tau(self.rule, m[_M_ROW], plan.tree, eta)
                np.minimum(m[_M_TAU] + 1, sub[_OUT] - sub[_POS], out=m[_M_EMITTED])
        elif self.reference:
            m[_M_TAU], m[_M_EMITTED] = self.verify_reference(rep, d_idx, view, verified)
        elif depth:
            self.tables.tau(m[_M_ROW], verified, eta, out=m[_M_TAU])
            np.minimum(m[_M_TAU] + 1, sub[_OUT] - sub[_POS], out=m[_M_EMITTED])
        else:
            m[_M_TAU] = 0
            np.minimum(1, sub[_OUT] - sub[_POS], out=m[_M_EMITTED])
        if self.observes:
            policy = self.policies[rep.index]
            if self.check_plans and not is_builtin(type(policy)):  # a user's: one-line errors
                call_user(type(policy), "observe", policy.observe, verified, m[_M_TAU])
            else:
                policy.observe(verified, m[_M_TAU])

    def record_step(self, rep: Replica, time: float, end: float,
                    seconds: tuple[float, float, float], **counts: int) -> float:
        """Log one step of ``rep`` from ``time`` to ``end`` (its priced ``seconds``: draft,
        target, verify; and the ``step_record`` counts: batch, prefill_tokens, drafted,
        verified, accepted, emitted, depth), retire the requests it finished, and return its
        duration: the tail every composer's step shares."""
        draft_t, target_t, verify_t = seconds
        self.rec.step_rows.append(step_record(
            replica=rep.index, time=time, end=end, draft_time=draft_t, target_time=target_t,
            verify_time=verify_t, overhead_time=self.overhead, **counts))
        rep.last_start = time
        self.finish(rep, end)
        return end - time

    def price_decode(self, m: np.ndarray, plan: Plan) -> PricedDecode:
        """The step's totals, draft and verification time from the outcome matrix ``m``
        # [len(Outcome), n] (:class:`PricedDecode`: Σ emitted, Σ d, Σ s, Σ τ, the plan's draft
        passes D, their seconds, the verify pass's batch sums (n, Σq, Σc, Σq·c, Σq²) for
        ``time_from_sums``, the rejection sampler's seconds (``verify_cost``,
        simulator.cost.verify_cost; 0 without)).

        One Gram product (simulator.engine.request_state.WEIGHT_OUTCOMES) gives Σ X and Σ s·X of
        every outcome row X from EMITTED to KV. The verify pass has query q_i = s_i + 1, so its
        batch sums are
        Σq = Σs + n, Σq·c = Σs·c + Σc and Σq² = Σs² + 2Σs + n (exact integers below 2^53).
        """
        n = m.shape[1]
        if not plan.depth:  # nothing drafted or verified: q_i = 1, so Σq = Σq² = n, Σq·c = Σc
            skv = int(_sum(m[_M_KV]))
            verify_t = (0.0 if self.verify_cost is None
                        else self.verify_cost.seconds(n, 0, plan.verified))
            return _tuple_new(PricedDecode, (
                int(_sum(m[_M_EMITTED])), 0, 0, 0, 0, 0.0,
                (n, float(n), float(skv), float(skv), float(n)), verify_t))
        total, by_verified = (m[WEIGHT_OUTCOMES] @ m[SUMMED_OUTCOMES].T).tolist()
        drafted_sum, verified_sum, skv = total[_M_DRAFTED], total[_M_VERIFIED], total[_M_KV]
        svv, svkv = by_verified[_M_VERIFIED], by_verified[_M_KV]
        sums = (n, float(verified_sum + n), float(skv), float(svkv + skv),
                float(svv + 2 * verified_sum + n))
        passes, kv = plan.draft_passes(drafted_sum), m[_M_KV]
        if plan.tree is not None:  # D passes over the tree's levels (simulator.engine.tree_decode)
            passes = self.tree.max_depth
            draft_t = tree_draft_seconds(self.tree, self.cost, kv)
        elif self.head:  # passes 2..D of an EAGLE / MTP head; pass 1: head_first_pass
            draft_t = self.head_later_passes(m, plan.drafted, passes,
                                             skv + total[_M_TAU] + n, drafted_sum == n * passes)
        elif self.from_sums is not None:
            draft_t = draft_seconds_from_sums(self.from_sums, plan.drafted, kv, passes, skv,
                                              drafted_sum == n * passes, self.pass_index)
        else:
            draft_t = draft_seconds(self.cost, plan.drafted, kv, passes)
        verify_t = (0.0 if self.verify_cost is None
                    else self.verify_cost.seconds(n, verified_sum, plan.verified))
        return _tuple_new(PricedDecode, (total[_M_EMITTED], drafted_sum, verified_sum,
                                         total[_M_TAU], passes, draft_t, sums, verify_t))

    def head_later_passes(self, m: np.ndarray, drafted: np.ndarray, passes: int,
                          skv_next: int, uniform: bool) -> float:
        """Seconds of an EAGLE / MTP head's passes after the first
        (simulator.cost.features.draft_head): pass j = 1..D−1 runs one token for each request still
        drafting (d_i > j) over c_i + τ_i + j cached tokens (vllm/v1/spec_decode/eagle.py,
        ``EagleProposer.propose``: ``seq_lens`` less the rejected drafts, + 1 per pass), i.e. the
        separate draft's pricing (:func:`~simulator.cost.draft_cost.draft_seconds`) of d_i − 1
        passes over c_i + τ_i + 1. m # [len(Outcome), n] the verified step's outcomes (KV c_i,
        ACCEPTED τ_i); drafted # [n]; ``skv_next`` = Σ (c_i + τ_i + 1); ``uniform``: every d_i =
        D."""
        later = passes - 1
        if later <= 0:
            return 0.0
        kv_next = m[_M_KV] + m[_M_TAU] + 1  # [n] c_i + τ_i + 1
        if self.from_sums is not None:
            return draft_seconds_from_sums(self.from_sums, drafted - 1, kv_next, later,
                                           skv_next, uniform, self.pass_index)
        return draft_seconds(self.cost, drafted - 1, kv_next, later)

    def head_first_pass(self, sums: tuple | None, query: np.ndarray, kv: np.ndarray) -> float:
        """Seconds of an EAGLE / MTP head's first pass of the step (0 without a head): over
        every token the target's pass computed, decoding requests' 1 + s_i and prefill
        chunks alike, the LM head over one row per request (simulator.cost.features.draft_head;
        vllm/v1/spec_decode/eagle.py, ``EagleProposer.propose`` with
        ``prepare_inputs_padded``). From the target pass's ``sums`` (n, Σq, Σc, Σq·c, Σq²)
        when the engine priced it from sums, else from its ``query``, ``kv`` # [n]."""
        if not self.head:
            return 0.0
        if sums is not None and self.from_sums is not None:
            return float(self.cost.first_pass_time(*sums))
        return float(self.cost.first_pass_step(query, kv))

    def commit(self, rep: Replica, m: np.ndarray, d_idx: np.ndarray | None) -> None:
        """Add the step's increments (outcome rows EMITTED..ACCEPTED) to state rows
        POS..N_ACCEPTED of the decoding requests (the reference twin moved POS itself)."""
        rows, outs = ((COUNTER_ROWS, COUNTER_OUTCOMES) if self.reference
                      else (COMMITTED_ROWS, INCREMENT_OUTCOMES))
        if d_idx is None:
            rep.state[rows] += m[outs]
        else:
            rep.state[rows, d_idx] += m[outs]

    def verify_reference(self, rep: Replica, d_idx: np.ndarray | None, view: StepView,
                         verified: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per-request loop twin of the vectorised verify + emit (scalar hash, one row at a
        time, from the view's drafted-path statistics q, pt, z, THEORY.md §3);
        moves the requests' POS itself. Returns τ and emitted # [n]."""
        q, pt, z = view.q, view.pt, view.z
        n = verified.shape[0]
        tau = np.zeros(n, dtype=_I64)
        emitted = np.zeros(n, dtype=_I64)
        depth = q.shape[1]
        state = rep.state
        for i in range(n):
            j = i if d_idx is None else int(d_idx[i])
            p = int(state[_POS, j])
            if depth:
                key = int(state[_KEY, j:j + 1].view(np.uint64)[0])
                eta = np.asarray([uniforms_scalar(key, p, depth)])
                t = int(sample_tau(q[i:i + 1], pt[i:i + 1], z[i:i + 1], verified[i:i + 1], eta,
                                   self.rule)[0])
            else:
                t = 0
            e = min(t + 1, int(state[_OUT, j]) - p)
            state[_POS, j] = p + e
            tau[i], emitted[i] = t, e
        return tau, emitted

    # ---------------------------------------------------------------- the step's end

    def emit_first(self, rep: Replica, idx: np.ndarray | slice, end: float) -> int:
        """Requests at ``idx`` (indices or a slice of the running batch) completed their
        prefill: a fresh prompt's pass emits token 0, a recomputed one (position t > 0, paged
        mode) emits nothing. Returns the tokens emitted."""
        state = rep.state
        uid = state[_UID, idx]
        if self.blocks is None:  # reserve mode: every completed prefill is a fresh prompt
            state[_POS, idx] = 1
            self.rec.first_token[uid] = end
            return int(uid.shape[0])
        pos = state[_POS, idx]
        fresh = pos == 0
        state[_POS, idx] = pos + fresh
        self.rec.first_token[uid[fresh]] = end
        return int(_count_nonzero(fresh))

    def finish(self, rep: Replica, end: float) -> None:
        """Retire requests that reached their output length (times stamped ``end``)."""
        state = rep.state
        done = state[_POS] >= state[_OUT]
        if not _count_nonzero(done):
            return
        gone = state.compress(done, axis=1)
        u = gone[_UID]
        self.rec.finish[u] = end
        self.counts[:, u] = gone[COMMITTED_ROWS]  # tokens, steps, drafted, verified, accepted
        if self.lag:  # freed when vLLM processes this step's output: after the next schedule
            rep.deferred = gone  # (simulator.engine.async_lag)
        else:
            self.release(rep, gone)
        rep.finishing += int(u.shape[0])
        rep.state = state.compress(~done, axis=1)

    def release(self, rep: Replica, gone: np.ndarray) -> None:
        """Free the KV blocks (or the reservation) of the finished requests ``gone`` (their
        state columns # [len(Row), f])."""
        if self.blocks is not None:
            self.blocks.release(rep, gone)
            if rep.prefix is not None:  # shared blocks stay held by other requests
                rep.free_blocks = rep.prefix.release_finished(gone[_UID], gone[_BLOCKS])
        elif self.kv_capacity is not None:  # the reservation only matters under a capacity
            rep.kv_reserved -= int(self.footprint.take(gone[_UID]).sum())
