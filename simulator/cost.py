"""Step-time cost models: how long one forward pass of the draft or target model takes.

One interface (:class:`CostModel`) for every model: ``step_time(role, query, kv)`` returns the
seconds of one forward pass of ``role`` ("draft" | "target") over a batch whose request i
processes ``query[i]`` new tokens with ``kv[i]`` tokens already in its KV cache, and
``overhead`` is the fixed CPU-side time of one engine step (added once per step by the
simulator, not by ``step_time``). Prefill is the same call: ``step_time(role, chunk, kv_before)``.
THEORY.md §5 (DSD) takes ``T_draft(k)``, ``T_target(k)`` and ``T_overhead(k)`` from here:
``T_draft(k) = k · step_time("draft", 1, kv)``, ``T_target(k) = step_time("target", k+1, kv)``.

Roofline (:class:`RooflineCost`)
================================
Per forward pass of a model with L layers, hidden size h, vocabulary V, P_layers = L · (weights
of one decoder layer) (``traces.shapes.ModelShape``), dtype width b bytes (bf16: 2), tensor
parallel degree tp, query vector q [n] and KV vector c [n] (Q = Σ q_i):

- FLOPs (per GPU, divided by tp)::

      F = 2 · (P_layers + h·V) · Q                       # every weight multiplies every token
        + 4 · L · h · Σ_i q_i · (c_i + (q_i + 1)/2)      # QK^T and AV, causal within the chunk

  The LM head (2·h·V per token) is charged for *every* query token: speculative verification
  needs logits at all k+1 positions, and for a prefill chunk (which needs only the last one)
  the overcount is h·V / (P_layers + h·V) of the linear FLOPs (1.3 % for Vicuna-33B; large
  only for the 68M draft, whose prefill is negligible anyway). Attention uses heads·head_dim = h
  query channels (grouped-query attention changes the KV bytes, not these FLOPs).
- Bytes (per GPU)::

      B = b · (P_layers + h·V + h) / tp                  # weights, streamed once per pass
        + kv_bytes_per_token · f_kv · Σ_i (c_i + 2·q_i)  # KV read (cache + own chunk) and written
        + b · L · (9h + 2·d_kv + 6I) · Q / tp            # activations in/out of each kernel

  where d_kv = kv_heads · head_dim, I = MLP width and f_kv = max(1, kv_heads/tp)/kv_heads is the
  per-GPU share of KV heads (replicated once tp > kv_heads). The input embedding reads only
  the Q rows it needs and is not counted. The activation term assumes every linear layer reads
  its input and writes its output once (no fusion) and is split by tp.
- Time::

      t = max(F / (peak · eff_c), B / (bw · eff_m))      # roofline: compute- or memory-bound
        + pass_latency + L · layer_latency                # fixed launch latencies
        + [tp > 1] · 2L · (allreduce_latency + 2(tp-1)/tp · b·h·Q / link_bw)

  i.e. two ring all-reduces of the hidden state per layer (after attention and after the MLP),
  not overlapped with compute. An empty batch (Q = 0) costs 0.
- The draft runs with ``draft_tp`` (default 1: vLLM's ``speculative_draft_tensor_parallel_size``
  = 1, the usual choice for a small draft), the target with ``tp``; tp must divide the number
  of attention heads (vLLM refuses otherwise).
- Not modelled: quantisation, KV-cache paging granularity, attention-kernel inefficiency at
  short contexts, CPU/GPU overlap, power throttling, MoE.

Sanity (tested in tests/simulator/test_cost.py): Vicuna-33B (65 GB bf16) decode at batch 1 on
one H100 is memory-bound at 65 GB / (3.35 TB/s · 0.8) + 0.5 ms ≈ 25 ms; the batch can grow to
about ``hardware.ridge`` ≈ 258 query tokens before it turns compute-bound; a 4096-token prefill
is compute-bound. Published figures this matches within a factor 1.5 (approximate, from the
vLLM / TensorRT-LLM / Vidur literature): Llama-2-7B bf16 batch-1 decode on A100-80GB at
~7-8 ms/token (model: 8.6 ms), Llama-3-8B on H100 at ~6-7 ms/token (model: 6.4 ms),
Llama-2-70B with tp=4 on H100 at ~15-25 ms/token (model: see test).

Profiled (:class:`ProfiledCost`)
================================
Fitted per role from a latency profile (Parquet or CSV, columns model, role, device, dtype,
batch_size, query_tokens, kv_tokens, latency_s; one row = one measured forward pass of a
uniform batch: ``batch_size`` requests each with ``query_tokens`` new and ``kv_tokens`` cached
tokens). The law is linear in physically meaningful features with non-negative coefficients
(``scipy.optimize.nnls``, so predicted times are never negative and never decrease with load)::

    t = β0 + β1·n + β2·Q + β3·Σc_i + β4·Σq_i·c_i + β5·Σq_i² + Σ_k γ_k · max(0, Q − κ_k)

(fixed latency, per-request cost, per-token weight/compute cost, KV reads, attention over
the cache, attention within the chunk, and convex hinges at knots κ_k — the 25/50/75 %
quantiles of the distinct Q values when there are ≥ 8 of them — that let the fit bend from the
memory-bound floor to the compute-bound slope, as the roofline does). Rows are weighted by
1/latency, so the fit minimises relative error; its k-fold (default 5, shuffled with seed 0,
knots re-chosen per fold) cross-validated mean absolute percentage error is stored per role
(``cv_mape``). The profile measures forward passes only, so ``overhead`` (the engine's CPU
time per step) comes from the hardware preset.

Hot path: both models reduce (query, kv) to (n, Σq, Σc, Σq·c, Σq²) with one small Gram
product (:func:`batch_sums`) and then do scalar arithmetic: ~5 µs per call at batch 64 on an
unloaded core (``benchmarks/cost_bench.py``). Both also expose the scalar half,
``time_from_sums(role, n, Σq, Σc, Σq·c, Σq²)`` (optional in :class:`CostModel`): the engine
computes one decode step's sums once and derives every draft pass from them (pass d of a
batch with query 1 has Σc + n_d·d cached tokens — exact in float64 below 2^53, so the times
are bit-identical to calling ``step_time`` per pass).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import numpy as np
from scipy.optimize import nnls
from specbatch.simulator.hardware import Hardware, get_hardware
from specbatch.traces.shapes import ModelShape, get_shape

from specbatch.errors import SpecbatchError, require

ROLES = ("draft", "target")


class CostModel(Protocol):
    """Step time of one forward pass plus a fixed per-step overhead (seconds)."""

    overhead: float

    def step_time(self, role: str, query: np.ndarray, kv: np.ndarray) -> float:
        """Seconds for one pass of ``role`` over ``query`` [n] new and ``kv`` [n] cached tokens."""
        ...


def batch_sums(query, kv) -> tuple[int, float, float, float, float]:
    """(n, Σq, Σc, Σq·c, Σq²) of query [n] and kv [n] (the sums as floats).

    The hot path of every cost model: one [2, n] x [n, 3] Gram product of the rows
    (q, c, 1), which is cheaper than four separate numpy reductions for small arrays.
    Exact for integer token counts below 2^53.
    """
    n = query.shape[0] if isinstance(query, np.ndarray) else int(np.size(query))
    b = np.empty((3, n))
    b[0] = query
    b[1] = kv
    b[2] = 1.0
    (qq, qc, sq), (_, _, sc) = (b[:2] @ b.T).tolist()
    return n, sq, sc, qc, qq


# ----------------------------------------------------------------------------- roofline


@dataclass(frozen=True)
class PassConstants:
    """Per-role, per-GPU constants of the roofline, so ``step_time`` is scalar arithmetic."""

    model: str
    tp: int
    flops_per_token: float  # 2 (P_layers + h V) / tp
    attn_flops: float  # 4 L h / tp  (times Σ q (c + (q+1)/2))
    weight_bytes: float  # b (P_layers + h V + h) / tp
    kv_bytes: float  # kv_bytes_per_token * f_kv  (times Σ c + 2 q)
    act_bytes_per_token: float  # b L (9h + 2 d_kv + 6 I) / tp
    comm_per_token: float  # seconds per query token of all-reduce bandwidth
    fixed: float  # pass_latency + L layer_latency + all-reduce latencies
    inv_compute: float  # 1 / (peak eff_c)
    inv_memory: float  # 1 / (bw eff_m)


def pass_constants(shape: ModelShape, hw: Hardware, tp: int = 1) -> PassConstants:
    """Precompute the roofline constants of ``shape`` on ``tp`` GPUs of type ``hw``."""
    require(isinstance(tp, (int, np.integer)) and tp >= 1, f"tp {tp!r}: expected an integer >= 1")
    require(shape.heads % tp == 0,
            f"tp {tp}: {shape.name} has {shape.heads} attention heads, not divisible by tp")
    b = hw.dtype_bytes
    L, h = shape.layers, shape.hidden
    p_layers = L * shape.layer_params
    head = h * shape.vocab
    d_kv = shape.kv_heads * shape.head_dim
    f_kv = max(1.0, shape.kv_heads / tp) / shape.kv_heads
    comm_tok = 0.0
    fixed = hw.pass_latency + L * hw.layer_latency
    if tp > 1:
        comm_tok = 2 * L * (2 * (tp - 1) / tp) * b * h / hw.link_bw
        fixed += 2 * L * hw.allreduce_latency
    return PassConstants(
        model=shape.name,
        tp=int(tp),
        flops_per_token=2.0 * (p_layers + head) / tp,
        attn_flops=4.0 * L * h / tp,
        weight_bytes=b * (p_layers + head + h) / tp,
        kv_bytes=float(shape.kv_bytes_per_token(b)) * f_kv,
        act_bytes_per_token=b * L * (9 * h + 2 * d_kv + 6 * shape.intermediate) / tp,
        comm_per_token=comm_tok,
        fixed=fixed,
        inv_compute=1.0 / (hw.peak_flops * hw.compute_eff),
        inv_memory=1.0 / (hw.mem_bw * hw.memory_eff),
    )


@dataclass(frozen=True)
class RooflineCost:
    """Roofline step time (module docstring) for a draft/target pair on one hardware preset."""

    hardware: Hardware
    target: ModelShape
    draft: ModelShape
    tp: int = 1
    draft_tp: int = 1
    overhead: float = field(default=math.nan)
    consts: dict = field(default=None, repr=False, compare=False)  # role -> PassConstants

    def __post_init__(self) -> None:
        if math.isnan(self.overhead):
            object.__setattr__(self, "overhead", float(self.hardware.overhead))
        consts = {
            "target": pass_constants(self.target, self.hardware, self.tp),
            "draft": pass_constants(self.draft, self.hardware, self.draft_tp),
        }
        object.__setattr__(self, "consts", consts)

    def _consts(self, role: str) -> PassConstants:
        c = self.consts.get(role)
        if c is None:
            raise SpecbatchError(f"cost role {role!r}: expected one of {', '.join(ROLES)}")
        return c

    def step_time(self, role: str, query: np.ndarray, kv: np.ndarray) -> float:
        """Seconds of one pass; ``query`` [n] new tokens, ``kv`` [n] cached tokens per request."""
        return self.time_from_sums(role, *batch_sums(query, kv))

    def time_from_sums(self, role: str, n: int, sq: float, skv: float, sqkv: float,
                       sqq: float) -> float:
        """:meth:`step_time` from the batch sums (:func:`batch_sums`: n, Σq, Σc, Σq·c, Σq²),
        so a caller that knows the sums (e.g. d draft passes whose KV grows by one token each)
        pays scalar arithmetic only; bit-identical to :meth:`step_time` on the same sums."""
        try:
            c = self.consts[role]
        except KeyError:
            c = self._consts(role)  # raises the one-line error
        if sq <= 0.0:
            return 0.0
        flops = c.flops_per_token * sq + c.attn_flops * (sqkv + 0.5 * (sqq + sq))
        nbytes = c.weight_bytes + c.kv_bytes * (skv + 2.0 * sq) + c.act_bytes_per_token * sq
        return max(flops * c.inv_compute, nbytes * c.inv_memory) + c.fixed + c.comm_per_token * sq

    def breakdown(self, role: str, query: np.ndarray, kv: np.ndarray) -> dict:
        """The terms of :meth:`step_time`: flops, bytes, compute/memory/comm/fixed seconds, bound."""
        c = self._consts(role)
        query = np.asarray(query, dtype=np.float64).ravel()
        kv = np.asarray(kv, dtype=np.float64).ravel()
        sq = float(query.sum())
        flops = c.flops_per_token * sq + c.attn_flops * float(np.dot(query, kv + 0.5 * (query + 1)))
        kv_bytes = c.kv_bytes * float((kv + 2.0 * query).sum())
        nbytes = c.weight_bytes + kv_bytes + c.act_bytes_per_token * sq
        compute_s, memory_s = flops * c.inv_compute, nbytes * c.inv_memory
        return {
            "role": role, "model": c.model, "tp": c.tp, "query_tokens": sq,
            "flops": flops, "bytes": nbytes, "weight_bytes": c.weight_bytes, "kv_bytes": kv_bytes,
            "compute_s": compute_s, "memory_s": memory_s,
            "comm_s": c.comm_per_token * sq, "fixed_s": c.fixed if sq > 0 else 0.0,
            "bound": "compute" if compute_s > memory_s else "memory",
            "step_time_s": self.step_time(role, query, kv),
        }


def kv_capacity_tokens(hardware: str = "h100", target: str = "vicuna-33b",
                       draft: str = "vicuna-68m", tp: int = 1,
                       gpu_memory_utilization: float = 0.9) -> int:
    """KV-cache tokens that fit next to the weights: (tp·M·u − W_target − W_draft) / kv bytes.

    ``M`` is one GPU's memory, ``u`` vLLM's ``gpu_memory_utilization``; each cached token needs
    the target's and the draft's KV (bf16). Activation workspace is ignored. Returns 0 when the
    weights alone do not fit (e.g. Vicuna-33B, 65 GB, leaves ~4k tokens on one 80 GB H100).
    """
    hw = get_hardware(hardware)
    t, d = get_shape(target), get_shape(draft)
    b = hw.dtype_bytes
    free = tp * hw.memory_bytes * gpu_memory_utilization - b * (t.params + d.params)
    per_token = t.kv_bytes_per_token(b) + d.kv_bytes_per_token(b)
    return max(0, int(free // per_token))


# ----------------------------------------------------------------------------- profiled

PROFILE_COLUMNS = ("role", "batch_size", "query_tokens", "kv_tokens", "latency_s")
NUMERIC_COLUMNS = ("batch_size", "query_tokens", "kv_tokens", "latency_s")
BASE_FEATURES = ("const", "batch", "query", "kv", "query_kv", "query_sq")
MIN_ROWS = 6  # per role
MIN_DISTINCT_FOR_KNOTS = 8
KNOT_QUANTILES = (0.25, 0.5, 0.75)


def profile_features(batch, query, kv, knots=()) -> np.ndarray:
    """Feature matrix [rows, F] for uniform batches: batch [rows], query [rows], kv [rows]
    per-request tokens. Columns: BASE_FEATURES then one hinge max(0, Q − κ) per knot."""
    n = np.asarray(batch, dtype=np.float64)
    q = np.asarray(query, dtype=np.float64)
    c = np.asarray(kv, dtype=np.float64)
    sq = n * q
    cols = [np.ones_like(n), n, sq, n * c, n * q * c, n * q * q]
    cols += [np.maximum(0.0, sq - k) for k in knots]
    return np.stack(cols, axis=1)


def choose_knots(total_query: np.ndarray) -> tuple[float, ...]:
    """Hinge knots: quantiles of the distinct total-query values (none if fewer than 8)."""
    distinct = np.unique(np.asarray(total_query, dtype=np.float64))
    if distinct.size < MIN_DISTINCT_FOR_KNOTS:
        return ()
    return tuple(float(k) for k in np.unique(np.quantile(distinct, KNOT_QUANTILES)))


def fit_nnls(X: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Non-negative least squares on relative error: minimise Σ ((Xβ − y)/y)², β ≥ 0.

    Rows are weighted by 1/y so short and long passes count alike (the target metric is MAPE);
    columns are scaled to unit max for conditioning and the coefficients scaled back.
    X [rows, F], y [rows] > 0 -> β [F].
    """
    w = 1.0 / y
    Xw = X * w[:, None]
    scale = np.abs(Xw).max(axis=0)
    scale[scale == 0] = 1.0
    beta, _ = nnls(Xw / scale, np.ones_like(y), maxiter=50 * X.shape[1])
    return beta / scale


