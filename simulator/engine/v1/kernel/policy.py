"""The draft-length rules of the compiled loop, each a twin of its Python policy: DynamicSD's
goodput scan (simulator.policies.papers.DynamicSD, :func:`dsd_goodput`), TETRIS's top-C of the
cumulative confidence (theory.allocate.budget.monotone_topc, :func:`monotone_topc` with its
quickselect :func:`select`), SGLang's adaptive slots (simulator.policies.engines.AdaptiveSlot:
:func:`ema_observe`, :func:`ema_recompute`) and vLLM's adaptive verification
(simulator.policies.adaptive.VllmAdaptive, :func:`adaptive_plan`). The per-step planning that
calls them, and the table-driven policies, are in :mod:`~simulator.engine.v1.kernel.loop`.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from specbatch.simulator.engine.v1.kernel.layout import (
    F_OVERHEAD,
    I_DSD_VERIFY,
    SF_ALPHA,
    SF_COEFF,
    SF_DOWN,
    SF_EMA,
    SF_UP,
    SL_BATCHES,
    SL_CANDS,
    SL_INTERVAL,
    SL_NC,
    SL_STEPS,
    SL_WARMUP,
)
from specbatch.simulator.engine.v1.kernel.pricing import (
    draft_time,
    host_target,
    role_time,
    verify_seconds,
)


@njit(cache=True)
def dsd_goodput(k, n, skv, alpha, floats, ints, tab, tlaw):
    """DynamicSD.goodput(k) of a batch of ``n`` requests with Σ KV ``skv`` (the cost model's
    step_time on those arrays is the roofline of their exact sums), the same operations in
    the same order (simulator.policies.papers.DynamicSD)."""
    a = alpha
    if a >= 1.0:
        tokens = n * (k + 1.0)
    else:
        tokens = n * ((1.0 - a ** np.float64(k + 1)) / (1.0 - a))
    q = k + 1
    fn = np.float64(n)
    t = floats[F_OVERHEAD] + host_target(
        floats, role_time(floats, 0, fn, np.float64(n * q), np.float64(skv),
                          np.float64(q * skv), np.float64(n * q * q), -1.0, tab, tlaw), n)
    for d in range(k):
        c = np.float64(skv + n * d)
        t += draft_time(floats, fn, fn, c, c, fn, -1.0, tab, tlaw)
    if ints[I_DSD_VERIFY]:
        t += verify_seconds(floats, ints, n, n * k, k, n if k else 0)
    return tokens / t if t > 0 else np.inf


@njit(cache=True)
def select(a, m, kth):
    """The value of rank ``kth`` (0-based, ascending) among ``a[:m]`` — ``np.partition(a[:m],
    kth)[kth]`` — by quickselect in place (finite values: the cumulative confidences)."""
    lo, hi = 0, m - 1
    while lo < hi:
        pivot = a[(lo + hi) // 2]
        i, j = lo, hi
        while i <= j:
            while a[i] < pivot:
                i += 1
            while a[j] > pivot:
                j -= 1
            if i <= j:
                a[i], a[j] = a[j], a[i]
                i += 1
                j -= 1
        if kth <= j:
            hi = j
        elif kth >= i:
            lo = i
        else:
            return a[kth]
    return a[kth]


@njit(cache=True)
def monotone_topc(values, n, k, budget, flat, s, positive_only=False):
    """theory.allocate.budget.monotone_topc of ``values[:n, :k]`` (non-increasing rows) into
    ``s[:n]``: the entries ≥ the C-th largest value, surplus ties dropped from the end of
    the (j, row) order; ``positive_only``: its monotone_optimum (C capped at the positive
    entries: all of them when the C-th largest is not positive)."""
    total = n * k
    c = budget if budget < total else total
    for i in range(n):
        s[i] = 0
    if c <= 0:
        return
    m = 0
    for i in range(n):
        for j in range(k):
            flat[m] = values[i, j]
            m += 1
    threshold = select(flat, total, total - c)
    if positive_only and not threshold > 0.0:  # fewer than C positive entries: all of them
        for i in range(n):
            for j in range(k):
                if values[i, j] > 0.0:
                    s[i] += 1
        return
    selected = 0
    for i in range(n):
        for j in range(k):
            if values[i, j] >= threshold:
                s[i] += 1
                selected += 1
    excess = selected - c
    j = k - 1
    while excess > 0 and j >= 0:
        i = n - 1
        while excess > 0 and i >= 0:
            if values[i, j] == threshold:
                s[i] -= 1
                excess -= 1
            i -= 1
        j -= 1





# ---------------------------------------------------------------- kernelpol: engine policies


@njit(cache=True)
def ema_recompute(slot_i, slot_f, r):
    """AdaptiveSlot.recompute of slot ``r`` (simulator.policies.engines): from 0 steps probe
    the next candidate; else walk down while ema <= (0.5 if prev == 0 else prev − 0.5) +
    down, up (if it did not move down) while ema > current − 0.5 + up, then the ceiling."""
    nc = slot_i[r, SL_NC]
    old = slot_i[r, SL_STEPS]
    i = 0
    while slot_i[r, SL_CANDS + i] != old:
        i += 1
    ema = slot_f[r, SF_EMA]
    if old == 0:
        i = i + 1 if i + 1 < nc else nc - 1
        c = slot_i[r, SL_CANDS + i]
        if c > 0 and ema < 0:
            slot_f[r, SF_EMA] = np.float64(c - 1)
        slot_i[r, SL_STEPS] = c
        return
    start = i
    while i > 0:
        prev = slot_i[r, SL_CANDS + i - 1]
        if ema <= (0.5 if prev == 0 else prev - 0.5) + slot_f[r, SF_DOWN]:
            i -= 1
        else:
            break
    if i == start:
        while i < nc - 1 and ema > slot_i[r, SL_CANDS + i] - 0.5 + slot_f[r, SF_UP]:
            i += 1
    if slot_f[r, SF_COEFF] > 0:
        ceiling = int(np.ceil(ema * slot_f[r, SF_COEFF]))
        if ceiling < 1:
            ceiling = 1
        if ceiling < slot_i[r, SL_CANDS + i] <= old:
            while i > 0 and slot_i[r, SL_CANDS + i] > ceiling:
                i -= 1
    slot_i[r, SL_STEPS] = slot_i[r, SL_CANDS + i]


@njit(cache=True)
def ema_observe(slot_i, slot_f, r, accepted, count):
    """AdaptiveSlot.update of slot ``r`` with ``count`` > 0 requests that accepted
    ``accepted`` draft tokens in all: the EMA of their mean (when the slot drafts), the batch
    count, and a re-plan every update_interval batches after the warm-up."""
    if slot_i[r, SL_STEPS] > 0:
        alpha = slot_f[r, SF_ALPHA]
        slot_f[r, SF_EMA] = ((1 - alpha) * slot_f[r, SF_EMA]
                             + alpha * (np.float64(accepted) / count))
    slot_i[r, SL_BATCHES] += 1
    b, warm = slot_i[r, SL_BATCHES], slot_i[r, SL_WARMUP]
    if b > warm and (b - warm) % slot_i[r, SL_INTERVAL] == 0:
        ema_recompute(slot_i, slot_f, r)


@njit(cache=True)
def adaptive_plan(nd, depth, dec_row, conf, proposed, has_proposed, stale, prev_src,
                  prev_stamp, gen, d_table, v_table, values, flat, scores, topc):
    """VllmAdaptive.decide (simulator.policies.adaptive) for the ``nd`` decoding requests at
    trace rows ``dec_row``: B* = the first argmax over B of (n + Σ_{j≤B} S_(j)) / (D(n) +
    V(n + B)) on the sizing survival (the previous step's, ``prev_src`` of the rows stamped
    ``gen``, else ones; or the current one), the slots past a request's cap (K, or what the
    drafter proposed) left out; then the B best slots of the current survival into
    ``topc[:nd]`` (monotone_topc of the masked rows). Returns B*."""
    m = 0
    for i in range(nd):
        row = dec_row[i]
        cap = depth
        if has_proposed and proposed[row] < cap:
            cap = proposed[row]
        src = -1
        if stale and prev_stamp[row] == gen:
            src = prev_src[row]
        for j in range(depth):
            if j < cap:
                values[i, j] = conf[row, j]
                if not stale:
                    scores[m] = conf[row, j]
                elif src >= 0:
                    scores[m] = conf[src, j]
                else:
                    scores[m] = 1.0
                m += 1
            else:
                values[i, j] = -1.0
    ranked = np.sort(scores[:m])  # ascending: the j-th best is ranked[m - j]
    draft = d_table[nd if nd < d_table.shape[0] else d_table.shape[0] - 1]
    last = v_table.shape[0] - 1
    slope = v_table[last] - v_table[last - 1] if last >= 1 else 0.0
    best_b = 0
    best = -np.inf
    acc = 0.0
    for b in range(m + 1):
        if b:
            acc += ranked[m - b]
        tok = nd + b
        v = v_table[last] + slope * (tok - last) if tok > last else v_table[tok]
        g = (nd + acc) / (draft + v)
        if g > best:
            best_b, best = b, g
    monotone_topc(values, nd, depth, best_b, flat, topc)
    return best_b
