"""One op's measured seconds over its row coordinate x (GEMM rows m, MoE tokens, all-reduce
elements) at a fixed shape, and how it is read between and beyond its points: :class:`Curve`,
with :class:`ShapeLaw`, the family law at the shape (simulator.cost.measured.aic_ops builds
both from the tables).

Between grid points a curve is interpolated **log-log** (linear in log x, log t), chosen over
linear interpolation by the leave-one-point-out check of :func:`interp_check`
(benchmarks/aic_validate.py reports both); the measured seconds are first made non-decreasing
(:func:`monotone`: a 3-point running median, then the non-decreasing least-squares fit in log
time; a pass with more tokens is never priced cheaper, and neither an isolated slow point nor
an isolated fast one moves its neighbours). Below the first grid point the first point's time
(a floor); beyond the last, its time times the law's growth law(x) / law(x_last).

Where vLLM switches kernel or tile count along x (simulator.cost.measured.aic_dispatch: the
fp8 GEMM's dispatch and tile rows, FlashInfer's fp8 MoE tiles, the custom all-reduce's one-stage
/ two-stage switch), a
curve carries the **edges** of those buckets and never reaches across one: the running median
stays within a bucket, and a row between two grid points of different buckets is priced from
its own bucket's points alone (:meth:`Curve.at`); the non-decreasing fit stays last, over the
whole curve.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from specbatch.simulator.cost.measured.aic_dispatch import bucket
from specbatch.simulator.cost.measured.aic_laws import features

#: family -> (the shape columns, the row coordinate).
SHAPES = {"gemm": (("n", "k"), "m"),
          "moe": (("hidden", "inter", "experts", "topk", "tp", "ep"), "tokens"),
          "allreduce": (("num_gpus",), "elements")}


@dataclass(frozen=True)
class ShapeLaw:
    """A family's fitted law with the op's shape columns fixed: row coordinate x -> seconds
    (what a :class:`Curve` prices beyond its grid by). Plain numbers, so a built curve is
    stored and read back without pandas (simulator.cost.measured.aic_cache)."""

    family: str
    columns: tuple  # the shape columns (aic_curve.SHAPES)
    row_col: str  # the row coordinate's column
    key: tuple  # the shape's values, one per column
    extra: tuple  # ((column, value), ...) the features need besides the shape (dtype)
    coef: tuple  # the law's coefficients

    def seconds(self, x) -> np.ndarray:
        """The law at this shape over ``x`` # [x]."""
        x = np.asarray(x, dtype=np.float64)
        rows = {c: np.full(len(x), v) for c, v in zip(self.columns, self.key)}
        rows[self.row_col] = x
        rows.update((c, np.full(len(x), v)) for c, v in self.extra)
        return features(self.family, rows) @ np.asarray(self.coef)

    def __call__(self, x: float) -> float:
        return float(self.seconds(np.array([x]))[0])