def mape(pred: np.ndarray, y: np.ndarray) -> float:
    """Mean absolute percentage error (a fraction: 0.05 = 5 %). pred, y [rows]."""
    return float(np.mean(np.abs(pred - y) / y))


@dataclass(frozen=True)
class RoleFit:
    """The fitted law of one role: coefficients over BASE_FEATURES + hinge knots."""

    role: str
    model: str
    coef: tuple[float, ...]
    knots: tuple[float, ...]
    rows: int
    fit_mape: float  # in-sample
    cv_mape: float  # k-fold cross-validated
    folds: int

    @property
    def feature_names(self) -> tuple[str, ...]:
        return BASE_FEATURES + tuple(f"query>{k:g}" for k in self.knots)

    def predict(self, batch, query, kv) -> np.ndarray:
        """Predicted seconds for uniform batches; batch, query, kv [rows]."""
        return profile_features(batch, query, kv, self.knots) @ np.asarray(self.coef)


def fit_role(batch, query, kv, latency, *, folds: int = 5, seed: int = 0,
             role: str = "target", model: str = "") -> RoleFit:
    """Fit one role's law (arrays [rows]) and its k-fold cross-validated MAPE."""
    batch, query, kv, y = (np.asarray(a, dtype=np.float64) for a in (batch, query, kv, latency))
    knots = choose_knots(batch * query)
    X = profile_features(batch, query, kv, knots)
    beta = fit_nnls(X, y)
    rows = y.size
    k = max(2, min(folds, rows))
    order = np.random.default_rng(seed).permutation(rows)
    pred = np.empty(rows)
    for fold in np.array_split(order, k):
        train = np.ones(rows, dtype=bool)
        train[fold] = False
        kf = choose_knots(batch[train] * query[train])
        b = fit_nnls(profile_features(batch[train], query[train], kv[train], kf), y[train])
        pred[fold] = profile_features(batch[fold], query[fold], kv[fold], kf) @ b
    return RoleFit(role=role, model=model, coef=tuple(float(v) for v in beta), knots=knots,
                   rows=rows, fit_mape=mape(X @ beta, y), cv_mape=mape(pred, y), folds=k)


