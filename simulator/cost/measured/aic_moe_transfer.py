"""The MoE transfer: a MoE block whose (h, I, E, k, tp, ep) the tables do not time, priced from
the timed shapes nearest it.

The GEMM transfer (aic_ops.ShapeCurves.curve) carries the measured/law ratio of the two shapes
nearest in log2 of every shape column. For MoE that misses 8 % in most groups
(docs/fidelity.md), for two reasons the rows show:

- the nearest shape is often *another model at the same split*: Qwen3-30B-A3B (2048, 768, 128,
  8) and the (2816, 704, 128, 8) shape are 0.48 apart in log2, a tp doubling 1.0; but the
  MoE kernels pick their tiles per model width (vLLM's Triton experts read a tuned config per
  (E, N = I/tp) and GPU, FlashInfer autotunes per shape), so a model's own curve at the
  neighbouring splits carries its ratio better. The squared log2 distance weighs the split
  columns (tp, ep) by ``split`` < 1 where the rows say so;
- the law ``t = a + u·T + 6·T·k·h·I/(tp·ep)/π + 3·E_t·h·I·b/tp/β`` (aic_laws) scales all of a
  block's work by 1/tp, but part of it does not split with the width: the tokens' activations
  gathered into and scattered out of the expert GEMMs (T·k·h per rank's share, T·k·h/ep) and a
  cost per touched expert (E_t: each runs its own tiles, however narrow). At tp 32 the H100 fp8
  block of Qwen3-235B (4096, 1536, 128, 8) takes 990 µs at 4096 tokens against the law's 270;
  the ``routed`` terms add these two to the four.

Which terms, split weight and combination price a group best is not assumed: each of the
:data:`VARIANTS` is judged by leaving every timed shape out in turn (or, for a shape whose
model (h, I, E, k) is timed at no split, every timed model: what it is) and pricing it from
the others (:meth:`MoeTransfer.scores`, against their rows as timed); the lowest MAPE is used
where it beats the first variant, the GEMM rule, by more than one standard error over the
models (:meth:`MoeTransfer.choose`). A shape judged itself (benchmarks/aic_validate.py) is
left out of that choice too, and of the law's fit: they see none of its rows (nested).

The transferred curve of a shape: the law (the chosen terms, fitted by relative least squares
on every timed row of the group, aic_laws.fit_relative) at the shape, times exp of the
neighbours' log measured/law ratios (each interpolated in log tokens onto the union of their
grids, held at the ends) combined as the variant says (:class:`Variant`), made non-decreasing
(aic_curve.monotone); beyond its grid it grows as that law.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specbatch.errors import SpecbatchError
from specbatch.simulator.cost.measured.aic_curve import Curve, ShapeLaw, isotonic, monotone
from specbatch.simulator.cost.measured.aic_laws import features, fit_relative

#: The transfer law's terms (aic_laws.features): "moe", the four of aic_laws' law (floor, per
#: token, FLOPs, weight bytes); "moe_routed", those and the activations moved per rank
#: (T·k·h/ep) and the experts touched (E_t).
TERMS = ("moe", "moe_routed")
#: The shape columns (aic_curve.SHAPES["moe"]) and the row coordinate.
COLUMNS, ROW = ("hidden", "inter", "experts", "topk", "tp", "ep"), "tokens"


@dataclass(frozen=True)
class Variant:
    """One way to transfer: the law's ``terms`` (:data:`TERMS`), the weight ``split`` of the
    split columns (tp, ep) in the squared log2 distance (the model columns weigh 1), the
    ``near`` nearest shapes taken, their log ratios combined by ``combine``: "mean" (plain),
    "idw" (weighted by inverse squared distance) or "line" (two shapes that differ from the
    one priced in one and the same column only, a model's own neighbouring splits: linear in
    that column's log2 through them, interpolated between them, extrapolated beyond, as tp 32
    from tp 16 and 8; any others: the plain mean)."""

    terms: str
    split: float
    near: int
    combine: str

    def __str__(self) -> str:
        return (f"{self.terms} terms, split weight {self.split:g}, {self.near} nearest, "
                f"{self.combine}")


#: The candidates :meth:`MoeTransfer.choose` judges; the first is the GEMM transfer's rule
#: (aic_laws' law, every column alike, the 2 nearest, plain mean).
VARIANTS = (Variant("moe", 1.0, 2, "mean"), Variant("moe_routed", 1.0, 2, "mean"),
            Variant("moe_routed", 0.25, 2, "mean"), Variant("moe_routed", 0.02, 2, "mean"),
            Variant("moe_routed", 0.25, 2, "line"), Variant("moe_routed", 0.02, 2, "line"))
#: Fewest models (h, I, E, k) whose spread :meth:`MoeTransfer.choose` takes a standard error
#: over: with two, one degree of freedom, the first variant is kept.
MIN_MODELS = 3


def moe_terms(keys: np.ndarray, tokens: np.ndarray, dtype: str, terms: str) -> np.ndarray:
    """The transfer law's ``terms`` (:data:`TERMS`) of rows # [rows, 4 or 6]: ``keys``
    # [rows, 6] the shape columns, ``tokens`` # [rows]."""
    keys = np.asarray(keys, dtype=np.int64)
    rows = {c: keys[:, j] for j, c in enumerate(COLUMNS)}
    rows[ROW] = np.asarray(tokens, dtype=np.float64)
    rows["dtype"] = np.full(len(keys), dtype)
    return features(terms, rows)


