"""The vllm-v1 composer's reference twin: one request at a time, as vLLM's ``schedule()`` reads.

Written straight from ``vllm/v1/core/sched/scheduler.py`` (``Scheduler.schedule``) and
``vllm/v1/core/kv_cache_manager.py`` (``KVCacheManager.allocate_slots``), with plain Python
integers and lists instead of the vectorised composer's arrays (simulator.engine.v1.compose
states the rules). Under vLLM's hybrid KV cache manager (sliding-window groups,
simulator.engine.kv) it is the only composer: it charges each KV cache group's table
(simulator.engine.group_tables). The engine runs it with ``reference=True``; a parity test checks
it gives the same :class:`~simulator.engine.v1.compose.Composition` as
:meth:`simulator.engine.v1.compose.V1Composer.compose` at every step.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specbatch.simulator.engine.request_state import Replica, Row
from specbatch.simulator.engine.state import EnginePart
from specbatch.simulator.engine.v1.compose import Composition


@dataclass
class Request:
    """A running request as vLLM's scheduler sees it."""

    uid: int
    num_prompt_tokens: int
    num_output_tokens: int  # tokens emitted so far, t
    num_computed_tokens: int  # tokens whose KV this admission has computed
    num_to_prefill: int  # prompt (+ t after a preemption): computed tokens before it decodes
    num_spec_tokens: int  # drafts it verifies this step (s_i; 0 while prefilling)
    blocks: int

    @property
    def prefilling(self) -> bool:
        return self.num_computed_tokens < self.num_to_prefill

    @property
    def num_tokens(self) -> int:
        """Prompt + output tokens; the last emitted one's KV is not computed yet."""
        return self.num_prompt_tokens + self.num_output_tokens

    @property
    def num_tokens_with_spec(self) -> int:
        return self.num_tokens + self.num_spec_tokens

    @property
    def computed(self) -> int:
        """KV slots already computed: the prefilled tokens, or prompt + t − 1 decoding."""
        return self.num_computed_tokens if self.prefilling else self.num_tokens - 1


