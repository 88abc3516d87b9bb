"""The vllm-v1 event loop compiled with numba: one call runs many steps of one replica.

The numpy engine (simulator.engine.core with simulator.engine.v1.step) is this kernel's
reference twin; :mod:`simulator.engine.v1.compiled` says where the kernel applies and drives it.
It covers one replica; FCFS or priority admission (a min-heap of simulator.engine.admission's
ranks); reserve or paged KV (the growth of simulator.engine.v1.compose.V1Composer.compose,
preemption of the newest by recompute as its ``preempt_walk``, and the prefix cache's counting
path, simulator.engine.prefix.PrefixCache with ``lazy``); ``long_prefill_token_threshold``;
chain policies planning d_i = s_i = min(k, proposed) (``fixed``; ``ar`` is k = 0; ``dsd``'s k
from its goodput scan every interval, α updated from each step's τ) or TETRIS's top-C of the
cumulative draft confidence (``tetris``, d_i = K; simulator.policies.papers.Tetris with
:func:`monotone_topc`, theory.allocate.budget's tie order; under BV its monotone_optimum); the
engines' policies (simulator.engine.v1.policy_arrays packs them): one K for the batch from a
table of the decoding batch size (``batch-schedule``: vLLM's
``num_speculative_tokens_per_batch_size`` and TensorRT-LLM's ``draft_len_schedule``;
``vllm-dynamic``'s goodput argmax), from SGLang's adaptive slots (``ema-adaptive``:
:func:`ema_observe`, :func:`ema_recompute`) or vLLM's adaptive verification (``vllm-adaptive``:
d_i = K, s_i the top B* slots, :func:`adaptive_plan`, its stale survival map per trace row),
the row-wise ones, (d_i, s_i) a table of the trace row (``threshold``, ``specdec++``,
``entropy-stop``), and the bounds ``hindsight`` (the prefix that accepts the most under the
step's η) and ``oracle`` under TV (top-C of the path's true survival); a chain rule scanning
its thresholds (TV: leading successes, BV: the last success; simulator.replay.chain); the
roofline's dense sums formula (simulator.cost.analytic.roofline.RooflineCost.time_from_sums)
or a role's PassTable (simulator.cost.tabulated.table_time: the calibrated model's passes,
:func:`role_time`), vLLM's host terms around it (simulator.cost.features.host.HostCost:
:func:`host_target`, :func:`host_draft`) and the rejection sampler's seconds
(simulator.cost.verify_cost.VerifyCost.seconds). Every float is computed by the numpy path's
expressions in the same order, on the same exact integer sums, so the step and request tables
are bit-identical (tests/simulator/engine/v1/test_compiled.py).

The step, as :meth:`~simulator.engine.v1.step.V1Step.composed_step` composes it (vLLM's
``Scheduler.schedule``): the decoding requests are planned first; running requests in
admission order take min(ask, budget left) tokens (ask = 1 + s_i decoding, the rest of the
prompt prefilling, both capped by the threshold), then, in a step that preempted nobody,
waiting prompts in queue order into what is left (chunked, or stopping at the first that
does not fit without chunked prefill); a decoding request cut by the budget verifies got − 1
drafts. η comes from the request's key and position (SplitMix64,
simulator.replay.chain.uniforms). Arrivals at or before a step's start are queued before it
(the engine's tie-break: arrivals, then step ends, then starts), and the next step starts at
time + duration, the engine's STEP_END event time.

The module imports numba; import it only where numba is installed.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from specbatch.simulator.cost.tabulated import grid_attention as _grid_attention

# int parameters (``ints``)
I_DEPTH, I_K, I_BUDGET, I_MAX_SEQS, I_CHUNKED, I_CAPACITY, I_DRAFTS_CHUNKS = range(7)
I_VERIFY, I_VOCAB, I_DRAFT_ROWS, I_BLOCK, I_LEADING, I_WRAP, I_PROPOSED = range(7, 14)
I_TETRIS, I_C = 14, 15  # the policy is tetris (TV, confidence surrogate); its C (-1: k per request)
I_PAGED, I_BLOCK_SIZE, I_LOOKAHEAD, I_POOL, I_PREFIX = range(16, 21)  # paged KV, counting cache
I_THRESHOLD = 21  # long_prefill_token_threshold (0: none)
I_DSD, I_KMAX, I_INTERVAL = 22, 23, 24  # the policy is dsd: its window's bound, its interval
I_DSD_VERIFY = 25  # dsd plans with the sampler's seconds (its price_verification was called)
I_PRIORITY = 26  # scheduling_policy "priority": the waiting queue is a heap of ranks
I_REPLICA = 27  # the replica's index (the step rows' first column)
I_POSITIVE = 28  # tetris under BV: monotone_optimum (top-C of the positive entries only)
# kernelpol: the engines' chain policies (simulator.policies.engines, simulator.policies.adaptive)
I_WINDOW = 35  # K from the batch-size table ``window`` (batch-schedule, vllm-dynamic; 0: off)
I_SLOTS = 36  # ema-adaptive: its SGLang slots, rows of ``slot_i`` / ``slot_f`` (0: not it)
I_ADAPTIVE = 37  # vllm-adaptive: 1 sizing B on stale confidences, 2 on fresh ones (0: not it)
I_ROWS = 38  # 1: (d_i, s_i) by trace row from ``row_d`` / ``row_s`` (threshold and the
# stops); 2: hindsight's s_i, the prefix that accepts the most under the step's η (d_i = K)
# (and I_TETRIS = 2: oracle under TV, tetris's top-C on ``conf`` = the path's true Π min(1, r),
# drafting K even at C = 0)
I_EVERY = 39  # an early stop's check interval in events (simulator.engine.core ``stop.every``;
# 0: no early stop): :func:`run_steps` returns STOP before a step whose events reach a check
N_INTS = 40
# float parameters (``floats``): the target's 10 pass constants, the draft's 10, then these
F_OVERHEAD, F_BANDWIDTH, F_VFLOOR, F_PER_POSITION, F_FUSED_FLOOR = range(20, 25)
F_SCALE = 25  # every pass's factor (analysis.sensitivity.ScaledCost; 1.0 = the model itself)
# the LM head's FLOPs per logit row of the target and the draft (PassConstants.head_flops), and
# whether the engine names a pass's logit rows (simulator.cost.interface.takes_logit_rows)
F_HEAD_T, F_HEAD_D, F_ROWS = 26, 27, 28
# vLLM's host terms (simulator.cost.features.host.HostCost around the padded roofline):
# whether they apply, async scheduling (max(t, a + b n) instead of t + b n), a = STEP_S,
# b = REQUEST_S, whether draft passes take the proposer floor, its k_small · g and N_ops · t_op
F_HOST, F_OVERLAP, F_STEP_S, F_REQUEST_S, F_FLOOR, F_KERNELS_S, F_OPS_S = range(29, 36)
F_OUTER = 36  # a ScaledCost's factor around the host terms (factor · host-adjusted pass; 1.0)
F_NSIZES = 37  # CUDA-graph capture sizes (0: no padding), listed from F_SIZES on, ascending
F_SIZES = 38
N_FLOATS = 38  # without sizes
# the replica's registers (``regs``): arrivals queued, arrivals admitted, running requests,
# reserved tokens (reserve) or free blocks (paged), step rows, preempted requests waiting in
# front, the prefix cache's segment queue (head, tail) and its named segments
R_ARRIVED, R_ADMITTED, R_RUNNING, R_FREE, R_ROWS, R_FRONT, R_HEAD, R_TAIL, R_NAMED = range(9)
R_FINISHED = 9  # requests finished so far (the caller's progress bar)
R_KNOW, R_DSTEPS = 10, 11  # dsd's window k_now and its steps planned (α: clock[1])
R_HEAPN = 12  # waiting requests in the priority heap
R_STEPPED = 13  # whether a step ran (the first step is woken by an arrival)
R_TICK = 14  # an early stop's events since its last check (simulator.engine.core's ``tick``)
R_SKIP = 15  # 1: the caller checked the events before the next step (STOP), go on past them
N_REGS = 16
# the step rows' two columns after STEP_COLUMNS: whether the step started on an arrival
# (the replica was idle) and that arrival's place in ``order``; the caller merges several
# replicas' rows into the engine's event order with them
W_WOKEN, W_BY = 14, 15
N_STEP_ROWS = 16
# kernelpol: ema-adaptive's slots (simulator.policies.engines.AdaptiveSlot), one row each:
# ``slot_i`` its batch-size key, update_interval, warmup_batches, the number of candidates, the
# current steps, the batches seen, then the candidates ascending; ``slot_f`` ema_alpha,
# down_hysteresis, up_hysteresis, ceiling_coeff and the EMA
SL_KEY, SL_INTERVAL, SL_WARMUP, SL_NC, SL_STEPS, SL_BATCHES, SL_CANDS = range(7)
SF_ALPHA, SF_DOWN, SF_UP, SF_COEFF, SF_EMA = range(5)
# ``pstate``: vllm-adaptive's generation of its stale-survival map (the rows stamped with it
# are in the map), ema-adaptive's slot of the last planned step (-1: none yet)
P_GEN, P_CURRENT = 0, 1
N_PSTATE = 2
# running state rows (``st``); a request's position and counters live in ``counts`` # [5, N]
S_UID, S_PREFILLED, S_FILL, S_BLOCKS = range(4)
N_ST = 4
C_POS, C_STEPS, C_DRAFTED, C_VERIFIED, C_ACCEPTED = range(5)  # RECORD_ROWS
# return codes
DONE, FULL, STUCK, GROW, STOP = 0, 1, 2, 3, 4

_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_POSMUL = np.uint64(0xD1B54A32D192ED03)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_S30, _S27, _S31, _S11 = np.uint64(30), np.uint64(27), np.uint64(31), np.uint64(11)
_UNIT = 1.0 / 9007199254740992.0  # 2**-53


@njit(cache=True)
def graph_pad(c, sq):
    """The CUDA-graph padding tokens of a pass of ``sq`` tokens (PaddedSumsCost.padding: the
    next captured size − Σq; 0 without sizes, for an empty pass or above the largest)."""
    m = int(c[F_NSIZES])
    if m:
        tokens = int(sq)
        if tokens != 0 and tokens <= c[F_SIZES + m - 1]:
            lo, hi = 0, m
            while lo < hi:  # bisect_left
                mid = (lo + hi) // 2
                if c[F_SIZES + mid] < tokens:
                    lo = mid + 1
                else:
                    hi = mid
            return c[F_SIZES + lo] - tokens
    return 0.0


@njit(cache=True)
def pass_time(c, off, sq, skv, sqkv, sqq, rows):
    """RooflineCost.time_from_sums of a dense role (constants ``c[off:off + 10]``:
    flops_per_token, attn_flops, weight_bytes, kv_bytes, act_bytes_per_token, inv_compute,
    inv_memory, floor, fixed, comm_per_token; the LM head's FLOPs per row at F_HEAD_T /
    F_HEAD_D), its LM head at ``rows`` logit rows (< 0: every query token, ``rows=None``),
    the same expressions in the same order,
    times ``c[F_SCALE]`` (ScaledCost's factor · time; × 1.0 is exact), after padding the pass
    to the next CUDA-graph size as simulator.cost.features.graph_padding.PaddedSumsCost does
    (p requests of query 1 and KV 0: Σq and Σq² grow by p; :func:`graph_pad`)."""
    pad = graph_pad(c, sq)
    if pad:
        sq = sq + pad
        sqq = sqq + pad
    if sq <= 0.0:
        return c[F_SCALE] * 0.0
    flops = c[off] * sq + c[off + 1] * (sqkv + 0.5 * (sqq + sq))
    nbytes = c[off + 2] + c[off + 3] * (skv + 2.0 * sq) + c[off + 4] * sq
    if rows >= 0.0 and rows < sq:  # the LM head only at the sampled rows
        flops -= c[F_HEAD_T if off == 0 else F_HEAD_D] * (sq - rows)
    compute = flops * c[off + 5]
    top = compute
    memory = nbytes * c[off + 6]
    if memory > top:
        top = memory
    if c[off + 7] > top:
        top = c[off + 7]
    return c[F_SCALE] * (top + c[off + 8] + c[off + 9] * sq)


# A role's tabulated pass (simulator.cost.tabulated.PassTable), in two arrays appended to
# run_steps' arguments: ``tab`` # [6, Q_max + 1] the target's L[Q], C[Q], H[r] rows, then the
# draft's; ``tlaw`` # [2, N_TLAW] per role (target, draft) these columns:
T_MODE = 0  # 1.0: the role is priced from its tables (role_time), 0.0: pass_time's roofline
T_FLOPS, T_FLOPS_RATE, T_KV, T_KV_RATE, T_OVERLAP, T_AFLOOR, T_PER_REQUEST = range(1, 8)
T_FIXED, T_FLOOR = 8, 9  # the launch: seconds added to every pass, the host floor
T_GRID = 10  # 1: a packed grid law (simulator.cost.tabulated.grid_attention) from N_TLAW on
N_TLAW = 11
grid_attention = njit(cache=True)(_grid_attention)
#: SHA-256 (16 hex) of simulator.cost.tabulated.grid_attention's source: numba's cache of the
#: kernels that call it is keyed on this file alone, so a change there must change this line
#: (a test pins the hash) or a cached kernel keeps the old law.
GRID_SOURCE = "cc14cc241eeed8b1"


@njit(cache=True)
def role_time(c, off, n, sq, skv, sqkv, sqq, rows, tab, tlaw):
    """One pass of the role at ``off`` (0 target, 10 draft) over ``n`` requests: pass_time's
    roofline, or where ``tlaw[role, T_MODE]`` is set the role's PassTable as
    simulator.cost.tabulated.table_time evaluates it (the same expressions in the same order:
    gpu = ((L[Q] + A) + C[Q]) + H[r], t = gpu + (fixed + max(0, floor − gpu)); H at r = Q
    unless 0 <= ``rows`` < Σq), after PaddedSumsCost's padding (p requests of query 1, KV 0:
    n, Σq and Σq² grow by p), times ``c[F_SCALE]``."""
    role = 0 if off == 0 else 1
    if tlaw[role, T_MODE] == 0.0:
        return pass_time(c, off, sq, skv, sqkv, sqq, rows)
    pad = graph_pad(c, sq)
    if pad:
        n = n + pad
        sq = sq + pad
        sqq = sqq + pad
    if sq <= 0.0:
        return c[F_SCALE] * 0.0
    q = int(sq)
    if q >= tab.shape[1]:
        raise ValueError("a pass past the compiled cost tables' tokens (compiled_gap's bound)")
    r = q
    if rows >= 0.0 and rows < sq:
        r = int(rows) if rows > 0.0 else 0
    law = tlaw[role]
    compute = law[T_FLOPS] * (sqkv + 0.5 * (sqq + sq)) / law[T_FLOPS_RATE]
    memory = law[T_KV] * (skv + 2.0 * sq) / law[T_KV_RATE]
    if law[T_OVERLAP] != 0.0:
        body = compute if compute >= memory else memory
    else:
        body = compute + memory
    attn = (law[T_AFLOOR] + law[T_PER_REQUEST] * n) + body
    if law[T_GRID] != 0.0:  # AttentionLaw.grid: the grid law replaces the linear one
        attn = grid_attention(law[N_TLAW:], n, sq, skv, sqkv, sqq)
    row = 3 * role
    gpu = ((tab[row, q] + attn) + tab[row + 1, q]) + tab[row + 2, r]
    short = law[T_FLOOR] - gpu
    return c[F_SCALE] * (gpu + (law[T_FIXED] + (short if short > 0.0 else 0.0)))


@njit(cache=True)
def host_target(c, t, n):
    """HostCost.target_seconds(t, n) of a target pass over ``n`` scheduled requests (t itself
    without the host terms): t if t <= 0 or n <= 0; max(t, a + b·n) under async scheduling
    (Python's max: t unless a + b·n > t); else t + b·n; times ``c[F_OUTER]`` (a ScaledCost
    around HostCost; × 1.0 is exact)."""
    if c[F_HOST] == 0.0 or t <= 0.0 or n <= 0:
        return c[F_OUTER] * t
    if c[F_OVERLAP] != 0.0:
        h = c[F_STEP_S] + c[F_REQUEST_S] * np.float64(n)
        return c[F_OUTER] * (h if h > t else t)
    return c[F_OUTER] * (t + c[F_REQUEST_S] * np.float64(n))


@njit(cache=True)
def host_draft(c, t):
    """HostCost's draft pass: host.draft_pass_floor(t, layers, d2t) = max(t + k_small · g,
    N_ops · t_op) where the drafter has layers (0 stays 0), else t; times ``c[F_OUTER]``."""
    if c[F_FLOOR] == 0.0 or t <= 0.0:
        return c[F_OUTER] * t
    a = t + c[F_KERNELS_S]
    b = c[F_OPS_S]
    return c[F_OUTER] * (b if b > a else a)


@njit(cache=True)
def eta(key, pos, j):
    """η_j of the request with stream ``key`` at output position ``pos`` (uniforms)."""
    seed = key ^ (np.uint64(pos) * _POSMUL)
    x = seed + np.uint64(j + 1) * _GOLDEN
    x ^= x >> _S30
    x *= _M1
    x ^= x >> _S27
    x *= _M2
    x ^= x >> _S31
    x >>= _S11
    return np.float64(x) * _UNIT


@njit(cache=True)
def verify_seconds(floats, ints, n, vsum, smax, snonzero):
    """VerifyCost.seconds(n, Σ s, s) from its counts (max s_i, #{s_i > 0})."""
    if n == 0:
        return 0.0
    if vsum == 0:
        floor = floats[F_FUSED_FLOOR]
    elif ints[I_BLOCK] and floats[F_PER_POSITION] != 0.0:
        floor = floats[F_VFLOOR]
        per = floats[F_PER_POSITION] * smax
        if per > floor:
            floor = per
    else:
        floor = floats[F_VFLOOR]
    draft_rows = ints[I_DRAFT_ROWS]
    rows = n + vsum * (2 if draft_rows else 1)
    if ints[I_BLOCK] and vsum:
        rows += 2 * (1 + draft_rows) * snonzero
    nbytes = np.float64(4 * ints[I_VOCAB] * rows)
    return nbytes / floats[F_BANDWIDTH] + floor


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
        t += host_draft(floats, role_time(floats, 10, fn, fn, c, c, fn, -1.0, tab, tlaw))
    if ints[I_DSD_VERIFY]:
        t += verify_seconds(floats, ints, n, n * k, k, n if k else 0)
    return tokens / t if t > 0 else np.inf


@njit(cache=True)
def heap_push(heap, size, value):
    """Push ``value`` onto the min-heap ``heap[:size]``; returns the new size."""
    i = size
    heap[i] = value
    while i > 0:
        parent = (i - 1) // 2
        if heap[parent] <= heap[i]:
            break
        heap[parent], heap[i] = heap[i], heap[parent]
        i = parent
    return size + 1


@njit(cache=True)
def heap_pop(heap, size):
    """Remove the smallest of the min-heap ``heap[:size]``; returns the new size."""
    size -= 1
    heap[0] = heap[size]
    i = 0
    while True:
        left, right, low = 2 * i + 1, 2 * i + 2, i
        if left < size and heap[left] < heap[low]:
            low = left
        if right < size and heap[right] < heap[low]:
            low = right
        if low == i:
            break
        heap[low], heap[i] = heap[i], heap[low]
        i = low
    return size


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

# ---------------------------------------------------------------- the counting prefix cache
# simulator.engine.prefix.PrefixCache in counting mode (``lazy``): the free queue as segments
# [uid, blocks r, hashed H] (uid −1: anonymous), kept only while a named one is in it.


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


@njit(cache=True)
def step_events(arrival, order, arrived, n_req, t, stepped, idle):
    """How many events the numpy engine (simulator.engine.core) pops between the start of
    the replica's last step and the start of its next one (or the run's end), one replica
    behind it: the arrivals while the last step ran (``t`` its end; at equal times arrivals
    pop first), its STEP_END, then, when that leaves it ``idle`` (nothing running or
    queued), the arrivals at the next arrival's time and their SCHEDULE event (the first
    step: those alone). simulator.engine.v1.compiled.step_events lists the same events."""
    i = arrived
    events = 0
    if stepped:
        while i < n_req and arrival[order[i]] <= t:
            i += 1
        events = i - arrived + 1
    if idle and i == arrived and arrived < n_req:
        a = arrival[order[i]]
        while i < n_req and arrival[order[i]] <= a:
            i += 1
        events += i - arrived + 1
    return events


@njit(cache=True)
def run_steps(arrival, order, prompt, out, base, keys, wrap, footprint, proposed, thr, thr2,
              conf, ints, floats, st, regs, clock, first_token, finish, counts, steps,
              preemptions, recomputed, front, hashed, done_tok, parked_seg, seg_uid, seg_r,
              seg_h, rank, by_rank, heap, tab, tlaw,
              # kernelpol: the engines' chain policies
              window, slot_i, slot_f, pstate, prev_src, prev_stamp, d_table, v_table, row_d,
              row_s):
    """Run steps until every request finished (returns DONE) or ``steps`` # [14, cap] is
    full (FULL: call again after taking its rows); GROW when the segment arrays need room;
    STUCK when a step would schedule nothing; STOP (``ints[I_EVERY]`` > 0, an early stop)
    before the next step when its events (:func:`step_events`) would bring ``regs[R_TICK]``
    to the check interval: the caller walks them, calling the rule, and calls again with
    ``regs[R_SKIP]`` = 1 (and the events' ticks in R_TICK) to go on.

    arrival # [N] float64, order # [N] its stable argsort; prompt, out, base, footprint,
    wrap # [N] int64; keys # [N] uint64; proposed # [rows] int64 (unread without I_PROPOSED);
    thr # [rows, K] TV's min(1, r) or BV's h, thr2 BV's p; conf # [rows, K] tetris's
    cumulative confidence; st # [4, max_seqs] the running batch; regs # [9]; clock # [1];
    first_token, finish # [N]; counts # [5, N] RECORD_ROWS (position t and counters, live);
    preemptions, recomputed # [N]; front # [N] preempted uids waiting before the arrivals
    (top = head of the queue); hashed, done_tok, parked_seg # [N] the counting prefix
    cache's per-request numbers; seg_uid, seg_r, seg_h # [cap] its segments; rank, by_rank,
    heap # [N] under priority admission: each request's (priority, arrival, uid) rank, the
    uid of each rank, the waiting ranks' min-heap (simulator.engine.admission); tab # [6,
    Q_max + 1] and tlaw # [2, N_TLAW] the roles' PassTables (:func:`role_time`; T_MODE 0:
    the roofline of ``floats``).

    The engines' policies (simulator.engine.v1.policy_arrays; placeholders for the others):
    window # [max_seqs + 1] int64 K by decoding batch size (I_WINDOW its length); slot_i #
    [slots, 6 + candidates] int64, slot_f # [slots, 5] ema-adaptive's slots (SL_*, SF_*; state
    updated in place); pstate # [N_PSTATE] int64 (P_GEN, P_CURRENT); prev_src, prev_stamp #
    [trace rows + K + 2] int64 vllm-adaptive's stale survival map (the row whose survival the
    entry holds, the generation that wrote it); d_table # [max_seqs + 1], v_table #
    [max_tokens + 1] float64 its profiled D(n) and V(t) in ms; row_d, row_s # [trace rows]
    int64 a row-wise policy's drafted and verified lengths of every trace row."""
    n_req = order.shape[0]  # this replica's requests (round-robin: every R-th arrival)
    depth, k, budget, max_seqs = ints[I_DEPTH], ints[I_K], ints[I_BUDGET], ints[I_MAX_SEQS]
    chunked, capacity, drafts_chunks = ints[I_CHUNKED], ints[I_CAPACITY], ints[I_DRAFTS_CHUNKS]
    has_verify, leading = ints[I_VERIFY], ints[I_LEADING]
    has_wrap, has_proposed = ints[I_WRAP], ints[I_PROPOSED]
    tetris, c_budget = ints[I_TETRIS], ints[I_C]
    paged, bs, lookahead, prefix = (
        ints[I_PAGED], ints[I_BLOCK_SIZE], ints[I_LOOKAHEAD], ints[I_PREFIX])
    threshold = ints[I_THRESHOLD]
    dsd, k_max, interval = ints[I_DSD], ints[I_KMAX], ints[I_INTERVAL]
    priority = ints[I_PRIORITY]
    heapn = regs[R_HEAPN]
    overhead = floats[F_OVERHEAD]
    arrived, admitted, n, free, nrows = (regs[R_ARRIVED], regs[R_ADMITTED], regs[R_RUNNING],
                                         regs[R_FREE], regs[R_ROWS])
    nfront = regs[R_FRONT]
    t = clock[0]
    cap = steps.shape[1]
    tokens = np.zeros(max_seqs, dtype=np.int64)
    need = np.zeros(max_seqs, dtype=np.int64)
    done_now = np.zeros(max_seqs, dtype=np.int64)
    plan_s = np.zeros(max_seqs, dtype=np.int64)
    plan_d = np.zeros(max_seqs, dtype=np.int64)
    kept_d = np.zeros(max_seqs, dtype=np.int64)
    kept_kv = np.zeros(max_seqs, dtype=np.int64)
    decoding = np.zeros(max_seqs, dtype=np.bool_)
    dec_idx = np.zeros(max_seqs, dtype=np.int64)
    dec_row = np.zeros(max_seqs, dtype=np.int64)
    values = np.zeros((max_seqs, max(depth, 1)))
    flat = np.zeros(max_seqs * max(depth, 1))
    topc = np.zeros(max_seqs, dtype=np.int64)
    last_tau = np.zeros(max_seqs, dtype=np.int64)
    # kernelpol: the engines' chain policies
    n_window, n_slots, adaptive = ints[I_WINDOW], ints[I_SLOTS], ints[I_ADAPTIVE]
    by_row = ints[I_ROWS]
    scores = np.zeros(max_seqs * max(depth, 1) if adaptive else 1)
    code = DONE
    while True:
        if nrows >= cap:
            code = FULL
            break
        if prefix and not seg_room(regs, seg_uid, seg_r, seg_h, parked_seg, 2 * max_seqs + 8):
            code = GROW
            break
        if ints[I_EVERY] > 0:  # an early stop: count the engine's events before this step
            if regs[R_SKIP]:
                regs[R_SKIP] = 0
            else:
                events = step_events(arrival, order, arrived, n_req, t, regs[R_STEPPED],
                                     n == 0 and admitted == arrived and nfront == 0
                                     and heapn == 0)
                if regs[R_TICK] + events >= ints[I_EVERY]:
                    code = STOP  # a check falls among them: the caller walks them
                    break
                regs[R_TICK] += events
        woken = -1  # the arrival that wakes an idle replica (its place in ``order``)
        if n == 0 and admitted == arrived and nfront == 0 and heapn == 0:
            if arrived == n_req:
                code = DONE
                break
            a = arrival[order[arrived]]
            if a > t or not regs[R_STEPPED]:
                woken = arrived
            if a > t:
                t = a
        while arrived < n_req and arrival[order[arrived]] <= t:
            if priority:  # queued by rank (PriorityWaiting); ``admitted`` follows ``arrived``
                heapn = heap_push(heap, heapn, rank[order[arrived]])
                admitted += 1
            arrived += 1
        # ---- plan: every decoding request's (d_i, s_i), before the composition
        nd = 0
        d_all = 0
        for i in range(n):
            decoding[i] = st[S_PREFILLED, i] >= st[S_FILL, i]
            if decoding[i]:
                u = st[S_UID, i]
                pos = counts[C_POS, u]
                dec_idx[nd] = i
                dec_row[nd] = base[u] + (pos % wrap[u] if has_wrap else pos)
                nd += 1
        if tetris and nd:
            for m in range(nd):
                for j in range(depth):
                    values[m, j] = conf[dec_row[m], j]
            c_step = k * nd if c_budget < 0 else c_budget
            monotone_topc(values, nd, depth, c_step, flat, topc, ints[I_POSITIVE] != 0)
            d_all = depth if c_step > 0 or tetris == 2 else 0  # kernelpol: oracle drafts K
        if adaptive and nd:  # kernelpol: VllmAdaptive.decide: d_i = K, s_i the top B* slots
            adaptive_plan(nd, depth, dec_row, conf, proposed, has_proposed, adaptive == 1,
                          prev_src, prev_stamp, pstate[P_GEN], d_table, v_table, values,
                          flat, scores, topc)
            d_all = depth
        k_step = k
        if n_window and nd:  # kernelpol: BatchSchedule.window / VllmDynamic's table of n
            k_step = window[nd if nd < n_window else n_window - 1]
        if n_slots and nd:  # kernelpol: EmaAdaptive.route: the slot of the largest key <= n
            cur = 0
            for r in range(n_slots):
                if slot_i[r, SL_KEY] <= nd:
                    cur = r
            pstate[P_CURRENT] = cur
            k_step = slot_i[cur, SL_STEPS]
        if dsd and nd:  # DynamicSD.decide: re-plan every ``interval`` steps, probe at k = 0
            k_step = regs[R_KNOW]
            if regs[R_DSTEPS] % interval == 0:
                skv_plan = 0
                for m in range(nd):
                    u = st[S_UID, dec_idx[m]]
                    skv_plan += prompt[u] + counts[C_POS, u]
                best_k, best = 0, -np.inf
                for kk in range(k_max + 1):
                    g = dsd_goodput(kk, nd, skv_plan, clock[1], floats, ints, tab, tlaw) * (
                        1.1 if kk == 0 else 1.0)
                    if g < best:
                        break
                    best_k, best = kk, g
                regs[R_KNOW] = k_step = best_k
                if k_step == 0 and k_max >= 1:
                    k_step = 1
            regs[R_DSTEPS] += 1
        for m in range(nd):
            i = dec_idx[m]
            if tetris or adaptive:
                s = topc[m]
                d = d_all
            elif by_row == 1:  # kernelpol: a row-wise policy's lengths (StepView.row_table)
                s = row_s[dec_row[m]]
                d = row_d[dec_row[m]]
            elif by_row == 2:  # kernelpol: Hindsight.decide, under TV τ of s = K, under BV
                u = st[S_UID, i]  # the last m with η_m < p_m
                s = 0
                for j in range(depth):
                    if leading:
                        if eta(keys[u], counts[C_POS, u], j) < thr[dec_row[m], j]:
                            s += 1
                        else:
                            break
                    elif eta(keys[u], counts[C_POS, u], j) < thr2[dec_row[m], j]:
                        s = j + 1
                d = depth
            else:
                s = k_step
                d = k_step
            if has_proposed:
                p = proposed[dec_row[m]]
                if p < d:
                    d = p
                if p < s:
                    s = p
            plan_s[i] = s
            plan_d[i] = d
        # ---- compose: the running requests first, in admission order
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
        total = kept
        # ---- admission: waiting prompts FCFS into what the budget has left
        if kept == n and left > 0 and n < max_seqs:
            room = max_seqs - n
            joined = 0
            while nfront or admitted < arrived or heapn:
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
        if total == 0:
            if nfront or admitted < arrived or heapn or n:  # pragma: no cover - invariant
                code = STUCK
                break
            continue  # nothing runs: wait for the next arrival
        # ---- decode: verify, commit
        keep = 0
        dsum = vsum = asum = emitted = skv = svkv = svv = maxd = snz = smax = 0
        for i in range(kept):
            if not decoding[i] or tokens[i] == 0:
                continue
            u = st[S_UID, i]
            pos = counts[C_POS, u]
            s = plan_s[i]
            d = plan_d[i]
            if tokens[i] - 1 < s:  # cut by the budget
                s = tokens[i] - 1
                if s < d:
                    d = s
            kv = prompt[u] + pos
            tau = 0
            if s:
                row = base[u] + (pos % wrap[u] if has_wrap else pos)
                key = keys[u]
                if leading:
                    for j in range(s):
                        if eta(key, pos, j) < thr[row, j]:
                            tau += 1
                        else:
                            break
                else:
                    for j in range(s):
                        h = thr2[row, j] if j == s - 1 else thr[row, j]
                        if eta(key, pos, j) < h:
                            tau = j + 1
            e = tau + 1
            if out[u] - pos < e:
                e = out[u] - pos
            counts[C_POS, u] = pos + e
            counts[C_STEPS, u] += 1
            counts[C_DRAFTED, u] += d
            counts[C_VERIFIED, u] += s
            counts[C_ACCEPTED, u] += tau
            last_tau[i] = tau
            kept_d[keep] = d
            kept_kv[keep] = kv
            keep += 1
            dsum += d
            vsum += s
            asum += tau
            emitted += e
            skv += kv
            svkv += s * kv
            svv += s * s
            if d > maxd:
                maxd = d
            if s > smax:
                smax = s
            if s:
                snz += 1
        if dsd and keep:  # DynamicSD.observe: α ← 0.85 α + 0.15 Σ τ / (Σ τ + #{τ < s})
            successes = 0
            misses = 0
            for i in range(kept):
                if decoding[i] and tokens[i] > 0:
                    s = plan_s[i] if plan_s[i] < tokens[i] - 1 else tokens[i] - 1
                    if s > 0:
                        successes += last_tau[i]
                        if last_tau[i] < s:
                            misses += 1
            trials = successes + misses
            if trials > 0:
                clock[1] = 0.85 * clock[1] + 0.15 * successes / trials
        if n_slots and keep:  # kernelpol: EmaAdaptive.observe: the routed slot's update
            ema_observe(slot_i, slot_f, pstate[P_CURRENT], asum, keep)
        if adaptive == 1 and keep:  # kernelpol: VllmAdaptive.observe (stale confidences)
            old_gen = pstate[P_GEN]
            new_gen = old_gen + 1
            for m in range(keep, nd):  # planned, not run: they keep their entry and row
                row = dec_row[m]
                if prev_stamp[row] == old_gen:
                    prev_stamp[row] = new_gen
            for m in range(keep):  # the ones that ran: their survival under the next row
                row = dec_row[m] + last_tau[dec_idx[m]] + 1
                prev_src[row] = dec_row[m]
                prev_stamp[row] = new_gen
            pstate[P_GEN] = new_gen
        draft_t = 0.0
        verify_t = 0.0
        passes = 0
        sq = sc = sqc = sqq = 0
        if keep:
            sq = vsum + keep
            sc = skv
            sqc = svkv + skv
            sqq = svv + 2 * vsum + keep
            if depth:
                passes = depth if dsum == keep * depth else maxd
                if passes:
                    if dsum == keep * passes:
                        fn = np.float64(keep)
                        for dd in range(passes):
                            c = np.float64(skv + keep * dd)
                            draft_t += host_draft(floats, role_time(
                                floats, 10, fn, fn, c, c, fn, -1.0, tab, tlaw))
                    else:
                        for dd in range(passes):
                            m = 0
                            ks = 0
                            for i in range(keep):
                                if kept_d[i] > dd:
                                    m += 1
                                    ks += kept_kv[i]
                            c = np.float64(ks + m * dd)
                            fm = np.float64(m)
                            draft_t += host_draft(floats, role_time(
                                floats, 10, fm, fm, c, c, fm, -1.0, tab, tlaw))
            if has_verify:
                verify_t = verify_seconds(floats, ints, keep, vsum, smax, snz)
        # ---- prefill: the running requests' chunks, then the admitted ones'
        pn = pq = pc = pqc = pqq = 0
        for i in range(total):
            if i < kept and decoding[i]:
                continue
            q = tokens[i]
            if q == 0:
                continue
            c0 = st[S_PREFILLED, i]
            pn += 1
            pq += q
            pc += c0
            pqc += q * c0
            pqq += q * q
            st[S_PREFILLED, i] = c0 + q
        if pn and drafts_chunks:
            draft_t += host_draft(floats, role_time(
                floats, 10, np.float64(pn), np.float64(pq), np.float64(pc), np.float64(pqc),
                np.float64(pqq), np.float64(pn) if floats[F_ROWS] else -1.0, tab, tlaw))
        # logit rows n + S: a prefill chunk's last token only (V1Step.run_composed)
        rows = np.float64(sq + pq) - np.float64(pq - pn) if floats[F_ROWS] else -1.0
        target_t = host_target(floats, role_time(  # n: the decoding requests + the chunks
            floats, 0, np.float64(keep + pn), np.float64(sq + pq), np.float64(sc + pc),
            np.float64(sqc + pqc), np.float64(sqq + pqq), rows, tab, tlaw), keep + pn)
        end_t = t + draft_t + target_t + verify_t + overhead
        if keep == 0 and pq == 0:
            code = STUCK
            break
        completed = 0
        for i in range(total):
            if ((i >= kept or not decoding[i]) and tokens[i] > 0
                    and st[S_PREFILLED, i] >= st[S_FILL, i]):
                u = st[S_UID, i]
                if counts[C_POS, u] == 0:
                    first_token[u] = end_t
                counts[C_POS, u] += 1
                completed += 1
        emitted += completed
        row_out = steps[:, nrows]
        row_out[0] = ints[I_REPLICA]
        row_out[W_WOKEN] = 1.0 if woken >= 0 else 0.0
        row_out[W_BY] = woken
        regs[R_STEPPED] = 1
        row_out[1] = t
        row_out[2] = end_t
        row_out[3] = keep
        row_out[4] = pq
        row_out[5] = dsum
        row_out[6] = vsum
        row_out[7] = asum
        row_out[8] = emitted
        row_out[9] = passes
        row_out[10] = draft_t
        row_out[11] = target_t
        row_out[12] = verify_t
        row_out[13] = overhead
        nrows += 1
        # ---- retire the finished requests (the others keep their order)
        j = 0
        released = 0
        for i in range(total):
            u = st[S_UID, i]
            if counts[C_POS, u] >= out[u]:
                finish[u] = end_t
                regs[R_FINISHED] += 1
                if paged:
                    released += st[S_BLOCKS, i]
                elif capacity >= 0:
                    free -= footprint[u]
            else:
                if j != i:
                    for r in range(N_ST):
                        st[r, j] = st[r, i]
                j += 1
        if released:
            free += released
            if prefix:
                seg_give(released, regs, seg_uid, seg_r, seg_h)
        n = j
        t = t + (end_t - t)  # the engine's STEP_END event: time + duration, not ``end``
    regs[R_ARRIVED], regs[R_ADMITTED], regs[R_RUNNING] = arrived, admitted, n
    regs[R_FREE], regs[R_ROWS], regs[R_FRONT] = free, nrows, nfront
    regs[R_HEAPN] = heapn
    clock[0] = t
    return code
