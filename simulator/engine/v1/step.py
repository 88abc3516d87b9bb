"""The vllm-v1 step: plan the decoding requests, compose (simulator.engine.v1.compose), then run
the batch.

vLLM's drafts exist before ``Scheduler.schedule`` runs, so the policy plans every decoding
request first (:meth:`~simulator.engine.decode.Decode.plan_decode`); the composer then decides
who runs with how many tokens (simulator.engine.v1.compose), and the scheduled decoding
requests, a prefix of the planned ones whose last may be cut to the budget, are verified, priced
and committed with
the prompt chunks in one target pass: query 1 + s_i per decoding request plus each chunk,
priced from exact integer sums when the cost model takes them, plus the rejection sampler's
time over the decoding requests (simulator.cost.verify_cost). The draft, when the policy
speculates, runs its decode passes and prefills the same chunks. A completed (re)prefill
emits one token (simulator.engine.v1.compose, recompute).
"""

from __future__ import annotations

import numpy as np

from specbatch.errors import SpecbatchError
from specbatch.simulator.engine.decode import Decode, PlannedDecode
from specbatch.simulator.engine.request_state import Replica, Row
from specbatch.simulator.engine.state import EngineState
from specbatch.simulator.engine.v1.batch import DecodeBatch, Decoding, PrefillBatch, Prefilled
from specbatch.simulator.engine.v1.compose import Composition, V1Composer, integer_sums
from specbatch.simulator.engine.v1.fast import V1Fast
from specbatch.simulator.engine.v1.reference import V1Reference
from specbatch.simulator.engine.v1.runs import V1Run
from specbatch.simulator.policies.step_plan import Plan
from specbatch.simulator.policies.view import StepView
from specbatch.simulator.replay.tree import cut_mask

_I64 = np.int64
_UID, _PREFILLED, _FILL, _POS = int(Row.UID), int(Row.PREFILLED), int(Row.FILL), int(Row.POS)
_EMPTY = np.zeros(0, dtype=_I64)
_EMPTY.flags.writeable = False
_NOBODY = Decoding(None, None, None, False)  # no running request: nobody decodes
_sum = np.add.reduce  # ndarray.sum without its Python-level wrapper
_count_nonzero = np.count_nonzero
_tuple_new = tuple.__new__  # a NamedTuple from a tuple without its class call (hot path)