@dataclass(frozen=True)
class ProfiledCost:
    """Step time from per-role laws fitted to a measured latency profile."""

    fits: dict  # role -> RoleFit
    overhead: float = 1e-3
    path: str | None = None

    def _fit(self, role: str) -> RoleFit:
        fit = self.fits.get(role)
        if fit is None:
            where = f"profile {self.path}: " if self.path else ""
            raise SpecbatchError(
                f"{where}column role: no rows for {role!r} (have {', '.join(sorted(self.fits))})")
        return fit

    @property
    def cv_mape(self) -> dict:
        return {role: fit.cv_mape for role, fit in self.fits.items()}

    def step_time(self, role: str, query: np.ndarray, kv: np.ndarray) -> float:
        """Seconds of one pass; ``query`` [n] new tokens, ``kv`` [n] cached tokens per request."""
        return self.time_from_sums(role, *batch_sums(query, kv))

    def time_from_sums(self, role: str, n: int, sq: float, skv: float, sqkv: float,
                       sqq: float) -> float:
        """:meth:`step_time` from the batch sums (n, Σq, Σc, Σq·c, Σq², :func:`batch_sums`)."""
        fit = self._fit(role)
        if sq <= 0.0:
            return 0.0
        b = fit.coef
        t = (b[0] + b[1] * n + b[2] * sq + b[3] * skv + b[4] * sqkv + b[5] * sqq)
        for coef, knot in zip(b[6:], fit.knots):
            if sq > knot:
                t += coef * (sq - knot)
        return t


