"""The attention law of the GPUs LLMServingSim profiled (RTX 4090, RTX PRO 6000): one layer's
attention call priced from the batch sums (n, Σq, Σc, Σqc, Σq²), fitted to the GPU's measured
attention table (traces.public.llmservingsim_profiles) and checked on its other tables.

A law of its own, apart from the pass pricer (:mod:`simulator.cost.measured.lss`, which prices
L layers of it next to the profiled modules): fitted once per GPU, checked on held-out models,
and packed for simulator.cost.tabulated.regime_attention, the compiled loop's source too.

An :class:`AttentionLaw` fitted to the GPU's measured attention table
(one Attention call per row: one prefill chunk and n_d decodes). Two regimes, as vLLM's
FlashAttention backend runs them (vllm/v1/attention/backends/flash_attn.py,
``FlashAttentionImpl.forward``: one varlen call over the batch; split-KV decode only
when every request has one query token): a pure-decode batch (Σq² = Σq) reads each KV
head once, t = a + u·n + B_kv/β; a batch with any chunk (Σq² > Σq) runs FlashAttention-2's
split-KV kernel with one split: one CTA per (request, query head, 64 query rows) walking its
request's whole cache, so t = a' + u'·n + e·E + ω·(F/π + B_H/β′) + B_miss/β_m, with
B_kv = 2b·(H_kv/tp)·d·(Σc + Σq) the KV bytes, F = 4 (H/tp) d (Σqc + (Σq² + Σq)/2) the causal
FLOPs, B_H = 2b·(H/tp)·d·(Σc + Σq) the same cache traversed once per *query* head (a decode's
CTA pays a whole 64-row tile per KV block), E the empty CTAs of the grid (sized for the longest
request: H/tp · (n · ceil(q̂_max/64) − Σ ceil(q_i/64)), q̂_max :func:`longest_query`),
ω = S / min(S, CTAs) the occupancy (fewer CTAs than the S SMs: the longest CTA sets the time)
and B_miss the re-reads of the H − H_kv other query heads that miss the L2 (the fraction of one
KV head's slab 2b·d·(Σc + Σq) past :data:`L2_BYTES`). Measured: a 16-token chunk next to 128
decodes of 1024 cached tokens takes 672 µs against 405 µs for the decodes alone (RTX PRO 6000,
Llama-3.1-8B); each 64 query rows of a chunk add ~1.7 ns per other request and head.
Non-negative least squares per regime, relative to t (:func:`fit_attention`), fitted on the
GPU's Llama-3.1-8B tp 1 table only (a verification batch, every request k+1 tokens, falls in
the chunked regime with E = 0; the tables hold no such batch, so it is not validated);
:func:`attention_check` reports the error on the other bundled tables (Qwen3-32B tp 1 and 2,
Qwen3-30B-A3B: held-out models). Not functions of the sums, so not priced: the longest
request's own CTA when the CTAs fill the SMs, wave quantisation, and the L2 reuse that
co-resident query heads of one group get (docs/fidelity.md).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from specbatch.simulator.cost.gpus.catalogue import GPUS
from specbatch.simulator.cost.measured.laws import scipy_optimize
from specbatch.simulator.cost.tabulated import pack_regimes
from specbatch.traces.models.model_shape import ModelShape
from specbatch.traces.models.shapes import get_shape
from specbatch.traces.public.llmservingsim_profiles import bundled_profiles, read_profile

#: The model each GPU's attention law is fitted on.
ATTENTION_FIT_MODEL = "llama-3.1-8b"
#: Bytes per element of the profiles' bf16 KV (and of the hidden state the pricer reduces).
DTYPE_BYTES = 2


#: FlashAttention-2's split-KV kernel, which vLLM's varlen call runs over a paged cache
#: (``flash_fwd_splitkv_kernel``, one split when some request has more than one query token):
#: query rows per CTA (kBlockM, 64 for every head size), so a request of q tokens is
#: ceil(q / 64) CTAs per query head and the grid is sized for the longest request.
TILE_ROWS = 64
#: L2 cache bytes per GPU (the catalogue's ``l2_bytes``: 72 MB in the RTX 4090, 128 MB in the
#: RTX PRO 6000): the KV of one head over the batch that stays resident while the other
#: query heads of its group re-read it.
L2_BYTES = {name: GPUS[name].l2_bytes for name in ("rtx4090", "rtxpro6000")}


def longest_query(n, sq, sqq):
    """The largest query length q_max the sums allow (Samuelson's bound: mean +
    sqrt((n − 1)/n · Σ(q − mean)²)): exact for one chunk among single-token requests and for
    equal lengths (a verification batch); arrays or scalars."""
    n = np.maximum(n, 1.0)
    spread = np.maximum(sqq - sq * sq / n, 0.0) * (n - 1.0) / n
    return sq / n + np.sqrt(spread)


def attention_features(shape: ModelShape, tp: int, n, sq, skv, sqkv, sqq,
                       gpu: str | None = None) -> np.ndarray:
    """[rows, 7] features of one layer's attention (module docstring): 1, n, B_kv GB, F TFLOP,
    B_H GB, E (millions of empty CTAs), B_miss GB; F and B_H are scaled by the occupancy
    ω = S / min(S, CTAs) when ``gpu`` names S and L2 (else ω = 1, B_miss = 0); arguments
    scalars or [rows]."""
    h_q = shape.heads / tp
    h_kv = max(shape.kv_heads / tp, 1.0)
    d = shape.head_dim
    n, sq, skv, sqkv, sqq = (np.asarray(x, dtype=np.float64) for x in (n, sq, skv, sqkv, sqq))
    kv = 2 * DTYPE_BYTES * h_kv * d * (skv + sq) * 1e-9
    flops = 4 * h_q * d * (sqkv + 0.5 * (sqq + sq)) * 1e-12
    trav = 2 * DTYPE_BYTES * h_q * d * (skv + sq) * 1e-9
    m_blocks = np.ceil(np.round(longest_query(n, sq, sqq), 6) / TILE_ROWS)
    tiles = np.maximum(n - 1.0 + m_blocks, np.ceil(sq / TILE_ROWS))  # <= Σ ceil(q_i / 64)
    empty = h_q * np.maximum(n * m_blocks - tiles, 0.0) * 1e-6
    miss = np.zeros_like(kv)
    if gpu is not None:
        sms = float(GPUS[gpu].sm_count)
        occupancy = sms / np.minimum(sms, np.maximum(h_q * tiles, 1.0))
        flops, trav = flops * occupancy, trav * occupancy
        slab = 2 * DTYPE_BYTES * d * (skv + sq)  # one KV head's K and V over the batch
        resident = np.clip(L2_BYTES[gpu] / np.maximum(slab, 1.0), 0.0, 1.0)
        miss = 2 * DTYPE_BYTES * (h_q - h_kv) * d * (skv + sq) * (1.0 - resident) * 1e-9
    return np.stack(np.broadcast_arrays(np.ones_like(sq), n, kv, flops, trav, empty, miss),
                    axis=-1)


#: Feature columns of each regime: decode (1, n, B_kv), chunked (1, n, F, B_H, E, B_miss).
REGIME_COLUMNS = {"decode": (0, 1, 2), "chunked": (0, 1, 3, 4, 5, 6)}


@dataclass(frozen=True)
class AttentionLaw:
    """Seconds of one layer's attention call: coefficient vectors [7] per regime, on
    :func:`attention_features` of ``gpu``."""

    decode: tuple
    chunked: tuple
    fitted_on: str
    gpu: str | None = None

    def seconds(self, shape: ModelShape, tp: int, n, sq, skv, sqkv, sqq) -> np.ndarray:
        x = attention_features(shape, tp, n, sq, skv, sqkv, sqq, self.gpu)  # [rows, 7]
        chunked = np.asarray(sqq) > np.asarray(sq)
        return np.where(chunked, x @ np.array(self.chunked), x @ np.array(self.decode))

    def packed(self, shape: ModelShape, tp: int, layers: float) -> tuple:
        """This law over ``layers`` layers of ``shape`` on ``tp`` GPUs as
        simulator.cost.tabulated.pack_regimes packs it: regime_attention prices one pass from
        it, the numpy engine's and the compiled loop's one source (:meth:`seconds` at n ≥ 1
        times ``layers``, bit for bit where numpy's BLAS fuses its dot product)."""
        h_q = shape.heads / tp
        h_kv = max(shape.kv_heads / tp, 1.0)
        sms, l2 = (0.0, 0.0) if self.gpu is None else (GPUS[self.gpu].sm_count,
                                                       L2_BYTES[self.gpu])
        return pack_regimes(layers, h_q, h_kv, shape.head_dim, DTYPE_BYTES, TILE_ROWS, sms, l2,
                            self.decode, self.chunked)


def table_sums(rows) -> tuple[np.ndarray, ...]:
    """(n, Σq, Σc, Σqc, Σq²) # [rows] of attention.csv rows: one chunk, n_d decodes."""
    pc, kp = rows["prefill_chunk"].to_numpy(), rows["kv_prefill"].to_numpy()
    nd, kd = rows["n_decode"].to_numpy(), rows["kv_decode"].to_numpy()
    return (nd + (pc > 0), pc + nd, kp + nd * kd, pc * kp + nd * kd, pc * pc + nd)


def attention_rows(gpu: str, model: str, tp: int):
    """The bundled attention rows of (gpu, model, tp) with a non-empty batch, their sums and
    the model's shape."""
    ps = bundled_profiles()[(gpu, model, tp)]
    rows = read_profile(ps.files["attention"], "attention")
    rows = rows[(rows["prefill_chunk"] + rows["n_decode"]) > 0]
    return rows, table_sums(rows), get_shape(str(ps.config))


def fit_attention(shape: ModelShape, tp: int, sums: tuple, seconds: np.ndarray,
                  fitted_on: str, gpu: str | None = None) -> AttentionLaw:
    """NNLS of the :class:`AttentionLaw` per regime to measured calls: ``sums`` the (n, Σq,
    Σc, Σqc, Σq²) # [rows] of each call, ``seconds`` # [rows]; residuals relative to t.
    (Relative weights were kept from the two-term law, where t^(-1/2) weights fit the table's
    long rows better but over-priced the :data:`SERVING` region.) ``gpu`` names the SM count
    and L2 of the occupancy and miss features (None: ω = 1, no misses)."""
    x = attention_features(shape, tp, *sums, gpu)  # [rows, 7]
    t = np.asarray(seconds, dtype=np.float64)  # [rows]
    chunked = np.asarray(sums[4]) > np.asarray(sums[1])
    coef = {}
    for regime, mask in (("decode", ~chunked), ("chunked", chunked)):
        cols = list(REGIME_COLUMNS[regime])
        sol, _ = scipy_optimize().nnls(x[mask][:, cols] / t[mask, None], np.ones(int(mask.sum())))
        full = np.zeros(x.shape[1])
        full[cols] = sol
        coef[regime] = tuple(float(v) for v in full)
    return AttentionLaw(coef["decode"], coef["chunked"], fitted_on, gpu)


@functools.lru_cache(maxsize=4)
def fitted_attention(gpu: str) -> AttentionLaw:
    """The :class:`AttentionLaw` of ``gpu``: :func:`fit_attention` on its
    :data:`ATTENTION_FIT_MODEL` tp 1 table."""
    rows, sums, shape = attention_rows(gpu, ATTENTION_FIT_MODEL, 1)
    return fit_attention(shape, 1, sums, rows["time_us"].to_numpy() * 1e-6,
                         f"{gpu} {ATTENTION_FIT_MODEL} tp 1", gpu)


#: The rows a serving step of the bundled runs reaches (2048-token budget, ShareGPT lengths):
#: a cache of at most 2048 tokens before the chunk, 16 or more decodes of 256 ... 4096.
SERVING = {"kv_prefill": (0, 2048), "n_decode": (16, 256), "kv_decode": (256, 4096)}


@functools.lru_cache(maxsize=4)
def attention_check(gpu: str) -> dict:
    """The fitted law's error on every bundled attention table of ``gpu``: per (model, tp)
    and regime, the MAPE over rows and the time-weighted error Σ(t̂ − t) / Σt, over the whole
    table and over its :data:`SERVING` rows."""
    law = fitted_attention(gpu)
    out = {}
    for (g, model, tp), ps in bundled_profiles().items():
        if g != gpu or "attention" not in ps.files:
            continue
        rows, sums, shape = attention_rows(gpu, model, tp)
        t = rows["time_us"].to_numpy() * 1e-6
        pred = law.seconds(shape, tp, *sums)
        chunked = sums[4] > sums[1]
        serving = np.ones(len(rows), dtype=bool)
        for col, (lo, hi) in SERVING.items():
            serving &= rows[col].between(lo, hi).to_numpy()
        for regime, mask in (("decode", ~chunked), ("chunked", chunked)):
            rec = {"held_out": model != ATTENTION_FIT_MODEL or tp != 1}
            for name, m in (("", mask), ("serving_", mask & serving)):
                err = pred[m] / t[m] - 1
                rec.update({f"{name}rows": int(m.sum()),
                            f"{name}mape": round(float(np.abs(err).mean()), 4),
                            f"{name}weighted": round(float((pred[m] - t[m]).sum()
                                                           / t[m].sum()), 4)})
            out[f"{model}|tp{tp}|{regime}"] = rec
    return out
