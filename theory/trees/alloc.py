"""The best verifiable subtrees of a batch's draft trees under one node budget (docs/trees.md).

The batch shares a budget C of verified (non-root) draft nodes; each request verifies a
draw-prefix-closed subtree of its recorded tree, worth Σ r over its nodes
(:mod:`specbatch.theory.trees.reach`: reach values, predecessors, closure).

- :func:`best_by_size`: per tree the best Σ r of closed sets of each size (tree knapsack over
  the predecessor forest, vectorised over trees of one structure); :func:`chosen_masks`
  recovers the sets.
- :func:`allocate_sizes`: sizes per request maximising the batch's Σ under Σ sizes ≤ C (max-plus
  convolutions over a balanced tree of requests); :func:`optimal_subtrees` is the batch-level
  call a policy makes once per step, :func:`optimal_subtrees_milp` its cvxpy twin.
- :func:`top_nodes`, :func:`frontier_greedy`, :func:`top_nodes_per_request`: the heuristics
  the optimum is compared with (a global top-C over the batch's nodes, TETRIS-style, its
  closed-frontier version, and a static top-k per request, SGLang's rule).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np

from specbatch.errors import require

# ----------------------------------------------------------------------- sizes per tree


def _check_budget(budget) -> int:
    require(isinstance(budget, (int, np.integer)) and budget >= 0,
            f"budget: expected an integer >= 0, got {budget!r}")
    return int(budget)


def _check_forest(pred: np.ndarray) -> None:
    n = pred.size
    require(pred.ndim == 1 and n >= 1 and pred[0] == -1
            and bool(((pred[1:] >= 0) & (pred[1:] < np.arange(1, n))).all()),
            "pred: expected -1 at node 0 and 0 <= pred(u) < u elsewhere (pre-order)")


def _maxplus(a: np.ndarray, b: np.ndarray, width: int) -> tuple:
    """``c[p, k] = max_j a[p, k − j] + b[p, j]`` for k < width and the smallest maximising j
    (b's share) # [p, wc] each; −inf marks an infeasible size. One strided window, no loop."""
    rows, wa = a.shape
    wb = b.shape[1]
    wc = min(wa + wb - 1, width)
    padded = np.full((rows, wb - 1 + wc), -np.inf)  # padded[i] = a[i − (wb − 1)]
    padded[:, wb - 1:wb - 1 + min(wa, wc)] = a[:, :min(wa, wc)]
    window = np.ndarray((rows, wc, wb), np.float64, buffer=padded,
                        strides=(padded.strides[0], 8, 8))  # window[p, k, i] = padded[k + i]
    cand = window[:, :, ::-1] + b[:, None, :]  # [p, wc, wb]: a[k − j] + b[j]
    share = np.argmax(cand, axis=2)  # first maximum: the smallest share j
    best = cand.reshape(-1, wb)[np.arange(rows * wc), share.ravel()]
    return best.reshape(rows, wc), share


@dataclass(frozen=True, eq=False)
class SizeTable:
    """Best closed sets per size of n trees sharing one predecessor forest.

    value # [n, cmax+1]: best Σ r over closed sets of k non-root nodes (−inf: none exists);
    shares[u]: ((successor c, share # [n, w]), ...) in fold order, share[i, t] the nodes that
    c's part gets when u's successors hold t nodes (used by :func:`chosen_masks`)."""

    pred: np.ndarray  # [N]
    value: np.ndarray  # [n, cmax+1]
    shares: tuple


def best_by_size(pred, r, cmax: int) -> SizeTable:
    """Exact best Σ r over draw-prefix-closed sets of each size k = 0..cmax, per tree.

    Tree knapsack over the predecessor forest: ``F_u[k]`` (best set of k nodes of u's forest
    subtree containing u) is r(u) plus the max-plus convolution of u's successors' tables
    (``F_c[0] = 0``), each clipped to cmax + 1 entries; O(N · cmax²) per tree, vectorised over
    the n trees (``r`` # [n, N] or [N]). Ties (in float64): the smaller share to the later
    successor, i.e. nodes under u's first child before u's later siblings.
    """
    pred = np.asarray(pred, dtype=np.int64)
    _check_forest(pred)
    r2 = np.atleast_2d(np.asarray(r, dtype=np.float64))
    require(r2.ndim == 2 and r2.shape[1] == pred.size and bool(np.isfinite(r2).all()),
            f"r: expected finite values # [n, {pred.size}], got shape {r2.shape}")
    require(int(cmax) == cmax and cmax >= 0, f"cmax: expected an integer >= 0, got {cmax!r}")
    width = int(cmax) + 1
    n, size = r2.shape
    succ = [[] for _ in range(size)]
    for u in range(1, size):
        succ[pred[u]].append(u)
    table: list = [None] * size  # F_u # [n, ≤ width]
    shares: list = [()] * size
    for u in range(size - 1, -1, -1):
        acc = None  # u's successors' table # [n, ≤ width]; None: no successor yet (= [0])
        parts = []
        for c in succ[u]:
            if acc is None:  # the first fold is the identity: all nodes go to c
                acc = table[c]
                share = np.broadcast_to(np.arange(acc.shape[1]), acc.shape)
            else:
                acc, share = _maxplus(acc, table[c], width)
            parts.append((c, share))
            table[c] = None
        acc = np.zeros((n, 1)) if acc is None else acc
        shares[u] = tuple(parts)
        if u:
            grown = np.empty((n, min(acc.shape[1] + 1, width)))
            grown[:, 0] = 0.0
            np.add(acc[:, :grown.shape[1] - 1], r2[:, u:u + 1], out=grown[:, 1:])
            table[u] = grown
        else:
            value = np.full((n, width), -np.inf)
            value[:, :acc.shape[1]] = acc
    if np.ndim(r) == 1:
        value = value[0]
    return SizeTable(pred, value, tuple(shares))


def chosen_masks(table: SizeTable, sizes) -> np.ndarray:
    """The sets behind ``table.value[i, sizes[i]]`` # [n, N] bool (root True), top-down."""
    value = np.atleast_2d(table.value)
    sizes = np.atleast_1d(np.asarray(sizes, dtype=np.int64))
    n = value.shape[0]
    require(sizes.shape == (n,) and bool((sizes >= 0).all() & (sizes < value.shape[1]).all())
            and bool(np.isfinite(value[np.arange(n), sizes]).all()),
            "sizes: expected one feasible size per tree")
    rows = np.arange(n)
    held = np.zeros((n, table.pred.size), dtype=np.int64)  # nodes in u's forest subtree
    for u, parts in enumerate(table.shares):
        rest = sizes.copy() if u == 0 else np.maximum(held[:, u] - 1, 0)
        for c, share in reversed(parts):
            held[:, c] = share[rows, rest]
            rest = rest - held[:, c]
    masks = held > 0
    masks[:, 0] = True
    return masks


# ----------------------------------------------------------------------- batch allocation


def allocate_sizes(values, budget: int) -> np.ndarray:
    """Sizes ``k`` # [n] int64 maximising ``Σ_i values[i][k_i]`` s.t. ``Σ k_i ≤ C``.

    values: per request its best value by size # [k_i + 1] (a list, or # [n, W]), entry 0
    finite, −inf where a size is infeasible. Max-plus convolutions over a balanced binary tree
    of requests (one vectorised call per level, widths clipped to C + 1), then top-down
    splits. Ties (float64): the smallest total Σ k, then at every tree node the larger share
    to its left half (lower request indices first).
    """
    budget = _check_budget(budget)
    if isinstance(values, np.ndarray) and values.ndim == 2:
        table = np.asarray(values, dtype=np.float64)  # [n, W]
    else:
        rows = [np.asarray(v, dtype=np.float64).ravel() for v in values]
        table = np.full((len(rows), max((v.size for v in rows), default=1)), -np.inf)
        for i, v in enumerate(rows):
            table[i, :v.size] = v
    if table.shape[0] == 0:
        return np.zeros(0, dtype=np.int64)
    require(table.shape[1] >= 1 and bool(np.isfinite(table[:, 0]).all())
            and not np.isnan(table).any() and not (table == np.inf).any(),
            "values: expected per request a finite value at size 0, then values or -inf")
    sizes = table.shape[1] - 1 - np.argmax(np.isfinite(table[:, ::-1]), axis=1)  # largest
    cap = min(int(budget), int(sizes.sum()))
    table = table[:, :cap + 1]
    levels = []
    while table.shape[0] > 2:
        count = table.shape[0]
        if count % 2:
            identity = np.full((1, table.shape[1]), -np.inf)
            identity[0, 0] = 0.0
            table = np.concatenate([table, identity])
        table, right = _maxplus(table[0::2], table[1::2], cap + 1)
        levels.append((right, count))
    if table.shape[0] == 1:
        totals = np.array([int(np.argmax(table[0]))])  # the smallest total reaching the max
    else:
        totals = np.array(_root_split(table[0], table[1], cap))
    for right, count in reversed(levels):
        share = right[np.arange(totals.size), totals]
        totals = np.stack([totals - share, share], axis=1).ravel()[:count]
    return totals.astype(np.int64)


def _root_split(left: np.ndarray, right: np.ndarray, cap: int) -> tuple:
    """Shares (a, b) maximising ``left[a] + right[b]`` s.t. a + b ≤ C, then the smallest
    a + b, then the largest a, without the full convolution: ``M[a] = left[a] +
    max_{b ≤ C − a} right[b]`` bounds every pair in float64 too (rounding is monotone), so
    only the rows a with ``M[a] = max M`` are expanded."""
    a = np.arange(left.size)  # left.size ≤ C + 1
    m = left + np.maximum.accumulate(right)[np.minimum(cap - a, right.size - 1)]
    rows = np.flatnonzero(m == m.max())  # [k] the a reaching the maximum
    b = np.arange(right.size)
    hit = (left[rows, None] + right[None, :] == m.max()) & (rows[:, None] + b <= cap)
    total = np.where(hit, rows[:, None] + b, 2 * (cap + 1))  # [k, |right|]
    best = total.min(axis=1)  # per row a its smallest total
    share = int(rows[np.flatnonzero(best == best.min())[-1]])  # the largest a among them
    return share, int(best.min()) - share


def optimal_subtrees(pred, r, budget: int, limit: int | None = None) -> tuple:
    """The batch's best closed subtrees under ``budget`` non-root nodes in all (and at most
    ``limit`` per request, e.g. a policy's k + e, when given).

    pred # [N] shared or # [n, N] per request (trees grouped by structure), r # [n, N] reach.
    Returns (masks # [n, N] bool, root column True; value = Σ r over the chosen nodes).
    Deterministic: ties as in :func:`allocate_sizes` (fewer nodes, lower requests first), then as in
    :func:`best_by_size` within a tree.
    """
    r = np.atleast_2d(np.asarray(r, dtype=np.float64))
    pred = np.asarray(pred, dtype=np.int64)
    n, size = r.shape
    budget = _check_budget(budget)
    cmax = min(budget, size - 1, size - 1 if limit is None else _check_budget(limit))
    require(pred.shape in ((size,), (n, size)), f"pred: expected # [{size}] or [{n}, {size}], "
            f"got shape {pred.shape}")
    if pred.ndim == 1:
        forests, group = pred[None, :], np.zeros(n, dtype=np.int64)
    else:
        forests, group = np.unique(pred, axis=0, return_inverse=True)
        group = np.asarray(group).ravel()
    tables = [best_by_size(forest, r[group == g], cmax) for g, forest in enumerate(forests)]
    value = np.empty((n, cmax + 1))
    for g, t in enumerate(tables):
        value[group == g] = t.value
    counts = allocate_sizes(value, budget)
    masks = np.empty((n, size), dtype=bool)
    for g, t in enumerate(tables):
        masks[group == g] = chosen_masks(t, counts[group == g])
    return masks, float(value[np.arange(n), counts].sum())


def optimal_subtrees_milp(pred, r, budget: int, limit: int | None = None) -> tuple:
    """Twin of :func:`optimal_subtrees` as a cvxpy boolean MILP (HiGHS, exact gaps):
    ``x_u ≤ x_pred(u)``, ``Σ x ≤ C``, ``Σ_u x_iu ≤ limit``, maximise ``Σ r·x``; returns
    (masks, value)."""
    import cvxpy as cp

    r = np.atleast_2d(np.asarray(r, dtype=np.float64))
    n, size = r.shape
    pred2 = np.broadcast_to(np.asarray(pred, dtype=np.int64), (n, size))
    masks = np.zeros((n, size), dtype=bool)
    masks[:, 0] = True
    if size == 1 or _check_budget(budget) == 0:
        return masks, 0.0
    top = float(np.abs(r[:, 1:]).max()) or 1.0  # HiGHS's tolerances are absolute: scale
    x = cp.Variable((n, size - 1), boolean=True)
    cons = [cp.sum(x) <= int(budget)]
    if limit is not None:
        cons.append(cp.sum(x, axis=1) <= _check_budget(limit))
    for i in range(n):
        for u in range(1, size):
            if pred2[i, u] > 0:
                cons.append(x[i, u - 1] <= x[i, pred2[i, u] - 1])
    problem = cp.Problem(cp.Maximize(cp.sum(cp.multiply(r[:, 1:] / top, x))), cons)
    problem.solve(solver="HIGHS", mip_rel_gap=0.0, mip_abs_gap=0.0)
    require(problem.status in ("optimal", "optimal_inaccurate"),
            f"optimal_subtrees_milp: HiGHS returned status {problem.status}")
    masks[:, 1:] = np.rint(np.asarray(x.value)) > 0
    return masks, float(r[masks & (np.arange(size) > 0)].sum())


# ----------------------------------------------------------------------- heuristics


def _check_score(score) -> np.ndarray:
    score = np.atleast_2d(np.asarray(score, dtype=np.float64))
    require(score.ndim == 2 and bool(np.isfinite(score).all()),
            f"score: expected finite values # [n, N], got shape {score.shape} or NaN")
    return score


def top_nodes(score, budget: int) -> np.ndarray:
    """Global top-C of the batch's non-root nodes by ``score`` # [n, N] (ties: lower request,
    then lower node id) # [n, N] bool, root True: TETRIS over tree nodes."""
    score = _check_score(score)
    n, size = score.shape
    order = np.argsort(-score[:, 1:].ravel(), kind="stable")[:_check_budget(budget)]
    chosen = np.zeros(n * (size - 1), dtype=bool)
    chosen[order] = True
    return np.concatenate([np.ones((n, 1), dtype=bool), chosen.reshape(n, size - 1)], axis=1)


def frontier_greedy(pred, score, budget: int, limit: int | None = None) -> np.ndarray:
    """Greedy over the batch's frontier: C times take the highest-``score`` node whose
    predecessor is kept (ties: lower request, then lower node id) # [n, N] bool, root True;
    a request that holds ``limit`` nodes (when given, e.g. a policy's k + e) takes no more.

    Closed by construction whatever the score (TETRIS over nodes with the frontier kept
    draw-prefix closed); with monotone scores (each node's below its predecessor's) and no
    limit it equals :func:`top_nodes`. pred # [N] shared or # [n, N]; a heap,
    O(C log(n·N))."""
    score = _check_score(score)
    n, size = score.shape
    budget = _check_budget(budget)
    limit = size - 1 if limit is None else _check_budget(limit)
    pred2 = np.broadcast_to(np.asarray(pred, dtype=np.int64), (n, size))
    succ: dict = {}
    for i in range(n):
        for u in range(1, size):
            succ.setdefault((i, int(pred2[i, u])), []).append(u)
    masks = np.zeros((n, size), dtype=bool)
    masks[:, 0] = True
    heap = [(-score[i, u], i, u) for i in range(n) for u in succ.get((i, 0), ())]
    heapq.heapify(heap)
    held = np.zeros(n, dtype=np.int64)
    while heap and budget > 0:
        _, i, u = heapq.heappop(heap)
        if held[i] >= limit:  # a full request's frontier is dropped node by node
            continue
        masks[i, u] = True
        held[i] += 1
        budget -= 1
        for c in succ.get((i, u), ()):
            heapq.heappush(heap, (-score[i, c], i, c))
    return masks


def top_nodes_per_request(score, k: int) -> np.ndarray:
    """Each request's top-k non-root nodes by ``score`` # [n, N] (ties: lower node id), the
    static per-request rule (SGLang's top nodes by path draft confidence) # [n, N] bool."""
    score = _check_score(score)
    n, size = score.shape
    order = np.argsort(-score[:, 1:], axis=1, kind="stable")[:, :_check_budget(k)]
    masks = np.zeros((n, size), dtype=bool)
    np.put_along_axis(masks[:, 1:], order, True, axis=1)
    masks[:, 0] = True
    return masks
