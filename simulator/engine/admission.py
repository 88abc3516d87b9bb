"""Admission of waiting requests into a replica's running batch, in both KV modes.

The waiting queue's order is the admission hook (:func:`waiting_queue`, the config's
``scheduling_policy``, vLLM's ``SchedulingPolicy`` in vllm/v1/core/sched/request_queue.py):
"fcfs" a deque in arrival order (a preempted request goes back to the front:
``FCFSRequestQueue.prepend_request``), "priority" a :class:`PriorityWaiting` ordered by
(priority, arrival time, uid), smaller first (``PriorityRequestQueue``, ordered by
``Request.__lt__`` of vllm/v1/request.py: priority, then ``arrival_time``, then
``request_id``; a preempted request is re-added by that order, never to the front). Every
admission below reads the queue from its head, so both orders run through the same code.

A part of the engine (simulator.engine.state.EnginePart): its methods read the engine's
declared state and write the replica's state matrix.

- Reserve mode (:meth:`Admission.admit`): head-of-line FCFS while ``max_num_seqs`` allows and,
  under a capacity, the whole footprint prompt + output + K + 1 fits.
- Paged mode (:meth:`Admission.schedule_paged`, :meth:`Admission.admit_paged`,
  simulator.engine.kv): grow the running requests' blocks first, preempting the newest by
  recomputation when the pool runs out; admit only in a step that preempted nobody, while the
  pool holds each joiner's prefill and first-token blocks.

Without chunked prefill a step that admits requests prefills at most
``max_num_batched_tokens`` prompt tokens (one request always fits).
"""

from __future__ import annotations

from bisect import bisect
from collections import deque
from collections.abc import Iterator
from typing import TYPE_CHECKING

import numpy as np

from specbatch.simulator.engine.request_state import Replica, Row
from specbatch.simulator.engine.state import EnginePart

if TYPE_CHECKING:
    from specbatch.simulator.workload.arrivals import Workload

_UID, _FILL = int(Row.UID), int(Row.FILL)


class PriorityWaiting:
    """A replica's waiting queue under ``scheduling_policy = "priority"``: uids sorted by
    their ``rank`` # [N] (each request's place in (priority, arrival, uid) order), with the
    deque operations admission uses. ``appendleft`` (a preempted request's return) inserts by
    rank too, as vLLM's ``PriorityRequestQueue.prepend_request`` does."""

    __slots__ = ("rank", "ranks", "uids")

    def __init__(self, rank: np.ndarray) -> None:
        self.rank = rank
        self.ranks: list[int] = []  # ascending
        self.uids: list[int] = []  # the uids in that order

    def append(self, uid: int) -> None:
        r = int(self.rank[uid])
        i = bisect(self.ranks, r)
        self.ranks.insert(i, r)
        self.uids.insert(i, uid)

    appendleft = append

    def popleft(self) -> int:
        del self.ranks[0]
        return self.uids.pop(0)

    def __getitem__(self, i: int) -> int:
        return self.uids[i]

    def __iter__(self) -> Iterator[int]:
        return iter(self.uids)

    def __len__(self) -> int:
        return len(self.uids)


def priority_rank(workload: Workload) -> np.ndarray:
    """Each request's place in vLLM's priority order: (priority, arrival, uid) ascending,
    priority 0 for a workload without the column. # [N] int64"""
    n = workload.n
    priority = (np.zeros(n, dtype=np.int64) if workload.priority is None
                else workload.priority)
    order = np.lexsort((np.arange(n), workload.arrival, priority))
    rank = np.empty(n, dtype=np.int64)
    rank[order] = np.arange(n, dtype=np.int64)
    return rank


def waiting_queue(policy: str, rank: np.ndarray | None) -> deque[int] | PriorityWaiting:
    """A replica's empty waiting queue under ``scheduling_policy`` ``policy`` (module
    docstring); ``rank`` is :func:`priority_rank`'s answer (None under "fcfs")."""
    return deque() if policy == "fcfs" else PriorityWaiting(rank)