@dataclass(frozen=True)
class Curve:
    """One op's seconds over its row coordinate: ``grid`` [G] increasing, ``seconds`` [G]
    non-decreasing; ``law`` prices rows beyond the grid (a fitted law of the family with the
    op's shape columns fixed); ``source`` says where the points came from."""

    grid: np.ndarray  # [G]
    seconds: np.ndarray  # [G]
    law: ShapeLaw | None  # x (float) -> law seconds at the op's shape
    source: str
    how: str = "loglog"
    edges: tuple = ()  # the last x of each kernel's bucket (aic_dispatch); () none
    extrap: str = "flat"  # a row past its bucket's grid points: aic_dispatch.EXTRAP

    def at(self, x: float) -> float:
        """Seconds at row coordinate ``x`` (module docstring)."""
        g, s = self.grid, self.seconds
        if x <= g[0]:
            return float(s[0])
        if x >= g[-1]:
            if x == g[-1]:
                return float(s[-1])
            if self.law is None:  # no law: linear growth beyond the grid
                return float(s[-1] * x / g[-1])
            return float(s[-1] * self.law(x) / self.law(g[-1]))
        i = int(np.searchsorted(g, x))
        if g[i] == x:  # a measured point is itself
            return float(s[i])
        # within its bracket: exp(log) rounding never breaks the curve's monotonicity
        inner = min(max(interp(g, s, x, self.how), float(s[i - 1])), float(s[i]))
        if self.edges and bucket(self.edges, g[i - 1]) != bucket(self.edges, g[i]):
            return self.across(i, x, inner)
        return inner

    def across(self, i: int, x: float, inner: float) -> float:
        """Seconds at ``x`` between grid points i - 1 and i of different buckets (``inner``:
        the plain interpolation): in the left point's bucket, that point's seconds carried on
        (:meth:`reach`); in the right point's, that one's carried back; in a bucket between
        them (no grid point), the plain interpolation. Non-decreasing in x: each part is; the
        part between is held within [the left bucket's end, the right one's start] and the
        right bucket's part floored by the left one's end; all within [s[i - 1], s[i]]."""
        g, s, e = self.grid, self.seconds, self.edges
        lo, hi, b = float(s[i - 1]), float(s[i]), bucket(e, x)
        bl, br = bucket(e, g[i - 1]), bucket(e, g[i])
        left_end = self.reach(i - 1, float(e[bl]), -1)  # the left bucket's last x
        if b == bl:
            v = self.reach(i - 1, x, -1)
        elif b == br:
            v = max(self.reach(i, x, +1), left_end)
        else:
            right_start = self.reach(i, float(e[br - 1]), +1)  # the right bucket's first x
            v = max(min(inner, right_start), left_end)
        return min(max(v, lo), hi)

    def reach(self, j: int, x: float, side: int) -> float:
        """Grid point ``j``'s seconds carried to ``x`` within its bucket (``side`` -1: x past
        it, the bucket's last point; +1: x before it, its first): "flat", s[j]; "slope", the
        log-log line through j and its bucket's next point inward (s[j] where the bucket has
        one point)."""
        g, s = self.grid, self.seconds
        k = j + side  # the next point inward
        if (self.extrap == "flat" or not 0 <= k < len(g)
                or bucket(self.edges, g[k]) != bucket(self.edges, g[j])):
            return float(s[j])
        lg, lk, ls, lsk = (math.log(float(g[j])), math.log(float(g[k])),
                           math.log(float(s[j])), math.log(float(s[k])))
        return math.exp(ls + (ls - lsk) / (lg - lk) * (math.log(x) - lg))

    def at_many(self, x: np.ndarray) -> np.ndarray:
        """:meth:`at` over ``x`` # [X], bit for bit (tests/simulator/cost pin the parity): the
        in-grid points in one :func:`numpy.interp` call, the logs and exps per point with
        :mod:`math` as :meth:`at` takes them, the few points past the grid through :meth:`at`
        itself. Why: tabulating a pass (simulator.cost.tabulated) prices every Q up to Q_max."""
        x = np.asarray(x, dtype=np.float64)  # [X]
        g, s = self.grid, self.seconds
        out = np.empty(x.shape)  # [X]
        low, high = x <= g[0], x >= g[-1]
        out[low] = float(s[0])
        for j in np.flatnonzero(high & ~low):
            out[j] = self.at(float(x[j]))
        mid = np.flatnonzero(~(low | high))
        if mid.size:
            xm = x[mid]
            i = np.searchsorted(g, xm)
            if self.how == "linear":
                v = np.interp(xm, g, s)
            else:
                v = np.interp(point_logs(xm), np.log(g), np.log(s))
                v = np.array([math.exp(t) for t in v.tolist()])
            v = np.minimum(np.maximum(v, s[i - 1]), s[i])
            out[mid] = np.where(g[i] == xm, s[i], v)
            if self.edges:  # the points between two buckets' grid points: as at() prices them
                e = np.asarray(self.edges, dtype=np.float64)
                gb, xb = np.searchsorted(e, g, side="left"), np.searchsorted(e, xm, side="left")
                cross = (gb[i - 1] != gb[i]) & (g[i] != xm)
                if self.extrap == "flat":  # across(): the left point, the right one, or v
                    v = np.where(xb == gb[i - 1], s[i - 1], np.where(xb == gb[i], s[i], v))
                    out[mid[cross]] = v[cross]
                else:
                    for j in np.flatnonzero(cross).tolist():
                        out[mid[j]] = self.across(int(i[j]), float(xm[j]), float(v[j]))
        return out


#: :func:`point_logs`' last results: blake2b of the points' bytes -> their logs # [X].
_LOGS: dict[bytes, np.ndarray] = {}


def point_logs(x: np.ndarray) -> np.ndarray:
    """``math.log`` of each point of ``x`` # [X] float64 (math's, as :meth:`Curve.at` takes
    them, not numpy's), kept for the last 8 arrays: every op of a pass table is priced at
    the same Q points (simulator.cost.measured.aic_pricer), ~8,000 logs a curve."""
    import hashlib

    key = hashlib.blake2b(x.tobytes(), digest_size=16).digest()
    logs = _LOGS.get(key)
    if logs is None:
        logs = np.array([math.log(v) for v in x.tolist()])
        logs.flags.writeable = False
        if len(_LOGS) >= 8:
            _LOGS.pop(next(iter(_LOGS)))
        _LOGS[key] = logs
    return logs


