"""The vllm-v1 step without the general composer where its answer is known (reserve mode).

In reserve KV mode (no blocks to grow, nobody ever preempted or parked) with every running
request decoding, no ``long_prefill_token_threshold`` and a token budget no step's asks can
exceed (n · (1 + K) ≤ ``max_num_batched_tokens``), :meth:`V1Composer.compose
<simulator.v1.V1Composer.compose>` schedules every running request as asked and admits
waiting prompts FCFS into what is left (:meth:`~simulator.v1.V1Composer.admit_v1`). The
step below does exactly that without building the composition's arrays: nobody to admit,
the running batch runs as it is; else the admitted requests' columns join with their
chunks already prefilled (they have no cached tokens here) once the running requests have
committed, and the chunks' pass sums
(n, Σq, Σc = 0, Σq·c = 0, Σq²) are summed from the admission's Python integers.
:meth:`~simulator.v1_step.V1Step.run_composed` then verifies, prices and records the step
as after the general composer, so every result is the same (``fast_paths`` False takes the
general path; the parity tests compare the two).
"""

from __future__ import annotations

import numpy as np

from specbatch.simulator.plan import Plan
from specbatch.simulator.state import Replica, Row
from specbatch.simulator.view import StepView

_I64 = np.int64
_PREFILLED, _FILL = int(Row.PREFILLED), int(Row.FILL)
_EMPTY = np.zeros(0, dtype=_I64)
_EMPTY.flags.writeable = False
_sum = np.add.reduce  # ndarray.sum without its Python-level wrapper


class V1Fast:
    """The reserve-mode vllm-v1 step (module docstring); mixed into
    :class:`~simulator.engine.Engine` through :class:`~simulator.v1_step.V1Step`."""

    def reserve_step(self, rep: Replica, time: float, m: np.ndarray, plan: Plan,
                     view: StepView | None, eta: np.ndarray, sub: np.ndarray) -> float | None:
        """Run the step of ``rep``'s ``n`` decoding requests (their plan ``m``, ``plan``,
        ``view``, ``eta``; ``sub`` = the state) without the composer when the module
        docstring's conditions hold; returns its duration, or None (nothing changed: the
        caller composes). The caller checked reserve mode and no threshold."""
        n = sub.shape[1]
        budget = self.max_batched
        if (n * (self.depth + 1) > budget or not self.fast_paths
                or self.compositions is not None or self.reference):
            return None
        if not rep.waiting or n >= self.max_seqs:
            return self.run_composed(rep, time, _EMPTY, 0, None, n, m, plan, view, eta, sub)
        if self.from_sums is None:  # the chunks join the pass as arrays: the general path
            return None
        left = budget - int(_sum(plan.verified)) - n  # what the running requests leave
        if left <= 0:
            return self.run_composed(rep, time, _EMPTY, 0, None, n, m, plan, view, eta, sub)
        joined, chunks, _, _, free = self.admit_v1(rep, left, rep.kv_reserved, n)
        if not joined:
            return self.run_composed(rep, time, _EMPTY, 0, None, n, m, plan, view, eta, sub)
        return self.run_composed(rep, time, _EMPTY, 0, None, n, m, plan, view, eta, sub,
                                 (joined, chunks, free))

    def join_prefilled(self, rep: Replica, joined: tuple[int, ...], chunks: list[int],
                       free: int) -> tuple[int, slice | np.ndarray | int, int, tuple]:
        """Append the admitted requests' columns, each with its chunk prefilled, and take
        them off the waiting queue; ``free`` the reserved tokens afterwards. Returns what
        :meth:`~simulator.v1_step.V1Step.prefill_joined` would (prompt tokens prefilled,
        the columns that completed their prefill, how many, the chunks' pass sums)."""
        k = len(joined)
        state = rep.state
        start = state.shape[1]
        waiting = rep.waiting
        rep.kv_reserved = free
        if k == 1:  # scalars for the one column
            u, q = joined[0], chunks[0]
            rep.state = state = np.concatenate([state, self.initial[:, u:u + 1]], axis=1)
            state[_PREFILLED, start] = q
            waiting.popleft()
            sums = (1, float(q), 0.0, 0.0, float(q * q))
            if q < state[_FILL, start]:
                rep.n_prefilling += 1
                return q, _EMPTY, 0, sums
            return q, start, 1, sums
        new = self.initial.take(joined, axis=1)  # a copy: fresh columns
        new[_PREFILLED] = chunks
        fills = new[_FILL].tolist()
        rep.state = np.concatenate([state, new], axis=1)
        for _ in range(k):
            waiting.popleft()
        total = sum(chunks)
        sums = (k, float(total), 0.0, 0.0, float(sum(q * q for q in chunks)))
        done = [i for i in range(k) if chunks[i] >= fills[i]]
        rep.n_prefilling += k - len(done)
        if len(done) == k:
            return total, slice(start, None), k, sums
        return total, np.asarray(done, dtype=_I64) + start, len(done), sums