def monotone_rows(secs: np.ndarray) -> np.ndarray:
    """aic_curve.monotone of each row of ``secs`` # [rows, G] (what the choice scores with; the
    curve itself is made with aic_curve.monotone)."""
    m = secs.copy()
    if secs.shape[1] > 2:
        m[:, 1:-1] = np.median(np.stack([secs[:, :-2], secs[:, 1:-1], secs[:, 2:]]), axis=0)
    logs = np.log(m)
    fit = logs.copy()
    for r in np.flatnonzero((np.diff(logs, axis=1) < 0).any(axis=1)):
        fit[r] = isotonic(logs[r])
    out = np.where(fit == logs, m, np.exp(fit))
    out = np.clip(out, m.min(axis=1, keepdims=True), m.max(axis=1, keepdims=True))
    return np.maximum.accumulate(out, axis=1)


class MoeTransfer:
    """One MoE group's timed curves (``points``: shape -> (tokens # [G], seconds # [G]) as
    timed) and the transfer to any shape (module docstring)."""

    def __init__(self, points: dict, dtype: str):
        self.keys = list(points)
        self.dtype = dtype
        self.index = {k: i for i, k in enumerate(self.keys)}
        self.coords = log2_coords(np.array(self.keys, dtype=np.float64))  # [N, 6]
        self.grids = [np.asarray(points[k][0], dtype=np.float64) for k in self.keys]
        self.raw = [np.asarray(points[k][1], dtype=np.float64) for k in self.keys]
        self.mono = [monotone(s) for s in self.raw]
        self.model = np.array(self.keys)[:, :4]  # [N, 4] each shape's (h, I, E, k)
        common = max(self.grids, key=lambda g: sum(np.array_equal(g, o) for o in self.grids))
        self.on_common = np.array([np.array_equal(g, common) for g in self.grids])
        self.common = len(common)
        self.rows = np.repeat(np.arange(len(self.keys)), [len(g) for g in self.grids])
        self.tokens = np.concatenate(self.grids)
        self.truth = np.concatenate(self.raw)
        self.x = {t: moe_terms(np.array(self.keys)[self.rows], self.tokens, dtype, t)
                  for t in TERMS}  # [rows, terms]
        self.fits: dict = {}  # (terms, excluded) -> coefficients (:meth:`coef`)
        self.picks: dict = {}  # (excluded, unit) -> Variant (:meth:`chosen`)

    def coef(self, terms: str, excluded: frozenset = frozenset()) -> np.ndarray:
        """The ``terms`` law fitted on the rows of every timed shape but ``excluded`` (the
        last 8 fits kept: a judged shape asks for its own once per variant)."""
        if (terms, excluded) not in self.fits:
            if len(self.fits) >= 8:
                self.fits.pop(next(iter(self.fits)))
            keep = ~np.isin(self.rows, [self.index[k] for k in excluded])
            self.fits[terms, excluded] = fit_relative(self.x[terms][keep], self.truth[keep])
        return self.fits[terms, excluded]

    def law(self, terms: str, coef: np.ndarray, key: tuple) -> ShapeLaw:
        """The ``terms`` law with coefficients ``coef`` at shape ``key``."""
        return ShapeLaw(terms, COLUMNS, ROW, tuple(int(v) for v in key),
                        (("dtype", self.dtype),), tuple(float(c) for c in coef))

    def ratios(self, terms: str, coef: np.ndarray) -> list[np.ndarray]:
        """log(measured / law) of every timed shape on its grid (the measured curve made
        non-decreasing, aic_curve.monotone)."""
        law = self.x[terms] @ coef
        return [np.log(m / law[self.rows == i]) for i, m in enumerate(self.mono)]

    def nearest(self, coords: np.ndarray, variant: Variant, out: np.ndarray) -> tuple:
        """(indices, weights) of the ``variant.near`` timed shapes nearest ``coords`` # [6]
        among those not ``out`` # [N] bool (ties: the shapes' sorted order)."""
        w = np.ones(6)
        w[4:] = variant.split
        dist = (((self.coords - coords) ** 2) * w).sum(axis=1)
        dist[out] = np.inf
        near = np.argsort(dist, kind="stable")[:min(variant.near, int((~out).sum()))]
        d = dist[near]
        weights = np.full(len(near), 1.0 / max(len(near), 1))
        if variant.combine == "idw" and (d > 0).all():
            weights = (1.0 / d) / (1.0 / d).sum()
        elif variant.combine == "line" and len(near) == 2:
            moved = self.coords[near] != coords  # [2, 6]
            if moved.sum() == 2 and (moved[0] == moved[1]).all():
                a, b = self.coords[near][:, moved[0]].ravel()
                t = (float(coords[moved[0]][0]) - a) / (a - b)  # r = r_a + t (r_a - r_b)
                weights = np.array([1.0 + t, -t])
        return near, weights

    def predict(self, key: tuple, variant: Variant, excluded: frozenset = frozenset(),
                coef: np.ndarray | None = None) -> tuple:
        """(grid # [G], seconds # [G] before aic_curve.monotone, the neighbours' keys) of shape
        ``key`` by ``variant``, nothing of ``excluded`` (nor of ``key``) seen (``coef``: the
        law's coefficients, default fitted without ``excluded``)."""
        coef = self.coef(variant.terms, excluded) if coef is None else coef
        r = self.ratios(variant.terms, coef)
        out = np.array([k in excluded or k == key for k in self.keys])
        near, weights = self.nearest(log2_coords(np.array(key, dtype=np.float64)), variant, out)
        if not len(near):
            raise SpecbatchError(f"moe {dict(zip(COLUMNS, key))}: no timed shape to transfer "
                                 "from")
        grid = np.unique(np.concatenate([self.grids[j] for j in near]))
        lr = sum(w * np.interp(np.log(grid), np.log(self.grids[j]), r[j])
                 for j, w in zip(near.tolist(), weights.tolist()))
        secs = self.law(variant.terms, coef, key).seconds(grid) * np.exp(lr)
        return grid, secs, [self.keys[j] for j in near]

    def curve(self, key: tuple, variant: Variant, excluded: frozenset = frozenset(),
              how: str = "loglog", coef: np.ndarray | None = None) -> Curve:
        """The transferred :class:`~simulator.cost.measured.aic_curve.Curve` of ``key``: the
        :meth:`predict` made non-decreasing, growing beyond its grid by the variant's law."""
        coef = self.coef(variant.terms, excluded) if coef is None else coef
        grid, secs, near = self.predict(key, variant, excluded, coef)
        law = self.law(variant.terms, coef, key)
        return Curve(grid, monotone(secs), law,
                     f"transfer to moe {dict(zip(COLUMNS, key))} from "
                     f"{', '.join(str(k) for k in near)} ({variant})", how)

    def held(self, i: int, unit: str) -> np.ndarray:
        """The timed shapes # [N] bool left out with shape ``i`` when it is judged: itself
        (``unit`` "shape") or every split of its model, its (h, I, E, k) (``unit`` "model")."""
        if unit == "model":
            return (self.model == self.model[i]).all(axis=1)
        return np.arange(len(self.keys)) == i

    def scores(self, excluded: frozenset = frozenset(), unit: str = "shape") -> np.ndarray:
        """The summed |relative error| # [variants, N] of each :data:`VARIANTS` over the rows
        as timed of each timed shape not ``excluded`` (NaN: excluded, or nothing left to price
        it from), each priced with ``excluded`` and its :meth:`held` left out of its
        neighbours (the law fitted with only ``excluded`` out)."""
        inner = [i for i, k in enumerate(self.keys) if k not in excluded]
        out0 = np.array([k in excluded for k in self.keys])
        res = np.full((len(VARIANTS), len(self.keys)), np.nan)
        for v, variant in enumerate(VARIANTS):
            coef = self.coef(variant.terms, excluded)
            r = self.ratios(variant.terms, coef)
            law = self.x[variant.terms] @ coef
            found = {i: self.nearest(self.coords[i], variant, out0 | self.held(i, unit))
                     for i in inner}
            # on the common grid, every shape at once (each on its own grid, so the curve
            # at its points is its seconds there); the others one by one through the Curve
            fast = [i for i in inner if self.on_common[i] and len(found[i][0]) == variant.near
                    and self.on_common[found[i][0]].all()]
            if fast:
                ratio = np.stack([r[i] if self.on_common[i] else np.zeros(self.common)
                                  for i in range(len(self.keys))])  # [N, G]
                near = np.array([found[i][0] for i in fast])  # [F, near]
                weights = np.array([found[i][1] for i in fast])  # [F, near]
                lr = np.einsum("fk,fkg->fg", weights, ratio[near])
                pred = monotone_rows(np.stack([law[self.rows == i] for i in fast]) * np.exp(lr))
                res[v, fast] = np.abs(pred / np.stack([self.raw[i] for i in fast]) - 1.0).sum(1)
            for i in sorted(set(inner) - set(fast)):
                if not len(found[i][0]):  # nothing left to price it from
                    continue
                out = out0 | self.held(i, unit)
                curve = self.curve(self.keys[i], variant,
                                   frozenset(k for k, o in zip(self.keys, out) if o), coef=coef)
                pred = np.array([curve.at(float(x)) for x in self.grids[i]])
                res[v, i] = np.abs(pred / self.raw[i] - 1.0).sum()
        return res

    def choose(self, excluded: frozenset = frozenset(), unit: str = "shape") -> Variant:
        """The variant of the lowest MAPE over the :meth:`scores`, where it beats the first
        (the GEMM transfer's rule) by more than one standard error: the error it saves per
        model (h, I, E, k), its mean less its standard error over the models, above zero
        (Breiman's one-standard-error rule; a model's splits are not independent draws, its
        models are). Else the first: a choice the rows cannot tell apart from it is noise (a
        group of two models, gpt-oss', picks a different variant for nearly every shape)."""
        sums = self.scores(excluded, unit)  # [V, N]
        seen = np.isfinite(sums).all(axis=0)  # [N]
        counts = np.array([len(g) for g in self.grids], dtype=np.float64)
        best = int(np.argmin(sums[:, seen].sum(axis=1)))
        models = np.unique(self.model[seen], axis=0)
        if best == 0 or len(models) < MIN_MODELS:
            return VARIANTS[0]
        saved = np.array([(sums[0, m] - sums[best, m]).sum() / counts[m].sum()
                          for m in ((self.model == mm).all(axis=1) & seen for mm in models)])
        se = saved.std(ddof=1) / np.sqrt(len(saved))
        return VARIANTS[best] if saved.mean() - se > 0 else VARIANTS[0]

    def chosen(self, excluded: frozenset = frozenset(), unit: str = "shape") -> Variant:
        """:meth:`choose`, kept for the group's last 8 questions (every untimed shape of a
        group asks the same one)."""
        if (excluded, unit) not in self.picks:
            if len(self.picks) >= 8:
                self.picks.pop(next(iter(self.picks)))
            self.picks[excluded, unit] = self.choose(excluded, unit)
        return self.picks[excluded, unit]


def log2_coords(keys: np.ndarray) -> np.ndarray:
    """log2 of the shape columns (as aic_ops.ShapeCurves' distance)."""
    return np.log2(np.maximum(keys, 1e-9))
