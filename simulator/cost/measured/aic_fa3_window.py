"""The keys and query-key pairs FlashAttention 3 (vLLM on Hopper) computes for a sliding-window
layer, tile by tile: the window sums ``cost = "aic"`` prices a sliding layer at on H100 / H200.

simulator.cost.analytic.window counts the keys a window holds, (K^W, P^W). The kernel works in
tiles: a CTA takes a query tile of kBlockM packed rows and walks the keys in tiles of kBlockN,
computing every (row, key) of a tile, masked ones too. From vllm-project/flash-attention
(commit 02d073b0, the FA3 vLLM builds; the same in its later ``hopper/`` sources):

- ``hopper/block.h`` ``BlockMN::get_n_block_min_max``: with ``Is_local`` the key walk starts
  at the window's first key of the tile's first query row, ``n_offset = max(0, m_idx_min +
  seqlen_k − seqlen_q − window_size_left)`` (the tiles are aligned at that key, not at
  multiples of kBlockN, as before "Attention Sinks Perf Boost", 2d3b7508, 2025-08-09,
  an ancestor of 02d073b0), and ends at the last row's key, ``n_token_max = m_idx_max + seqlen_k
  − seqlen_q − n_offset``: a tile of query positions [lo, hi) of a request with c cached and
  q new tokens walks ceil((hi + c − n_offset) / kBlockN) key tiles, n_offset = max(0, lo + c −
  W + 1) under window W (``window_size_left`` = W − 1, vLLM's ``FlashAttentionImpl``); the
  causal kernel of a full layer walks ceil((hi + c) / kBlockN). With ``PackGQA`` the rows are
  the G = H / H_kv query heads of a KV head packed, m_idx = row / G.
- ``hopper/flash_api.cpp``: ``mha_fwd`` sets ``window_size_left = -1`` when it is >=
  ``max_seqlen_k − 1`` (the kernel is local only if some request's c + q > W);
  ``get_pagedkv_tma`` is false for a local call and needs ``page_size % kBlockN == 0`` (vLLM's
  16-token blocks, the collector's 64, never are), so a paged call runs ``paged_kv_non_TMA``;
  ``get_pack_gqa`` is then true.
- ``hopper/tile_size.h`` ``tile_size_fwd_sm90(headdim, headdim_v, is_causal, is_local,
  element_size, v_colmajor, paged_kv_non_TMA, softcap, use_one_mma_wg)`` gives (kBlockM,
  kBlockN) (:func:`fa3_tiles`, paged non-TMA, no softcap); ``hopper/heuristics.h``
  ``use_one_mma_wg``: head width 64 or 128 and max_seqlen_q · G <= 64.
- ``hopper/paged_kv.h`` ``PagedKVManager::load_K`` / ``load_V``: a paged non-TMA tile loads
  only its rows below ``seqlen_k`` (the shifted one of a local walk), so a tile past a
  request's last key is computed on zero-filled rows but not read.

So a decode (one query row per request) reads the W keys of its window, computing
kBlockN · ceil(W / kBlockN) of them, which is what the causal kernel does at a context of
W − 1 (the decode cell the law reads at K^W / n): the tile rule changes no decode, and the
exact K^W stands. A multi-token request's query tile of m = kBlockM / G positions computes
against the W + m − 1 keys its rows span, rounded up to whole tiles (real keys, so loaded
and multiplied, the masked ones too): against the window's W per row, twice as many at
W = 128 with 128-key tiles. How that enters the law: its prefill cells time FA3's causal
kernel, its own tile waste included, and a sliding layer's query-key term was moved by the
exact window pairs less the exact causal ones; here it is moved by the local kernel's tile
products less the causal kernel's (:func:`fa3_window_sums`: P = Σ q (q + 1)/2 + q c + local −
causal over the multi-token requests). Only where the backend is FA3 (aic_mixed.backend:
compute capability 9.x); FA2, FlashInfer and TRT-LLM walk and tile otherwise (not derived
here), so those GPUs keep the exact sums.
"""

from __future__ import annotations

import numpy as np

