"""vLLM V1's prefix cache of KV blocks (``enable_prefix_caching``, vllm-v1 paged mode).

Read from vllm-project/vllm: ``vllm/v1/core/block_pool.py`` (``BlockPool``:
``get_new_blocks``, ``free_blocks``, ``touch``, ``cache_full_blocks``), the free-block queue
of ``vllm/v1/core/kv_cache_utils.py`` (``FreeKVCacheBlockQueue``) and
``vllm/v1/core/kv_cache_manager.py`` (``KVCacheManager.get_computed_blocks``, ``free``):

- Every block is in the free queue while no running request holds it (reference count 0),
  in LRU order: allocation pops from the head, and a freed request's blocks are appended to
  the tail last block first (``free`` walks them reversed), so its tail blocks are evicted
  first. Popping a block that holds a cached hash evicts that hash.
- A block becomes cached once it is full of a request's computed tokens (prompt and output
  tokens, never drafts): its hash names the tokens of its whole prefix, so blocks inside a
  shared prefix (a ``prefix_group`` of the workload and its ``prefix_len``) have one hash
  per group and position, every other block a hash of its own request and position.
- At admission a request reuses its leading cached blocks (``get_computed_blocks``; at most
  ⌊(tokens − 1) / block_size⌋, the last token is always computed to get its logits): they
  leave the free queue if no running request holds them (``touch``) and count against the
  free pool like new blocks (``allocate_slots``). A preempted request readmitted finds its
  own freed blocks unless they were evicted meanwhile.

Blocks are numbered 0..pool − 1; the engine's per-request block counts (``Row.BLOCKS``) are
the blocks each request holds, shared ones included, and the free pool is the free queue's
length (a shared block returns to it when its last holder lets go).
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np


def prefix_groups(workload) -> tuple[np.ndarray, np.ndarray]:
    """Each request's shared-prefix group (−1 = none) and that prefix's tokens, capped at its
    prompt: the workload's ``prefix_group`` / ``prefix_len`` columns, or none at all.
    # ([N], [N]) int64"""
    n = workload.n
    group = getattr(workload, "prefix_group", None)
    if group is None:
        return np.full(n, -1, dtype=np.int64), np.zeros(n, dtype=np.int64)
    shared = np.minimum(np.asarray(workload.prefix_len, dtype=np.int64), workload.prompt_len)
    return np.asarray(group, dtype=np.int64), np.where(group >= 0, shared, 0)


class PrefixCache:
    """One replica's block pool with hashed full blocks (module docstring).

    group:  # [N] int64 shared-prefix group of each request (−1 = none)
    shared: # [N] int64 length of that shared prefix in tokens
    """

    def __init__(self, pool: int, block_size: int, group: np.ndarray, shared: np.ndarray):
        self.block_size = block_size
        self.free: OrderedDict[int, None] = OrderedDict((b, None) for b in range(pool))
        self.hash_of: dict[int, tuple] = {}
        self.cached: dict[tuple, int] = {}
        self.ref = [0] * pool
        self.owned: dict[int, list[int]] = {}
        self.hashed = np.zeros(group.shape[0], dtype=np.int64)  # [N] leading blocks hashed
        self.seen: set[int] = set()  # requests that hashed blocks (their own may be cached)
        self.group = group
        self.full_shared = shared // block_size  # blocks wholly inside the shared prefix

    def key(self, uid: int, j: int) -> tuple:
        """The hash of request ``uid``'s block ``j``: shared within its group's prefix."""
        if j < self.full_shared[uid]:
            return (int(self.group[uid]), j)
        return (-1 - uid, j)

    def allocate(self, uid: int, n: int) -> None:
        """``get_new_blocks``: ``n`` blocks from the head of the free queue, evicting hashes."""
        blocks = self.owned.setdefault(uid, [])
        for _ in range(n):
            b, _ = self.free.popitem(last=False)
            h = self.hash_of.pop(b, None)
            if h is not None:
                del self.cached[h]
            self.ref[b] = 1
            blocks.append(b)

    def release(self, uid: int) -> int:
        """``free``: the request's blocks back to the queue's tail, last block first (those
        no other running request holds). Returns how many joined the free queue."""
        freed = 0
        for b in reversed(self.owned.pop(uid, ())):
            self.ref[b] -= 1
            if self.ref[b] == 0:
                self.free[b] = None
                freed += 1
        self.hashed[uid] = 0
        return freed

    def cache_full(self, uid: int, full: int) -> None:
        """``cache_full_blocks``: hash the request's first ``full`` blocks (a hash already
        cached keeps its block)."""
        start = int(self.hashed[uid])
        if full <= start:
            return
        blocks = self.owned[uid]
        for j in range(start, full):
            h = self.key(uid, j)
            if h not in self.cached:
                self.cached[h] = blocks[j]
                self.hash_of[blocks[j]] = h
        self.seen.add(uid)
        self.hashed[uid] = full

    def hits(self, uid: int, tokens: int) -> list[int]:
        """``get_computed_blocks``: the leading cached blocks of a request of ``tokens``
        tokens, at most ⌊(tokens − 1) / block_size⌋."""
        out: list[int] = []
        if self.group[uid] < 0 and uid not in self.seen:  # nothing of it was ever cached
            return out
        for j in range((tokens - 1) // self.block_size):
            b = self.cached.get(self.key(uid, j))
            if b is None:
                break
            out.append(b)
        return out

    def evictable(self, blocks: list[int]) -> int:
        """How many of ``blocks`` sit in the free queue (reference count 0)."""
        return sum(1 for b in blocks if self.ref[b] == 0)

    def touch(self, uid: int, blocks: list[int]) -> None:
        """``touch``: the request holds ``blocks`` (hits), out of the free queue."""
        for b in blocks:
            if self.ref[b] == 0:
                del self.free[b]
            self.ref[b] += 1
        self.owned[uid] = list(blocks)
        self.hashed[uid] = len(blocks)
