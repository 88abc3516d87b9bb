"""The profiled cost model: step time from per-role laws fitted to a measured latency profile.

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
(``cv_mape``); above ``MAPE_WARN`` = 10 % :func:`mape_warnings` says so (``specbatch cost
fit`` prints it on stderr and in its JSON ``warnings``). The profile measures forward passes only, so ``overhead`` (the engine's CPU
time per step) comes from the hardware preset.

The fitted law is a function of the batch sums (simulator.cost_interface.batch_sums), so
:class:`ProfiledCost` is a :class:`~simulator.cost_interface.SumsCostModel`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy.optimize import nnls

from specbatch.errors import SpecbatchError, require
from specbatch.simulator.cost_interface import ROLES, batch_sums

PROFILE_COLUMNS = ("role", "batch_size", "query_tokens", "kv_tokens", "latency_s")
NUMERIC_COLUMNS = ("batch_size", "query_tokens", "kv_tokens", "latency_s")
BASE_FEATURES = ("const", "batch", "query", "kv", "query_kv", "query_sq")
MIN_ROWS = 6  # per role
MIN_DISTINCT_FOR_KNOTS = 8
KNOT_QUANTILES = (0.25, 0.5, 0.75)
#: Held-out (k-fold) MAPE above which a fit is reported with a warning (``mape_warnings``).
MAPE_WARN = 0.10


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


def mape_warnings(model: ProfiledCost, limit: float = MAPE_WARN) -> list[str]:
    """One line per role whose held-out (k-fold) MAPE exceeds ``limit`` (a fraction)."""
    return [f"{role} {fit.model or '?'}: {fit.folds}-fold held-out MAPE {100 * fit.cv_mape:.1f} % "
            f"exceeds {100 * limit:g} %; step times from this fit are uncertain by that much"
            for role, fit in model.fits.items() if fit.cv_mape > limit]


def fit_report(model: ProfiledCost) -> dict:
    """Per role: the fitted model's name, rows, folds, cross-validated and in-sample MAPE, and
    the coefficients by feature name (what ``specbatch cost fit`` prints)."""
    return {role: {"model": fit.model, "rows": fit.rows, "folds": fit.folds,
                   "cv_mape": fit.cv_mape, "fit_mape": fit.fit_mape,
                   "coefficients": dict(zip(fit.feature_names, fit.coef))}
            for role, fit in model.fits.items()}