class Admission(EnginePart):
    """Admission verbs of the engine (module docstring)."""

    def admit(self, rep: Replica) -> int:
        """Head-of-line admission from the waiting queue; returns how many requests joined
        (appended to the running arrays)."""
        if not rep.waiting:  # the common cases: nobody waits, or the batch is full
            return 0
        room = self.max_seqs - rep.state.shape[1]
        if room <= 0:
            return 0
        take: list[int] = []
        tokens = 0
        prompt = self.w.prompt_len
        capacity = self.kv_capacity  # KV reservations are tracked only under a capacity
        while rep.waiting and len(take) < room:
            u = rep.waiting[0]
            if capacity is not None:
                fp = int(self.footprint[u])
                if rep.kv_reserved + fp > capacity:
                    break
            if (not self.chunked and self.max_batched is not None and take
                    and tokens + int(prompt[u]) > self.max_batched):
                break
            rep.waiting.popleft()
            take.append(u)
            if capacity is not None:
                rep.kv_reserved += fp
            tokens += int(prompt[u])
        if not take:
            return 0
        new = self.initial.take(take, axis=1)  # [len(Row), joined] fresh state columns
        rep.state = np.concatenate([rep.state, new], axis=1)
        rep.n_prefilling += len(take)
        return len(take)

    def admit_paged(self, rep: Replica) -> int:
        """Paged-mode head-of-line admission (simulator.engine.kv, step 2): a request joins while
        ``max_num_seqs`` allows and the free pool holds ⌈(fill + 1) / block_size⌉ blocks for
        it (allocated now without chunked prefill, per chunk with it); a preempted request
        rejoins with its parked column (position t, FILL = prompt + t)."""
        room = self.max_seqs - rep.n_running
        if not rep.waiting or room <= 0:
            return 0
        take: list[int] = []
        needs: list[int] = []
        revived: list[tuple[int, np.ndarray]] = []  # (index in take, parked column)
        tokens = promised = 0
        prompt, parked = self.w.prompt_len, self.parked
        while rep.waiting and len(take) < room:
            u = rep.waiting[0]
            col = parked.get(u)
            fill = int(prompt[u]) if col is None else int(col[_FILL])
            need = self.blocks.admission_blocks(fill)
            if promised + need > rep.free_blocks:
                break
            if (not self.chunked and self.max_batched is not None and take
                    and tokens + fill > self.max_batched):
                break
            rep.waiting.popleft()
            if col is not None:
                revived.append((len(take), parked.pop(u)))
            take.append(u)
            needs.append(need)
            promised += need
            tokens += fill
        if not take:
            return 0
        new = self.initial.take(take, axis=1)  # [len(Row), joined] fresh state columns
        for j, col in revived:
            new[:, j] = col
        if not self.chunked:  # the prefill's blocks now; chunked prefill allocates per chunk
            new[Row.BLOCKS] = needs
            rep.free_blocks -= promised
        rep.state = np.concatenate([rep.state, new], axis=1)
        rep.n_prefilling += len(take)
        return len(take)

    def park(self, rep: Replica, gone: np.ndarray) -> None:
        """Preempted requests' columns ``gone`` # [len(Row), p], newest first
        (:func:`simulator.engine.kv.preempted_columns`) wait at the front of the queue (the older of
        two preempted ends up in front) with their columns parked for re-admission; each
        counts a preemption and the tokens its recompute prefills."""
        for col in gone.T:
            u = int(col[_UID])
            self.parked[u] = col
            rep.waiting.appendleft(u)
            self.rec.preemptions[u] += 1
            self.rec.recomputed[u] += int(col[_FILL])

    def schedule_paged(self, rep: Replica) -> int:
        """Paged mode's step start (simulator.engine.kv): grow the decoding requests' blocks,
        preempting the newest when the pool runs out, then admit unless a preemption
        happened (and something still runs). Returns how many requests joined."""
        gone = self.blocks.grow(rep)  # [len(Row), p] newest first, or None
        if gone is not None:
            self.park(rep, gone)
            if rep.n_running:
                return 0
        return self.admit_paged(rep)
