"""A step's seconds in the compiled loop: the roofline's dense sums formula
(simulator.cost.analytic.roofline.RooflineCost.time_from_sums, :func:`pass_time`) or a role's
PassTable (simulator.cost.tabulated.table_time: the calibrated model's passes,
:func:`role_time`), both after CUDA-graph padding (:func:`graph_pad`); vLLM's host terms around
them (simulator.cost.features.host.HostCost: :func:`host_target`, :func:`host_draft`) and the
rejection sampler's seconds (simulator.cost.verify_cost.VerifyCost.seconds,
:func:`verify_seconds`); the drafter's passes (:func:`draft_time`: a draft model's role, a
head's later passes, 0 s for the n-gram proposer or a free drafter; :func:`first_pass`: a
head's pass 1, a vLLM V1 draft model's pass 1 or the n-gram proposer's host seconds, once per
step on the target pass's sums; :func:`decode_draft_seconds`: a step's draft passes). Each is
the numpy path's expressions in the same order on the same exact integer sums, so the step
times are bit-identical.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from specbatch.simulator.cost.tabulated import grid_attention as _grid_attention
from specbatch.simulator.cost.tabulated import regime_attention as _regime_attention
from specbatch.simulator.engine.v1.kernel.layout import (
    DRAFT_HEAD,
    DRAFT_MODEL,
    DRAFT_MODEL_V1,
    DRAFT_NGRAM,
    F_BANDWIDTH,
    F_DRAFTER,
    F_FLOOR,
    F_FUSED_FLOOR,
    F_HEAD_D,
    F_HEAD_T,
    F_HOST,
    F_HP,
    F_KERNELS_S,
    F_MOE,
    F_NGRAM,
    F_NSIZES,
    F_OPS_S,
    F_OUTER,
    F_OVERLAP,
    F_PER_POSITION,
    F_REQUEST_S,
    F_ROWS,
    F_SCALE,
    F_SIZES,
    F_STEP_S,
    F_VFLOOR,
    HP_ACT,
    HP_ATTN,
    HP_BYTES,
    HP_BYTES1,
    HP_COMM,
    HP_EXPERT_BYTES,
    HP_EXPERTS,
    HP_FIXED,
    HP_FLOOR,
    HP_FLOPS,
    HP_FLOPS1,
    HP_INV_C,
    HP_INV_M,
    HP_KV,
    HP_LM,
    HP_MISS,
    I_BLOCK,
    I_DRAFT_ROWS,
    I_VOCAB,
    M_EXPERT_BYTES,
    M_EXPERTS,
    M_FP8,
    M_INV_FP8,
    M_MISS,
)


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
    """RooflineCost.time_from_sums of a role without sliding windows (constants
    ``c[off:off + 10]``:
    flops_per_token, attn_flops, weight_bytes, kv_bytes, act_bytes_per_token, inv_compute,
    inv_memory, floor, fixed, comm_per_token; the LM head's FLOPs per row at F_HEAD_T /
    F_HEAD_D), its LM head at ``rows`` logit rows (< 0: every query token, ``rows=None``),
    its W8A8 FP8 GEMMs and uniform-routing experts from F_MOE (5 a role),
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
    m = F_MOE + (0 if off == 0 else 5)
    if c[m + M_EXPERTS] != 0.0:  # E_touched(Σq) = E (1 − (1 − k/E)^Σq), theory.moe
        nbytes += c[m + M_EXPERT_BYTES] * (c[m + M_EXPERTS] * (1.0 - c[m + M_MISS] ** sq))
    compute = flops * c[off + 5]
    if c[m + M_FP8] != 0.0:  # W8A8 FP8: the quantised GEMMs at the FP8 peak
        compute += c[m + M_FP8] * sq * c[m + M_INV_FP8]
    top = compute
    memory = nbytes * c[off + 6]
    if memory > top:
        top = memory
    if c[off + 7] > top:
        top = c[off + 7]
    return c[F_SCALE] * (top + c[off + 8] + c[off + 9] * sq)


