"""Attention over the batch sums from AIConfigurator's decode and prefill tables: a grid law of
the measured cells (what ``cost = "aic"`` prices with), and the linear law below (its FLOP
rate, the ratio that carries a grid to an untimed head shape, L40S's decode).

The grid law (:func:`cells` -> :func:`grid_tables` -> :func:`grid_law`; evaluated by
simulator.cost.tabulated.grid_attention, where its composition of a mixed batch is stated):
a head shape's decode cells D(B, c) and prefill cells ΔP(B, s) = P(B, s) − D(B, c_min),
missing cells filled, the decode cells read cold (:func:`cold_cells`: the collector times
them over a warm KV cache), made non-decreasing; an untimed shape's cells are
:func:`carried` from timed ones by the linear law's ratio; how the backend runs a batch that
mixes decodes with longer queries is aic_mixed's (the mode :func:`grid_law` packs). Judged by
:func:`cell_check` (cells left out) and in benchmarks/aic_validate.py (shapes left out).

The linear law:

vLLM V1 runs one attention call per layer over the whole batch: decodes, verifications and
prefill chunks together (FlashAttention's varlen kernel; FlashInfer / TRT-LLM split it in a
decode and a prefill launch). The simulator sees a batch only through its sums (n requests,
Σq, Σc, Σq·c, Σq²; simulator.cost.interface), so the law is the tabulated form's
:class:`~simulator.cost.tabulated.AttentionLaw`, per layer on one GPU (H query and H_kv KV
heads of width d per GPU, e bytes per KV element)::

    P = Σq·c + (Σq² + Σq)/2            query-key pairs under the causal mask
    K = Σc + 2Σq                       KV tokens read (and written)
    t = a + n·(u + u_h·H·d/128) + 4·H·d·P/π + 2·H_kv·d·e·K/β

a per-call floor, a per-request term (grows with the heads a request's query spans), the FLOPs
at the achieved rate π and the KV bytes at the achieved bandwidth β (a decode's time is its KV
bytes, a long prefill's its FLOPs; their sum, not their max: see below). The same five numbers
price a decode-only, a prefill-only and a mixed batch: the composition is that of the sums,
one floor per call however the batch mixes, a mixed batch's FLOPs and bytes summed over its
requests. The tables time no mixed batch; the grid law prices one through how the backend
runs it (aic_mixed), which this linear law does not.

:func:`fit_attention` fits (a, u, u_h, π, β) by least squares on the relative error over the
decode and the prefill rows of one (GPU, KV dtype, kernel) together (each table weighted
equally, each row's relative error by √(t / median t)), in log space (every term positive).
The √t weight sits between a relative fit (every call counts alike, however short) and an
absolute one (only the longest count): chosen over the relative fit by the time-weighted
error Σ|t̂ − t| / Σt on the tables (RTX PRO 6000 Llama-3.1-8B shape: 10.7 % -> 2.4 %, MAPE
18.9 -> 19.7 %; H100: 9.0 % -> 4.2 %, decode MAPE 9.4 -> 13.6 %): a step's time is dominated by
its long calls. With it, a fit's β no longer exceeds the GPU's DRAM bandwidth (RTX PRO 6000:
2.23 -> 1.62 TB/s against 1.60; the short, L2-resident calls had pulled it up).
The terms add (``overlap`` False): LLMServingSim's RTX PRO 6000 attention profile (mixed
batches) is priced closer by the sum than by the max (benchmarks/aic_passes.py).
:func:`held_out` judges it by leaving one head shape (H, H_kv, d) out: the law fitted on
the other shapes predicts every row of the left-out one, decode and prefill reported apart.
Decode row: B requests at one query token over c cached tokens (the table's ``step``):
n = Σq = B, Σc = Σq·c = B·c, Σq² = B. Prefill row: B prompts of s tokens, nothing cached:
n = B, Σq = B·s, Σc = Σq·c = 0, Σq² = B·s².
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from specbatch.simulator.cost.measured.aic_laws import element_bytes
from specbatch.simulator.cost.tabulated import (
    ONE_CALL,
    AttentionLaw,
    grid_attention,
    pack_grid,
)

SHAPE = ("heads", "kv_heads", "head_dim")
#: Whether the FLOPs and KV-byte terms overlap (max) or add (module docstring).
OVERLAP = False
#: Starting point of the fit: floor s, per request s, per request-head s, FLOP/s, bytes/s.
START = (8e-6, 5e-8, 5e-9, 3e14, 2e12)


@dataclass(frozen=True)
class AttnFit:
    """The five numbers of one GPU's law (module docstring) and how they were judged."""

    floor: float  # a, s per call per layer
    per_request: float  # u, s per request per layer
    per_request_head: float  # u_h, s per request per layer per 128 query-head widths
    flops_rate: float  # π, FLOP/s
    kv_rate: float  # β, bytes/s
    mape_decode: float = float("nan")  # in-sample MAPE on the decode rows
    mape_prefill: float = float("nan")

    def law(self, heads: float, kv_heads: float, head_dim: float, kv_bytes: float,
            layers: int) -> AttentionLaw:
        """The :class:`AttentionLaw` of ``layers`` layers with these per-GPU heads."""
        return AttentionLaw(
            flops=4.0 * heads * head_dim * layers, flops_rate=self.flops_rate,
            kv=2.0 * kv_heads * head_dim * kv_bytes * layers, kv_rate=self.kv_rate,
            overlap=OVERLAP, floor=self.floor * layers,
            per_request=(self.per_request + self.per_request_head * heads * head_dim / 128.0)
            * layers)


