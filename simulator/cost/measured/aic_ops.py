"""One op's time as a function of its token count, from AIConfigurator's measured curves.

An op of a fixed shape (a GEMM's (n, k), a MoE block's (h, I, E, k, tp, ep), an all-reduce's
GPU count) has a measured curve over its row coordinate x (GEMM rows m, MoE tokens, all-reduce
elements): :class:`Curve`. Where the tables timed that exact shape, the curve is its measured
points; otherwise the **transfer** estimator builds one (simulator.cost.measured.aic_laws): the
fitted law of the op's family at the shape, times the geometric-mean measured/law ratio of the
:data:`~simulator.cost.measured.aic_laws.NEIGHBOURS` nearest timed shapes (Euclidean in log2
of the shape columns) at each grid point (the neighbour's ratio interpolated in log x); a MoE
block's transfer is simulator.cost.measured.aic_moe_transfer's (its neighbours, law and
combination chosen per group by leaving timed shapes out).

How a curve is read (log-log between its points, made non-decreasing, within kernel buckets):
simulator.cost.measured.aic_curve.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from specbatch.errors import SpecbatchError
from specbatch.simulator.cost.measured.aic_curve import (
    SHAPES,
    Curve,
    ShapeLaw,
    buckets_of,
    monotone,
)
from specbatch.simulator.cost.measured.aic_laws import NEIGHBOURS, Law, features, fit_relative
from specbatch.simulator.cost.measured.aic_moe_transfer import MoeTransfer

if TYPE_CHECKING:  # a ShapeCurves is built from the read curves; a built Curve needs no pandas
    import pandas as pd


class ShapeCurves:
    """The measured curves of one family's group (one dtype and kernel, or one all-reduce
    backend) and the law its transfer uses: :meth:`curve` of any shape."""

    def __init__(self, family: str, frame: pd.DataFrame, law: Law | None, extra: dict,
                 edges=None, extrap: str = "flat"):
        self.family = family
        self.edges = edges  # (key, top) -> the shape's bucket edges (aic_dispatch), or None
        self.extrap = extrap
        self.shape_cols, self.row_col = SHAPES[family]
        self.frame = frame.reset_index(drop=True)
        self.law = law
        self.extra = dict(extra)  # columns the law's features need besides the shape (dtype)
        keys = self.frame[list(self.shape_cols)].to_numpy(dtype=np.int64)  # [rows, dims]
        self.points = {}
        for key in np.unique(keys, axis=0):
            rows = self.frame[(keys == key).all(axis=1)].sort_values(self.row_col)
            rows = rows.drop_duplicates(self.row_col)
            self.points[tuple(int(v) for v in key)] = (
                rows[self.row_col].to_numpy(dtype=np.float64),
                rows["latency_s"].to_numpy(dtype=np.float64))
        self.coords = {k: np.log2(np.maximum(np.array(k, dtype=np.float64), 1e-9))
                       for k in self.points}
        self.moe = None  # the MoE transfer, built on first use (:meth:`moe_transfer`)

    def edges_of(self, key: tuple, grid: np.ndarray) -> tuple:
        """Shape ``key``'s bucket edges up to ``grid``'s last point (() where none)."""
        if self.edges is None:
            return ()
        return tuple(float(e) for e in self.edges(tuple(int(v) for v in key), float(grid[-1])))

    def enveloped(self, key: tuple, grid: np.ndarray, secs: np.ndarray) -> np.ndarray:
        """:func:`monotone` of shape ``key``'s seconds over ``grid``, within its buckets."""
        return monotone(secs, buckets_of(grid, self.edges_of(key, grid)))

    def shape_law(self, key: tuple, coef=None) -> ShapeLaw:
        """The family law at shape ``key`` (``coef``: other coefficients than the fit's)."""
        if self.law is None:
            raise SpecbatchError(f"{self.family} {self.extra}: no fitted law to transfer with")
        return ShapeLaw(self.family, tuple(self.shape_cols), self.row_col,
                        tuple(int(v) for v in key), tuple(self.extra.items()),
                        tuple(float(c) for c in (self.law.coef if coef is None else coef)))

    def law_seconds(self, key: tuple, x: np.ndarray, coef=None) -> np.ndarray:
        """The family law at shape ``key`` over ``x`` # [x] (``coef``: other coefficients)."""
        return self.shape_law(key, coef).seconds(x)

    def refit(self, exclude: tuple) -> np.ndarray:
        """The law's coefficients refitted without shape ``exclude`` (held-out checks)."""
        keys = self.frame[list(self.shape_cols)].to_numpy(dtype=np.int64)
        rows = self.frame[~(keys == np.array(exclude)).all(axis=1)]
        x = features(self.family, rows.assign(**self.extra))
        return fit_relative(x, rows["latency_s"].to_numpy(dtype=np.float64))

    def curve(self, key: tuple, exclude: bool = False, how: str = "loglog",
              refit: bool = False) -> Curve:
        """The curve of shape ``key``: measured where timed (unless ``exclude``: the held-out
        check prices a timed shape as if it were not, its own rows out of the neighbours and,
        with ``refit``, out of the law too), else the transfer (module docstring)."""
        key = tuple(int(v) for v in key)
        coef = self.refit(key) if exclude and refit and self.law is not None else None
        law = None if self.law is None else self.shape_law(key, coef)

        if key in self.points and not exclude:
            grid, secs = self.points[key]
            return self.made(key, grid, secs, law,
                             f"measured {self.family} {dict(zip(self.shape_cols, key))}", how)
        if self.family == "moe":  # its own transfer (aic_moe_transfer), its law refitted
            return self.moe_curve(key, exclude, how)
        if self.law is None:
            raise SpecbatchError(f"{self.family} {dict(zip(self.shape_cols, key))}: not timed "
                                 "and no law to transfer with")
        me = np.log2(np.maximum(np.array(key, dtype=np.float64), 1e-9))
        others = [k for k in self.points if k != key]
        dist = np.array([((self.coords[k] - me) ** 2).sum() for k in others])
        near = [others[i] for i in np.argsort(dist, kind="stable")[:NEIGHBOURS]]
        grid = np.unique(np.concatenate([self.points[k][0] for k in near]))  # [G]
        ratios = []
        for k in near:
            g, s = self.points[k]
            r = np.log(self.enveloped(k, g, s) / self.law_seconds(k, g, coef))
            ratios.append(np.interp(np.log(grid), np.log(g), r))  # held at the edges
        secs = self.law_seconds(key, grid, coef) * np.exp(np.mean(ratios, axis=0))
        return self.made(key, grid, secs, law,
                         f"transfer to {self.family} {dict(zip(self.shape_cols, key))} from "
                         f"{', '.join(str(k) for k in near)}", how)

    def made(self, key: tuple, grid: np.ndarray, secs: np.ndarray, law, source: str,
             how: str) -> Curve:
        """The :class:`Curve` of shape ``key`` from its seconds over ``grid``, made
        non-decreasing within its kernel buckets and read within them."""
        return Curve(grid, self.enveloped(key, grid, secs), law, source, how,
                     self.edges_of(key, grid), self.extrap)

    def moe_curve(self, key: tuple, exclude: bool, how: str) -> Curve:
        """A MoE shape's transferred curve (simulator.cost.measured.aic_moe_transfer): the
        variant chosen by leaving out, in turn, each timed shape (the shape's model, its
        (h, I, E, k), is timed at other splits) or each timed model (it is not), ``key``'s own
        rows out of the choice and of the law's fit with ``exclude``; read within the key's own
        kernel buckets (aic_dispatch), as its timed splits are."""
        excluded = frozenset([key]) if exclude and key in self.points else frozenset()
        unit = "shape" if any(k[:4] == key[:4] for k in self.points if k not in excluded) \
            else "model"
        moe = self.moe_transfer()
        curve = moe.curve(key, moe.chosen(excluded, unit), excluded, how)
        if not self.edges_of(key, curve.grid):  # already made non-decreasing: kept as built
            return curve
        return self.made(key, curve.grid, curve.seconds, curve.law, curve.source, how)

    def moe_transfer(self):
        """This MoE group's :class:`~simulator.cost.measured.aic_moe_transfer.MoeTransfer`
        (built once)."""
        if self.moe is None:
            self.moe = MoeTransfer(self.points, str(self.extra["dtype"]))
        return self.moe
