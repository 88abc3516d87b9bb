"""The profiled cost model: step time from per-role laws fitted to a measured latency profile.

Fitted per role from a latency profile (Parquet or CSV, columns model, role, device, dtype,
batch_size, query_tokens, kv_tokens, latency_s; one row = one measured forward pass of a
uniform batch: ``batch_size`` requests each with ``query_tokens`` new and ``kv_tokens`` cached
tokens; optional columns ``prefill_batch``/``prefill_tokens`` (:data:`MIXED_COLUMNS`) make a
row a mixed pass: those prompts packed into the batch's pass, fitted as the concatenated batch's
sums, :func:`profile_features`, and by the grid as its uniform equivalent). The law is
linear in physically meaningful features with non-negative coefficients
(``scipy.optimize.nnls``, so predicted times are never negative and never decrease with load)::

    t = β0 + β1·n + β2·Q + β3·Σc_i + β4·Σq_i·c_i + β5·Σq_i² + Σ_k γ_k · max(0, Q − κ_k)

(fixed latency, per-request cost, per-token weight/compute cost, KV reads, attention over the cache,
attention within the chunk, and convex hinges at knots κ_k — the 25/50/75 % quantiles of the
distinct Q values when there are ≥ 8 of them — that let the fit bend from the memory-bound floor to
the compute-bound slope, as the roofline does). Rows are weighted by 1/latency, so the fit minimises
relative error; its k-fold (default 5, shuffled with seed 0, knots re-chosen per fold)
cross-validated mean absolute percentage error is stored per role (``cv_mape``); above ``MAPE_WARN``
= 10 % :func:`mape_warnings` says so (``specbatch cost fit`` prints it on stderr and in its JSON
``warnings``). The profile measures forward passes only, so ``overhead`` (the engine's CPU time per
step) comes from the hardware preset.

Model family chosen by cross-validation (``FAMILIES``): next to the NNLS law above (``nnls``), each
role also gets a floored law (``floor``, below) and an interpolated grid (``grid``, as Vidur and
LLMServingSim do): piecewise-linear interpolation of log2 latency over the measured (log2 batch,
log2 query, log2(1 + kv)) points (duplicates averaged; Delaunay ``LinearNDInterpolator`` on the axes
that vary, nearest measured point outside their hull), with queries clamped to the grid's edges (no
extrapolation of its own: beyond an edge the edge's value is scaled by the NNLS law's growth from
the edge to the point, so long prefill chunks still cost more). Both families get the same k-fold
held-out MAPE (same fixed fold assignment, seed 0); the role uses the one with the lowest, the
simpler on a tie within ``FAMILY_TIE`` (2 % relative), and all are recorded (``RoleFit.family_cv``,
``fit_report``). A non-uniform batch is priced by the grid as the uniform batch with its n, mean
query Σq/n and mean cache Σc/n.

The third family, ``floor``, is max(φ, NNLS law): a per-pass floor φ (an eager pass's
per-layer launch and sync latency times its L layers, the host-bound regime the H100 profiles
show for small batches) under the law, fitted by :func:`fit_floor`; ``fit_report`` states φ and,
when the profile's model name is a known shape, φ / L.

All families are functions of the batch sums (simulator.cost.interface.batch_sums), so
:class:`ProfiledCost` is a :class:`~simulator.cost.interface.SumsCostModel` whichever is chosen
(``time_from_sums`` is bit-identical to ``step_time`` for both).

The fitting of one role (features, families, cross-validation, :class:`RoleFit`) lives in
:mod:`simulator.cost.measured.role_fit` (re-exported here); this module reads the profile, fits each
role and prices a step.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from specbatch.errors import SpecbatchError, require
from specbatch.simulator.cost.interface import ROLES, batch_sums
from specbatch.simulator.cost.measured.profile_file import (  # noqa: F401 - importable here too
    MIXED_COLUMNS,
    NUMERIC_COLUMNS,
    PROFILE_COLUMNS,
    read_profile,
    select_rows,
)
from specbatch.simulator.cost.measured.role_fit import (  # noqa: F401 - importable from here too
    BASE_FEATURES,
    FAMILIES,
    FAMILY_TIE,
    FLOOR_QUANTILES,
    KNOT_QUANTILES,
    MIN_DISTINCT_FOR_KNOTS,
    MIN_ROWS,
    GridLaw,
    RoleFit,
    choose_family,
    choose_knots,
    fit_floor,
    fit_nnls,
    fit_role,
    mape,
    profile_features,
    uniform_equivalent,
)

#: Held-out (k-fold) MAPE above which a fit is reported with a warning (``mape_warnings``).
MAPE_WARN = 0.10


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
        if fit.family == "grid":  # the uniform batch with this n, mean query and mean cache
            return float(fit.predict(np.array([n]), np.array([sq / n]), np.array([skv / n]))[0])
        b = fit.coef
        t = (b[0] + b[1] * n + b[2] * sq + b[3] * skv + b[4] * sqkv + b[5] * sqq)
        for coef, knot in zip(b[6:], fit.knots):
            if sq > knot:
                t += coef * (sq - knot)
        return max(fit.floor, t) if fit.family == "floor" else t


def fit_profile(path: str | Path, *, overhead: float = 1e-3, target: str | None = None,
                draft: str | None = None, device: str | None = None,
                folds: int = 5, seed: int = 0, families=FAMILIES,
                roles: tuple[str, ...] = ROLES) -> ProfiledCost:
    """Fit a :class:`ProfiledCost` (one law per role present) with k-fold CV MAPE per role.

    ``target``/``draft``/``device`` select rows only when the profile holds several models per
    role or several devices (substring match, case-insensitive); a single value is used as is.
    Each present role needs at least ``MIN_ROWS`` rows; ``roles`` limits the roles fitted
    (the target alone for a drafter without a model).
    """
    df = read_profile(path)
    fits = {}
    for role, wanted in (("draft", draft), ("target", target)):
        rows = df[df["role"] == role] if role in roles else df.iloc[:0]
        if len(rows) == 0:
            continue
        rows = select_rows(rows, "device", device, path, role)
        rows = select_rows(rows, "model", wanted, path, role)
        require(len(rows) >= MIN_ROWS, f"profile {path}: column role: {len(rows)} rows for "
                f"{role!r}, expected at least {MIN_ROWS}")
        model = str(rows["model"].iloc[0]) if "model" in rows.columns else ""
        mixed = {col: rows[col] for col in MIXED_COLUMNS if col in rows.columns}
        fits[role] = fit_role(rows["batch_size"], rows["query_tokens"], rows["kv_tokens"],
                              rows["latency_s"], folds=folds, seed=seed, role=role, model=model,
                              families=families, **mixed)
    return ProfiledCost(fits=fits, overhead=float(overhead), path=str(path))


def mape_warnings(model: ProfiledCost, limit: float = MAPE_WARN) -> list[str]:
    """One line per role whose held-out (k-fold) MAPE exceeds ``limit`` (a fraction)."""
    return [f"{role} {fit.model or '?'}: {fit.folds}-fold held-out MAPE {100 * fit.cv_mape:.1f} % "
            f"exceeds {100 * limit:g} %; step times from this fit are uncertain by that much"
            for role, fit in model.fits.items() if fit.cv_mape > limit]


def fit_report(model: ProfiledCost) -> dict:
    """Per role: the fitted model's name, rows, folds, the chosen family and every family's
    cross-validated MAPE, the chosen family's cross-validated and in-sample MAPE, and the NNLS
    coefficients by feature name (what ``specbatch cost fit`` prints)."""
    return {role: {"model": fit.model, "rows": fit.rows, "folds": fit.folds,
                   "family": fit.family,
                   "family_cv_mape": dict(fit.family_cv or ((fit.family, fit.cv_mape),)),
                   "cv_mape": fit.cv_mape, "fit_mape": fit.fit_mape,
                   "floor_s": fit.floor, "floor_per_layer_s": floor_per_layer(fit),
                   "coefficients": dict(zip(fit.feature_names, fit.coef))}
            for role, fit in model.fits.items()}


def floor_per_layer(fit: RoleFit) -> float | None:
    """φ / L, the ``floor`` family's latency per decoder layer, when the fit's model name is
    a known shape (traces.models.shapes) with L layers; None otherwise or for the other families."""
    from specbatch.traces.models.shapes import SHAPES

    shape = SHAPES.get(fit.model.lower()) if fit.model else None
    if fit.family != "floor" or shape is None:
        return None
    return fit.floor / shape.layers
