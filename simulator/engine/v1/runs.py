"""Runs of identical vllm-v1 decode steps, taken at once (the engine's result unchanged).

A policy of depth 0 (``ar``: no drafts, every request emits one token a step) makes the
steps between two changes of the running batch identical in composition: while nobody
finishes, nobody can be admitted and the block pool holds every request's next slot, each
step schedules the same requests with one token each and differs from the last only in the
requests' positions (t + 1). :meth:`V1Run.decode_run` takes such a run of J steps in one go:
J = the fewest tokens any running request has left (its last token ends the run, and the
engine's ``finish`` then retires it as after a single step), cut short

- when the replica could admit (fewer than ``max_num_seqs`` running and budget left): at
  the step after which the next event (an arrival) is due, since that step would see it
  in the waiting queue (and not at all with requests already waiting);
- in paged mode: at the last step whose KV slots the free pool still holds (the next one
  preempts and runs as a single step);
- when the engine's ``start + duration`` would not land exactly on the run's last end
  (floating point), so the next step starts at the same instant it would step by step.

Each step of the run is priced and recorded exactly as a single step is (the same sums to
the same cost-model call, the same float additions, one
:class:`~simulator.engine.request_state.StepRecord` each, one logged composition each when the
engine logs them), and the state ends where J
single steps leave it: positions and step counts + J, blocks grown to the last step's
slots, the pool and the lazy prefix cache's free count and computed tokens (whose
``note_done`` keeps only the last step's numbers). Not taken (a single step runs): with
drafts, a reference run, checked plans, a policy that observes, requests prefilling, an
exact-mode prefix cache (block identities are allocated step by step), or more than one
replica (another replica's steps interleave in the step table).
"""

from __future__ import annotations

import numpy as np

from specbatch.simulator.engine.request_state import Replica, Row, step_record
from specbatch.simulator.engine.state import EnginePart

_I64 = np.int64
_UID, _BLOCKS, _OUT, _PROMPT, _POS, _N_STEPS = (
    int(Row.UID), int(Row.BLOCKS), int(Row.OUT), int(Row.PROMPT), int(Row.POS),
    int(Row.N_STEPS))
_sum = np.add.reduce  # ndarray.sum without its Python-level wrapper