def read_profile(path: str | Path):
    """Read and validate a latency profile (Parquet or CSV) into a DataFrame.

    Raises a one-line :class:`SpecbatchError` naming the file and the offending column.
    """
    import pandas as pd

    path = Path(path)
    require(path.is_file(), f"profile {path}: no such file")
    try:
        if path.suffix.lower() in (".parquet", ".pq"):
            df = pd.read_parquet(path)
        else:
            df = pd.read_csv(path)
    except Exception as exc:  # noqa: BLE001 - any reader failure is a bad file
        raise SpecbatchError(f"profile {path}: cannot read: {str(exc).splitlines()[0]}") from None
    for col in PROFILE_COLUMNS:
        require(col in df.columns, f"profile {path}: column {col}: missing "
                f"(expected columns {', '.join(PROFILE_COLUMNS)})")
    for col in NUMERIC_COLUMNS:
        values = pd.to_numeric(df[col], errors="coerce").to_numpy(dtype=np.float64)
        bad = np.flatnonzero(~np.isfinite(values))
        require(bad.size == 0, f"profile {path}: column {col}: expected finite numbers, "
                f"got {df[col].iloc[bad[0]] if bad.size else ''!r} in row {bad[0] if bad.size else 0}")
        df[col] = values
    for col, low, strict in (("latency_s", 0.0, True), ("batch_size", 1.0, False),
                             ("query_tokens", 1.0, False), ("kv_tokens", 0.0, False)):
        v = df[col].to_numpy()
        bad = np.flatnonzero(v <= low) if strict else np.flatnonzero(v < low)
        require(bad.size == 0, f"profile {path}: column {col}: expected "
                f"{'>' if strict else '>='} {low:g}, got {v[bad[0]] if bad.size else 0:g} "
                f"in row {bad[0] if bad.size else 0}")
    roles = df["role"].astype(str).str.lower()
    unknown = sorted(set(roles) - set(ROLES))
    require(not unknown, f"profile {path}: column role: expected draft or target, got {unknown[0]!r}"
            if unknown else "")
    df["role"] = roles
    require(len(df) > 0, f"profile {path}: column latency_s: no rows")
    return df