def sums(decode: pd.DataFrame, prefill: pd.DataFrame) -> tuple[np.ndarray, ...]:
    """(n, Σq, Σc, Σq·c, Σq², H, H_kv, d, e, seconds) of the rows # each [rows]."""
    b_d = decode["batch"].to_numpy(np.float64)
    c = decode["context"].to_numpy(np.float64)
    b_p = prefill["batch"].to_numpy(np.float64)
    s = prefill["prompt"].to_numpy(np.float64)
    n = np.concatenate([b_d, b_p])
    sq = np.concatenate([b_d, b_p * s])
    skv = np.concatenate([b_d * c, np.zeros_like(s)])
    sqq = np.concatenate([b_d, b_p * s * s])
    both = pd.concat([decode[[*SHAPE, "kv_dtype", "latency_s"]],
                      prefill[[*SHAPE, "kv_dtype", "latency_s"]]])
    h, hkv, d = (both[col].to_numpy(np.float64) for col in SHAPE)
    e = element_bytes(both["kv_dtype"].to_numpy())
    return n, sq, skv, skv.copy(), sqq, h, hkv, d, e, both["latency_s"].to_numpy(np.float64)


def predict(theta: np.ndarray, cols: tuple) -> np.ndarray:
    """Per-layer seconds of rows ``cols`` (:func:`sums`) under θ = (a, u, u_h, 1/π, 1/β)."""
    n, sq, skv, sqkv, sqq, h, hkv, d, e, _ = cols
    a, u, uh, inv_pi, inv_beta = theta
    compute = 4.0 * h * d * (sqkv + 0.5 * (sqq + sq)) * inv_pi
    memory = 2.0 * hkv * d * e * (skv + 2.0 * sq) * inv_beta
    body = compute + memory if not OVERLAP else np.maximum(compute, memory)
    return a + n * (u + uh * h * d / 128.0) + body


def fit_attention(decode: pd.DataFrame, prefill: pd.DataFrame) -> AttnFit:
    """(a, u, u_h, π, β) minimising the relative error over both tables (module docstring)."""
    from scipy.optimize import least_squares

    cols = sums(decode, prefill)
    t = cols[-1]
    nd = len(decode)
    w = np.concatenate([np.full(nd, 1.0 / np.sqrt(max(nd, 1))),
                        np.full(len(t) - nd, 1.0 / np.sqrt(max(len(t) - nd, 1)))])
    w = w * np.sqrt(t / np.median(t))  # a row's relative error weighted by √t (docstring)
    start = np.log([START[0], START[1], START[2], 1.0 / START[3], 1.0 / START[4]])

    def resid(z):
        return w * (predict(np.exp(z), cols) / t - 1.0)

    z = least_squares(resid, start, method="trf", x_scale=1.0, max_nfev=400).x
    theta = np.exp(z)
    err = np.abs(predict(theta, cols) / t - 1.0)
    return AttnFit(float(theta[0]), float(theta[1]), float(theta[2]), float(1.0 / theta[3]),
                   float(1.0 / theta[4]), float(err[:nd].mean()) if nd else float("nan"),
                   float(err[nd:].mean()) if len(t) > nd else float("nan"))