class V1Run(EnginePart):
    """The engine's run of identical vllm-v1 decode steps (module docstring); a part the
    vllm-v1 composer holds (``runs``, simulator.engine.v1.step; it retires the finished through
    the composer). ``fast_paths`` False (simulator.engine.state) turns it off, and the step
    without the composer of simulator.engine.v1.fast (every step through the composer, one at a
    time: the
    same results; the parity tests compare the two)."""

    def decode_run(self, rep: Replica, time: float) -> float | None:
        """Take a run of identical depth-0 decode steps starting at ``time`` (module
        docstring); returns its duration, or None when no run of two or more steps can be
        taken (nothing changed: the caller runs a single step)."""
        state = rep.state
        n = state.shape[1]
        if (not n or rep.n_prefilling or self.depth or not self.fast_paths or self.reference
                or self.check_plans or self.observes or len(self.replicas) != 1
                or rep.pending or rep.deferred is not None):  # async_lag: the next step differs
            return None
        prefix = rep.prefix
        if prefix is not None and not prefix.lazy:
            return None
        budget = self.max_batched
        if budget is not None and n > budget:  # the budget cuts someone: not a plain step
            return None
        admits = n < self.max_seqs and (budget is None or n < budget)
        if admits and rep.waiting:
            return None
        steps = int((state[_OUT] - state[_POS]).min())
        if steps >= 2 and self.blocks is not None:
            steps = self.run_blocks(rep, steps)
        if steps < 2:
            return None
        verify_t = (0.0 if self.verify_cost is None
                    else self.verify_cost.seconds(n, 0, np.zeros(n, dtype=_I64)))
        horizon = self.heap[0][0] if admits and self.heap else None
        times = self.run_times(rep, time, steps, verify_t, horizon)
        if len(times) < 2:
            return None
        self.commit_run(rep, times, verify_t)
        start, end, _ = times[-1]
        rep.last_start = start
        return start + (end - start) - time

    def run_slots(self, rep: Replica, steps: int) -> np.ndarray:
        """Paged mode: the blocks each running request holds after each of ``steps`` steps
        # [steps, n] (step j = 0.. grows a request at t to ⌈(prompt + t + j + lookahead) /
        block_size⌉ blocks, never shrinking)."""
        state = rep.state
        bs = self.blocks.block_size
        base = state[_PROMPT] + state[_POS] + (self.lookahead + bs - 1)  # [n]
        return np.maximum((base + np.arange(steps, dtype=_I64)[:, None]) // bs, state[_BLOCKS])

    def run_blocks(self, rep: Replica, steps: int) -> int:
        """Paged mode: how many of the run's first ``steps`` steps the free pool holds."""
        state = rep.state
        bs = self.blocks.block_size
        free = rep.prefix.n_free if rep.prefix is not None else rep.free_blocks
        last = (state[_PROMPT] + state[_POS] + (steps - 1 + self.lookahead + bs - 1)) // bs
        last -= state[_BLOCKS]
        if int(_sum(np.maximum(last, 0, out=last))) <= free:
            return steps
        grown = _sum(self.run_slots(rep, steps) - state[_BLOCKS], axis=1)  # [steps] rising
        return int(np.searchsorted(grown, free, side="right"))

    def run_times(self, rep: Replica, time: float, steps: int, verify_t: float,
                  horizon: float | None) -> list[tuple[float, float, float]]:
        """Each step's (start, end, target seconds), priced as a single step prices it: at
        most ``steps``, ending with the step after which ``horizon`` (the next event, when
        the replica could admit) is due, and the longest run whose last end the engine's
        ``time + duration`` reproduces exactly."""
        state = rep.state
        n = state.shape[1]
        ctx = state[_PROMPT] + state[_POS]  # [n] prompt + t at the run's first step
        overhead = self.overhead
        draft_t = 0.0
        from_sums = self.from_sums
        fn = float(n)
        skv = int(_sum(ctx))
        ones = np.ones(n, dtype=_I64) if from_sums is None else None
        # one logit row per request, as V1Step.run_composed names them (n + S, S = 0 here)
        rows = {"rows": fn} if self.logit_rows else {}
        times: list[tuple[float, float, float]] = []
        start = time
        for j in range(steps):
            if from_sums is not None:
                s = float(skv + j * n)
                target_t = float(from_sums("target", n, fn, s, s, fn, **rows))
            else:
                target_t = float(self.cost.step_time("target", ones, ctx + j, **rows))
            end = start + draft_t + target_t + verify_t + overhead
            times.append((start, end, target_t))
            start = start + (end - start)  # the engine's push of the step's end
            if horizon is not None and start >= horizon:  # the next step sees the arrival
                break
        while len(times) >= 2:
            start, end, _ = times[-1]
            last = start + (end - start)
            if time + (last - time) == last:
                break
            times.pop()
        return times

    def commit_run(self, rep: Replica, times: list[tuple[float, float, float]],
                   verify_t: float) -> None:
        """Record the run's steps (``times``: each one's start, end and target seconds) and
        leave the state where they leave it (module docstring)."""
        state = rep.state
        n = state.shape[1]
        steps = len(times)
        if self.compositions is not None:
            self.log_run(rep, times)
        overhead = self.overhead
        append = self.rec.step_rows.append
        index = rep.index
        for start, end, target_t in times:
            append(step_record(
                replica=index, time=start, end=end, batch=n, prefill_tokens=0, drafted=0,
                verified=0, accepted=0, emitted=n, depth=0, draft_time=0.0,
                target_time=target_t, verify_time=verify_t, overhead_time=overhead))
        prefix = rep.prefix
        if self.blocks is not None:
            bs = self.blocks.block_size
            held = state[_BLOCKS]
            last = (state[_PROMPT] + state[_POS] + (steps - 1 + self.lookahead + bs - 1)) // bs
            grown = int(_sum(np.maximum(last - held, 0)))
            np.maximum(held, last, out=held)
            if prefix is not None:
                prefix.take(grown)
                rep.free_blocks = prefix.n_free
            else:
                rep.free_blocks -= grown
        if prefix is not None:  # the last step's computed tokens: prompt + t, t its position
            prefix.note_done(state[_UID], state[_PROMPT] + state[_POS] + (steps - 1), True)
        state[_POS] += steps
        state[_N_STEPS] += steps
        self.composer.finish(rep, times[-1][1])

    def log_run(self, rep: Replica, times: list[tuple[float, float, float]]) -> None:
        """Append each step's composition as :meth:`~simulator.engine.v1.step.V1Step.
        log_composition` writes it: every running request, one token each, its blocks
        after the step's allocation, nobody preempted or admitted."""
        state = rep.state
        uids = tuple(int(u) for u in state[_UID])
        ones = (1,) * len(uids)
        if self.blocks is None:
            blocks = [tuple(state[_BLOCKS].tolist())] * len(times)
            free = [rep.kv_reserved] * len(times)
        else:
            slots = self.run_slots(rep, len(times))  # [steps, n]
            pool = rep.prefix.n_free if rep.prefix is not None else rep.free_blocks
            free = (pool - _sum(slots - state[_BLOCKS], axis=1)).tolist()
            blocks = [tuple(row) for row in slots.tolist()]
        for j, (start, _, _) in enumerate(times):
            self.compositions.append((rep.index, start, uids, ones, blocks[j], (), free[j], ()))