def _select(df, column: str, wanted: str | None, path, role: str):
    """Rows of ``df`` whose ``column`` matches ``wanted`` when the column holds several values."""
    if column not in df.columns:
        return df
    values = sorted(set(df[column].astype(str)))
    if len(values) <= 1:
        return df
    require(wanted is not None, f"profile {path}: column {column}: {role} rows hold several "
            f"values ({', '.join(values)}); pick one")
    key = str(wanted).lower()
    mask = df[column].astype(str).str.lower().str.contains(key, regex=False)
    require(bool(mask.any()), f"profile {path}: column {column}: no {role} rows match "
            f"{wanted!r} (have {', '.join(values)})")
    return df[mask]


def fit_profile(path: str | Path, *, overhead: float = 1e-3, target: str | None = None,
                draft: str | None = None, device: str | None = None,
                folds: int = 5, seed: int = 0) -> ProfiledCost:
    """Fit a :class:`ProfiledCost` (one law per role present) with k-fold CV MAPE per role.

    ``target``/``draft``/``device`` select rows only when the profile holds several models per
    role or several devices (substring match, case-insensitive); a single value is used as is.
    Each present role needs at least ``MIN_ROWS`` rows.
    """
    df = read_profile(path)
    fits = {}
    for role, wanted in (("draft", draft), ("target", target)):
        rows = df[df["role"] == role]
        if len(rows) == 0:
            continue
        rows = _select(rows, "device", device, path, role)
        rows = _select(rows, "model", wanted, path, role)
        require(len(rows) >= MIN_ROWS, f"profile {path}: column role: {len(rows)} rows for "
                f"{role!r}, expected at least {MIN_ROWS}")
        model = str(rows["model"].iloc[0]) if "model" in rows.columns else ""
        fits[role] = fit_role(rows["batch_size"], rows["query_tokens"], rows["kv_tokens"],
                              rows["latency_s"], folds=folds, seed=seed, role=role, model=model)
    return ProfiledCost(fits=fits, overhead=float(overhead), path=str(path))


