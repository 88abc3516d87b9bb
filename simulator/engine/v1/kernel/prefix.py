"""The prefix cache's counting path in the compiled loop: simulator.engine.prefix.PrefixCache
in counting mode (``lazy``), the free queue as segments [uid, blocks r, hashed H] (uid −1:
anonymous), kept only while a named one is in it. The paged KV growth and preemption that call
these are in :mod:`~simulator.engine.v1.kernel.loop`.
"""

from __future__ import annotations

from numba import njit

from specbatch.simulator.engine.v1.kernel.layout import R_HEAD, R_NAMED, R_TAIL


@njit(cache=True)
def seg_take(n, regs, seg_uid, seg_r, parked_seg):
    """PrefixCache.take: ``n`` blocks off the queue's head (the free count is the caller's)."""
    if regs[R_NAMED] == 0:
        return
    head = regs[R_HEAD]
    while n:
        if seg_r[head] > n:
            seg_r[head] -= n
            break
        n -= seg_r[head]
        u = seg_uid[head]
        head += 1
        if u >= 0:
            parked_seg[u] = -1
            regs[R_NAMED] -= 1
    regs[R_HEAD] = head
    if regs[R_NAMED] == 0:
        regs[R_HEAD] = regs[R_TAIL] = 0


@njit(cache=True)
def seg_give(n, regs, seg_uid, seg_r, seg_h):
    """PrefixCache.give: ``n`` anonymous blocks join the queue's tail."""
    if regs[R_NAMED] and n:
        tail = regs[R_TAIL]
        if seg_uid[tail - 1] < 0:
            seg_r[tail - 1] += n
        else:
            seg_uid[tail], seg_r[tail], seg_h[tail] = -1, n, 0
            regs[R_TAIL] = tail + 1


@njit(cache=True)
def seg_park(u, held, hashed, free, regs, seg_uid, seg_r, seg_h, parked_seg):
    """PrefixCache.park of a preempted request holding ``held`` blocks, ``hashed`` hashed,
    with ``free`` blocks in the queue before it."""
    if not held or not hashed:
        seg_give(held, regs, seg_uid, seg_r, seg_h)
        return
    tail = regs[R_TAIL]
    if regs[R_NAMED] == 0 and free:
        seg_uid[tail], seg_r[tail], seg_h[tail] = -1, free, 0
        tail += 1
    seg_uid[tail], seg_r[tail], seg_h[tail] = u, held, hashed
    parked_seg[u] = tail
    regs[R_TAIL] = tail + 1
    regs[R_NAMED] += 1


@njit(cache=True)
def seg_touch(u, hits, regs, seg_uid, seg_r, parked_seg):
    """PrefixCache.touch in counting mode: the hits leave ``u``'s segment, the rest turns
    anonymous (the free count is the caller's)."""
    at = parked_seg[u]
    if at >= 0:
        seg_uid[at] = -1
        seg_r[at] -= hits
        parked_seg[u] = -1
        regs[R_NAMED] -= 1
        if regs[R_NAMED] == 0:
            regs[R_HEAD] = regs[R_TAIL] = 0


@njit(cache=True)
def seg_room(regs, seg_uid, seg_r, seg_h, parked_seg, want):
    """Move the live segments to the front when fewer than ``want`` slots are left at the
    tail; False when the arrays are too small even then (the caller grows them)."""
    cap = seg_uid.shape[0]
    if cap - regs[R_TAIL] >= want:
        return True
    head, tail = regs[R_HEAD], regs[R_TAIL]
    for j in range(head, tail):
        seg_uid[j - head], seg_r[j - head], seg_h[j - head] = seg_uid[j], seg_r[j], seg_h[j]
        if seg_uid[j] >= 0:
            parked_seg[seg_uid[j]] = j - head
    regs[R_HEAD], regs[R_TAIL] = 0, tail - head
    return cap - regs[R_TAIL] >= want