# A role's tabulated pass (simulator.cost.tabulated.PassTable), in two arrays appended to
# run_steps' arguments: ``tab`` # [8, Q_max + 1] the target's L[Q], C[Q], H[r] rows, then the
# draft's, then the target's and the draft's S[n] (TAB_SAMPLER + role); ``tlaw`` # [2, N_TLAW]
# per role (target, draft) these columns:
T_MODE = 0  # 1.0: the role is priced from its tables (role_time), 0.0: pass_time's roofline
T_FLOPS, T_FLOPS_RATE, T_KV, T_KV_RATE, T_OVERLAP, T_AFLOOR, T_PER_REQUEST = range(1, 8)
T_FIXED, T_FLOOR = 8, 9  # the launch: seconds added to every pass, the host floor
#: 1: a packed grid law (simulator.cost.tabulated.grid_attention) from N_TLAW on; 2: a packed
#: regime law (simulator.cost.tabulated.regime_attention) from N_TLAW on
T_GRID = 10
T_SAMPLER = 11  # 1: the role's PassTable has a sampler S[n] (tab row TAB_SAMPLER + role)
N_TLAW = 12
TAB_SAMPLER = 6
#: The grid and regime laws compiled from their one source (simulator.cost.tabulated;
#: compiled.kernel_stamp digests that file too, so a cached kernel never keeps an old law).
grid_attention = njit(cache=True)(_grid_attention)
regime_attention = njit(cache=True)(_regime_attention)


@njit(cache=True)
def role_time(c, off, n, sq, skv, sqkv, sqq, rows, tab, tlaw):
    """One pass of the role at ``off`` (0 target, 10 draft) over ``n`` requests: pass_time's
    roofline, or where ``tlaw[role, T_MODE]`` is set the role's PassTable as
    simulator.cost.tabulated.table_time evaluates it (the same expressions in the same order:
    gpu = ((L[Q] + A) + C[Q]) + (H[r] + S[n]), t = gpu + (fixed + max(0, floor − gpu)); H at
    r = Q unless 0 <= ``rows`` < Σq; S only where the table has a sampler), after
    PaddedSumsCost's padding (p requests of query 1, KV 0: n, Σq and Σq² grow by p), times
    ``c[F_SCALE]``."""
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
    if law[T_GRID] == 1.0:  # AttentionLaw.grid: the grid law replaces the linear one
        attn = grid_attention(law[N_TLAW:], n, sq, skv, sqkv, sqq)
    elif law[T_GRID] == 2.0:  # AttentionLaw.regimes: the regime law replaces it
        attn = regime_attention(law[N_TLAW:], n, sq, skv, sqkv, sqq)
    row = 3 * role
    head = tab[row + 2, r]
    if law[T_SAMPLER] != 0.0:  # PassTable.sampler: S[n] beside the LM head's rows
        s = int(n)
        if s >= tab.shape[1]:
            raise ValueError("a pass of more requests than the compiled cost tables' tokens")
        head = head + tab[TAB_SAMPLER + role, s]
    gpu = ((tab[row, q] + attn) + tab[row + 1, q]) + head
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
def head_time(c, first, n, sq, skv, sqkv, sqq):
    """simulator.cost.features.draft_head.HeadPass.seconds(n, Σq, Σc, Σq·c, Σq², first) of a
    head (an MTP layer's experts under uniform routing: compiled_gap) from the F_HP constants,
    the same expressions in the same order (its per-token FLOPs and fixed bytes summed
    beforehand as it sums them), times ``c[F_SCALE]``; 0 for an empty pass."""
    if sq <= 0.0:
        return c[F_SCALE] * 0.0
    o = F_HP
    per_token = c[o + HP_FLOPS1] if first else c[o + HP_FLOPS]
    fixed_bytes = c[o + HP_BYTES1] if first else c[o + HP_BYTES]
    flops = (per_token * sq + c[o + HP_ATTN] * (sqkv + 0.5 * (sqq + sq))
             + c[o + HP_LM] * n)
    nbytes = fixed_bytes + c[o + HP_KV] * (skv + 2.0 * sq) + c[o + HP_ACT] * sq
    if c[o + HP_EXPERTS] != 0.0:  # an MTP layer's experts: E (1 − (1 − k/E)^Σq) touched
        nbytes += c[o + HP_EXPERT_BYTES] * (c[o + HP_EXPERTS] * (1.0 - c[o + HP_MISS] ** sq))
    top = flops * c[o + HP_INV_C]
    memory = nbytes * c[o + HP_INV_M]
    if memory > top:
        top = memory
    if c[o + HP_FLOOR] > top:
        top = c[o + HP_FLOOR]
    return c[F_SCALE] * (top + c[o + HP_FIXED] + c[o + HP_COMM] * sq)


@njit(cache=True)
def ngram_time(c, n, sq, skv):
    """host.ngram_seconds(n, Σc + Σq) of vLLM's n-gram proposer over the target pass's ``n``
    requests (c0 + c1 n + c2 Σ + c3 n², 0 for n <= 0), times ``c[F_OUTER]``."""
    if n <= 0:
        return c[F_OUTER] * 0.0
    tokens = skv + sq
    return c[F_OUTER] * (c[F_NGRAM] + np.float64(n) * c[F_NGRAM + 1]
                         + tokens * c[F_NGRAM + 2] + np.float64(n * n) * c[F_NGRAM + 3])


