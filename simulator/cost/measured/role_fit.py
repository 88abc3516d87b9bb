"""One role's latency law fitted to profile rows: features, the three families, k-fold CV.

The features of a pass (:func:`profile_features`, batch sums of the NNLS law), the families
(``nnls`` by :func:`fit_nnls`, ``floor`` by :func:`fit_floor`, ``grid`` by :class:`GridLaw`),
the cross-validated choice between them (:func:`choose_family`) and its result
(:class:`RoleFit`, from :func:`fit_role`). :mod:`simulator.cost.measured.profiled` describes the
model and builds the step-time cost model from one :class:`RoleFit` per role; it re-exports every
name here. Fitting is its own concept (numpy/scipy on arrays [rows]), independent of the profile
file and of the engine's cost interface.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from specbatch.errors import require

BASE_FEATURES = ("const", "batch", "query", "kv", "query_kv", "query_sq")
MIN_ROWS = 6  # per role
MIN_DISTINCT_FOR_KNOTS = 8
KNOT_QUANTILES = (0.25, 0.5, 0.75)
#: Model families compared per role by k-fold held-out MAPE (first wins a tie).
FAMILIES = ("nnls", "floor", "grid")
#: Candidate floors of the ``floor`` family: these quantiles of the measured latencies (and 0).
FLOOR_QUANTILES = tuple(np.linspace(0.0, 0.6, 13))
#: Relative margin within which held-out MAPEs count as tied (the simpler family wins).
FAMILY_TIE = 0.02


def profile_features(batch, query, kv, knots=(), prefill_batch=None,
                     prefill_tokens=None) -> np.ndarray:
    """Feature matrix [rows, F] for uniform batches: batch [rows], query [rows], kv [rows]
    per-request tokens. Columns: BASE_FEATURES then one hinge max(0, Q − κ) per knot.

    A row whose ``prefill_batch`` m [rows] is > 0 is a mixed pass (vLLM V1): the batch's rows
    plus m prompts of ``prefill_tokens`` p [rows] tokens on no cache in one target pass, so its
    features are the batch sums of the concatenated queries, as the simulator prices a mixed
    step (n + m requests, Q + m·p tokens, m·p² more attention within the chunk)."""
    n = np.asarray(batch, dtype=np.float64)
    q = np.asarray(query, dtype=np.float64)
    c = np.asarray(kv, dtype=np.float64)
    sq = n * q
    cols = [np.ones_like(n), n, sq, n * c, n * q * c, n * q * q]
    if prefill_batch is not None and np.any(prefill_batch):
        m = np.asarray(prefill_batch, dtype=np.float64)
        mp = m * np.asarray(prefill_tokens, dtype=np.float64)
        sq = sq + mp
        cols[1], cols[2], cols[5] = n + m, sq, cols[5] + mp * np.asarray(prefill_tokens)
    cols += [np.maximum(0.0, sq - k) for k in knots]
    return np.stack(cols, axis=1)


def uniform_equivalent(batch, query, kv, prefill_batch=None, prefill_tokens=None):
    """(n, mean query, mean cache) [rows] of each row, the uniform batch the grid family prices
    a pass as; rows without prefills (``prefill_batch`` 0 or None) are returned unchanged."""
    if prefill_batch is None or not np.any(prefill_batch):
        return batch, query, kv
    n, q, c, m, p = (np.asarray(a, dtype=np.float64)
                     for a in (batch, query, kv, prefill_batch, prefill_tokens))
    mixed, total = m > 0, n + m
    return (np.where(mixed, total, n), np.where(mixed, (n * q + m * p) / total, q),
            np.where(mixed, n * c / total, c))


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
    from scipy.optimize import nnls  # here: scipy.optimize adds ~0.3 s to every simulate start

    w = 1.0 / y
    Xw = X * w[:, None]
    scale = np.abs(Xw).max(axis=0)
    scale[scale == 0] = 1.0
    beta, _ = nnls(Xw / scale, np.ones_like(y), maxiter=50 * X.shape[1])
    return beta / scale


def mape(pred: np.ndarray, y: np.ndarray) -> float:
    """Mean absolute percentage error (a fraction: 0.05 = 5 %). pred, y [rows]."""
    return float(np.mean(np.abs(pred - y) / y))


def fit_floor(X: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray]:
    """The ``floor`` family: t = max(φ, Xβ), a launch/host floor φ under the NNLS law.

    An eager or host-bound forward pass costs about L·ℓ (L layers, ℓ the per-layer launch and
    sync latency) whatever its load, and only a pass heavy enough for the GPU to dominate
    follows the roofline-like law; the max is that hard knee (simulator.cost.gpus.hardware's eager
    preset has the same shape). φ is chosen among 0 and the ``FLOOR_QUANTILES`` of y: for each
    candidate β is fitted (:func:`fit_nnls`) to the rows measured above it, and the candidate
    whose max(φ, Xβ) has the lowest in-sample MAPE wins (the lower φ on a tie). X [rows, F],
    y [rows] > 0 -> (φ seconds, β [F]).
    """
    best = (np.inf, 0.0, np.zeros(X.shape[1]))
    for phi in np.unique(np.concatenate([[0.0], np.quantile(y, FLOOR_QUANTILES)])):
        above = y > phi
        if above.sum() < MIN_ROWS:
            continue
        beta = fit_nnls(X[above], y[above])
        err = mape(np.maximum(phi, X @ beta), y)
        if err < best[0]:
            best = (err, float(phi), beta)
    return best[1], best[2]


def _grid_axes(batch, query, kv) -> np.ndarray:
    """[rows, 3] grid coordinates (log2 batch, log2 query, log2(1 + kv)) of uniform batches."""
    n, q, c = (np.asarray(a, dtype=np.float64).reshape(-1) for a in (batch, query, kv))
    return np.stack([np.log2(n), np.log2(q), np.log2(1.0 + c)], axis=1)


class GridLaw:
    """Piecewise-linear interpolation of log2 latency over the measured (batch, query, kv) grid
    (log2 axes; duplicates averaged; clamped to the grid's edges; nearest measured point where
    the clamped query falls outside the hull of the points). Built from arrays [rows]."""

    def __init__(self, batch, query, kv, latency):
        X = _grid_axes(batch, query, kv)
        y = np.log2(np.asarray(latency, dtype=np.float64).reshape(-1))
        keys, inverse = np.unique(X, axis=0, return_inverse=True)
        inverse = inverse.reshape(-1)
        self.values = np.bincount(inverse, weights=y) / np.bincount(inverse)  # [points]
        self.lo, self.hi = keys.min(axis=0), keys.max(axis=0)  # [3]
        self.axes = np.flatnonzero(self.hi > self.lo)  # the axes that vary
        self.points = keys[:, self.axes]  # [points, len(axes)]
        self._interp = None

    def __getstate__(self):  # the scipy interpolators are rebuilt on demand
        state = dict(self.__dict__)
        state["_interp"] = None
        return state

    def _build(self):
        from scipy.interpolate import LinearNDInterpolator, NearestNDInterpolator
        from scipy.spatial import QhullError

        nearest = NearestNDInterpolator(self.points, self.values)
        try:
            linear = LinearNDInterpolator(self.points, self.values)
        except (QhullError, ValueError):  # too few or coplanar points: nearest only
            linear = None
        self._interp = (linear, nearest)
        return self._interp

    def clamp(self, batch, query, kv) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The nearest points on the grid's box (batch, query, kv [rows]) and whether each
        point was moved (outside the measured range on some axis)."""
        X = _grid_axes(batch, query, kv)
        C = np.clip(X, self.lo, self.hi)
        moved = (C != X).any(axis=1)
        return np.exp2(C[:, 0]), np.exp2(C[:, 1]), np.exp2(C[:, 2]) - 1.0, moved

    def __call__(self, batch, query, kv) -> np.ndarray:
        """Predicted seconds for uniform batches; batch, query, kv [rows]."""
        X = np.clip(_grid_axes(batch, query, kv), self.lo, self.hi)[:, self.axes]
        if self.axes.size == 0:
            out = np.full(X.shape[0], self.values[0])
        elif self.axes.size == 1:
            x = self.points[:, 0]
            order = np.argsort(x)
            out = np.interp(X[:, 0], x[order], self.values[order])
        else:
            linear, nearest = self._interp or self._build()
            out = linear(X) if linear is not None else np.full(X.shape[0], np.nan)
            missing = ~np.isfinite(out)
            if missing.any():
                out[missing] = nearest(X[missing])
        return np.exp2(out)