class V1Step(Decode, V1Composer):
    """The engine's vllm-v1 step composer (the ``vllm-v1`` row of simulator.config.schedulers;
    module docstring): the shared decode verbs and V1's general composer, holding three parts
    of its own (each a view of the engine's state, simulator.engine.state): ``runs``
    (simulator.engine.v1.runs: runs of identical decode steps), ``fast``
    (simulator.engine.v1.fast: the step without the general composer) and ``twin``
    (simulator.engine.v1.reference: the composer's per-request reference twin)."""

    def __init__(self, engine: EngineState) -> None:
        super().__init__(engine)
        self.runs = V1Run(engine)
        self.fast = V1Fast(engine)
        self.twin = V1Reference(engine)

    # ------------------------------------------------------------- the dispatcher

    def step(self, rep: Replica, time: float, held: int = 0) -> float | None:
        """Compose and run one vllm-v1 step; returns its duration (None: nothing runs).
        ``held``: the ``max_num_seqs`` slots still held by the requests the step in flight
        finished (vLLM's async scheduling: simulator.engine.async_lag.lagged_step; 0
        otherwise): admission seats at most max_num_seqs − held running requests. No run of
        steps starts while slots are held (``runs.decode_run`` declines while
        ``rep.deferred`` holds them).

        The decoding requests' plan comes first (vLLM's drafts exist before ``schedule``);
        the composition then decides who runs and with how many tokens. The fast paths are
        tried in order, each a named check and the handler that takes the step without the
        general composer when it applies (a handler may still decline, changing nothing):

        - :meth:`may_run` → ``runs.decode_run``: a run of identical depth-0 decode steps at once;
        - :meth:`all_decode` → ``fast.fast_step``: every running request decodes;
        - ``Decoding.tail`` (:meth:`decoding`) → ``fast.mixed_step``: all decode but the newest,
          which prefills the rest of its prompt;

        and :meth:`composed_step`, the general path, runs the step none took."""
        if self.may_run():
            duration = self.runs.decode_run(rep, time)
            if duration is not None:
                return duration
        state = rep.state
        if not state.flags.c_contiguous:  # a column selection (finish) left it column-major
            rep.state = state = np.ascontiguousarray(state)  # rows contiguous: faster rows
        if not state.shape[1]:
            return self.composed_step(rep, time, _NOBODY, held)
        decoding = self.decoding(rep, state)
        _, sub, planned, tail = decoding
        if self.all_decode(decoding):
            duration = self.fast.fast_step(rep, time, planned, sub, held)
        elif tail:
            duration = self.fast.mixed_step(rep, time, planned, sub, held)
        else:
            duration = None
        if duration is not None:
            return duration
        return self.composed_step(rep, time, decoding, held)

    def may_run(self) -> bool:
        """A policy of depth 0: the steps between two changes of the running batch may be
        identical (``runs.decode_run`` checks the rest)."""
        return not self.depth

    def all_decode(self, decoding: Decoding) -> bool:
        """Every running request decodes and no ``long_prefill_token_threshold`` caps them
        (``fast.fast_step`` checks the budget, the pool and the prefix cache)."""
        return decoding.d_idx is None and not self.threshold

    def decoding(self, rep: Replica, state: np.ndarray) -> Decoding:
        """The running requests that decode (``state`` # [len(Row), n], n ≥ 1), planned;
        ``tail`` when only the newest prefills (the rest of a chunked prompt) and a fast
        path may take the step: its decoding requests are then the leading columns."""
        tail = False
        if not rep.n_prefilling:
            d_idx, sub = None, state
        else:
            last = state.shape[1] - 1
            tail = (rep.n_prefilling == 1 and self.fast_paths and not self.reference
                    and not self.threshold and self.compositions is None
                    and state[_PREFILLED, last] < state[_FILL, last])
            if tail:  # the decoding requests are the leading columns: a view
                d_idx = np.arange(last, dtype=_I64)
                sub = state[:, :last]
            else:
                d_idx = np.flatnonzero(state[_PREFILLED] >= state[_FILL])
                sub = state[:, d_idx]
        planned = self.plan_decode(rep, sub) if sub.shape[1] else None
        return _tuple_new(Decoding, (d_idx, sub, planned, tail))

    # ------------------------------------------------------------- the general path

    def composed_step(self, rep: Replica, time: float, decoding: Decoding, held: int = 0
                      ) -> float | None:
        """The step through the general composer (or its reference twin): compose, apply the
        composition (preempt, admit; ``held`` slots taken, :meth:`step`), cut the plan to what
        was scheduled, then run it."""
        d_idx, sub, planned, _ = decoding
        state = rep.state
        n = state.shape[1]
        nd = sub.shape[1] if n else 0
        verified = planned.plan.verified if nd else _EMPTY
        want = self.wants(state, d_idx, verified) if n else _EMPTY
        hybrid = self.blocks is not None and self.blocks.tables is not None  # engine.kv
        comp = (self.twin.compose_reference(rep, d_idx, verified, held)
                if self.reference or hybrid
                else self.compose(rep, want, None if d_idx is not None or planned is None
                                  else planned.kv, held))
        if self.compositions is not None:
            self.log_composition(rep, time, comp)
        self.apply(rep, comp)
        if not rep.state.shape[1]:
            return None
        keep = nd
        if nd:
            tokens = comp.tokens
            if comp.cut is None:
                full = comp.kept == n and int(_sum(tokens[:n])) == int(_sum(want))
            else:
                full = not comp.cut
            if not full or (self.threshold and bool((verified >= self.threshold).any())):
                scheduled = int(_count_nonzero(tokens[:comp.kept]))  # a prefix of the running
                keep = min(scheduled if d_idx is None
                           else int(np.searchsorted(d_idx, scheduled)), nd)
                cols = slice(0, keep) if d_idx is None else d_idx[:keep]
                got = tokens[cols]
                if keep < nd or bool((got < planned.verified[:keep] + 1).any()):
                    planned = self.cut_plan(planned, keep, got)
                    sub = sub[:, :keep]
        return self.run_composed(rep, time, _tuple_new(DecodeBatch, (keep, d_idx, planned, sub)),
                                 _tuple_new(PrefillBatch, (comp.tokens, len(comp.joined), None,
                                                           None)))

    def draft_chunk_seconds(self, chunk_sums: tuple) -> float:
        """A draft model's pass over the step's prefill chunks: its LM head at one row per
        chunk when the cost model takes the rows (vLLM's proposer samples each request's last
        token only), else at every chunk token."""
        if self.logit_rows:
            return float(self.from_sums("draft", *chunk_sums, rows=chunk_sums[0]))
        return float(self.from_sums("draft", *chunk_sums))

    def run_composed(self, rep: Replica, time: float, decoding: DecodeBatch,
                     prefill: PrefillBatch) -> float:
        """Verify, price and commit the composed step: the ``decoding`` requests (the first
        ``keep`` planned ones, columns ``d_idx``, None = the first ``keep``; their plan and
        state columns ``sub`` already cut to what was scheduled) and the ``prefill`` chunks:
        the composer's ``tokens`` # [running] (the last ``n_joined`` columns were admitted
        this step), or a fast path's: ``admit`` for simulator.engine.v1.fast's admission once
        the decoding requests have committed (:meth:`~simulator.engine.v1.fast.V1Fast.
        admit_after`: the budget's rest known from their Σ s_i, and the batch's leading
        columns are then the whole state, a contiguous commit), ``chunk`` for the one running
        request that prefills, the last column (:meth:`~simulator.engine.v1.fast.V1Fast.
        mixed_step`); ``n_joined`` is 0 and ``tokens`` unread then."""
        keep, d_idx, planned, sub = decoding
        tokens, n_joined, join, chunk = prefill
        state = rep.state
        emitted = drafted_sum = verified_sum = accepted_sum = passes = 0
        draft_t, verify_t, sums, q_len, kv = 0.0, 0.0, None, _EMPTY, _EMPTY
        unsampled = 0.0  # Σ (chunk − 1) of the prefill chunks: query tokens vLLM takes no logits at
        if keep:
            if d_idx is None:
                cols = None if keep == state.shape[1] else slice(0, keep)
            else:
                cols = d_idx[:keep]
            m, plan = planned.m, planned.plan
            self.verify_decode(rep, sub, None if d_idx is None else cols, planned)
            (emitted, drafted_sum, verified_sum, accepted_sum, passes, draft_t,
             sums, verify_t) = self.price_decode(m, plan)
            self.commit(rep, m, cols)
            if self.from_sums is None:  # the verify pass's query and KV lengths
                kv = planned.kv
                q_len = plan.verified + 1
        prefill_tokens = 0
        completed: np.ndarray | slice | int = _EMPTY
        n_completed = 0
        joined = (self.fast.admit_after(rep, join.left - verified_sum, join.free, join.held)
                  if join is not None else None)
        if chunk is not None:
            joined = self.fast.prefill_running(rep, chunk, joined)
        if joined is not None or (rep.n_prefilling == n_joined and n_joined
                                  and self.from_sums is not None):
            # only the admitted prompts prefill (the last columns): scalar sums
            prefill_tokens, completed, n_completed, chunk_sums = (
                joined if joined is not None else self.prefill_joined(rep, tokens, n_joined))
            if self.drafts_chunks:
                draft_t += self.draft_chunk_seconds(chunk_sums)
            sums = chunk_sums if sums is None else (
                sums[0] + chunk_sums[0], sums[1] + chunk_sums[1], sums[2] + chunk_sums[2],
                sums[3] + chunk_sums[3], sums[4] + chunk_sums[4])
            unsampled += chunk_sums[1] - chunk_sums[0]
        elif rep.n_prefilling and tokens.shape[0]:  # the composer's tokens (not a fast path)
            prefilled, fill = state[_PREFILLED], state[_FILL]
            p_idx = np.flatnonzero((tokens > 0) & (prefilled < fill))
            if p_idx.shape[0]:
                chunk = tokens[p_idx]
                kv_before = prefilled[p_idx]
                if self.from_sums is not None:  # price from exact integer sums
                    chunk_sums = integer_sums(chunk, kv_before)
                    if self.drafts_chunks:
                        draft_t += self.draft_chunk_seconds(chunk_sums)
                    sums = chunk_sums if sums is None else (
                        sums[0] + chunk_sums[0], sums[1] + chunk_sums[1],
                        sums[2] + chunk_sums[2], sums[3] + chunk_sums[3],
                        sums[4] + chunk_sums[4])
                    unsampled += chunk_sums[1] - chunk_sums[0]
                else:
                    if self.drafts_chunks:
                        draft_t += (float(self.cost.step_time("draft", chunk, kv_before,
                                                              rows=float(chunk.shape[0])))
                                    if self.logit_rows else
                                    float(self.cost.step_time("draft", chunk, kv_before)))
                    q_len = np.concatenate([q_len, chunk])
                    kv = np.concatenate([kv, kv_before])
                    unsampled += float(_sum(chunk)) - chunk.shape[0]
                prefilled[p_idx] += chunk
                completed = p_idx[prefilled[p_idx] >= fill[p_idx]]
                n_completed = int(completed.shape[0])
                rep.n_prefilling -= n_completed
                prefill_tokens = int(_sum(chunk))
        if not self.logit_rows:
            target_t = (float(self.from_sums("target", *sums)) if self.from_sums is not None
                        else float(self.cost.step_time("target", q_len, kv)))
        elif self.from_sums is not None:  # logits at n + S rows: a chunk's last token only
            target_t = float(self.from_sums("target", *sums, rows=sums[1] - unsampled))
        else:
            target_t = float(self.cost.step_time("target", q_len, kv,
                                                 rows=float(_sum(q_len)) - unsampled))
        if self.head:  # an EAGLE / MTP head's pass 1 over the whole target pass
            draft_t += self.head_first_pass(sums, q_len, kv)
        overhead = self.overhead
        end = time + draft_t + target_t + verify_t + overhead
        if n_completed:
            self.emit_completed(rep, completed, end)
            emitted += n_completed
        if keep == 0 and prefill_tokens == 0:  # pragma: no cover - engine invariant
            raise SpecbatchError("simulator: a vllm-v1 step with nothing scheduled "
                                 "(engine invariant broken)")
        return self.record_step(rep, time, end, (draft_t, target_t, verify_t), batch=keep,
                                prefill_tokens=prefill_tokens, drafted=drafted_sum,
                                verified=verified_sum, accepted=accepted_sum, emitted=emitted,
                                depth=passes)

    def cut_plan(self, planned: PlannedDecode, keep: int, got: np.ndarray) -> PlannedDecode:
        """The plan of the first ``keep`` decoding requests, the last one's drafts cut to the
        ``got`` # [keep] tokens the budget gave (verified = got − 1, drafted ≤ verified)."""
        m, plan, _, eta = planned
        kept = PlannedDecode(m[:, :keep].copy(), plan, None, eta[:keep])  # rows: views of the copy
        verified = np.minimum(kept.verified, got - 1)
        drafted = kept.drafted
        cut = verified < kept.verified
        drafted = np.where(cut, np.minimum(drafted, verified), drafted)
        kept.verified[:] = verified
        kept.drafted[:] = drafted
        view = StepView(self.trace, rows=kept.trace_rows, kv=kept.kv, budget=None,
                        depth=self.depth, eta=kept.eta, cost=self.cost, tables=self.view_tables)
        tree = None if plan.tree is None else cut_mask(plan.tree[:keep], verified)
        return PlannedDecode(m=kept.m, view=view, eta=kept.eta,
                             plan=Plan(drafted=drafted, verified=verified, depth=plan.depth,
                                       tree=tree))

    def prefill_joined(self, rep: Replica, tokens: np.ndarray, n_joined: int) -> Prefilled:
        """Prefill the chunks of the ``n_joined`` requests admitted this step, the last
        columns, when no other request prefills: (prompt tokens prefilled, the columns whose
        (re)prefill completed (a slice when all did, the column when it is one), how many,
        the chunks' pass sums (n, Σq, Σc, Σq·c, Σq²) as
        :func:`~simulator.engine.v1.compose.integer_sums` gives them, summed in Python integers: a
        few requests' chunks cost less so than as
        arrays)."""
        state = rep.state
        start = state.shape[1] - n_joined
        if n_joined == 1:  # scalars: cheaper than the arrays for one request
            q0, c0 = int(tokens[start]), int(state[_PREFILLED, start])
            state[_PREFILLED, start] = c0 + q0
            sums = (1, float(q0), float(c0), float(q0 * c0), float(q0 * q0))
            if c0 + q0 < state[_FILL, start]:
                return _tuple_new(Prefilled, (q0, _EMPTY, 0, sums))
            rep.n_prefilling -= 1
            return _tuple_new(Prefilled, (q0, start, 1, sums))
        prefilled = state[_PREFILLED, start:]  # a view: the update writes through
        chunk = tokens[start:]
        q, c, f = chunk.tolist(), prefilled.tolist(), state[_FILL, start:].tolist()
        prefilled += chunk
        total = sum(q)
        sums = (n_joined, float(total), float(sum(c)), float(sum(a * b for a, b in zip(q, c))),
                float(sum(a * a for a in q)))
        done = [i for i in range(n_joined) if c[i] + q[i] >= f[i]]
        rep.n_prefilling -= len(done)
        if len(done) == n_joined:
            return _tuple_new(Prefilled, (total, slice(start, None), n_joined, sums))
        return _tuple_new(Prefilled, (total, np.asarray(done, dtype=_I64) + start, len(done),
                                      sums))

    def emit_completed(self, rep: Replica, idx: np.ndarray | slice | int, end: float) -> None:
        """Requests at ``idx`` (columns, a slice of them, or one column) completed their
        (re)prefill this step: each samples one token from its last position, a fresh prompt
        its first (TTFT), a recomputed one its next (position t → t + 1)."""
        state = rep.state
        if isinstance(idx, int):
            pos = int(state[_POS, idx])
            if not pos:
                self.rec.first_token[state[_UID, idx]] = end
            state[_POS, idx] = pos + 1
            return
        pos = state[_POS, idx]
        self.rec.first_token[state[_UID, idx][pos == 0]] = end
        state[_POS, idx] = pos + 1

    def log_composition(self, rep: Replica, time: float, comp: Composition) -> None:
        """Append the composition to ``compositions`` as plain values (parity tests): replica,
        start time, the uids scheduled with their tokens and blocks, the uids preempted."""
        state = rep.state
        uids = [int(u) for u in state[_UID, :comp.kept]] + list(comp.joined)
        preempted = [int(u) for u in state[_UID, comp.kept:][::-1]]
        self.compositions.append((rep.index, time, tuple(uids), tuple(comp.tokens.tolist()),
                                  tuple(comp.blocks.tolist()), tuple(preempted), comp.free,
                                  tuple(comp.cached)))
