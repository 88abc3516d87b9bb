"""Who runs a step of the compiled loop, with how many tokens: the composition.

As simulator.engine.v1.compose.V1Composer.compose (vLLM's ``Scheduler.schedule``): the running
requests first (:func:`schedule_running`: the token budget in admission order, KV growth,
preemption of the newest when the pool runs short), then, in a step that preempted nobody, the
waiting requests in queue order into what is left (:func:`admit_waiting`).

The module imports numba; import it only where numba is installed.
"""

from __future__ import annotations

from numba import njit

from specbatch.simulator.engine.v1.kernel.admission import heap_pop
from specbatch.simulator.engine.v1.kernel.layout import (
    C_POS,
    I_BLOCK_SIZE,
    I_BUDGET,
    I_CAPACITY,
    I_CHUNKED,
    I_LOOKAHEAD,
    I_MAX_SEQS,
    I_PAGED,
    I_PREFIX,
    I_PRIORITY,
    I_THRESHOLD,
    R_NAMED,
    S_BLOCKS,
    S_FILL,
    S_PREFILLED,
    S_UID,
)
from specbatch.simulator.engine.v1.kernel.prefix import seg_park, seg_take, seg_touch


@njit(cache=True)
def schedule_running(n, st, counts, prompt, decoding, plan_s, tokens, need, done_now, free,
                     nfront, front, preemptions, recomputed, hashed, done_tok, parked_seg,
                     seg_uid, seg_r, seg_h, ints, regs):
    """The ``n`` running requests (``st``) in admission order take min(ask, budget left)
    tokens into ``tokens`` (ask = 1 + s_i decoding, the rest of the prompt prefilling, both
    capped by the threshold); in paged mode each scheduled one's blocks grow for them, and
    when the ``free`` pool runs short the newest are preempted (V1Composer.preempt_walk) and
    parked at the front of the queue (``front``, ``nfront``), their blocks given back to the
    prefix cache's segments. Returns (budget tokens left, running requests kept, free
    blocks or reserved tokens, nfront)."""
    budget, threshold = ints[I_BUDGET], ints[I_THRESHOLD]
    paged, bs, lookahead, prefix = (
        ints[I_PAGED], ints[I_BLOCK_SIZE], ints[I_LOOKAHEAD], ints[I_PREFIX])
    left = budget
    for i in range(n):
        if decoding[i]:
            want = 1 + plan_s[i]
        else:
            want = st[S_FILL, i] - st[S_PREFILLED, i]
        if threshold and want > threshold:  # vLLM caps every running request
            want = threshold
        tok = want if want < left else left
        tokens[i] = tok
        left -= tok
    kept = n
    if paged and n:  # KVCacheManager.allocate_slots, preempting the newest when short
        total_need = 0
        for i in range(n):
            u = st[S_UID, i]
            tok = tokens[i]
            if decoding[i]:
                ctx = prompt[u] + counts[C_POS, u]
                computed = ctx - 1
                done_now[i] = ctx
            else:
                computed = st[S_PREFILLED, i]
                done_now[i] = computed + tok
                if st[S_FILL, i] < done_now[i]:
                    done_now[i] = st[S_FILL, i]
            g = -(-(computed + tok + lookahead) // bs) - st[S_BLOCKS, i]
            if g < 0 or tok == 0:
                g = 0
            need[i] = g
            total_need += g
        if total_need <= free:
            for i in range(n):
                st[S_BLOCKS, i] += need[i]
            free -= total_need
            if prefix and total_need:
                seg_take(total_need, regs, seg_uid, seg_r, parked_seg)
        else:  # V1Composer.preempt_walk
            i = 0
            acc = 0
            while acc + need[i] <= free:
                acc += need[i]
                i += 1
            for j in range(i):
                st[S_BLOCKS, j] += need[j]
            free -= acc
            if prefix and acc:
                seg_take(acc, regs, seg_uid, seg_r, parked_seg)
            end = n
            while i < end and tokens[i] > 0:
                while need[i] > free and end > i:
                    end -= 1
                    held = st[S_BLOCKS, end]
                    if prefix:
                        ue = st[S_UID, end]
                        h = done_tok[ue] // bs
                        if hashed[ue] > h:
                            h = hashed[ue]
                        hashed[ue] = 0
                        done_tok[ue] = 0
                        seg_park(ue, held, h, free, regs, seg_uid, seg_r, seg_h,
                                 parked_seg)
                    free += held
                if end == i:
                    break
                free -= need[i]
                st[S_BLOCKS, i] += need[i]
                if prefix and need[i]:
                    seg_take(need[i], regs, seg_uid, seg_r, parked_seg)
                i += 1
            for j in range(i, end):
                tokens[j] = 0
            kept = end
        if prefix:  # cache_scheduled: the tokens each scheduled request has computed
            for i in range(kept):
                if tokens[i] > 0:
                    done_tok[st[S_UID, i]] = done_now[i]
        for j in range(n - 1, kept - 1, -1):  # park the preempted, newest first
            u = st[S_UID, j]
            front[nfront] = u
            nfront += 1
            preemptions[u] += 1
            recomputed[u] += prompt[u] + counts[C_POS, u]
    return left, kept, free, nfront


@njit(cache=True)
def admit_waiting(n, kept, left, ghost_n, free, nfront, admitted, seen, heapn, st, counts,
                  prompt, order, footprint, front, recomputed, by_rank, heap, hashed,
                  parked_seg, seg_uid, seg_r, seg_h, decoding, tokens, ints, regs):
    """In a step that preempted nobody (``kept`` == ``n``), the waiting requests in queue
    order (the preempted at ``front`` first, then the arrivals the scheduler has ``seen``,
    or the priority ``heap``) join into the ``left`` budget tokens and the ``max_num_seqs``
    slots the running requests and the ``ghost_n`` held by the last step's finished (the
    async lag) leave (V1Composer.admit_v1): chunked or stopping at the first that does not
    fit, each with its prefix-cache hits and its blocks or reservation. Appends them to
    ``st`` and ``tokens``; returns (running + joined, free, nfront, admitted, heapn)."""
    max_seqs, priority, chunked = ints[I_MAX_SEQS], ints[I_PRIORITY], ints[I_CHUNKED]
    capacity, threshold = ints[I_CAPACITY], ints[I_THRESHOLD]
    paged, bs, prefix = ints[I_PAGED], ints[I_BLOCK_SIZE], ints[I_PREFIX]
    total = kept
    if kept == n and left > 0 and n < max_seqs - ghost_n:
        room = max_seqs - ghost_n - n
        joined = 0
        while nfront or admitted < seen or heapn:
            if left <= 0 or joined >= room:
                break
            resumed = nfront > 0
            if priority:
                u = by_rank[heap[0]]
            else:
                u = front[nfront - 1] if resumed else order[admitted]
            num_tokens = prompt[u] + counts[C_POS, u] if resumed else prompt[u]
            hits = 0
            if prefix and parked_seg[u] >= 0:
                at = parked_seg[u]
                hits = min(seg_r[at], seg_h[at], (num_tokens - 1) // bs)
            computed = hits * bs
            num = num_tokens - computed
            if threshold and num > threshold:
                num = threshold
            if num > left:
                if not chunked:
                    break
                num = left
            held = 0
            if paged:
                fresh = -(-(computed + num) // bs) - hits
                if fresh + hits > free:
                    break
                free -= fresh + hits
                held = fresh + hits
                if prefix:
                    if regs[R_NAMED]:
                        seg_touch(u, hits, regs, seg_uid, seg_r, parked_seg)
                    seg_take(fresh, regs, seg_uid, seg_r, parked_seg)
                    full = computed + num
                    if num_tokens < full:
                        full = num_tokens
                    hashed[u] = full // bs
            elif capacity >= 0:
                fp = footprint[u]
                if free + fp > capacity:
                    break
                free += fp
            if priority:
                heapn = heap_pop(heap, heapn)
            elif resumed:
                nfront -= 1
                recomputed[u] -= computed
            else:
                admitted += 1
            st[S_UID, total] = u
            st[S_PREFILLED, total] = computed
            st[S_FILL, total] = num_tokens
            st[S_BLOCKS, total] = held
            decoding[total] = False
            tokens[total] = num
            total += 1
            joined += 1
            left -= num
    return total, free, nfront, admitted, heapn
