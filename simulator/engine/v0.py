"""The vllm-v0 step: prefill-only steps, or decode steps with chunked prompts behind them.

:meth:`V0Step.step` (the ``vllm-v0`` row of simulator.config.schedulers) first admits in queue order
(simulator.engine.admission: a whole reservation in reserve mode, blocks and preemption in
paged mode). Without chunked prefill, a step that admitted requests is then a prefill-only
step over their whole prompts (:meth:`V0Step.prefill_step`); otherwise a decode step runs the
decoding requests' plan (simulator.engine.decode) and, with ``enable_chunked_prefill``, FCFS
prompt chunks fill the token budget the decode batch leaves (:meth:`V0Step.decode_step`,
:meth:`V0Step.prefill_chunks`). The composer object the engine holds under vllm-v0, built from
the shared decode verbs (simulator.engine.decode, with ``emit_first`` and ``finish``) and the
admission part (simulator.engine.admission).
"""

from __future__ import annotations

import numpy as np

from specbatch.errors import SpecbatchError
from specbatch.simulator.engine.admission import Admission
from specbatch.simulator.engine.decode import Decode
from specbatch.simulator.engine.request_state import Outcome, Replica, Row

_I64 = np.int64
# Rows as plain ints: numpy indexes an int about twice as fast as an IntEnum member.
_PREFILLED, _FILL = int(Row.PREFILLED), int(Row.FILL)
_M_KV = int(Outcome.KV)
_sum = np.add.reduce  # ndarray.sum without its Python-level wrapper (~0.5 µs per call)
_EMPTY = np.zeros(0, dtype=_I64)
_EMPTY.flags.writeable = False