def seconds(fit: AttnFit, decode: pd.DataFrame, prefill: pd.DataFrame) -> np.ndarray:
    """Per-layer seconds of the decode then the prefill rows under ``fit`` # [rows]."""
    theta = np.array([fit.floor, fit.per_request, fit.per_request_head, 1.0 / fit.flops_rate,
                      1.0 / fit.kv_rate])
    return predict(theta, sums(decode, prefill))


def held_out(decode: pd.DataFrame, prefill: pd.DataFrame) -> dict:
    """Leave-one-head-shape-out |relative error|: {"decode": [rows], "prefill": [rows]}."""
    keys = sorted(set(map(tuple, decode[list(SHAPE)].to_numpy().tolist()))
                  | set(map(tuple, prefill[list(SHAPE)].to_numpy().tolist())))
    err = {"decode": [], "prefill": []}
    for key in keys:
        in_d = (decode[list(SHAPE)].to_numpy() == np.array(key)).all(axis=1)
        in_p = (prefill[list(SHAPE)].to_numpy() == np.array(key)).all(axis=1)
        fit = fit_attention(decode[~in_d], prefill[~in_p])
        pred = seconds(fit, decode[in_d], prefill[in_p])
        t = np.concatenate([decode["latency_s"].to_numpy()[in_d],
                            prefill["latency_s"].to_numpy()[in_p]])
        e = np.abs(pred / t - 1.0)
        err["decode"].extend(e[:int(in_d.sum())])
        err["prefill"].extend(e[int(in_d.sum()):])
    return {k: np.array(v) for k, v in err.items()}


def _filled(val: np.ndarray, xs: np.ndarray) -> np.ndarray:
    """``val`` # [rows, cols] with each row's missing cells filled linearly in ``xs`` # [cols]
    (between its measured cells, past the last along its last two, non-decreasing; before the
    first at it), then each column's
    still-missing cells along the rows the same way (a row with < 2 measured cells)."""
    out = val.copy()
    for r in range(out.shape[0]):
        ok = np.isfinite(out[r])
        if ok.sum() >= 2 and not ok.all():
            x, y = xs[ok], out[r, ok]
            f = np.interp(xs, x, y)
            hi, lo = xs > x[-1], xs < x[0]
            slope = max((y[-1] - y[-2]) / (x[-1] - x[-2]), 0.0)  # never falling past them
            f[hi] = y[-1] + slope * (xs[hi] - x[-1])
            f[lo] = y[0]
            out[r] = np.where(ok, out[r], f)
    return out


def _cleaned(val: np.ndarray) -> np.ndarray:
    """``val`` made non-decreasing along both axes by the suffix minimum (the kernel's time
    never falls with more requests or more tokens; this lowers the tables' isolated spikes)."""
    out = np.minimum.accumulate(val[:, ::-1], axis=1)[:, ::-1]
    return np.minimum.accumulate(out[::-1], axis=0)[::-1]


def cells(decode: pd.DataFrame, prefill: pd.DataFrame) -> tuple[tuple, tuple]:
    """The measured cells of one head shape: ((B [nb], c [nc], seconds [nb, nc]), (B, s,
    seconds)), the mean latency per (batch, context) and (batch, prompt) cell, NaN where the
    table has none; prompts of one token dropped (the decode grid's first context stands for
    them: :func:`grid_tables`)."""
    dp = decode.pivot_table(index="batch", columns="context", values="latency_s")
    pp = prefill.pivot_table(index="batch", columns="prompt", values="latency_s")
    pp = pp.loc[:, pp.columns > 1]
    return ((dp.index.to_numpy(np.float64), dp.columns.to_numpy(np.float64),
             dp.to_numpy(np.float64)),
            (pp.index.to_numpy(np.float64), pp.columns.to_numpy(np.float64),
             pp.to_numpy(np.float64)))


def cold_cells(b: np.ndarray, c: np.ndarray, v: np.ndarray, cold: tuple | None) -> np.ndarray:
    """Decode cells v # [B, c] no faster than reading their KV cold: max(v, B (c + 1) k / r)
    with ``cold`` = (k KV bytes per token over the KV heads, r bytes/s; aic_mixed.cold_args:
    the collector re-reads one warm KV cache, a serving pass reads it once); None: v."""
    if cold is None:
        return v
    return np.maximum(v, b[:, None] * (c[None, :] + 1.0) * (cold[0] / cold[1]))