@njit(cache=True)
def draft_time(c, n, sq, skv, sqkv, sqq, rows, tab, tlaw):
    """One draft pass (a draft model's, or a head's after its first) with the host's draft
    floor: the draft role's :func:`role_time` for a draft model (vllm-v0's draft worker or
    vLLM V1's proposer); :func:`head_time` after PaddedSumsCost's padding (n, Σq, Σq² grow by
    p) for a head; 0 s for the n-gram proposer (HostCost prices its passes 0) or a free
    drafter (FreeDraftCost)."""
    mode = c[F_DRAFTER]
    if mode == DRAFT_MODEL or mode == DRAFT_MODEL_V1:
        return host_draft(c, role_time(c, 10, n, sq, skv, sqkv, sqq, rows, tab, tlaw))
    if mode == DRAFT_HEAD:
        pad = graph_pad(c, sq)
        if pad:
            n = n + pad
            sq = sq + pad
            sqq = sqq + pad
        return host_draft(c, head_time(c, False, n, sq, skv, sqkv, sqq))
    return 0.0


@njit(cache=True)
def first_pass(c, n, sq, skv, sqkv, sqq, tab, tlaw):
    """The drafter's once-per-step term on the target pass's sums (simulator.engine.decode.
    Decode.head_first_pass, the cost's ``first_pass_time``): a head's pass 1 (unpadded: the
    padding wraps time_from_sums only) with the host's draft floor; a vLLM V1 draft model's
    pass 1 (simulator.cost.features.draft_model_pass.DraftModelPasses.first_pass_time: the
    draft role over q_i + 1 at c_i, n' = n, Σq + n, Σc, Σq·c + Σc, Σq² + 2Σq + n, n logit rows;
    padded, as pad_to_graphs pads inside that wrapper) with the draft floor; the n-gram
    proposer's host seconds; 0 for vllm-v0's draft model or a free drafter (no first pass)."""
    mode = c[F_DRAFTER]
    if mode == DRAFT_HEAD:
        return host_draft(c, head_time(c, True, n, sq, skv, sqkv, sqq))
    if mode == DRAFT_MODEL_V1:
        return host_draft(c, role_time(c, 10, n, sq + n, skv, sqkv + skv, sqq + 2.0 * sq + n,
                                       n if c[F_ROWS] else -1.0, tab, tlaw))
    if mode == DRAFT_NGRAM:
        return ngram_time(c, int(n), sq, skv)
    return 0.0


@njit(cache=True)
def decode_draft_seconds(c, keep, passes, dsum, asum, skv, kept_d, kept_kv, kept_tau, tab,
                         tlaw):
    """The draft passes of a step's ``keep`` decoding requests drafting ``passes`` passes
    (Σ d = ``dsum``, Σ τ = ``asum``, Σ c = ``skv``; kept_d, kept_kv, kept_tau # [>= keep] each
    request's d_i, c_i, τ_i), summed in pass order: a draft model's pass j over the n_j
    requests with d_i > j at c_i + j (simulator.cost.draft_cost.draft_seconds_from_sums); a
    head's (the n-gram proposer's, a vLLM V1 draft model's) passes after its first, pass
    j = 1..D−1 over those with d_i > j at c_i + τ_i + j (simulator.engine.decode.Decode.
    head_later_passes)."""
    head = (c[F_DRAFTER] == DRAFT_HEAD or c[F_DRAFTER] == DRAFT_NGRAM
            or c[F_DRAFTER] == DRAFT_MODEL_V1)
    shift = 1 if head else 0
    later = passes - shift
    draft_t = 0.0
    if later <= 0:
        return draft_t
    if dsum == keep * passes:  # every request drafts D: n and Σc of pass j by formula
        fn = np.float64(keep)
        start = skv + asum + keep if head else skv
        for dd in range(later):
            cc = np.float64(start + keep * dd)
            draft_t += draft_time(c, fn, fn, cc, cc, fn, -1.0, tab, tlaw)
        return draft_t
    for dd in range(later):
        m = 0
        ks = 0
        for i in range(keep):
            if kept_d[i] - shift > dd:
                m += 1
                ks += kept_kv[i] + (kept_tau[i] + 1 if head else 0)
        cc = np.float64(ks + m * dd)
        fm = np.float64(m)
        draft_t += draft_time(c, fm, fm, cc, cc, fm, -1.0, tab, tlaw)
    return draft_t
