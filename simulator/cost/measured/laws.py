"""Fitting the calibrated roofline (simulator.cost.measured.calibrated) to per-operation GPU
timings.

The data are Vidur-layout tables (traces.public.vidur_profiles): per (gpu, model, tp, Q tokens) the
median time of every non-attention op of one decoder layer, and NCCL all-reduce times by
message size and world size. Three laws, each fitted per GPU type:

- **GEMM** (QKV, O, MLP up, MLP down; the LM head is priced with it). One GPU's shard reads
  a weight K x N and Q x K activations, writes Q x N (b bytes each)::

      m = b (K N + Q (K + N)) / β · (1 + n₀/N)                # streaming bound
      c = 2 (K + k₀) · w · S · t_m t_n / π,  w = ⌈⌈Q/t_m⌉ ⌈N/t_n⌉ / S⌉  # compute bound
      t = t₀ + (m^p + c^p)^(1/p)                               # smooth knee (p-norm)

  β and π are the achieved bandwidth and FLOP/s, t₀ a per-kernel floor. The compute bound
  counts *whole waves* of t_m x t_n output tiles over the GPU's S SMs (tile and wave
  quantisation: a narrow tp 8 shard leaves most of a wave idle, the reason tp 8 is the roofline's
  worst case; the tile height t_m is the power of two >= Q between 16 and the fitted maximum,
  :func:`tile_rows`), n₀ a bandwidth ramp for narrow outputs, and k₀ extra K per tile
  (prologue/epilogue; short K, as in a tp 8 down projection, runs further from peak). p > 1 makes
  the knee smooth: near the ridge a GEMM is neither bound (measured: ~60 % of both at Q = 256 on
  H100). Fitted per GEMM (QKV, O,
  up, down: their K/N aspect differs) by ``scipy.optimize.least_squares`` on the error
  relative to the measured *layer* time of each (model, tp, Q) row (so each op weighs what
  it weighs in a pass); the maximum t_m is chosen from (64, 128) by the same loss, t_n = 128.
- **Shape-neighbour correction** of each GEMM law: measured cuBLAS times jump where the
  kernel choice changes with (M, N, K) (A100 QKV: -20 to -37 % around Q = 192-384 against
  any smooth law), and the same shard shapes recur across models. So each GEMM is priced as
  law × exp(Σ_c w_c log(measured_c / law)(Q)), the log-ratio of every fitted cell c (same op,
  same GPU) interpolated in Q and weighted by a Gaussian kernel, width h = 0.3, in the
  distance between (log K, log N) and the cell's: a shape between fitted ones gets their
  ratios, a far one its nearest cells'. h was chosen among 0.2 / 0.3 / 0.5 by the same
  leave-one-shape-out check that reports the error (3.97 / 3.86 / 3.97 % overall): a mild
  optimism.
- **Small ops** (embedding, norms, rotary, activation, residual add): t = a + d · bytes with
  bytes the op's per-GPU traffic (:func:`small_op_bytes`) plus a term in the row width
  (:class:`SmallOpLaw`); non-negative least squares relative to the layer time, per op.
  Fitted on gated (SwiGLU) models only: the shapes traces.models.shapes describes.
- **All-reduce** of s bytes on a world of n GPUs: t = α_n + s / γ_n, fitted per (cluster,
  n) with 1/t weights; :mod:`simulator.cost.measured.calibrated_role` prefers interpolating the
  measured curve where one exists and uses this law elsewhere.

Shapes are :class:`LayerShape` (one decoder layer's per-model dimensions), so a fit can be
validated on a model it never saw (leave-one-shape-out, benchmarks/cost_vs_public.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from specbatch.simulator.cost.gpus.catalogue import GPUS

if TYPE_CHECKING:  # the laws are fitted on DataFrames; evaluating them needs no pandas
    import pandas as pd

GEMMS = ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj")
SMALL_OPS = ("emb", "input_layernorm", "attn_rope", "post_attention_layernorm", "mlp_act", "add")


def scipy_optimize():
    """``scipy.optimize``, imported on first fit: pricing from the stored laws never needs it,
    and its import is ~0.5 CPU s of every ``specbatch simulate`` start-up (issue 35)."""
    import scipy.optimize

    return scipy.optimize


TILE_N = 128
TILE_M_CHOICES = (64, 128)
MIN_TILE_M = 16
DTYPE_BYTES = 2


@dataclass(frozen=True)
class LayerShape:
    """One decoder layer's dimensions (Vidur's mlp.csv shape columns) and the tp degree."""

    hidden: int
    heads: int
    kv_heads: int
    intermediate: int
    vocab: int
    gated: bool = True

    @property
    def d_kv(self) -> int:
        return self.kv_heads * (self.hidden // self.heads)

    def gemm_dims(self, tp: int) -> dict[str, tuple[float, float]]:
        """(K, N) of each GEMM's shard on one of ``tp`` GPUs (Megatron split: column-parallel
        QKV and up, row-parallel O and down)."""
        up = (2 if self.gated else 1) * self.intermediate
        return {"attn_pre_proj": (self.hidden, (self.hidden + 2 * self.d_kv) / tp),
                "attn_post_proj": (self.hidden / tp, self.hidden),
                "mlp_up_proj": (self.hidden, up / tp),
                "mlp_down_proj": (self.intermediate / tp, self.hidden)}


def tile_rows(q: np.ndarray, tile_m: int) -> np.ndarray:
    """Tile height a GEMM kernel uses for Q rows: the power of two >= Q between
    :data:`MIN_TILE_M` and ``tile_m`` (a skinny decode GEMM is not padded to a 64-row tile:
    cuBLAS/CUTLASS heuristics pick small-M or split-K kernels for it)."""
    pow2 = 2.0 ** np.ceil(np.log2(np.maximum(q, 1.0)))
    return np.clip(pow2, MIN_TILE_M, tile_m)


@dataclass(frozen=True)
class GemmLaw:
    """The fitted GEMM law of one GPU (module docstring)."""

    bandwidth: float  # β, bytes/s
    flops: float  # π, FLOP/s
    floor: float  # t₀, seconds per kernel
    knee: float  # p
    k_pad: float  # k₀
    n_ramp: float  # n₀: bandwidth reaches β only for N >> n₀
    tile_m: int
    sms: int

    def seconds(self, q: np.ndarray, k, n) -> np.ndarray:
        """t of a Q x K by K x N GEMM, q # [rows] tokens; k, n scalars or [rows]."""
        q = np.asarray(q, dtype=np.float64)
        m = DTYPE_BYTES * (k * n + q * (k + n)) / self.bandwidth * (1.0 + self.n_ramp / n)
        tile_m = tile_rows(q, self.tile_m)
        tiles = np.ceil(q / tile_m) * np.ceil(np.asarray(n, dtype=np.float64) / TILE_N)
        waves = np.ceil(tiles / self.sms)
        c = 2.0 * (k + self.k_pad) * waves * self.sms * tile_m * TILE_N / self.flops
        top = np.maximum(m, c)
        return self.floor + top * ((m / top) ** self.knee + (c / top) ** self.knee) ** (
            1.0 / self.knee)