def grid_tables(measured: tuple[tuple, tuple], cold: tuple | None = None
                ) -> tuple[tuple, tuple]:
    """((B, c, D), (B, s, ΔP)), seconds per layer (simulator.cost.tabulated.grid_attention),
    from :func:`cells`: missing cells filled (:func:`_filled`, along the context / prompt
    axis, then along the batch axis), the decode cells read cold (:func:`cold_cells`),
    made non-decreasing (:func:`_cleaned`); ΔP is the
    prefill grid less the decode grid's first context D(B, c_min) (one token, nothing cached;
    its s = 1 column, 0), so a prefill row is priced at its own cells whatever the decode
    floor (ΔP < 0 where the decode kernel's floor is the higher: L40S). The s axis is held
    as s²: a prompt's causal work; linear in s² is exact for its FLOPs term and, left out
    at twice the spacing, 1.5-6 pt better than linear in s."""
    (bd, cd, dv), (bp, sp, pv) = measured
    dv = _cleaned(cold_cells(bd, cd, _filled(_filled(dv, cd).T, bd).T, cold))
    pv = _filled(_filled(pv, sp).T, bp).T
    first = np.interp(bp, bd, dv[:, 0])  # D(B, c_min) # [B]
    pv = np.column_stack([first, _cleaned(pv)]) - first[:, None]
    pv[-1] = np.maximum(pv[-1], pv[-2])  # read past the last batch at slopes >= 0: bounded
    return (bd, cd, dv), (bp, np.concatenate([[1.0], sp]) ** 2, pv)


def grid_law(tables: tuple, fit: AttnFit, heads: float, head_dim: float, kv_bytes: float,
             kv_heads: float, layers: int, mixed: tuple = (ONE_CALL,)) -> AttentionLaw:
    """The :class:`AttentionLaw` of ``layers`` layers from :func:`grid_tables`' per-layer
    grids (the packed grid law) with ``fit``'s FLOP rate pricing the query tokens past each
    request's first against its cached tokens and ``mixed`` how the backend runs a mixed
    call (aic_mixed.mixed_mode, over the same layers; simulator.cost.tabulated.grid_attention)."""
    (bd, cd, dv), (bp, sp, pv) = tables
    g = pack_grid((bd, cd, dv * layers), (bp, sp, pv * layers),
                  4.0 * heads * head_dim * layers / fit.flops_rate, mixed)
    base = fit.law(heads, kv_heads, head_dim, kv_bytes, layers)
    return AttentionLaw(flops=base.flops, flops_rate=base.flops_rate, kv=base.kv,
                        kv_rate=base.kv_rate, overlap=base.overlap, floor=base.floor,
                        per_request=base.per_request, grid=tuple(float(x) for x in g))


def law_cells(fit: AttnFit, heads: float, kv_heads: float, head_dim: float,
              kv_bytes: float) -> tuple:
    """The decode cells (B [2], c [2], seconds [2, 2]) of ``fit``'s law at B = 1, 512 and
    c = 1, 32767: the law is affine in B, c and B·c on decode rows, so the bilinear grid over
    these four corners is the law itself (a table without a decode grid: L40S)."""
    b, c = np.array([1.0, 512.0]), np.array([1.0, 32767.0])
    bb, cc = np.meshgrid(b, c, indexing="ij")
    theta = np.array([fit.floor, fit.per_request, fit.per_request_head, 1.0 / fit.flops_rate,
                      1.0 / fit.kv_rate])
    n = bb.ravel()
    cols = (n, n, n * cc.ravel(), n * cc.ravel(), n, np.full(4, heads), np.full(4, kv_heads),
            np.full(4, head_dim), np.full(4, kv_bytes), None)
    return b, c, predict(theta, cols).reshape(2, 2)


def has_grid(measured: tuple) -> bool:
    """Whether each of :func:`cells`' tables spans a grid: >= 3 batches and 3 contexts /
    prompts, every batch measured at >= 2 of them and half the cells or more measured (L40S's
    decode table, a few contexts per shape, does not)."""
    for _, _, v in measured:
        ok = np.isfinite(v)
        if min(v.shape) < 3 or ok.sum(axis=1).min() < 2 or ok.mean() < 0.5:
            return False
    return True


