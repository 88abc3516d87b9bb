"""A sliding layer's multi-token queries priced per query token and per computed product:
the decomposition of the grid law's causal prefill cells ``cost = "aic"`` prices a windowed
prefill with.

The grid law (simulator.cost.tabulated.grid_attention) prices B prompts of s tokens by its
prefill cell ΔP(B, s), read in s²: the causal kernel's time, indexed by its query-key pairs.
A sliding layer's prompt of s > W tokens computes far fewer products (each query its W keys)
but still runs all its query tiles, and each tile pays its own fixed cost (its Q load, its
output, its softmax rescale and store, the masked edge tiles) whatever its walk: on
AIConfigurator's windowed FA3 rows of H100 the local kernel runs at about a sixth of the causal
kernel's rate per product (W = 128, 16k tokens), so reading the grid at the windowed pairs
(moving its cell by the pairs the window removes at the linear law's FLOP rate) priced a
windowed prefill 30 % low and, past ~10k tokens, below zero.

From the GPU's own causal cells (window 0, the bundled table; nothing windowed), per batch
size B of the prefill grid (:func:`prefill_split`)::

    ΔP(B, s) ≈ α_B · B·s + β_B · B·P(s)

least squares on the cells' relative error (each cell over its whole time ΔP + D(B, c_min);
s > 1),
α_B, β_B >= 0 (non-negative least squares); P(s) the products the causal kernel computes for
one prompt: on FA3 its tile products (aic_fa3_window.tile_pairs with tile_size_fwd_sm90's
causal tiles: the tile waste is then β's, not α's), elsewhere s (s + 1)/2. A sliding layer's
request of q > W new tokens is then priced (:func:`local_parts`) as its first W tokens, a
causal prefill the window does not bind (the grid's own cell: q' = W), plus the q − W tokens
past them at α each and the products they add at β::

    ΔP_W = ΔP(B, W) + α_B · (q − W) + β_B · (P_local(q) − P(W))

(P_local: the local kernel's tile products on FA3, aic_fa3_window; the window's pairs
elsewhere), so it is the grid exactly where the window does not bind (q <= W) and continuous
at q = W. Its cached prefix (a chunk's, a verification's) keeps the law's per-pair term at
the pairs the window holds against cached keys. Every added term is >= 0.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specbatch.simulator.cost.analytic.window import window_sums
from specbatch.simulator.cost.measured.aic_fa3_window import fa3_tiles, tile_pairs


@dataclass(frozen=True)
class TileShape:
    """What FA3's tile sizes read for one per-GPU head shape (aic_fa3_window.fa3_tiles);
    ``fa3`` False: the GPU's backend is not FA3, products are exact pairs."""

    fa3: bool
    groups: int = 1  # G = H / H_kv query heads per KV head, per GPU (PackGQA rows)
    head_dim: int = 128
    kv_bytes: float = 2.0


def causal_products(s, tiles: TileShape) -> np.ndarray:
    """# [len s] products the causal kernel computes for one prompt of s tokens, nothing
    cached, per query head (module docstring's P(s))."""
    s = np.asarray(s, dtype=np.int64).ravel()
    if not tiles.fa3:
        return s * (s + 1) / 2.0
    out = np.empty(s.shape)
    for i, si in enumerate(s.tolist()):
        one = tiles.head_dim in (64, 128) and si * tiles.groups <= 64  # heuristics.h
        m, n = fa3_tiles(tiles.head_dim, tiles.kv_bytes, False, True, one)
        out[i] = tile_pairs([si], [0], tiles.groups, m, n, None)[0]
    return out


def local_products(q, window: int, tiles: TileShape) -> np.ndarray:
    """# [len q] products a sliding layer's kernel computes for prompts of q tokens, nothing
    cached, per query head: the local kernel's tile products on FA3, the window's pairs
    elsewhere."""
    q = np.asarray(q, dtype=np.int64).ravel()
    if not tiles.fa3:
        return np.array([window_sums([x], [0], window)[1] for x in q.tolist()])
    out = np.empty(q.shape)
    for i, qi in enumerate(q.tolist()):
        one = tiles.head_dim in (64, 128) and qi * tiles.groups <= 64
        m, n = fa3_tiles(tiles.head_dim, tiles.kv_bytes, True, False, one)
        out[i] = tile_pairs([qi], [0], tiles.groups, m, n, window)[0]
    return out