from specbatch.simulator.cost.analytic.window import window_sums


def fa3_tiles(head_dim: int, kv_bytes: float, local: bool, causal: bool,
              one_mma_wg: bool) -> tuple[int, int]:
    """(kBlockM, kBlockN) of ``tile_size_fwd_sm90`` (hopper/tile_size.h, module docstring) for
    a paged non-TMA call without softcap, V as wide as K; ``kv_bytes`` 1 (fp8, e4m3) or 2."""
    d = int(head_dim)
    if kv_bytes >= 2.0:
        if d <= 64:
            return (64, 192) if one_mma_wg else (192, 128 if causal else 160)
        if d <= 96:
            return 192, 128
        if d <= 128:
            return 64 if one_mma_wg else 128, 128
        if d <= 192:
            return 128, 96
        return 128, 64 if local else 80
    if d <= 64:
        return 192, 160
    if d <= 96:
        return 192, 128
    if d <= 128:
        return 128, 160
    if d <= 192:
        return 128, 128 if local else 160
    return 128, 64 if local else 128


def tile_pairs(query, kv, groups: int, block_m: int, block_n: int, window: int | None):
    """# [n] (row, key) products per query head the kernel computes for each request of
    ``query`` # [n] new and ``kv`` # [n] cached tokens: its query tiles of ``block_m`` packed
    rows (``groups`` query heads per KV head), each walking whole key tiles of ``block_n``
    (module docstring), a row counted as 1 / ``groups`` position; ``window`` W of a local
    call, None for the causal kernel."""
    q = np.asarray(query, dtype=np.int64).ravel()
    c = np.asarray(kv, dtype=np.int64).ravel()
    rows = q * groups
    blocks = -(-rows // block_m)  # [n]
    req = np.repeat(np.arange(q.shape[0]), blocks)  # [Σ blocks]
    first = np.cumsum(blocks) - blocks
    b = np.arange(req.shape[0]) - first[req]
    start = b * block_m
    stop = np.minimum(start + block_m, rows[req])
    lo = start // groups
    hi = np.minimum((start + block_m - 1) // groups + 1, q[req])
    end = hi + c[req]
    if window is not None:
        end = end - np.maximum(0, lo + c[req] - (window - 1))
    keys = block_n * (-(-end // block_n))
    return np.bincount(req, weights=(stop - start) / groups * keys, minlength=q.shape[0])


def fa3_window_sums(query, kv, window: int, heads: int, kv_heads: int, head_dim: int,
                    kv_bytes: float) -> tuple[float, float]:
    """(K, P): the window sums (simulator.cost.analytic.window.window_sums's (K^W, P^W)
    semantics) FA3 presents for one call of ``query`` # [n] new and ``kv`` # [n] cached tokens
    under window W at this per-GPU head shape (module docstring): K = K^W; a request of one
    query token (or none) keeps its exact pairs, a longer one's are q (q + 1)/2 + q c + (local
    − causal tile products, :func:`tile_pairs`). A call no request's c + q exceeds W is not
    local: the exact sums, the full ones."""
    q = np.asarray(query, dtype=np.int64).ravel()
    c = np.asarray(kv, dtype=np.int64).ravel()
    w = int(window)
    cached, pairs = window_sums(q, c, w)
    long = q > 1
    if not np.any(long) or not np.any(q + c > w):
        return cached, pairs
    ql, cl = q[long], c[long]
    groups = max(int(heads) // int(kv_heads), 1)
    one_mma = int(head_dim) in (64, 128) and int(q.max()) * groups <= 64
    m_loc, n_loc = fa3_tiles(head_dim, kv_bytes, True, False, one_mma)
    m_full, n_full = fa3_tiles(head_dim, kv_bytes, False, True, one_mma)
    _, exact = window_sums(ql, cl, w)
    tiled = (ql * (ql + 1) // 2 + ql * cl
             + tile_pairs(ql, cl, groups, m_loc, n_loc, w)
             - tile_pairs(ql, cl, groups, m_full, n_full, None)).sum()
    return cached, pairs - exact + float(tiled)