class V1Reference(EnginePart):
    """The reference composer, a part the vllm-v1 composer holds (``twin``) next to its own
    :meth:`~simulator.engine.v1.compose.V1Composer.compose`."""

    def compose_reference(self, rep: Replica, d_idx: np.ndarray | None,
                          verified: np.ndarray, held: int = 0) -> Composition:
        """:meth:`~simulator.engine.v1.compose.V1Composer.compose`, one request at a time
        (``held``: its ``max_num_seqs`` slots held under the async lag)."""
        state = rep.state
        spec = dict.fromkeys(range(state.shape[1]), 0)
        for j, s in zip(range(state.shape[1]) if d_idx is None else d_idx.tolist(),
                        verified.tolist()):
            spec[j] = s
        running = [Request(int(state[Row.UID, j]), int(state[Row.PROMPT, j]),
                           int(state[Row.POS, j]), int(state[Row.PREFILLED, j]),
                           int(state[Row.FILL, j]), spec[j], int(state[Row.BLOCKS, j]))
                   for j in range(state.shape[1])]
        paged = self.blocks is not None
        prefix = rep.prefix  # the block pool's identities (simulator.engine.prefix), or None
        if prefix is not None:
            free = len(prefix.free)
        else:
            free = rep.free_blocks if paged else rep.kv_reserved
        token_budget = int(self.max_batched)
        scheduled: dict[int, int] = {}
        preempted: list[Request] = []
        # vLLM's hybrid KV cache manager: one table per KV cache group (simulator.engine.kv)
        tables = self.blocks.tables if paged else None

        def allocate_slots(request: Request, num_new_tokens: int, lookahead: int) -> bool:
            nonlocal free
            if not paged:
                return True
            bs = self.blocks.block_size
            slots = request.computed + num_new_tokens + lookahead
            if tables is not None:  # remove_skipped_blocks, then the groups' new blocks
                freed = tables.remove_skipped(request.uid, request.computed)
                free += freed
                request.blocks -= freed
                new = tables.to_allocate(request.uid, slots)
                if new > free:
                    return False
                tables.commit(request.uid, slots)
                request.blocks += new
                free -= new
                return True
            new = max(-(-slots // bs) - request.blocks, 0)
            if new > free:
                return False
            request.blocks += new
            free -= new
            if prefix is not None and new:
                prefix.allocate(request.uid, new)
            return True

        # First, schedule the RUNNING requests.
        req_index = 0
        while req_index < len(running) and token_budget > 0:
            request = running[req_index]
            if request.prefilling:
                num_new_tokens = request.num_to_prefill - request.num_computed_tokens
            else:
                num_new_tokens = request.num_tokens_with_spec - request.computed
            if 0 < self.threshold < num_new_tokens:
                num_new_tokens = self.threshold
            num_new_tokens = min(num_new_tokens, token_budget)
            while True:
                can_schedule = allocate_slots(request, num_new_tokens, self.lookahead)
                if can_schedule:
                    break
                preempted_req = running.pop()  # the newest
                # its blocks back to the free queue (those no other request holds)
                free += (preempted_req.blocks if prefix is None
                         else prefix.release(preempted_req.uid))
                if tables is not None:
                    tables.release(preempted_req.uid)
                preempted_req.blocks = 0
                preempted.append(preempted_req)
                if preempted_req is request:
                    break
            if not can_schedule:
                break
            scheduled[request.uid] = num_new_tokens
            token_budget -= num_new_tokens
            req_index += 1

        # Full blocks of the scheduled running requests become cached (cache_full_blocks).
        if prefix is not None:
            for request in running:
                if request.uid in scheduled:
                    done = min(request.computed + scheduled[request.uid],
                               request.num_to_prefill if request.prefilling
                               else request.num_tokens)
                    prefix.cache_full(request.uid, done // self.blocks.block_size)

        # Next, schedule the WAITING requests (only in a step that preempted nobody).
        joined: list[Request] = []
        if not preempted:
            for uid in rep.waiting:
                if token_budget <= 0 or len(running) == self.max_seqs - held:
                    break
                parked = self.parked.get(uid)
                prompt = int(self.w.prompt_len[uid])
                t = 0 if parked is None else int(parked[Row.POS])
                request = Request(uid, prompt, t, 0, prompt + t, 0, 0)
                hits = prefix.hits(uid, request.num_tokens) if prefix is not None else []
                request.num_computed_tokens = len(hits) * (self.blocks.block_size if paged else 0)
                num_new_tokens = request.num_tokens - request.num_computed_tokens
                if 0 < self.threshold < num_new_tokens:
                    num_new_tokens = self.threshold
                if not self.chunked and num_new_tokens > token_budget:
                    break
                num_new_tokens = min(num_new_tokens, token_budget)
                if paged:
                    # allocate_slots: the hits held again count against the free pool when
                    # no running request holds them
                    bs = self.blocks.block_size
                    total = -(-(request.num_computed_tokens + num_new_tokens) // bs)
                    if tables is not None:  # a fresh table in every group
                        total = tables.to_allocate(uid, num_new_tokens)
                    new = total - len(hits)
                    evictable = prefix.evictable(hits) if prefix is not None else 0
                    if new + evictable > free:
                        break
                    free -= new + evictable
                    request.blocks = total
                    if tables is not None:
                        tables.commit(uid, num_new_tokens)
                    if prefix is not None:
                        prefix.touch(uid, hits)
                        prefix.allocate(uid, new)
                        prefix.cache_full(uid, min(request.num_computed_tokens + num_new_tokens,
                                                   request.num_tokens) // bs)
                elif self.kv_capacity is not None:
                    footprint = int(self.footprint[uid])
                    if free + footprint > self.kv_capacity:
                        break
                    free += footprint
                running.append(request)
                joined.append(request)
                scheduled[uid] = num_new_tokens
                token_budget -= num_new_tokens

        kept = len(running) - len(joined)
        tokens = np.asarray([scheduled.get(r.uid, 0) for r in running], dtype=np.int64)
        blocks = np.asarray([r.blocks for r in running], dtype=np.int64)
        return Composition(kept=kept, joined=tuple(r.uid for r in joined), tokens=tokens,
                           blocks=blocks, free=free,
                           cached=tuple(r.num_computed_tokens for r in joined))