@dataclass(frozen=True)
class RoleFit:
    """The fitted law of one role: the NNLS coefficients over BASE_FEATURES + hinge knots, the
    interpolated grid, and which of the two (``family``) the k-fold CV chose."""

    role: str
    model: str
    coef: tuple[float, ...]
    knots: tuple[float, ...]
    rows: int
    fit_mape: float  # in-sample, of the chosen family
    cv_mape: float  # k-fold cross-validated, of the chosen family
    folds: int
    family: str = "nnls"
    family_cv: tuple = ()  # (family, k-fold held-out MAPE) pairs, every family compared
    floor: float = 0.0  # φ of the ``floor`` family (seconds; 0 for the others)
    grid: GridLaw | None = field(default=None, repr=False, compare=False)

    @property
    def feature_names(self) -> tuple[str, ...]:
        return BASE_FEATURES + tuple(f"query>{k:g}" for k in self.knots)

    def predict(self, batch, query, kv) -> np.ndarray:
        """Predicted seconds for uniform batches (chosen family); batch, query, kv [rows].

        The grid is exact inside its box; beyond an edge (a 512-token prefill chunk against a
        grid measured to query 9, say) it takes the edge's value times the NNLS law's growth
        from the edge to the point, so it extrapolates with the linear law's shape instead of
        pricing every larger pass like the edge."""
        batch, query, kv = (np.asarray(a, dtype=np.float64).reshape(-1) for a in (batch, query, kv))
        law = profile_features(batch, query, kv, self.knots) @ np.asarray(self.coef)
        if self.family == "floor":
            return np.maximum(self.floor, law)
        if self.family != "grid":
            return law
        out = self.grid(batch, query, kv)
        cb, cq, ckv, moved = self.grid.clamp(batch, query, kv)
        if moved.any():
            edge = profile_features(cb, cq, ckv, self.knots) @ np.asarray(self.coef)
            ok = moved & (edge > 0) & (law > 0)
            out = np.where(ok, out * np.where(ok, law, 1.0) / np.where(ok, edge, 1.0), out)
        return out


