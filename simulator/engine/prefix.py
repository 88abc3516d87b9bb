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

from collections import OrderedDict, deque
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from specbatch.simulator.workload.arrivals import Workload


def prefix_groups(workload: Workload) -> tuple[np.ndarray, np.ndarray]:
    """Each request's shared-prefix group (−1 = none) and that prefix's tokens, capped at its
    prompt: the workload's ``prefix_group`` / ``prefix_len`` columns, or none at all.
    # ([N], [N]) int64"""
    n = workload.n
    group = workload.prefix_group
    if group is None:
        return np.full(n, -1, dtype=np.int64), np.zeros(n, dtype=np.int64)
    shared = np.minimum(np.asarray(workload.prefix_len, dtype=np.int64), workload.prompt_len)
    return np.asarray(group, dtype=np.int64), np.where(group >= 0, shared, 0)


class PrefixCache:
    """One replica's block pool with hashed full blocks (module docstring).

    group:  # [N] int64 shared-prefix group of each request (−1 = none)
    shared: # [N] int64 length of that shared prefix in tokens
    lazy:   start in counting mode when no request has a shared-prefix group (below)

    Counting mode (``lazy``): without shared-prefix groups a request's hashes can only be
    found by that request readmitted after a preemption, so block identities change
    nothing a run observes but that request's hits. The cache counts the free blocks and
    remembers the tokens each running request has computed (no per-block work). A
    preempted request's blocks join the free queue's tail as one *segment* (:meth:`park`):
    its blocks j = n − 1 .. 0 in queue order, the first H of them hashed. Allocation pops
    the queue's head, so a segment loses its highest blocks first and keeps a prefix
    j < r; readmitted, the request finds min(r, H, ⌊(tokens − 1) / block_size⌋) blocks
    (:meth:`hits`), and what is left of its segment holds no hash (H never exceeds that
    cap: a preempted request's prompt + t is past every token it hashed), so it turns
    anonymous. The free queue is then a FIFO of anonymous runs and segments
    (``segments``, kept only while some segment is in it), which gives every count and
    hit the per-block pool gives (the parity tests run both) at a cost per preemption,
    not per block. :meth:`materialise` still builds the exact pool from the running
    requests' block counts (the hashes of finished requests, which no one asks for
    again, left out).
    """

    def __init__(self, pool: int, block_size: int, group: np.ndarray, shared: np.ndarray,
                 lazy: bool = True):
        self.block_size = block_size
        self.pool = pool
        self.n_free = pool  # blocks in the free queue (reference count 0)
        self.lazy = lazy and not bool((group >= 0).any())
        self.queue: OrderedDict[int, None] = OrderedDict()  # the free queue, LRU order
        self.hash_of: dict[int, tuple] = {}
        self.cached: dict[tuple, int] = {}
        self.ref: list[int] = []
        self.owned: dict[int, list[int]] = {}
        self.hashed = np.zeros(group.shape[0], dtype=np.int64)  # [N] leading blocks hashed
        self.done = np.zeros(group.shape[0], dtype=np.int64)  # [N] tokens hashable (counting)
        self.pending: tuple[np.ndarray, np.ndarray] | None = None  # last step's (uids, done)
        self.seen: set[int] = set()  # requests that hashed blocks (their own may be cached)
        self.group = group
        self.full_shared = shared // block_size  # blocks wholly inside the shared prefix
        # counting mode's free queue while it holds a preempted request's blocks, head first:
        # [uid, blocks r, hashed H] per segment (uid −1: an anonymous run of blocks)
        self.segments: deque[list[int]] = deque()
        self.parked: dict[int, list[int]] = {}  # uid -> its segment in ``segments``
        if not self.lazy:
            self.queue = OrderedDict((b, None) for b in range(pool))
            self.ref = [0] * pool

    @property
    def free(self) -> OrderedDict[int, None]:
        """The free queue of block ids, head first (exact mode)."""
        assert not self.lazy, "prefix cache: materialise() the counting mode first"
        return self.queue

    def materialise(self, uids: np.ndarray, blocks: np.ndarray) -> None:
        """Leave counting mode, given the running requests ``uids`` and the ``blocks`` each
        holds # [n]: number the held blocks request by request, hash each request's first
        ⌊done / block_size⌋ of them, and queue the rest of the pool as free."""
        if not self.lazy:
            return
        self.flush()
        self.lazy = False
        self.ref = [0] * self.pool
        nxt = 0
        for u, n in zip(uids.tolist(), blocks.tolist()):
            held = list(range(nxt, nxt + n))
            nxt += n
            self.owned[u] = held
            for b in held:
                self.ref[b] = 1
            self.hashed[u] = max(int(self.hashed[u]), int(self.done[u]) // self.block_size)
            for j in range(int(self.hashed[u])):
                h = self.key(u, j)
                self.cached[h] = held[j]
                self.hash_of[held[j]] = h
            if self.hashed[u]:
                self.seen.add(u)
        self.queue = OrderedDict((b, None) for b in range(nxt, self.pool))
        assert len(self.queue) == self.n_free, "prefix cache: counting mode lost blocks"

    def key(self, uid: int, j: int) -> tuple:
        """The hash of request ``uid``'s block ``j``: shared within its group's prefix."""
        if j < self.full_shared[uid]:
            return (int(self.group[uid]), j)
        return (-1 - uid, j)

    def allocate(self, uid: int, n: int) -> None:
        """``get_new_blocks``: ``n`` blocks from the head of the free queue, evicting hashes."""
        if self.lazy:
            self.take(n)
            return
        self.n_free -= n
        blocks = self.owned.setdefault(uid, [])
        queue, hash_of, ref = self.queue, self.hash_of, self.ref
        for _ in range(n):
            b, _ = queue.popitem(last=False)
            h = hash_of.pop(b, None)
            if h is not None:
                del self.cached[h]
            ref[b] = 1
            blocks.append(b)

    def allocate_many(self, uids: np.ndarray, counts: np.ndarray) -> None:
        """:meth:`allocate` ``counts[i]`` blocks to each of the distinct ``uids``, in order."""
        if self.lazy:
            self.take(int(counts.sum()))
            return
        for u, n in zip(uids.tolist(), counts.tolist()):
            self.allocate(u, n)

    def take(self, n: int) -> None:
        """Counting mode's :meth:`allocate`: ``n`` blocks off the free queue's head, the
        segments they reach losing their highest blocks (evicted hashes)."""
        self.n_free -= n
        if not self.parked:
            return
        segments = self.segments
        while n:
            head = segments[0]
            if head[1] > n:
                head[1] -= n
                break
            n -= head[1]
            segments.popleft()
            if head[0] >= 0:
                del self.parked[head[0]]
        if not self.parked:
            segments.clear()

    def give(self, n: int) -> None:
        """Counting mode: ``n`` blocks without a hash anyone asks for join the queue's tail."""
        self.n_free += n
        if self.parked and n:
            tail = self.segments[-1]
            if tail[0] < 0:
                tail[1] += n
            else:
                self.segments.append([-1, n, 0])

    def park(self, uid: int, held: int, hashed: int) -> None:
        """Counting mode's :meth:`release` of a preempted request holding ``held`` blocks,
        its first ``hashed`` of them hashed: one segment at the queue's tail."""
        if not held or not hashed:
            self.give(held)
            return
        if not self.parked and self.n_free:
            self.segments.append([-1, self.n_free, 0])  # the queue so far: anonymous
        segment = [uid, held, hashed]
        self.segments.append(segment)
        self.parked[uid] = segment
        self.n_free += held

    def release(self, uid: int, held: int | None = None) -> int:
        """``free``: the request's blocks back to the queue's tail, last block first (those
        no other running request holds). Returns how many joined the free queue. In
        counting mode the request (preempted: a finished one goes through
        :meth:`release_finished`) holds ``held`` blocks, hashed up to what it computed."""
        if self.lazy:
            assert held is not None, "prefix cache: counting mode releases a block count"
            self.flush()
            hashed = max(int(self.hashed[uid]), int(self.done[uid]) // self.block_size)
            self.hashed[uid] = self.done[uid] = 0
            self.park(uid, held, hashed)
            return held
        freed = 0
        ref = self.ref
        for b in reversed(self.owned.pop(uid, ())):
            ref[b] -= 1
            if ref[b] == 0:
                self.queue[b] = None
                freed += 1
        self.hashed[uid] = 0
        self.n_free += freed
        return freed

    def release_finished(self, uids: np.ndarray, blocks: np.ndarray) -> int:
        """:meth:`release` each of the finished ``uids`` (holding ``blocks`` # [f]) in order;
        returns the free blocks. In counting mode their blocks are only counted back: no
        one asks for their hashes again."""
        if self.lazy:
            self.give(int(blocks.sum()))
            return self.n_free
        for u in uids.tolist():
            self.release(u)
        return self.n_free

    def cache_full(self, uid: int, full: int) -> None:
        """``cache_full_blocks``: hash the request's first ``full`` blocks (a hash already
        cached keeps its block)."""
        start = int(self.hashed[uid])
        if full <= start:
            return
        if self.lazy:
            self.hashed[uid] = full
            return
        blocks = self.owned[uid]
        cached, hash_of = self.cached, self.hash_of
        group, shared, own = int(self.group[uid]), int(self.full_shared[uid]), -1 - uid
        for j in range(start, full):  # self.key(uid, j), inlined
            h = (group, j) if j < shared else (own, j)
            if h not in cached:
                cached[h] = blocks[j]
                hash_of[blocks[j]] = h
        self.seen.add(uid)
        self.hashed[uid] = full

    def note_done(self, uids: np.ndarray, done: np.ndarray, every: bool) -> None:
        """Counting mode: the distinct running ``uids`` have ``done`` # [n] tokens computed
        (prompt and output, never drafts), ⌊done / block_size⌋ full blocks to hash; the
        hashing waits for a preemption (:meth:`release`) or :meth:`materialise`. The arrays
        are kept as they are (never written later) until a step that does not schedule
        ``every`` running request, a preemption or :meth:`materialise` writes them down: a step
        that schedules every one of them supersedes the last step's numbers for all that still
        run."""
        if not every:
            self.flush()
        self.pending = (uids, done)

    def flush(self) -> None:
        """Write the kept :meth:`note_done` numbers into ``done`` # [N]."""
        if self.pending is not None:
            uids, done = self.pending
            self.done[uids] = done
            self.pending = None

    def cache_many(self, uids: np.ndarray, full: np.ndarray) -> None:
        """:meth:`cache_full` each of the distinct ``uids`` up to ``full`` blocks (each more
        than it hashed), in order."""
        if self.lazy:
            self.hashed[uids] = full
            return
        for u, f in zip(uids.tolist(), full.tolist()):
            self.cache_full(u, f)

    def hits(self, uid: int, tokens: int) -> list[int]:
        """``get_computed_blocks``: the leading cached blocks of a request of ``tokens``
        tokens, at most ⌊(tokens − 1) / block_size⌋. (In counting mode only a preempted
        request's segment holds any: its blocks' positions j, not pool ids.)"""
        out: list[int] = []
        if self.lazy:
            segment = self.parked.get(uid)
            if segment is None:
                return out
            return list(range(min(segment[1], segment[2], (tokens - 1) // self.block_size)))
        if self.group[uid] < 0 and uid not in self.seen:
            return out  # nothing of it was ever cached
        cached = self.cached
        group, shared, own = int(self.group[uid]), int(self.full_shared[uid]), -1 - uid
        for j in range((tokens - 1) // self.block_size):  # self.key(uid, j), inlined
            b = cached.get((group, j) if j < shared else (own, j))
            if b is None:
                break
            out.append(b)
        return out

    def evictable(self, blocks: list[int]) -> int:
        """How many of ``blocks`` sit in the free queue (reference count 0)."""
        if self.lazy:  # a waiting request's hits: all in its segment
            return len(blocks)
        return sum(1 for b in blocks if self.ref[b] == 0)

    def admit(self, uid: int, hits: list[int], fresh: int, full: int) -> None:
        """A request admitted with its ``hits`` (:meth:`touch`), ``fresh`` new blocks
        (:meth:`allocate`) and its first ``full`` blocks full (:meth:`cache_full`), in that
        order. In counting mode (no hits) that is the free count and the hashed blocks."""
        if self.lazy:
            if self.parked:
                self.touch(uid, hits)
            self.take(fresh)
            self.hashed[uid] = full
            return
        self.touch(uid, hits)
        self.allocate(uid, fresh)
        self.cache_full(uid, full)

    def touch(self, uid: int, blocks: list[int]) -> None:
        """``touch``: the request holds ``blocks`` (hits), out of the free queue."""
        self.hashed[uid] = len(blocks)
        if self.lazy:  # the hits leave the request's segment; the rest holds no hash
            segment = self.parked.pop(uid, None)
            if segment is not None:
                segment[0] = -1
                segment[1] -= len(blocks)
                self.n_free -= len(blocks)
                if not self.parked:
                    self.segments.clear()
            return
        for b in blocks:
            if self.ref[b] == 0:
                del self.queue[b]
                self.n_free -= 1
            self.ref[b] += 1
        self.owned[uid] = list(blocks)