def law_grid(fit: AttnFit, shape: tuple, kv_bytes: float, batch: np.ndarray,
             length: np.ndarray, decode: bool) -> np.ndarray:
    """Per-layer seconds of ``fit``'s law for head shape (H, H_kv, d) over the grid
    batch x length (decode: the context; prefill: the prompt) # [batch, length]."""
    bb, xx = np.meshgrid(batch, length, indexing="ij")
    n, x = bb.ravel(), xx.ravel()
    zero = np.zeros_like(n)
    cols = (n, n, n * x, n * x, n) if decode else (n, n * x, zero, zero, n * x * x)
    theta = np.array([fit.floor, fit.per_request, fit.per_request_head, 1.0 / fit.flops_rate,
                      1.0 / fit.kv_rate])
    full = (*cols, *(np.full(n.size, float(v)) for v in shape), np.full(n.size, kv_bytes), None)
    return predict(theta, full).reshape(bb.shape)


def carried(sources: list, fit: AttnFit, to: tuple, kv_bytes: float) -> tuple:
    """:func:`cells` of head shape ``to`` from those of timed shapes ``sources`` [(shape,
    cells)], as the GEMM transfer does (aic_ops): each source's cells times the width law's
    ratio law(to) / law(source) at the same cell, then the geometric mean over the sources
    that share the first one's axes. A table a source lacks (None) stays None."""
    out = []
    for part, decode in ((0, True), (1, False)):
        first = sources[0][1][part]
        if first is None:
            out.append(None)
            continue
        b, x = first[0], first[1]
        logs = []
        for shape, got in sources:
            m = got[part]
            if m is None or not (np.array_equal(m[0], b) and np.array_equal(m[1], x)):
                continue
            ratio = (law_grid(fit, to, kv_bytes, b, x, decode)
                     / law_grid(fit, shape, kv_bytes, b, x, decode))
            logs.append(np.log(m[2] * ratio))
        out.append((b, x, np.exp(np.mean(logs, axis=0))))
    return tuple(out)


def grid_seconds(measured: tuple, batch: np.ndarray, length: np.ndarray,
                 decode: bool, cold: tuple | None = None) -> np.ndarray:
    """Per-layer seconds of decode rows (``length`` the context) or prefill rows (the prompt)
    under the grid law of :func:`cells` ``measured`` read ``cold`` (:func:`grid_tables`; no
    cached-prefix term: neither table has one) # [rows]."""
    (bd, cd, dv), (bp, sp, pv) = grid_tables(measured, cold)
    g = pack_grid((bd, cd, dv), (bp, sp, pv), 0.0)
    if decode:
        return np.array([grid_attention(g, b, b, b * c, b * c, b)
                         for b, c in zip(batch.tolist(), length.tolist())])
    return np.array([grid_attention(g, b, b * s, 0.0, 0.0, b * s * s)
                     for b, s in zip(batch.tolist(), length.tolist())])


def cell_check(measured: tuple, cold: tuple | None = None) -> dict:
    """Signed errors of the grid law with measured cells left out, twice the spacing the law
    interpolates over: each interior context / prompt column and each interior batch row of
    either table left out in turn and priced from the rest, against the measured cell means
    (the decode cells read ``cold`` as the law reads them, :func:`cold_cells`).
    {"decode": [cells], "prefill": [cells], "decode_context": [cells] (the columns' contexts,
    for the short-context split)}."""
    dec, pre = measured
    dec = (dec[0], dec[1], cold_cells(dec[0], dec[1], dec[2], cold))
    out = {"decode": [], "prefill": [], "decode_context": []}
    for which, (b, x, v) in (("decode", dec), ("prefill", pre)):
        for axis in (1, 0):
            for k in range(1, v.shape[axis] - 1):
                cut = (b, np.delete(x, k), np.delete(v, k, 1)) if axis else \
                    (np.delete(b, k), x, np.delete(v, k, 0))
                rest = (cut, pre) if which == "decode" else (dec, cut)
                t = v[:, k] if axis else v[k]
                ok = np.isfinite(t)
                bb = b[ok] if axis else np.full(int(ok.sum()), b[k])
                xx = np.full(int(ok.sum()), x[k]) if axis else x[ok]
                out[which].append(grid_seconds(rest, bb, xx, which == "decode", cold)
                                  / t[ok] - 1.0)
                if which == "decode":
                    out["decode_context"].append(xx)
    return {k: np.concatenate(v) if v else np.zeros(0) for k, v in out.items()}