def monotone(secs: np.ndarray, buckets: np.ndarray | None = None) -> np.ndarray:
    """``secs`` # [G] > 0 made non-decreasing, robust to isolated points either way: each
    interior point replaced by the median of it and its two neighbours (:func:`median3`; with
    ``buckets`` # [G], each point's kernel bucket (aic_dispatch), only where all three share
    one: a point next to an edge keeps its value), then
    the least-squares non-decreasing fit in log time (:func:`isotonic`: a run that decreases is
    replaced by its geometric mean). Same length, bounded by the input's min and max, the input
    itself where it is already non-decreasing.

    Why not the suffix minimum (t_i = min over j >= i of t_j): one fast point lowers the whole
    stretch before it (H100 fp8 MoE, Llama-4-Scout tp 2: 1.56-1.94 ms at 16-1024 tokens,
    0.92 ms at 2048, all priced 0.92 ms); nor the running maximum: an isolated spike (B200 fp8
    GEMM (3072, 65536): 375 µs at m = 9 between 65 µs neighbours) is carried to every larger
    m. Chosen over both and over isotonic regression alone by the held-out error against the
    raw rows (benchmarks/aic_envelope.py, docs/fidelity.md)."""
    m = median3(secs, buckets)
    logs = np.log(m)
    fit = isotonic(logs)
    out = np.where(fit == logs, m, np.exp(fit))  # a point no run pooled keeps its value
    return np.maximum.accumulate(np.clip(out, m.min(), m.max()))


def median3(secs: np.ndarray, buckets: np.ndarray | None = None) -> np.ndarray:
    """``secs`` # [G] with each interior point replaced by the median of it and its two
    neighbours (the endpoints kept): an isolated point off its neighbours, up or down, is
    taken to the nearer of them. With ``buckets`` # [G], only a point whose two neighbours
    are in its bucket (the ends of a bucket kept, as the curve's ends are)."""
    s = np.asarray(secs, dtype=np.float64)
    out = s.copy()
    if len(s) > 2:
        med = np.median(np.stack([s[:-2], s[1:-1], s[2:]]), axis=0)
        if buckets is not None:
            b = np.asarray(buckets)
            med = np.where((b[:-2] == b[1:-1]) & (b[2:] == b[1:-1]), med, s[1:-1])
        out[1:-1] = med
    return out


def buckets_of(grid: np.ndarray, edges: tuple) -> np.ndarray | None:
    """Each grid point's bucket under ``edges`` # [G] (aic_dispatch.bucket), None for none."""
    if not edges:
        return None
    return np.searchsorted(np.asarray(edges, dtype=np.float64), grid, side="left")


def isotonic(values: np.ndarray) -> np.ndarray:
    """The non-decreasing sequence nearest ``values`` # [G] in least squares (pool adjacent
    violators: each run that decreases is replaced by its mean, merged backwards until the
    means no longer decrease)."""
    means, sizes = [], []
    for v in np.asarray(values, dtype=np.float64).tolist():
        mean, size = v, 1
        while means and means[-1] > mean:
            m, n = means.pop(), sizes.pop()
            mean, size = (m * n + mean * size) / (n + size), n + size
        means.append(mean)
        sizes.append(size)
    return np.repeat(np.array(means, dtype=np.float64), sizes)


def interp(grid: np.ndarray, secs: np.ndarray, x: float, how: str = "loglog") -> float:
    """``secs`` at ``x`` between ``grid`` points: log-log or linear."""
    if how == "linear":
        return float(np.interp(x, grid, secs))
    return float(math.exp(np.interp(math.log(x), np.log(grid), np.log(secs))))


def interp_check(grid: np.ndarray, secs: np.ndarray, how: str,
                 truth: np.ndarray | None = None, edges: tuple = (),
                 extrap: str = "flat") -> np.ndarray:
    """Signed relative error of each interior point left out # [G - 2]: the other points made
    non-decreasing (:func:`monotone`, as the cost reads them) and interpolated at it (twice the
    spacing the cost interpolates over), against ``truth`` at it (default ``secs``: the raw
    rows, never an enveloped copy of them). With ``edges`` (aic_dispatch), the curve the cost
    builds from the other points read at it (:meth:`Curve.at`: within its bucket only)."""
    truth = secs if truth is None else truth
    out = np.empty(max(len(grid) - 2, 0))
    for i in range(1, len(grid) - 1):
        keep = np.r_[0:i, i + 1:len(grid)]
        if edges:
            g = grid[keep]
            curve = Curve(g, monotone(secs[keep], buckets_of(g, edges)), None, "", how, edges,
                          extrap)
            got = curve.at(float(grid[i]))
        else:
            got = interp(grid[keep], monotone(secs[keep]), float(grid[i]), how)
        out[i - 1] = got / truth[i] - 1.0
    return out