@dataclass(frozen=True)
class SmallOpLaw:
    """t = intercept + per_width · bytes per token + slope · bytes of one small op on one GPU
    (the middle term: a cost in the row width that does not shrink with Q, e.g. the
    activation kernel's grid over I/tp columns)."""

    intercept: float
    per_width: float  # seconds per byte of one token's row
    slope: float  # seconds per byte

    def seconds(self, nbytes: np.ndarray, q: np.ndarray) -> np.ndarray:
        q = np.asarray(q, dtype=np.float64)
        nbytes = np.asarray(nbytes, dtype=np.float64)
        return self.intercept + self.per_width * nbytes / np.maximum(q, 1.0) + self.slope * nbytes


@dataclass(frozen=True)
class GemmCorrection:
    """Measured/law time ratios of one GEMM on the fitted cells, for the shape-neighbour
    correction (module docstring): ``grid`` [G] token counts, ``log_k``/``log_n`` [C] the
    cells' shard shapes, ``log_ratio`` [C, G] log(measured / law) per cell and token count
    (held at a cell's last measured count beyond it)."""

    grid: np.ndarray
    log_k: np.ndarray
    log_n: np.ndarray
    log_ratio: np.ndarray
    width: float = 0.3  # Gaussian kernel width h in log-shape distance

    def factor(self, q: np.ndarray, k, n) -> np.ndarray:
        """exp(Σ_c w_c log ratio_c(Q)), w ∝ exp(−d_c² / 2h²), d_c the distance of
        (log K, log N) to cell c; q # [rows], k and n scalars."""
        d2 = (math.log(k) - self.log_k) ** 2 + (math.log(n) - self.log_n) ** 2  # [C]
        w = np.exp(-(d2 - d2.min()) / (2 * self.width ** 2))
        w /= w.sum()
        q = np.clip(np.asarray(q, dtype=np.float64), self.grid[0], self.grid[-1])
        i = np.clip(np.searchsorted(self.grid, q, side="right") - 1, 0, len(self.grid) - 2)
        t = (q - self.grid[i]) / (self.grid[i + 1] - self.grid[i])  # [rows]
        mixed = w @ self.log_ratio  # [G]
        return np.exp(mixed[i] * (1 - t) + mixed[i + 1] * t)


