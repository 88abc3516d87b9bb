"""The vllm-v1 step without the general composer, where the composer's answer is known.

With every running request decoding, no ``long_prefill_token_threshold``, a token budget no
step's asks can exceed (n · (1 + K) ≤ ``max_num_batched_tokens``) and, in paged mode, no
prefix cache keeping block identities (none, or one still counting: simulator.engine.prefix),
:meth:`V1Composer.compose <simulator.engine.v1.compose.V1Composer.compose>` schedules every
running request as asked, grows its blocks to ⌈(prompt + t − 1 + 1 + s_i + lookahead) /
block_size⌉ in one allocation when the free pool holds them all, and admits waiting prompts FCFS
into what the budget has left (:meth:`~simulator.engine.v1.compose.V1Composer.admit_v1`);
:meth:`~simulator.engine.v1.compose.V1Composer.apply` then appends the admitted columns.
:meth:`V1Fast.fast_step` does exactly
that without the composition's arrays: the growth in place, the admitted requests' columns
appended once the running requests have committed (a contiguous commit), each with its
chunk prefilled and its blocks (none is found in a prefix cache here), and the chunks' pass
sums (n, Σq, Σc, Σq·c, Σq²) summed from the admission's Python integers (Σc = Σq·c = 0:
nothing cached). A pool too small for the growth (someone is preempted) takes the general
path. :meth:`~simulator.engine.v1.step.V1Step.run_composed` verifies, prices and records the step
as after the composer, so every result is the same (``fast_paths`` False always takes the
general path; the parity tests compare the two).
"""

from __future__ import annotations

import numpy as np

from specbatch.simulator.engine.decode import PlannedDecode
from specbatch.simulator.engine.request_state import Replica, Row
from specbatch.simulator.engine.state import EnginePart
from specbatch.simulator.engine.v1.batch import Admit, Chunk, DecodeBatch, PrefillBatch, Prefilled

_I64 = np.int64
_UID, _PREFILLED, _FILL, _BLOCKS = int(Row.UID), int(Row.PREFILLED), int(Row.FILL), int(Row.BLOCKS)
_EMPTY = np.zeros(0, dtype=_I64)
_EMPTY.flags.writeable = False
_sum = np.add.reduce  # ndarray.sum without its Python-level wrapper
_tuple_new = tuple.__new__  # a NamedTuple from a tuple without its class call (hot path)


