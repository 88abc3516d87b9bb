"""A sums cost model in tabulated form: the shape of a pass time the compiled loop evaluates.

A measured cost model prices one forward pass of a role from the batch sums (n requests,
Σq query tokens, Σc cached tokens, Σq·c, Σq²) and the r logit rows the engine samples
(simulator.cost.interface). Most of a pass depends on Q = Σq alone (the decoder's GEMMs,
norms, all-reduces and MoE blocks run once per query token) and only attention on the other
sums, so such a model is exactly::

    gpu    = ((L[Q] + A(n, Σq, Σc, Σq·c, Σq²)) + C[Q]) + H[r]
    t      = gpu + (fixed + max(0, floor − gpu))

with L[Q] the layers (everything per token but the all-reduce and the LM head), C[Q] the
all-reduces, H[r] the LM head at r rows (r = Q when the engine names none or r ≥ Q; H[0] = 0)
and A the attention law of :class:`AttentionLaw`. The tables hold integer Q = 0..Q_max: the
engine's token counts are integers, so a table lookup is the model's own value at that Q,
bit for bit, and :func:`table_time` (the Python twin of the compiled loop's evaluation, the
same expressions in the same order) reproduces the model's ``time_from_sums`` exactly.

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
        A = D(n_d, Σc/n_d) + ΔP(B_p, s_p²) + x · (Σq·c − Σc)

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
    its own cells. ``x`` prices the
    query tokens past a request's first against its cached tokens (a chunk's prefix, a
    verification's drafted tokens), which neither table holds, per query-key pair.
    One function without calls and with plain indexing and float arithmetic: the compiled
    loop compiles this same source (simulator.engine.v1.kernel)."""
    if sq <= 0.0:
        return 0.0
    nn = n if n > 1.0 else 1.0
    extra = sq - n
    s_p = 0.0
    if extra > 0.0:
        s_p = (sqq - n) / extra - 1.0
        if s_p > 1.0 and n - extra / (s_p - 1.0) >= 1.0:
            nn = n - extra / (s_p - 1.0)  # the one-token requests: n − B_p
    o = 0
    t = 0.0
    for part in range(2):
        nx = int(g[o])
        ny = int(g[o + 1])
        ax = o + 2
        ay = ax + nx
        v = ay + ny
        if part == 0:
            x = nn
            y = skv / nn
        else:
            x = extra / (s_p - 1.0) if s_p > 1.0 else 0.0
            y = s_p * s_p
        if part == 0 or s_p > 1.0:
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
            if part == 1 and skv > 0.0 and value < 0.0:
                value = 0.0  # a chunk or drafts next to cached tokens never cost less
            t = t + value
        o = v + nx * ny
    return t + g[o] * (sqkv - skv)


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


def pack_grid(decode: tuple, prefill: tuple, extra: float) -> np.ndarray:
    """The packed grid law :func:`grid_attention` reads # [length]: ``decode`` = (B axis,
    c axis, seconds [B, c]), ``prefill`` = (B axis, s² axis starting at 1, seconds [B, s] with
    the s = 1 column 0), ``extra`` seconds per query-key pair past each request's first query
    token."""
    parts = []
    for bx, cy, val in (decode, prefill):
        bx, cy, val = (np.asarray(a, dtype=np.float64) for a in (bx, cy, val))
        if val.shape != (bx.size, cy.size) or bx.size < 2 or cy.size < 2:
            raise ValueError(f"a grid of {val.shape} over axes {bx.size} x {cy.size}")
        parts.append(np.concatenate([[bx.size, cy.size], bx, cy, val.ravel()]))
    return np.concatenate([*parts, [extra]])


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

    def seconds(self, n: float, sq: float, skv: float, sqkv: float, sqq: float) -> float:
        """A of the class docstring (the expressions the compiled loop mirrors)."""
        if self.grid:
            return grid_attention(self.grid, n, sq, skv, sqkv, sqq)
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
    gpu = ((table.layers[q] + attn) + table.allreduce[q]) + table.head[r]
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