def fit_corrections(gemm: dict, compute: pd.DataFrame) -> dict:
    """op -> :class:`GemmCorrection` of the fitted ``gemm`` laws on ``compute``'s cells."""
    grid = np.unique(compute["num_tokens"].to_numpy(dtype=np.float64))  # [G]
    out = {}
    for op in GEMMS:
        log_k, log_n, ratios = [], [], []
        for (_, tp), cell in compute.groupby(["model", "tp"], sort=True):
            k, n = frame_shape(cell.iloc[0]).gemm_dims(int(tp))[op]
            q = cell["num_tokens"].to_numpy(dtype=np.float64)
            r = np.log(1e-3 * cell[f"{op}_ms"].to_numpy(dtype=np.float64)
                       / gemm[op].seconds(q, k, n))
            log_k.append(math.log(k))
            log_n.append(math.log(n))
            ratios.append(np.interp(grid, q, r))
        out[op] = GemmCorrection(grid, np.array(log_k), np.array(log_n), np.array(ratios))
    return out


def gemm_seconds(fit: GpuFit, op: str, q: np.ndarray, k, n) -> np.ndarray:
    """One GEMM's seconds: the ``op`` law times its shape-neighbour correction (if fitted)."""
    t = fit.gemm[op].seconds(q, k, n)
    corr = fit.corrections.get(op) if fit.corrections else None
    return t if corr is None else t * corr.factor(q, k, n)


def small_op_bytes(op: str, shape: LayerShape, tp: int, q: np.ndarray) -> np.ndarray:
    """Per-GPU bytes read + written by ``op`` for q # [rows] tokens (b-byte activations):
    norm and add act on the full (replicated) hidden state, embedding writes Q rows of h,
    rotary rewrites this GPU's query and key heads, the gated activation reads 2 I/tp and
    writes I/tp per token (1 + 1 without a gate)."""
    q = np.asarray(q, dtype=np.float64)
    h = shape.hidden
    per_token = {
        "emb": 2 * h,
        "input_layernorm": 2 * h, "post_attention_layernorm": 2 * h,
        "add": 3 * h,
        "attn_rope": 2 * (h + shape.d_kv) / tp,
        "mlp_act": (3 if shape.gated else 2) * shape.intermediate / tp,
    }[op]
    return DTYPE_BYTES * per_token * q


@dataclass(frozen=True)
class GpuFit:
    """Everything fitted for one GPU type: the GEMM law and one law per small op."""

    gpu: str
    gemm: dict  # GEMM op -> GemmLaw (the LM head uses "mlp_up_proj"'s: both are N >> K)
    small: dict  # op -> SmallOpLaw
    models: tuple[str, ...]  # the models fitted on
    corrections: dict = None  # op -> GemmCorrection (None: the laws alone)


def frame_shape(row) -> LayerShape:
    """The :class:`LayerShape` of one compute-table row."""
    return LayerShape(int(row.n_embd), int(row.n_head), int(row.n_kv_head),
                      int(row.n_expanded_embd), int(row.vocab_size), bool(row.gated))


def layer_totals(cell: pd.DataFrame) -> np.ndarray:
    """Measured seconds of one decoder layer's ops (the embedding excluded) # [rows]."""
    return 1e-3 * cell[[f"{op}_ms" for op in (*GEMMS, *SMALL_OPS) if op != "emb"]].to_numpy(
        dtype=np.float64).sum(axis=1)


