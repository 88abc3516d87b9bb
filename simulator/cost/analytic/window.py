"""Sliding-window attention of one pass: the windowed batch sums and the attention work of a
model whose L_s of L layers slide with window W (``ModelShape.sliding_layers``,
``ModelShape.sliding_window``).

A sliding layer's query at position p attends to the keys at positions (p − W, p] (vLLM's
FlashAttention backend passes flash-attn ``window_size = (W − 1, 0)`` for a layer's
``sliding_window``: vllm/v1/attention/backends/flash_attn.py ``FlashAttentionImpl.__init__``).
Request i of a pass has c_i cached tokens and q_i new ones at positions c_i .. c_i + q_i − 1, so

- query j (0 ≤ j < q_i) sees min(c_i + j + 1, W) keys; the pass's (query, key) pairs are
  P^W = Σ_i Σ_j min(c_i + j + 1, W), which is Σ_i q_i (c_i + (q_i + 1)/2) (the full layers'
  pairs, the roofline's FLOP sum) when W ≥ c_i + q_i for every i;
- the union of the windows reaches back to position max(0, c_i − W + 1): the layer reads
  K^W = Σ_i min(c_i, W − 1) cached keys (Σ_i c_i on a full layer) plus the q_i own keys, and
  writes the q_i new ones.

A request's key counts run lo = min(c + 1, W), ..., hi = min(c + q, W) and then stay at W, so
its pairs are (hi (hi + 1) − lo (lo − 1))/2 + (q − hi + lo − 1) W (:func:`batch_window_sums`,
one Gram product with the batch sums; :func:`window_sums_reference` counts the keys one query
at a time, its parity test is tests/simulator/cost/analytic/test_window.py).

A pass's attention is priced per layer: L − L_s layers at the full sums, L_s at the windowed
ones (:func:`attention_work` for the roofline; :func:`windowed_sums` gives a per-layer law
fitted on full-attention sums, the calibrated models' attention laws, the sums a sliding layer
presents to it). The window is a formula, not a fit: nothing is fitted on windowed data.
"""

from __future__ import annotations

import numpy as np

from specbatch.errors import require


def window_sums(query, kv, window: int) -> tuple[float, float]:
    """(K^W, P^W) = (Σ min(c, W − 1), Σ_i Σ_j min(c_i + j + 1, W)) of query # [n] and kv # [n]
    under window W (module docstring), as floats (exact integers below 2^53)."""
    return batch_window_sums(query, kv, window)[5]


def batch_window_sums(query, kv, window: int) -> tuple:
    """(n, Σq, Σc, Σq·c, Σq², (K^W, P^W)): the batch sums (interface.batch_sums) and the
    window sums from one [5, n] x [n, 5] Gram product of the rows (q, c, 1, hi, lo).

    A request's key counts run lo = min(c + 1, W), lo + 1, ..., hi = min(c + q, W), then stay
    at W for the q − (hi − lo + 1) queries past the cap, so its pairs are
    (hi (hi + 1) − lo (lo − 1))/2 + (q − hi + lo − 1) W (0 when q = 0), and its cached keys
    min(c, W − 1) = lo − 1. Exact for integer token counts below 2^53."""
    n = query.shape[0] if isinstance(query, np.ndarray) else int(np.size(query))
    b = np.empty((5, n))
    b[0] = query
    b[1] = kv
    b[2] = 1.0
    np.minimum(np.add(b[1], b[0], out=b[3]), window, out=b[3])  # hi
    np.minimum(np.add(b[1], 1.0, out=b[4]), window, out=b[4])  # lo
    (qq, qc, sq, _, _), (_, _, sc, _, _), _, (_, _, sh, hh, _), (_, _, sl, _, ll) = \
        (b @ b.T).tolist()
    pairs = 0.5 * (hh + sh - ll + sl) + window * (sq - sh + sl - n)
    return n, sq, sc, qc, qq, (sl - n, pairs)


def window_sums_reference(query, kv, window: int) -> tuple[float, float]:
    """:func:`window_sums` by counting: every query's keys in (p − W, p], and the cached keys
    the union of a request's windows reaches, one request and one query at a time."""
    cached = pairs = 0
    for q_i, c_i in zip(np.asarray(query).ravel().tolist(), np.asarray(kv).ravel().tolist()):
        reached = set()
        for p in range(c_i, c_i + q_i):
            keys = [k for k in range(0, p + 1) if p - window < k]
            pairs += len(keys)
            reached.update(k for k in keys if k < c_i)
        cached += len(reached) if q_i else min(c_i, window - 1)
    return float(cached), float(pairs)


def check_window(window: int, where: str = "window") -> int:
    """``window`` as an int >= 1 (one-line error otherwise)."""
    require(isinstance(window, (int, np.integer)) and not isinstance(window, bool) and window >= 1,
            f"{where} {window!r}: expected an integer >= 1")
    return int(window)


def windowed_sums(sq: float, skv: float, sqkv: float, sqq: float,
                  window: tuple[float, float]) -> tuple[float, float, float, float]:
    """(Σq, Σc, Σq·c, Σq²) a sliding layer presents to a per-layer law written in the full
    sums: Σc -> K^W and Σq·c -> P^W − (Σq² + Σq)/2, so that the law's KV term Σc + Σq and
    pair term Σq·c + (Σq² + Σq)/2 become K^W + Σq and P^W (``window`` = (K^W, P^W))."""
    cached, pairs = window
    return sq, cached, pairs - 0.5 * (sqq + sq), sqq


def attention_work(consts, sq: float, skv: float, sqkv: float, sqq: float,
                   window: tuple[float, float] | None) -> tuple[float, float]:
    """(attention FLOPs, KV bytes) of one pass from ``consts`` (the roofline's
    ``PassConstants``: ``attn_flops``, ``kv_bytes`` over all L layers, ``sliding_layers``
    L_s): the full layers' share (L − L_s)/L at (Σq·c + (Σq² + Σq)/2, Σc + 2Σq), the sliding
    layers' L_s/L at (P^W, K^W + 2Σq). ``window`` = (K^W, P^W) of :func:`window_sums`."""
    pairs = sqkv + 0.5 * (sqq + sq)
    keys = skv + 2.0 * sq
    if consts.sliding_layers:
        require(window is not None, f"model {consts.model}: has sliding-window layers, so a "
                                    "pass is priced with its window sums (K^W, P^W)")
        cached, wpairs = window
        full = (consts.layers - consts.sliding_layers) / consts.layers
        slide = consts.sliding_layers / consts.layers
        pairs = full * pairs + slide * wpairs
        keys = full * keys + slide * (cached + 2.0 * sq)
    return consts.attn_flops * pairs, consts.kv_bytes * keys