# ----------------------------------------------------------------------------- registry


def build_roofline(hardware: str, target: str, draft: str, tp: int, profile: str | None):
    return RooflineCost(get_hardware(hardware), get_shape(target), get_shape(draft), tp=tp)


def build_profiled(hardware: str, target: str, draft: str, tp: int, profile: str | None):
    require(profile is not None, "cost 'profiled': expected a latency profile (profile = PATH)")
    return fit_profile(profile, overhead=get_hardware(hardware).overhead, target=target,
                       draft=draft, device=hardware)


COST_MODELS = {"roofline": build_roofline, "profiled": build_profiled}


def build_cost_model(cost: str = "roofline", hardware: str = "h100", target: str = "vicuna-33b",
                     draft: str = "vicuna-68m", tp: int = 1,
                     profile: str | None = None) -> CostModel:
    """Build a cost model by name (``COST_MODELS``): "roofline" or "profiled" (needs ``profile``).

    The profiled model's per-step ``overhead`` is the hardware preset's (the profile measures
    forward passes only, not the engine's CPU work).
    """
    builder = COST_MODELS.get(str(cost).lower())
    if builder is None:
        raise SpecbatchError(f"cost {cost!r}: expected one of {', '.join(COST_MODELS)}")
    return builder(hardware, target, draft, tp, profile)