def gemm_rows(compute: pd.DataFrame, ops: tuple[str, ...] = GEMMS) -> tuple[np.ndarray, ...]:
    """(q, K, N, measured seconds, layer seconds) # [rows x ops] of a compute table."""
    qs, ks, ns, ts, ws = [], [], [], [], []
    for (_, tp), cell in compute.groupby(["model", "tp"], sort=False):
        dims = frame_shape(cell.iloc[0]).gemm_dims(int(tp))
        q = cell["num_tokens"].to_numpy(dtype=np.float64)
        for op in ops:
            k, n = dims[op]
            qs.append(q)
            ks.append(np.full(q.shape, k))
            ns.append(np.full(q.shape, n))
            ts.append(1e-3 * cell[f"{op}_ms"].to_numpy(dtype=np.float64))
            ws.append(layer_totals(cell))
    return tuple(np.concatenate(a) for a in (qs, ks, ns, ts, ws))


def fit_gemm(compute: pd.DataFrame, gpu: str, peaks: tuple[float, float],
             ops: tuple[str, ...] = GEMMS) -> GemmLaw:
    """Least-squares fit of the GEMM law to one GPU's rows of ``ops`` (module docstring);
    ``peaks`` = (datasheet FLOP/s, bytes/s) start the search."""
    q, k, n, t, w = gemm_rows(compute, ops)
    sms = GPUS[gpu].sm_count  # the catalogue row's datasheet SM count
    best = None
    for tile_m in TILE_M_CHOICES:
        def law(x, tile_m=tile_m):
            return GemmLaw(math.exp(x[0]), math.exp(x[1]), math.exp(x[2]), 1.0 + math.exp(x[3]),
                           math.exp(x[4]), math.exp(x[5]), tile_m, sms)

        def residual(x, law=law):
            return (law(x).seconds(q, k, n) - t) / w

        x0 = [math.log(0.8 * peaks[1]), math.log(0.7 * peaks[0]), math.log(3e-6),
              math.log(2.0), math.log(64.0), math.log(256.0)]
        lo = [x0[0] - 3, x0[1] - 3, math.log(1e-8), math.log(0.05), math.log(1.0), math.log(1.0)]
        hi = [x0[0] + 1, x0[1] + 1, math.log(1e-4), math.log(20.0), math.log(4096.0),
              math.log(65536.0)]
        res = scipy_optimize().least_squares(
            residual, x0, method="trf", bounds=(lo, hi), max_nfev=400
        )
        if best is None or res.cost < best[0]:
            best = (res.cost, law(res.x))
    return best[1]


def fit_small_ops(compute: pd.DataFrame) -> dict:
    """op -> :class:`SmallOpLaw`, non-negative least squares weighted by 1/t."""
    laws = {}
    for op in SMALL_OPS:
        xs, qs, ts, ws = [], [], [], []
        for (_, tp), cell in compute.groupby(["model", "tp"], sort=False):
            t = 1e-3 * cell[f"{op}_ms"].to_numpy(dtype=np.float64)
            keep = t > 0  # an op the model does not have (phi-2: one norm)
            q = cell["num_tokens"].to_numpy(dtype=np.float64)
            xs.append(small_op_bytes(op, frame_shape(cell.iloc[0]), int(tp), q)[keep])
            qs.append(q[keep])
            ts.append(t[keep])
            ws.append(layer_totals(cell)[keep])
        x, q, t, w = (np.concatenate(a) for a in (xs, qs, ts, ws))
        a = np.stack([np.ones_like(x), x / q * 1e-6, x * 1e-9], axis=1) / w[:, None]  # [rows, 3]
        coef, _ = scipy_optimize().nnls(a, t / w)
        laws[op] = SmallOpLaw(float(coef[0]), float(coef[1] * 1e-6), float(coef[2] * 1e-9))
    return laws


def fit_gpu(compute: pd.DataFrame, gpu: str, peaks: tuple[float, float]) -> GpuFit:
    """The :class:`GpuFit` of ``gpu`` from the rows of ``compute`` measured on it."""
    rows = compute[(compute["gpu"] == gpu) & compute["gated"]]
    gemm = {op: fit_gemm(rows, gpu, peaks, (op,)) for op in GEMMS}
    return GpuFit(gpu, gemm, fit_small_ops(rows), tuple(sorted(rows["model"].unique())),
                  fit_corrections(gemm, rows))


def layer_seconds(fit: GpuFit, shape: LayerShape, tp: int, q: np.ndarray,
                  ops: tuple[str, ...] | None = None) -> np.ndarray:
    """Seconds of one decoder layer's non-attention ops (the embedding excluded) for
    q # [rows] tokens: Vidur's block sum (norms, QKV, rotary, O, up, activation, down, add)."""
    q = np.asarray(q, dtype=np.float64)
    total = np.zeros_like(q)
    dims = shape.gemm_dims(tp)
    for op in GEMMS:
        total += gemm_seconds(fit, op, q, *dims[op])
    for op in SMALL_OPS:
        if op != "emb":
            total += fit.small[op].seconds(small_op_bytes(op, shape, tp, q), q)
    return total


