"""Paged KV under vLLM V1's hybrid KV cache manager: a request's block table in every KV cache
group (simulator.cost.analytic.kv_groups lays the groups out), all groups drawing on one pool.

Rules, read from vLLM's source (vllm-project/vllm):

- ``vllm/v1/core/kv_cache_coordinator.py``, ``HybridKVCacheCoordinator``: a request has one
  block table per group; ``get_num_blocks_to_allocate`` sums the groups' needs and
  ``remove_skipped_blocks`` / ``allocate_new_blocks`` / ``free`` act on every group.
- ``vllm/v1/core/kv_cache_manager.py``, ``KVCacheManager.allocate_slots``: first
  ``remove_skipped_blocks(request, num_computed_tokens)`` (done even when the request then
  cannot be scheduled), then the new blocks are counted and checked against the free pool.
- ``vllm/v1/core/single_type_kv_cache_manager.py``: a group with block size b_g holds a table
  of ⌈slots / b_g⌉ entries for slots = computed + new tokens + lookahead
  (``get_num_blocks_to_allocate``: max(⌈slots / b_g⌉ − len(table), 0) new blocks, the table's
  length counting the null blocks that replaced freed ones; a table never shrinks while the
  request runs). ``SlidingWindowManager.get_num_skipped_tokens``: the tokens behind the window
  of the next token, s = max(0, computed − W + 1); ``remove_skipped_blocks`` turns the first
  ⌊s / b_g⌋ entries into the null block and frees them. A full-attention group skips nothing.

So a request that has computed c tokens and holds slots S holds, in a sliding group,
⌈S / b_g⌉ − ⌊max(0, c − W + 1) / b_g⌋ blocks: at most ⌈(W − 1 + q) / b_g⌉ + 1 for a step of q
new slots, whatever its context (``SlidingWindowSpec.max_memory_usage_bytes``), where a full
group holds ⌈S / b_g⌉. Blocks behind the window are freed at the request's next
``allocate_slots``, i.e. after the step that computed past them, before its next step's
allocation; a request preempted first returns them with the rest.

:class:`GroupTables` keeps, per running request, each group's table length and null entries
(two integers per group, the identities of blocks do not matter without prefix caching).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from specbatch.simulator.cost.analytic.kv_groups import KVLayout


@dataclass
class GroupTables:
    """Every running request's table in each group of ``layout`` (uid -> per group
    [entries, null entries]); the engine's BLOCKS row holds each request's
    :meth:`held` total, what its preemption or finish returns to the pool."""

    layout: KVLayout
    tables: dict[int, list[list[int]]] = field(default_factory=dict)

    def remove_skipped(self, uid: int, computed: int) -> int:
        """``remove_skipped_blocks``: null the entries of every sliding group wholly behind
        the window of token ``computed``; returns the blocks freed."""
        table = self.tables.get(uid)
        if table is None:
            return 0
        freed = 0
        for group, entry in zip(self.layout.groups, table):
            if group.window:
                skipped = max(0, computed - group.window + 1) // group.block_size
                skipped = min(skipped, entry[0])
                if skipped > entry[1]:
                    freed += skipped - entry[1]
                    entry[1] = skipped
        return freed

    def to_allocate(self, uid: int, slots: int) -> int:
        """``get_num_blocks_to_allocate`` summed over the groups: new blocks for ``slots``."""
        table = self.tables.get(uid)
        if table is None:
            return sum(-(-slots // g.block_size) for g in self.layout.groups)
        return sum(max(-(-slots // g.block_size) - entry[0], 0)
                   for g, entry in zip(self.layout.groups, table))

    def commit(self, uid: int, slots: int) -> None:
        """``allocate_new_blocks``: every group's table grown to ⌈slots / b_g⌉ entries."""
        table = self.tables.setdefault(uid, [[0, 0] for _ in self.layout.groups])
        for g, entry in zip(self.layout.groups, table):
            entry[0] = max(entry[0], -(-slots // g.block_size))

    def held(self, uid: int) -> int:
        """Blocks ``uid`` holds over all groups (entries less null entries)."""
        return sum(e[0] - e[1] for e in self.tables.get(uid, ()))

    def release(self, uid: int) -> int:
        """``free``: drop ``uid``'s tables; returns the blocks it held."""
        held = self.held(uid)
        self.tables.pop(uid, None)
        return held


def lone_peak_blocks(layout: KVLayout, slots: int, step_slots: int) -> int:
    """The most blocks one request can hold alone: ⌈slots / b_g⌉ per full group and
    min(⌈slots / b_g⌉, ⌈(W − 1 + step_slots) / b_g⌉ + 1) per sliding group
    (``FullAttentionSpec`` / ``SlidingWindowSpec.max_memory_usage_bytes`` with max_model_len =
    ``slots``, the request's largest, and ``step_slots`` the most slots one step adds)."""
    total = 0
    for g in layout.groups:
        full = -(-slots // g.block_size)
        if g.window:
            full = min(full, -(-(g.window - 1 + step_slots) // g.block_size) + 1)
        total += full
    return total


def request_blocks(layout: KVLayout, computed, slots):
    """Blocks a running request holds over all groups once its table covers ``slots`` and its
    skipped blocks behind ``computed`` are freed: Σ_g ⌈slots / b_g⌉ − Σ_sliding
    ⌊max(0, computed − W + 1) / b_g⌋ (integers or arrays # [n] of them)."""
    total = 0
    for g in layout.groups:
        total = total + -(-slots // g.block_size)
        if g.window:
            total = total - np.maximum(computed - g.window + 1, 0) // g.block_size
    return total