def unpack_cells(g) -> tuple:
    """(decode B axis, decode first-context cells D(B, c_min), prefill B axis, s axis,
    ΔP cells [B, s]) of a packed grid law (simulator.cost.tabulated.pack_grid)."""
    nx, ny = int(g[0]), int(g[1])
    bd = np.asarray(g[2:2 + nx], dtype=np.float64)
    dv = np.asarray(g[2 + nx + ny:2 + nx + ny + nx * ny], dtype=np.float64).reshape(nx, ny)
    o = 2 + nx + ny + nx * ny
    px, py = int(g[o]), int(g[o + 1])
    bp = np.asarray(g[o + 2:o + 2 + px], dtype=np.float64)
    s = np.sqrt(np.asarray(g[o + 2 + px:o + 2 + px + py], dtype=np.float64))
    pv = np.asarray(g[o + 2 + px + py:o + 2 + px + py + px * py], dtype=np.float64)
    return bd, dv[:, 0], bp, s, pv.reshape(px, py)


def prefill_split(g, tiles: TileShape) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(B axis, α_B seconds per query token, β_B seconds per product) # each [nb] of the packed
    grid law ``g``'s causal prefill cells (module docstring; over the law's layers, as its
    cells are)."""
    from scipy.optimize import nnls

    bd, d0, bp, s, pv = unpack_cells(g)
    s, pv = s[1:], pv[:, 1:]  # the s = 1 column is 0 by construction (pack_grid), not a cell
    first = np.interp(bp, bd, d0)  # D(B, c_min) # [nb]
    prod = causal_products(np.rint(s).astype(np.int64), tiles)  # [ns]
    alpha, beta = np.empty(bp.size), np.empty(bp.size)
    for i, b in enumerate(bp.tolist()):
        whole = pv[i] + first[i]
        w = 1.0 / np.where(whole > 0.0, whole, np.inf)  # each cell's relative error
        (alpha[i], beta[i]), _ = nnls(np.column_stack([b * s * w, b * prod * w]), pv[i] * w)
    return bp, alpha, beta


def local_parts(query, kv, window: int, pairs_of, tiles: TileShape,
                pairs: float | None = None) -> tuple:
    """(Σq', Σq'², cross, E, R, B_W) of one pass of ``query`` # [n] new and ``kv`` # [n] cached
    tokens under window W: q' = min(q, W) the queries the grid prices as a causal prefill (a
    request of q <= W as it is), ``cross`` the pairs past each request's first query against
    its cached keys the window holds (>= 0; ``pairs_of(query, kv)`` the pass's window pairs,
    ``pairs`` where the caller has them already), E = Σ (q − W) over the B_W requests of
    q > W, R = Σ of their local products less the causal ones of W tokens (>= 0, per query
    head)."""
    q = np.asarray(query, dtype=np.int64).ravel()
    c = np.asarray(kv, dtype=np.int64).ravel()
    w = int(window)
    clipped = np.minimum(q, w)
    keys = np.minimum(c, w - 1)
    own = pairs_of(q, np.zeros_like(c))
    pairs = pairs_of(q, c) if pairs is None else pairs
    cross = max(0.0, float(pairs - own) - float(keys[q > 0].sum()))
    past = q > w
    tokens = float((q[past] - w).sum())
    rest = 0.0
    if np.any(past):
        rest = float(np.maximum(local_products(q[past], w, tiles)
                                - causal_products([w], tiles)[0], 0.0).sum())
    return (float(clipped.sum()), float((clipped * clipped).sum()), cross, tokens, rest,
            float(past.sum()))


def local_seconds(law, split: tuple, n: float, cached: float, parts: tuple) -> float:
    """Seconds of the sliding layers ``law`` (simulator.cost.tabulated.AttentionLaw, a grid
    law) prices at ``n`` requests, K^W = ``cached`` and ``parts`` = :func:`local_parts`, with
    ``split`` = :func:`prefill_split` of its grid: the grid at (n, Σq', K^W, K^W + cross,
    Σq'²) plus α_B · E + β_B · R at B = B_W, α and β read linearly in B between the grid's
    batches and at its ends past them."""
    w_sq, w_sqq, cross, tokens, rest, past = parts
    t = law.seconds(n, w_sq, cached, cached + cross, w_sqq)
    if past > 0.0:
        bp, alpha, beta = split
        t += float(np.interp(past, bp, alpha)) * tokens + float(np.interp(past, bp, beta)) * rest
    return t