class V0Step(Decode, Admission):
    """The engine's vllm-v0 step composer (module docstring): the shared decode verbs and the
    head-of-line admission; a part of the engine (simulator.engine.state)."""

    def step(self, rep: Replica, time: float, held: int = 0) -> float | None:
        """Admit, then run one prefill-only or decode step; returns its duration (None:
        nothing runs). ``held`` is always 0 here: vllm-v0 has no async scheduling (the
        interface's argument, simulator.engine.composers)."""
        joined = self.admit(rep) if self.blocks is None else self.schedule_paged(rep)
        if not rep.state.shape[1]:  # nothing runs (n_running, without the property call)
            return None
        if not self.chunked and joined:
            return self.prefill_step(rep, time, joined)
        return self.decode_step(rep, time)

    def prefill_step(self, rep: Replica, time: float, joined: int) -> float:
        """Prefill-only step over the ``joined`` newest requests' whole prompts."""
        sel = slice(rep.n_running - joined, rep.n_running)
        q = rep.state[_FILL, sel]
        total = int(_sum(q))
        if self.from_sums is not None:  # kv = 0: the sums are (n, Σq, 0, 0, Σq²), exact integers
            sums = (joined, float(total), 0.0, 0.0, float(int(q @ q)))
            target_t = float(self.from_sums("target", *sums))
            draft_t = float(self.from_sums("draft", *sums)) if self.drafts_chunks else 0.0
        else:
            kv0 = np.zeros(joined, dtype=_I64)
            target_t = float(self.cost.step_time("target", q, kv0))
            draft_t = (float(self.cost.step_time("draft", q, kv0)) if self.drafts_chunks
                       else 0.0)
        if self.head:  # an EAGLE / MTP head's pass 1 over the prompts
            draft_t += self.head_first_pass(sums if self.from_sums is not None else None, q,
                                            np.zeros(joined, dtype=_I64))
        overhead = self.overhead
        end = time + draft_t + target_t + overhead
        rep.state[_PREFILLED, sel] = q
        rep.n_prefilling -= joined
        emitted = self.emit_first(rep, sel, end)
        return self.record_step(rep, time, end, (draft_t, target_t, 0.0),
                                batch=0, prefill_tokens=total, drafted=0, verified=0,
                                accepted=0, emitted=emitted, depth=0)

    def decode_step(self, rep: Replica, time: float) -> float:
        """One decode step (THEORY.md §5): the decoding requests draft, are verified and
        commit; under chunked prefill, prompt chunks fill the token budget they leave; the
        step lasts T_draft + T_target + T_verify + T_overhead. Returns its duration."""
        state = rep.state
        if rep.n_prefilling == 0:
            d_idx, sub = None, state
        else:
            d_idx = np.flatnonzero(state[_PREFILLED] >= state[_FILL])
            sub = state[:, d_idx]
        n = sub.shape[1]
        emitted = drafted_sum = verified_sum = accepted_sum = passes = 0
        draft_t, verify_t, sums, q_len, kv = 0.0, 0.0, None, _EMPTY, _EMPTY
        if n:
            m, plan = self.decide_and_verify(rep, sub, d_idx)
            (emitted, drafted_sum, verified_sum, accepted_sum, passes, draft_t,
             sums, verify_t) = self.price_decode(m, plan)
            self.commit(rep, m, d_idx)
            kv = m[_M_KV]
            if rep.n_prefilling or self.from_sums is None:
                q_len = plan.verified + 1  # the verify pass's query lengths (when needed)
        prefill_tokens = 0
        if rep.n_prefilling:
            q_len, kv, prefill_draft_t, prefill_tokens, completed = self.prefill_chunks(
                rep, q_len, kv)
            draft_t += prefill_draft_t
        if sums is not None and prefill_tokens == 0 and self.from_sums is not None:
            target_t = float(self.from_sums("target", *sums))
            if self.head:  # an EAGLE / MTP head's pass 1 over the whole target pass
                draft_t += self.head_first_pass(sums, q_len, kv)
        else:
            target_t = float(self.cost.step_time("target", q_len, kv))
            if self.head:
                draft_t += self.head_first_pass(None, q_len, kv)
        overhead = self.overhead
        end = time + draft_t + target_t + verify_t + overhead
        if prefill_tokens and completed.shape[0]:
            emitted += self.emit_first(rep, completed, end)
        if n == 0 and prefill_tokens == 0:  # pragma: no cover - engine invariant
            raise SpecbatchError("simulator: a step with no decode and no prefill "
                                 "(engine invariant broken)")
        return self.record_step(rep, time, end, (draft_t, target_t, verify_t), batch=n,
                                prefill_tokens=prefill_tokens, drafted=drafted_sum,
                                verified=verified_sum, accepted=accepted_sum, emitted=emitted,
                                depth=passes)

    def prefill_chunks(self, rep: Replica, q_len: np.ndarray, kv: np.ndarray
                       ) -> tuple[np.ndarray, np.ndarray, float, int, np.ndarray]:
        """Chunked prefill: FCFS prompt chunks in the token budget the decode batch leaves,
        max(B − Σ(s_i + 1), 0) with B = ``max_num_batched_tokens``; the draft (when the policy
        speculates) prefills the same chunks. Returns the target pass's query and KV (the
        decode batch's ``q_len``, ``kv`` # [n] followed by the chunks'), the draft's prefill
        seconds, the prompt tokens prefilled and the running-batch indices of the prompts the
        chunks completed # [done]."""
        prefilled, fill = rep.state[_PREFILLED], rep.state[_FILL]  # row views: writes go through
        p_idx = np.flatnonzero(prefilled < fill)
        left = max(int(self.max_batched) - int(q_len.sum()), 0)
        rem = fill[p_idx] - prefilled[p_idx]
        chunk = np.clip(left - (np.cumsum(rem) - rem), 0, rem)
        sel = chunk > 0
        if not sel.any():
            return q_len, kv, 0.0, 0, _EMPTY
        c_idx, chunk = p_idx[sel], chunk[sel]
        if self.blocks is not None:  # paged: each chunk allocates its blocks, FCFS
            chunk = self.blocks.allocate_chunks(rep, c_idx, chunk)
            sel = chunk > 0
            if not sel.all():
                if not sel.any():
                    return q_len, kv, 0.0, 0, _EMPTY
                c_idx, chunk = c_idx[sel], chunk[sel]
        kv_before = prefilled[c_idx]
        draft_t = (float(self.cost.step_time("draft", chunk, kv_before)) if self.drafts_chunks
                   else 0.0)
        prefilled[c_idx] += chunk
        done = prefilled[c_idx] >= fill[c_idx]
        rep.n_prefilling -= int(done.sum())
        return (np.concatenate([q_len, chunk]), np.concatenate([kv, kv_before]), draft_t,
                int(chunk.sum()), c_idx[done])