class V1Fast(EnginePart):
    """The vllm-v1 step without the general composer (module docstring); a part the vllm-v1
    composer holds (``fast``, simulator.engine.v1.step), which runs the step it hands back
    (``composer.run_composed``) and admits for it (``composer.admit_v1``)."""

    def fast_step(self, rep: Replica, time: float, planned: PlannedDecode, sub: np.ndarray,
                  held: int = 0) -> float | None:
        """Run the step of ``rep``'s ``n`` decoding requests (their plan ``planned``; ``sub`` =
        the state) without the composer when the module
        docstring's conditions hold; returns its duration, or None (nothing changed: the
        caller composes). The caller checked that all decode and there is no threshold.
        ``held``: slots of ``max_num_seqs`` held by the step in flight's finished requests
        (V1Step.step)."""
        n = sub.shape[1]
        budget = self.max_batched
        if (n * (self.depth + 1) > budget or not self.fast_paths
                or self.compositions is not None or self.reference):
            return None
        admits = bool(rep.waiting) and n < self.max_seqs - held
        if admits and self.from_sums is None:  # chunks join the pass as arrays: composer
            return None
        prefix = rep.prefix
        if self.blocks is None:
            free = rep.kv_reserved
        else:
            if prefix is not None and (not prefix.lazy or (admits and prefix.parked)):
                return None  # block identities, or a preempted request's hits: composer
            free = self.grow_running(rep, planned, prefix)
            if free is None:  # someone is preempted: the composer
                return None
        return self.composer.run_composed(
            rep, time, _tuple_new(DecodeBatch, (n, None, planned, sub)),
            _tuple_new(PrefillBatch, (_EMPTY, 0, _tuple_new(Admit, (budget - n, free, held))
                                      if admits else None, None)))

    def mixed_step(self, rep: Replica, time: float, planned: PlannedDecode | None,
                   sub: np.ndarray, held: int = 0) -> float | None:
        """Run the step of ``rep``'s requests when all decode but the newest, the last
        column, which prefills the rest of a chunked prompt (``sub``: the leading decoding
        columns, ``planned`` their plan, None when there are none),
        without the composer: the module docstring's conditions on the decoding requests,
        no threshold (the caller checked), a cost model that prices from sums. The
        composer would give the decoding requests all they ask (1 + s_i each, Σ ≤ the
        budget), the prefilling one q = min(its rest, what the budget has left), grow every
        scheduled request's blocks to ⌈(computed + tokens + lookahead) / block_size⌉ in one
        allocation, and admit waiting prompts FCFS into what is left when q is its whole
        rest; this does the same in place (``held`` slots taken, as in :meth:`fast_step`).
        Returns the duration, or None (nothing changed: the caller composes with the same
        plan)."""
        state = rep.state
        last = sub.shape[1]
        budget = self.max_batched
        if last * (self.depth + 1) > budget or self.from_sums is None:
            return None
        plan = None if planned is None else planned.plan
        asked = last + (int(_sum(plan.verified)) if last and plan.depth else 0)
        prefilled, fill = int(state[_PREFILLED, last]), int(state[_FILL, last])
        rest = fill - prefilled
        q = min(rest, budget - asked)
        admits = (asked + q < budget and bool(rep.waiting)
                  and state.shape[1] < self.max_seqs - held)
        prefix = rep.prefix
        if prefix is not None and (not prefix.lazy or (admits and prefix.parked)):
            return None
        if self.blocks is None:
            free = rep.kv_reserved
        else:
            bs = self.blocks.block_size
            blocks = state[_BLOCKS]
            grow = 0
            if q:
                grow = max(-(-(prefilled + q + self.lookahead) // bs) - int(blocks[last]), 0)
            if last:
                need = planned.kv + plan.verified  # computed + 1 + s_i
                need += self.lookahead + bs - 1
                need //= bs
                need -= blocks[:last]
                np.maximum(need, 0, out=need)
                total = int(_sum(need)) + grow
            else:
                total = grow
            free = prefix.n_free if prefix is not None else rep.free_blocks
            if total > free:  # someone is preempted: the composer
                return None
            if total:
                if last:
                    blocks[:last] += need
                blocks[last] += grow
                free -= total
                if prefix is not None:
                    prefix.take(total)
            rep.free_blocks = free
            if prefix is not None:  # the composer's cache_scheduled: tokens computed
                done = np.empty(last + 1, dtype=_I64)
                if last:
                    done[:last] = planned.kv
                done[last] = prefilled + q
                whole = q == rest  # nobody cut: every running request scheduled as asked
                uid = state[_UID] if q else state[_UID, :last]
                prefix.note_done(uid, done if q else done[:last], whole)
        return self.composer.run_composed(
            rep, time, _tuple_new(DecodeBatch, (last, None, planned, sub)),
            _tuple_new(PrefillBatch, (_EMPTY, 0,
                                      _tuple_new(Admit, (budget - last - q, free, held))
                                      if admits else None,
                                      _tuple_new(Chunk, (last, q)) if q else None)))

    def prefill_running(self, rep: Replica, chunk: Chunk, joined: Prefilled | None
                        ) -> Prefilled:
        """Prefill the ``chunk`` (column, tokens q) of the running request that prefills
        next to the requests ``joined`` this step (:meth:`join_prefilled`'s answer, or
        None); returns the same record for both: prompt tokens, the columns that completed
        their prefill, how many, the pass sums (n, Σq, Σc, Σq·c, Σq²) (exact integers)."""
        col, q = chunk
        state = rep.state
        c = int(state[_PREFILLED, col])
        state[_PREFILLED, col] = c + q
        done = c + q >= state[_FILL, col]
        if done:
            rep.n_prefilling -= 1
        if joined is None:
            return _tuple_new(Prefilled, (q, (col if done else _EMPTY), int(done), (
                1, float(q), float(c), float(q * c), float(q * q))))
        tokens, completed, n_completed, sums = joined
        if done:
            if not n_completed:
                completed = col
            else:
                if isinstance(completed, slice):
                    completed = np.arange(completed.start, state.shape[1], dtype=_I64)
                completed = np.concatenate([[col], np.atleast_1d(completed)])
            n_completed += 1
        return _tuple_new(Prefilled, (tokens + q, completed, n_completed, (
            sums[0] + 1, sums[1] + q, sums[2] + c, sums[3] + q * c, sums[4] + q * q)))

    def admit_after(self, rep: Replica, left: int, free: int, held: int = 0
                    ) -> Prefilled | None:
        """FCFS admission into the ``left`` budget tokens the running requests left (their
        Σ (1 + s_i) taken off), next to them (they have committed) and the ``held`` slots
        (:meth:`fast_step`); ``free`` blocks or reserved tokens. Returns
        :meth:`join_prefilled`'s answer, or None: nobody joins."""
        if left <= 0:
            return None
        joined, chunks, blocks, _, free = self.composer.admit_v1(rep, left, free,
                                                                rep.state.shape[1] + held)
        return self.join_prefilled(rep, joined, chunks, blocks, free) if joined else None

    def grow_running(self, rep: Replica, planned: PlannedDecode, prefix) -> int | None:
        """Paged mode: grow every running request's blocks for its 1 + s_i tokens (the
        plan's KV row is prompt + t = computed + 1) and note the tokens it has computed
        in a counting prefix cache; returns the free blocks left, or None (nothing changed)
        when the pool does not hold the growth."""
        state = rep.state
        bs = self.blocks.block_size
        ctx = planned.kv
        need = ctx + planned.plan.verified
        need += self.lookahead + bs - 1
        need //= bs
        need -= state[_BLOCKS]
        np.maximum(need, 0, out=need)
        total = int(_sum(need))
        free = prefix.n_free if prefix is not None else rep.free_blocks
        if total > free:
            return None
        if total:
            state[_BLOCKS] += need
            free -= total
            if prefix is not None:
                prefix.take(total)
        rep.free_blocks = free
        if prefix is not None:
            prefix.note_done(state[_UID], ctx, True)
        return free

    def join_prefilled(self, rep: Replica, joined: tuple[int, ...], chunks: list[int],
                       blocks: list[int], free: int) -> Prefilled:
        """Append the admitted requests' columns (a preempted one's parked column), each
        with its chunk prefilled and, in paged mode, its ``blocks``, and take them off the
        waiting queue; ``free`` the free blocks or reserved tokens afterwards. Returns what
        :meth:`~simulator.engine.v1.step.V1Step.prefill_joined` would (prompt tokens prefilled,
        the columns that completed their prefill, how many, the chunks' pass sums)."""
        k = len(joined)
        state = rep.state
        start = state.shape[1]
        waiting = rep.waiting
        paged = self.blocks is not None
        if paged:
            rep.free_blocks = free
        else:
            rep.kv_reserved = free
        parked = self.parked
        if k == 1 and joined[0] not in parked:  # scalars for one fresh column
            u, q = joined[0], chunks[0]
            rep.state = state = np.concatenate([state, self.initial[:, u:u + 1]], axis=1)
            state[_PREFILLED, start] = q
            if paged:
                state[_BLOCKS, start] = blocks[0]
            waiting.popleft()
            sums = (1, float(q), 0.0, 0.0, float(q * q))
            if q < state[_FILL, start]:
                rep.n_prefilling += 1
                return _tuple_new(Prefilled, (q, _EMPTY, 0, sums))
            return _tuple_new(Prefilled, (q, start, 1, sums))
        new = self.initial.take(joined, axis=1)  # a copy: fresh columns
        for j, u in enumerate(joined):
            waiting.popleft()
            col = parked.pop(u, None)
            if col is not None:  # resumed: position t, FILL = prompt + t
                new[:, j] = col
        new[_PREFILLED] = chunks
        if paged:
            new[_BLOCKS] = blocks
        fills = new[_FILL].tolist()
        rep.state = np.concatenate([state, new], axis=1)
        total = sum(chunks)
        sums = (k, float(total), 0.0, 0.0, float(sum(q * q for q in chunks)))
        done = [i for i in range(k) if chunks[i] >= fills[i]]
        rep.n_prefilling += k - len(done)
        if len(done) == k:
            return _tuple_new(Prefilled, (total, slice(start, None), k, sums))
        return _tuple_new(Prefilled, (total, np.asarray(done, dtype=_I64) + start, len(done),
                                      sums))