def _fit_family(family: str, batch, query, kv, y, m=None, p=None):
    """One family fitted to arrays [rows] (``m``, ``p``: prompts of mixed rows,
    :func:`profile_features`) -> predict(batch, query, kv, m, p) -> seconds [rows]."""
    if family == "grid":
        grid = GridLaw(*uniform_equivalent(batch, query, kv, m, p), y)
        return lambda b, q, c, mb, pt: grid(*uniform_equivalent(b, q, c, mb, pt))
    X = profile_features(batch, query, kv, (), m, p)
    knots = choose_knots(X[:, 2])
    X = profile_features(batch, query, kv, knots, m, p)
    if family == "floor":
        phi, beta = fit_floor(X, y)
        return lambda b, q, c, mb, pt: np.maximum(
            phi, profile_features(b, q, c, knots, mb, pt) @ beta)
    beta = fit_nnls(X, y)
    return lambda b, q, c, mb, pt: profile_features(b, q, c, knots, mb, pt) @ beta


def choose_family(family_cv: dict) -> str:
    """The first family (in ``FAMILIES`` order: simplest first) whose held-out MAPE is within
    ``FAMILY_TIE`` (relative) of the lowest: a more flexible family must beat a simpler one by
    more than fold-to-fold noise (the floor family with a tiny φ otherwise wins by chance on
    a linear profile)."""
    best = min(family_cv.values())
    return next(f for f, cv in family_cv.items() if cv <= best * (1.0 + FAMILY_TIE))


def _take(a, rows):
    """``a[rows]``, or None for an absent optional column."""
    return None if a is None else a[rows]


def fit_role(batch, query, kv, latency, *, folds: int = 5, seed: int = 0,
             role: str = "target", model: str = "", families=FAMILIES,
             prefill_batch=None, prefill_tokens=None) -> RoleFit:
    """Fit one role's law (arrays [rows]): every family in ``families`` with its k-fold
    cross-validated MAPE (one fixed fold assignment, shuffled with ``seed``), keeping the
    family :func:`choose_family` picks. ``prefill_batch``/``prefill_tokens`` [rows] (optional)
    make rows with prefill_batch > 0 mixed passes (:func:`profile_features`)."""
    batch, query, kv, y = (np.asarray(a, dtype=np.float64) for a in (batch, query, kv, latency))
    m = p = None
    if prefill_batch is not None and np.any(prefill_batch):
        m, p = (np.asarray(a, dtype=np.float64) for a in (prefill_batch, prefill_tokens))
    unknown = sorted(set(families) - set(FAMILIES))
    require(bool(families) and not unknown, f"families {list(families)}: expected some of "
            f"{', '.join(FAMILIES)}")
    knots = choose_knots(profile_features(batch, query, kv, (), m, p)[:, 2])
    X = profile_features(batch, query, kv, knots, m, p)
    beta = fit_nnls(X, y)
    rows = y.size
    k = max(2, min(folds, rows))
    order = np.random.default_rng(seed).permutation(rows)
    preds = {family: np.empty(rows) for family in families}
    for fold in np.array_split(order, k):
        train = np.ones(rows, dtype=bool)
        train[fold] = False
        for family in families:
            law = _fit_family(family, batch[train], query[train], kv[train], y[train],
                              _take(m, train), _take(p, train))
            preds[family][fold] = law(batch[fold], query[fold], kv[fold], _take(m, fold),
                                      _take(p, fold))
    family_cv = {family: mape(pred, y) for family, pred in preds.items()}
    chosen = choose_family(family_cv)
    uniform = uniform_equivalent(batch, query, kv, m, p)
    grid = GridLaw(*uniform, y) if "grid" in families else None
    floor = 0.0
    if chosen == "floor":  # the floor's own β; the other families keep the all-rows law
        floor, beta = fit_floor(X, y)
        in_sample = np.maximum(floor, X @ beta)
    else:
        in_sample = grid(*uniform) if chosen == "grid" else X @ beta
    return RoleFit(role=role, model=model, coef=tuple(float(v) for v in beta), knots=knots,
                   rows=rows, fit_mape=mape(in_sample, y), cv_mape=family_cv[chosen], folds=k,
                   family=chosen, family_cv=tuple(family_cv.items()), floor=floor, grid=grid)