def embedding_seconds(fit: GpuFit, shape: LayerShape, tp: int, q: np.ndarray) -> np.ndarray:
    """Seconds of the input embedding's Q-row gather."""
    return fit.small["emb"].seconds(small_op_bytes("emb", shape, tp, q), q)


@dataclass(frozen=True)
class AllReduceLaw:
    """t = latency + s / bandwidth for one (cluster, world)."""

    latency: float
    bandwidth: float

    def seconds(self, nbytes):
        return self.latency + np.asarray(nbytes, dtype=np.float64) / self.bandwidth


#: :func:`fit_allreduce_uncached` per curve, keyed on the points' bytes (contents, never a
#: name): the calibrated model prices a pass past a curve's last size through its edges' law,
#: thousands of times per plan on a handful of curves.
_ALLREDUCE_FITS: dict[tuple, AllReduceLaw] = {}


def fit_allreduce(sizes: np.ndarray, seconds: np.ndarray) -> AllReduceLaw:
    """:func:`fit_allreduce_uncached`, once per curve in a process (the same law: a test pins
    the parity)."""
    sizes = np.ascontiguousarray(sizes, dtype=np.float64)
    seconds = np.ascontiguousarray(seconds, dtype=np.float64)
    key = (sizes.shape, sizes.tobytes(), seconds.shape, seconds.tobytes())
    got = _ALLREDUCE_FITS.get(key)
    if got is None:
        got = fit_allreduce_uncached(sizes, seconds)
        if len(_ALLREDUCE_FITS) >= 256:
            _ALLREDUCE_FITS.pop(next(iter(_ALLREDUCE_FITS)))
        _ALLREDUCE_FITS[key] = got
    return got


def fit_allreduce_uncached(sizes: np.ndarray, seconds: np.ndarray) -> AllReduceLaw:
    """NNLS of t = α + s/γ weighted by 1/t over one measured curve."""
    a = np.stack([np.ones_like(sizes), sizes / 1e9], axis=1) / seconds[:, None]
    coef, _ = scipy_optimize().nnls(a, np.ones_like(seconds))
    return AllReduceLaw(float(coef[0]), 1e9 / max(float(coef[1]), 1e-30))


def fit_to_dict(fit: GpuFit) -> dict:
    """A JSON-ready record of ``fit`` (simulator/cost/measured/data/calibrated_laws.json)."""
    corr = {op: {"grid": c.grid.tolist(), "log_k": c.log_k.tolist(), "log_n": c.log_n.tolist(),
                 "log_ratio": np.round(c.log_ratio, 5).tolist(), "width": c.width}
            for op, c in (fit.corrections or {}).items()}
    return {"gpu": fit.gpu, "models": list(fit.models),
            "gemm": {op: vars(law).copy() for op, law in fit.gemm.items()},
            "small": {op: vars(law).copy() for op, law in fit.small.items()},
            "corrections": corr}


def fit_from_dict(d: dict) -> GpuFit:
    """The :class:`GpuFit` of a :func:`fit_to_dict` record."""
    corr = {op: GemmCorrection(np.array(c["grid"]), np.array(c["log_k"]), np.array(c["log_n"]),
                               np.array(c["log_ratio"]), c["width"])
            for op, c in d.get("corrections", {}).items()}
    return GpuFit(d["gpu"], {op: GemmLaw(**v) for op, v in d["gemm"].items()},
                  {op: SmallOpLaw(**v) for op, v in d["small"].items()}, tuple(d["models"]),
                  corr or None)


def envelope(fn, q: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """``fn`` (vectorised over token counts) made non-decreasing: the running maximum of
    fn(grid) interpolated linearly at q # [rows]; beyond the grid the last value times fn's
    own growth (simulator.cost.measured.calibrated_role prices every corrected law through
    this)."""
    q = np.asarray(q, dtype=np.float64)
    vals = np.maximum.accumulate(fn(grid))  # [G]
    inside = np.interp(np.minimum(q, grid[-1]), grid, vals)
    beyond = vals[-1] * fn(np.maximum(q, grid[-1])) / fn(grid[-1:])
    return np.where(q <= grid[-1], inside, beyond)

