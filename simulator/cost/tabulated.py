"""A sums cost model in tabulated form: the shape of a pass time the compiled loop evaluates.

A measured cost model prices one forward pass of a role from the batch sums (n requests,
Σq query tokens, Σc cached tokens, Σq·c, Σq²) and the r logit rows the engine samples
(simulator.cost.interface). Most of a pass depends on Q = Σq alone (the decoder's GEMMs,
norms, all-reduces and MoE blocks run once per query token) and only attention on the other
sums, so such a model is exactly::

    gpu    = ((L[Q] + A(n, Σq, Σc, Σq·c, Σq²)) + C[Q]) + (H[r] + S[n])
    t      = gpu + (fixed + max(0, floor − gpu))

with L[Q] the layers (everything per token but the all-reduce and the LM head), C[Q] the
all-reduces, H[r] the LM head at r rows (r = Q when the engine names none or r ≥ Q; H[0] = 0
unless the model prices an empty head otherwise), S[n] a sampler at n requests where the model
prices one (the LLMServingSim GPUs' measured sampler; else no term: H[r] alone) and A the
attention law of :class:`AttentionLaw` (linear in the sums, the aic grid law
:func:`grid_attention` or the two-regime law :func:`regime_attention`). The tables hold integer
Q, r, n = 0..Q_max: the engine's counts are integers, so a table lookup is the model's own
value there, bit for bit, and :func:`table_time` (the Python twin of the compiled loop's
evaluation, the same expressions in the same order) reproduces the model's ``time_from_sums``
exactly.

A cost model opts in with ``pass_table(role, max_tokens) -> PassTable`` and
``table_gap(role) -> str | None`` (why the role's pass has no such form, e.g. sliding-window
layers); the compiled loop (simulator.engine.v1) runs tabulated models, and a parity test pins
each implementation's ``time_from_sums`` against :func:`table_time` at random sums.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


def grid_attention(g, n: float, sq: float, skv: float, sqkv: float, sqq: float) -> float:
    """Seconds of one attention call (all layers) from the packed grid law ``g``
    (:class:`AttentionLaw` ``grid``, written by :func:`pack_grid`)::

        D(B, c)    the decode grid: B requests of one query token over c cached tokens each
        ΔP(B, s)   the prefill grid less its s = 1 column: B prompts of s tokens, none cached
        s_p = (Σq² − n)/(Σq − n) − 1,  B_p = (Σq − n)/(s_p − 1)    (the multi-token queries)
        n_d = n − B_p where that is >= 1 (one-token requests beside the chunks), else n
        c̄ = Σc / n_d
        A = D(n_d, c̄) + ΔP(B_p, s_p²) + x · (Σq·c − Σc)                   (one call, packed)

    each grid read bilinearly (linear in B and in c, or in s², between the measured points,
    linear past the last, clamped below the first; the prefill axis holds s²). Exact at
    every cell of either table: a decode row has Σq = n (no ΔP), a prefill row Σc = 0
    (D(B, 0) is what ΔP is taken against); a request of one query token adds nothing to
    (s_p, B_p), so a chunk next to decodes is priced as the chunk alone in ΔP and the decodes
    (its cached prefix folded into their KV) in D (vLLM's one varlen call: one floor; a
    verification, every request multi-token, reads D at all n). ΔP < 0 where the decode
    table's floor exceeds a short prompt's cell (A100, RTX PRO 6000, L40S: up to ~5 µs); it
    is taken as 0 once any token is cached (Σc > 0), so adding a chunk to decodes, or drafts
    to a verification, never lowers the price, while a batch of fresh prompts (Σc = 0) keeps
    its own cells. ``x`` prices the query tokens past a request's first against its cached
    tokens (a chunk's prefix, a verification's drafted tokens), which neither table holds,
    per query-key pair.

    How the call mixes is the attention backend's (the mode after ``x``, :func:`pack_grid`;
    simulator.cost.measured.aic_mixed says which vLLM picks and why):

    - 0, one call that keeps its decode path (FlashAttention 3): A as above.
    - 1, two launches (FlashInfer: a prefill and a decode call): a chunk beside one-token
      requests adds its own launch, A + D(B_p, c_min) (the chunk at its own prefill cell).
    - 3, a decode path that takes short queries of any length (vLLM's MLA backends with
      ``QueryLenSupport.VARLEN``: every request of q <= T query tokens, T the builder's
      ``reorder_batch_threshold``, runs in the one decode launch): with s_p <= T, A as in
      mode 0 (one launch; ΔP is then the decode path's own extra for s_p query rows per
      request where the table timed it through the decode kernel); past T, mode 1. The law
      packs (3, T).
    - 2, FlashAttention 2's varlen call: with any query longer than one token (Σq > n) and a
      cache (Σc > 0) the call runs unpacked and unsplit, one CTA per (request, query head)
      walking its whole cache; with U(N, c) the unpacked cells (N such CTAs over c cached
      tokens, L2 cold), τ = U(N_0, c̄) one CTA's walk (the first row), S resident CTA slots,
      L2 the cache bytes, b the KV bytes per token and KV head, G query heads per KV head,
      H query heads, m query rows per CTA::

        N = n_d · H,  W = (N / S) · τ                     (waves of whole walks)
        miss = max(0, 1 − L2 / (b Σc)) · (1 − min(1, max(0, F − 1) / (G − 1)))
        F = S / (n_d + B_p s_p / m if the chunks stand beside one-token requests, else n_d)
        R = D + miss · (U(N, c̄) − D)                      (re-reads of the G heads that miss)
        A = max(max(D, R, W) + ΔP + x · (Σq·c − Σc), τ)

      (F: the query heads of one KV head resident at once; the grid runs head by head, so
      a head's re-read of a KV block hits the L2 where the heads share the SMs or one KV
      head's cache over the batch, b Σc, fits it).

    One function without calls and with plain indexing and float arithmetic: the compiled
    loop compiles this same source (simulator.engine.v1.kernel)."""
    if sq <= 0.0:
        return 0.0
    nn = n if n > 1.0 else 1.0
    extra = sq - n
    s_p = 0.0
    b_p = 0.0
    beside = False
    if extra > 0.0:
        s_p = (sqq - n) / extra - 1.0
        if s_p > 1.0:
            b_p = extra / (s_p - 1.0)
            if n - b_p >= 1.0:
                nn = n - b_p  # the one-token requests: n − B_p
                beside = True
    o_pre = 2 + int(g[0]) + int(g[1]) + int(g[0]) * int(g[1])
    o_x = o_pre + 2 + int(g[o_pre]) + int(g[o_pre + 1]) + int(g[o_pre]) * int(g[o_pre + 1])
    mode = g[o_x + 1]
    fa2 = mode == 2.0 and extra > 0.0 and skv > 0.0
    o_u = o_x + 8  # the unpacked grid U after mode, S, L2, b, G, H, m
    own = 0.0
    dp = 0.0
    lone = 0.0
    u_n = 0.0
    tau = 0.0
    for part in range(5):
        o = 0
        x = nn
        y = skv / nn
        on = True
        if part == 1:
            o = o_pre
            x = b_p
            y = s_p * s_p
            on = s_p > 1.0
        elif part == 2:
            x = b_p
            y = g[2 + int(g[0])]  # the decode grid's first context
            on = (mode == 1.0 or (mode == 3.0 and s_p > g[o_x + 2])) and beside
        elif part == 3:
            on = fa2
            if fa2:
                o = o_u
                x = nn * g[o_x + 6]  # N = n_d · H unpacked CTAs
        elif part == 4:
            on = fa2
            if fa2:
                o = o_u
                x = g[o_u + 2]  # the first row: one walk per SM
        if on:
            nx = int(g[o])
            ny = int(g[o + 1])
            ax = o + 2
            ay = ax + nx
            v = ay + ny
            i = 0
            while i < nx - 2 and x >= g[ax + i + 1]:
                i += 1
            j = 0
            while j < ny - 2 and y >= g[ay + j + 1]:
                j += 1
            fx = (x - g[ax + i]) / (g[ax + i + 1] - g[ax + i])
            fy = (y - g[ay + j]) / (g[ay + j + 1] - g[ay + j])
            if fx < 0.0:
                fx = 0.0
            if fy < 0.0:
                fy = 0.0
            k = v + i * ny + j
            near = g[k] + (g[k + 1] - g[k]) * fy
            far = g[k + ny] + (g[k + ny + 1] - g[k + ny]) * fy
            value = near + (far - near) * fx
            if part == 0:
                own = value
            elif part == 1:
                if skv > 0.0 and value < 0.0:
                    value = 0.0  # a chunk or drafts next to cached tokens never cost less
                dp = value
            elif part == 2:
                lone = value
            elif part == 3:
                u_n = value
            else:
                tau = value
    cached = g[o_x] * (sqkv - skv)
    if not fa2:
        return ((own + dp) + lone) + cached
    slots = g[o_x + 2]
    slab = skv * g[o_x + 4]  # one KV head's cache over the batch, bytes
    miss = 0.0
    if slab > g[o_x + 3]:
        ctas = nn + (b_p * s_p / g[o_x + 7] if beside else 0.0)
        cover = (slots / ctas - 1.0) / (g[o_x + 5] - 1.0)
        if cover < 0.0:
            cover = 0.0
        if cover > 1.0:
            cover = 1.0
        miss = (1.0 - g[o_x + 3] / slab) * (1.0 - cover)
    dec = own
    reread = own + miss * (u_n - own)
    if reread > dec:
        dec = reread
    waves = nn * g[o_x + 6] / slots * tau
    if waves > dec:
        dec = waves
    t = (dec + dp) + cached
    return t if t >= tau else tau


def grid_least(g) -> float:
    """A lower bound of :func:`grid_attention` over every non-empty batch: the least decode
    cell plus the least prefill step where negative, for grids as aic_attention.grid_tables
    builds them (D non-decreasing in B and c, ΔP in s past its s = 1 column and between its
    last two batches, so every grid is read past its ends at non-negative slopes and inside
    them between its cells: no batch reads less; the cached-prefix term is >= 0).
    analysis.plan.pass_floor's attention floor of a grid law."""
    nd = int(g[0]) * int(g[1])
    op = 2 + int(g[0]) + int(g[1]) + nd
    npf = int(g[op]) * int(g[op + 1])
    dec = min(g[2 + int(g[0]) + int(g[1]):op])
    pre = min(g[op + 2 + int(g[op]) + int(g[op + 1]):op + 2 + int(g[op]) + int(g[op + 1]) + npf])
    return float(dec + min(pre, 0.0))


#: How a call that mixes one-token and longer queries runs (grid_attention's modes).
ONE_CALL, TWO_LAUNCHES, FA2_VARLEN, DECODE_PATH = 0.0, 1.0, 2.0, 3.0


def pack_grid(decode: tuple, prefill: tuple, extra: float, mixed: tuple = (ONE_CALL,)
              ) -> np.ndarray:
    """The packed grid law :func:`grid_attention` reads # [length]: ``decode`` = (B axis,
    c axis, seconds [B, c]), ``prefill`` = (B axis, s² axis starting at 1, seconds [B, s] with
    the s = 1 column 0), ``extra`` seconds per query-key pair past each request's first query
    token, then ``mixed``: the mode alone (:data:`ONE_CALL`, :data:`TWO_LAUNCHES`),
    (:data:`DECODE_PATH`, T) or :func:`fa2_mixed`'s numbers."""
    parts = []
    for bx, cy, val in (decode, prefill):
        parts.append(grid_part(bx, cy, val))
    return np.concatenate([*parts, [extra], np.asarray(mixed, dtype=np.float64)])


def grid_part(bx, cy, val) -> np.ndarray:
    """One grid as :func:`grid_attention` reads it: [len x, len y, x axis, y axis, values
    row by row] # [2 + nx + ny + nx·ny]."""
    bx, cy, val = (np.asarray(a, dtype=np.float64) for a in (bx, cy, val))
    if val.shape != (bx.size, cy.size) or bx.size < 2 or cy.size < 2:
        raise ValueError(f"a grid of {val.shape} over axes {bx.size} x {cy.size}")
    return np.concatenate([[bx.size, cy.size], bx, cy, val.ravel()])


def fa2_mixed(slots: float, l2_bytes: float, kv_bytes: float, groups: float, heads: float,
              rows: float, unpacked: tuple) -> tuple:
    """:func:`pack_grid`'s ``mixed`` of FlashAttention 2's varlen call (:func:`grid_attention`,
    mode 2): S resident CTA slots, the L2 bytes, the KV bytes per token and KV head, G query
    heads per KV head (> 1), H query heads, m query rows per CTA, and the unpacked grid U =
    (CTAs axis, c axis, seconds [CTAs, c])."""
    if not groups > 1.0 or not slots > 0.0 or not rows > 0.0:
        raise ValueError(f"fa2_mixed: groups {groups} (> 1), slots {slots}, rows {rows} (> 0)")
    return (FA2_VARLEN, float(slots), float(l2_bytes), float(kv_bytes), float(groups),
            float(heads), float(rows), *grid_part(*unpacked).tolist())


#: Slots of a packed regime law (:func:`pack_regimes`, read by :func:`regime_attention`).
R_LAYERS, R_HQ, R_KV, R_FLOPS, R_TRAV, R_SMS, R_L2, R_SLAB, R_MISS, R_ROWS = range(10)
R_DECODE, R_CHUNKED, R_LENGTH = 10, 17, 24


def regime_attention(g, n: float, sq: float, skv: float, sqkv: float, sqq: float) -> float:
    """Seconds of one pass's attention from the packed regime law ``g`` (:func:`pack_regimes`:
    simulator.cost.measured.lss_attention.AttentionLaw over L layers, the LLMServingSim GPUs'
    attention)::

        n' = max(n, 1)                                 (LssPricer.parts)
        x  = (1, n', B_kv, ω·F, ω·B_H, E, B_miss)      (lss_attention.attention_features at n')
        A  = L · (x · c_chunked if Σq² > Σq else x · c_decode)

    each feature by attention_features' expressions in its order (its np.round(·, 6) being
    numpy's rint(1e6 ·) / 1e6), the dot product as the chain of fused multiply-adds
    acc ← fma(x_i, c_i, acc), i = 0..6 from acc = 0, that numpy's ``x @ c`` computes where its
    BLAS (OpenBLAS's ddot on AVX2 / AVX-512 CPUs) fuses: each fma emulated exactly in double
    arithmetic (Dekker's product, Knuth's two-sum, the low parts added rounded to odd, then
    one rounding to nearest: Boldo & Melquiond, IEEE Trans. Computers 57(4), 2008), so the
    numpy engine and the compiled loop compute the same bits on any CPU. A term with c_i = 0
    or x_i = 0 leaves acc as it is (fma(0, c, acc) = acc).

    One function without calls (numpy's rint and nextafter, math's ceil and sqrt aside) and
    with plain indexing and float arithmetic: the compiled loop compiles this same source."""
    if sq <= 0.0:
        return 0.0
    nn = n if n > 1.0 else 1.0
    kv = g[R_KV] * (skv + sq) * 1e-9
    flops = g[R_FLOPS] * (sqkv + 0.5 * (sqq + sq)) * 1e-12
    trav = g[R_TRAV] * (skv + sq) * 1e-9
    spread = sqq - sq * sq / nn  # lss_attention.longest_query: longest request's query tokens
    if spread < 0.0:
        spread = 0.0
    spread = spread * (nn - 1.0) / nn
    longest = float(np.rint((sq / nn + math.sqrt(spread)) * 1e6)) / 1e6
    m_blocks = float(math.ceil(longest / g[R_ROWS]))
    tiles = nn - 1.0 + m_blocks
    fewest = float(math.ceil(sq / g[R_ROWS]))
    if fewest > tiles:
        tiles = fewest
    empty = nn * m_blocks - tiles
    if empty < 0.0:
        empty = 0.0
    empty = g[R_HQ] * empty * 1e-6
    miss = 0.0
    if g[R_SMS] > 0.0:  # the GPU's SMs and L2: occupancy ω and the L2 misses
        sms = g[R_SMS]
        ctas = g[R_HQ] * tiles
        if ctas < 1.0:
            ctas = 1.0
        if ctas > sms:
            ctas = sms
        occupancy = sms / ctas
        flops = flops * occupancy
        trav = trav * occupancy
        slab = g[R_SLAB] * (skv + sq)
        resident = g[R_L2] / (slab if slab > 1.0 else 1.0)
        if resident > 1.0:
            resident = 1.0
        if resident < 0.0:
            resident = 0.0
        miss = g[R_MISS] * (skv + sq) * (1.0 - resident) * 1e-9
    o = R_CHUNKED if sqq > sq else R_DECODE
    xs = (1.0, nn, kv, flops, trav, empty, miss)  # [7] the features x
    acc = 0.0
    for i in range(7):
        c = g[o + i]
        x = xs[i]
        if c != 0.0 and x != 0.0:  # acc = fma(x, c, acc), emulated exactly
            p = x * c
            t = 134217729.0 * x  # Dekker's split (2^27 + 1): x = xh + xl, c = ch + cl
            xh = t - (t - x)
            xl = x - xh
            t = 134217729.0 * c
            ch = t - (t - c)
            cl = c - ch
            low = xl * cl - (((p - xh * ch) - xl * ch) - xh * cl)  # x·c = p + low exactly
            high = acc + p  # two-sum: acc + p = high + rest exactly
            back = high - acc
            rest = (acc - (high - back)) + (p - back)
            v = rest + low  # rest + low rounded to odd
            back = v - rest
            lost = (rest - (v - back)) + (low - back)
            if lost != 0.0:
                mag = abs(v)
                ulp = float(np.nextafter(mag, np.inf)) - mag
                if (mag / ulp) % 2.0 == 0.0:  # an even last bit: step toward the lost part
                    v = float(np.nextafter(v, np.inf if lost > 0.0 else -np.inf))
            acc = high + v
    return g[R_LAYERS] * acc


def pack_regimes(layers: float, heads: float, kv_heads: float, head_dim: float,
                 dtype_bytes: float, tile_rows: float, sms: float, l2_bytes: float,
                 decode: tuple, chunked: tuple) -> tuple:
    """The packed regime law :func:`regime_attention` reads # [R_LENGTH]: L layers, per GPU
    H/tp query heads and H_kv/tp KV heads (max 1), head_dim d, the KV dtype's bytes b, the
    split-KV kernel's query rows per CTA, the GPU's SMs S and L2 bytes (S = 0: ω = 1 and no
    misses), the coefficients [7] per regime; each feature's constant factor multiplied out
    in lss_attention.attention_features' order (2b·H_kv·d, 4·H·d, 2b·H·d, 2b·d,
    2b·(H − H_kv)·d)."""
    if len(decode) != 7 or len(chunked) != 7 or not tile_rows > 0:
        raise ValueError(f"pack_regimes: 7 coefficients per regime and tile_rows > 0, got "
                         f"{len(decode)}, {len(chunked)}, {tile_rows}")
    return (float(layers), float(heads), float(2 * dtype_bytes * kv_heads * head_dim),
            float(4 * heads * head_dim), float(2 * dtype_bytes * heads * head_dim),
            float(sms), float(l2_bytes), float(2 * dtype_bytes * head_dim),
            float(2 * dtype_bytes * (heads - kv_heads) * head_dim), float(tile_rows),
            *(float(c) for c in decode), *(float(c) for c in chunked))


def regime_least(g) -> float:
    """A lower bound of :func:`regime_attention` over every non-empty batch: L · the least
    of c_0 + c_1 over the regimes (n' >= 1 and every feature >= 0; coefficients >= 0, as
    non-negative least squares fits them; a negative one gives -inf)."""
    low = math.inf
    for o in (R_DECODE, R_CHUNKED):
        if min(g[o:o + 7]) < 0.0:
            return -math.inf
        low = min(low, g[o] + g[o + 1])
    return float(g[R_LAYERS] * low)


@dataclass(frozen=True)
class AttentionLaw:
    """Seconds of one pass's attention from the batch sums::

        P = Σq·c + (Σq² + Σq)/2      (query-key pairs under the causal mask)
        K = Σc + 2Σq                 (KV tokens read, and written, per layer)
        compute = flops · P / flops_rate
        memory  = kv · K / kv_rate
        body    = max(compute, memory) if overlap else compute + memory
        A       = (floor + per_request · n) + body       (0 when Σq = 0)

    ``flops`` are the FLOPs per pair over all layers (4·H·d·L per GPU), ``kv`` the bytes per
    KV token over all layers; ``flops_rate`` π and ``kv_rate`` β the achieved FLOP/s and
    bytes/s. ``floor`` and ``per_request`` are a kernel's launch floor and per-sequence cost
    over all layers (0 for an analytic law)."""

    flops: float
    flops_rate: float
    kv: float
    kv_rate: float
    overlap: bool = True
    floor: float = 0.0
    per_request: float = 0.0
    grid: tuple = ()  # a packed grid law (pack_grid); non-empty: A is grid_attention's
    regimes: tuple = ()  # a packed regime law (pack_regimes); non-empty: regime_attention's

    def seconds(self, n: float, sq: float, skv: float, sqkv: float, sqq: float) -> float:
        """A of the class docstring (the expressions the compiled loop mirrors)."""
        if self.grid:
            return grid_attention(self.grid, n, sq, skv, sqkv, sqq)
        if self.regimes:
            return regime_attention(self.regimes, n, sq, skv, sqkv, sqq)
        compute = self.flops * (sqkv + 0.5 * (sqq + sq)) / self.flops_rate
        memory = self.kv * (skv + 2.0 * sq) / self.kv_rate
        if self.overlap:
            body = compute if compute >= memory else memory
        else:
            body = compute + memory
        return (self.floor + self.per_request * n) + body


@dataclass(frozen=True)
class PassTable:
    """One role's pass in tabulated form (module docstring); arrays indexed by token count."""

    layers: np.ndarray  # [Q_max + 1] L[Q] seconds, L[0] = 0
    allreduce: np.ndarray  # [Q_max + 1] C[Q] seconds
    head: np.ndarray  # [Q_max + 1] H[r] seconds of the LM head at r rows, H[0] = 0
    attention: AttentionLaw
    fixed: float = 0.0  # launch seconds added to every pass
    floor: float = 0.0  # host floor: a pass is never shorter (eager execution)
    sampler: np.ndarray | None = None  # [Q_max + 1] S[n] seconds at n requests, or none

    @property
    def max_tokens(self) -> int:
        """Q_max: the largest token count the table prices."""
        return int(self.layers.shape[0]) - 1


def table_time(table: PassTable, n: float, sq: float, skv: float, sqkv: float, sqq: float,
               rows: float | None = None) -> float:
    """The pass time of the module docstring from ``table``: the reference twin of the compiled
    loop's evaluation. ``rows`` None (or ≥ Σq) prices the LM head at every query token."""
    if sq <= 0.0:
        return 0.0
    q = int(sq)
    if q > table.max_tokens:
        raise ValueError(f"Σq = {q} is past the table's {table.max_tokens} tokens")
    r = q if rows is None or rows >= sq else max(int(rows), 0)
    attn = table.attention.seconds(n, sq, skv, sqkv, sqq)
    head = table.head[r]
    if table.sampler is not None:  # the sampler at n requests beside the LM head's rows
        s = int(n)
        if s >= table.sampler.shape[0]:
            raise ValueError(f"n = {s} requests is past the table's {table.max_tokens}")
        head = head + table.sampler[s]
    gpu = ((table.layers[q] + attn) + table.allreduce[q]) + head
    return float(gpu + (table.fixed + max(0.0, table.floor - gpu)))


def tabulate(fn, max_tokens: int) -> np.ndarray:
    """``fn(Q)`` at Q = 0..max_tokens as a float64 array # [max_tokens + 1] (fn(0) taken as 0:
    an empty pass costs nothing)."""
    out = np.zeros(max_tokens + 1)
    for q in range(1, max_tokens + 1):
        out[q] = fn(float(q))
    return out


def finite_rates(law: AttentionLaw) -> bool:
    """Whether the law's rates are positive and finite (a table the compiled loop can take)."""
    return all(math.isfinite(x) and x > 0 for x in (law.flops_rate, law.kv_rate))
