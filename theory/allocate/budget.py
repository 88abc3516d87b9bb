"""Which draft tokens to verify in a batch: allocation under a budget (THEORY.md §5).

N running requests each drafted K tokens; ``values[i, j-1] = P_{i,j} = P(τ_i ≥ j)`` is the
expected gain of verifying request i's j-th draft token (given its first j-1 are verified).
Choose prefix lengths ``s_i ∈ {0..K}`` with ``Σ s_i ≤ C`` to maximise

    value(s) = Σ_i Σ_{j ≤ s_i} values[i, j-1].

- Token verification (TV): P_{i,j} is a product of numbers ≤ 1, non-increasing in j, so the C
  largest entries of the batch form prefixes and are optimal (TETRIS, Wu et al. 2025).
  :func:`greedy_topc` is the vectorised global top-C (as in the official code),
  :func:`greedy_heap` the paper's max-heap over row frontiers (reference twin).
- Block verification (BV): P_{i,j} = p_{i,j} may rise along j, so top-C is not optimal; the
  problem is a prefix-constrained knapsack with non-concave gains. :func:`optimal_dp` solves
  it exactly by dynamic programming over requests (max-plus convolution, vectorised over the
  budget), :func:`optimal_milp` is its cvxpy MILP twin. On gain tables (BV's exact per-path
  gains, :func:`prefix_gains`) :func:`optimal_dp_gains` is the reference DP and
  :func:`optimal_tree_gains` the fast one (a log2 N tree of max-plus convolutions); those
  live in :mod:`theory.allocate.gains` and are re-exported here.

All functions take ``values`` # [N, K] finite and non-negative and a budget C ≥ 0 and return
``s`` # [N] int64. Tie-breaks are deterministic:

- greedy: entries compared by (value desc, j asc, row asc); exactly min(C, N·K) entries are
  selected and ``s_i`` counts row i's selected entries (a prefix when rows are non-increasing).
- optimal_dp: among optima (in the DP's float64 arithmetic) prefer the smaller total Σ s_i,
  then the lexicographically smaller s.
- optimal_tree_gains: the smaller total Σ s_i, then top down at every tree node the smaller
  share to its left subtree (same optimum value, possibly another optimal s).
"""

from __future__ import annotations

import heapq

import numpy as np

from specbatch.errors import require
from specbatch.theory.allocate.gains import (  # noqa: F401 - importable from here too
    _check,
    gains_value,
    optimal_dp_gains,
    optimal_tree_gains,
    prefix_gains,
)


def allocation_value(values: np.ndarray, s: np.ndarray) -> float:
    """``Σ_i Σ_{j ≤ s_i} values[i, j-1]``: expected accepted draft tokens of allocation s.

    values: # [N, K]
    s:      # [N] int in 0..K
    """
    values = np.asarray(values, dtype=np.float64)
    s = np.asarray(s, dtype=np.int64)
    k = values.shape[1]
    mask = np.arange(k)[None, :] < s[:, None]  # [N, K]
    return float(np.where(mask, values, 0.0).sum())


def greedy_topc(values: np.ndarray, budget: int) -> np.ndarray:
    """TETRIS greedy: select the C largest entries of the whole batch (vectorised).

    Entries are ranked by value (descending), ties by smaller position j, then smaller row;
    min(C, N·K) entries are selected and ``s_i`` is the number selected in row i. O(N·K) with
    one ``np.partition`` (no sort): everything above the C-th largest value is taken, and the
    entries equal to it are taken in (j, row) order until C is reached.

    values: # [N, K] non-negative
    returns # [N] int64
    """
    values, c = _check(values, budget)
    n, k = values.shape
    total = n * k
    c = min(c, total)
    if c == 0:
        return np.zeros(n, dtype=np.int64)
    flat = values.T.ravel()  # [K·N], j-major: flat index = j·N + i, so ties prefer smaller j
    threshold = np.partition(flat, total - c)[total - c]  # the C-th largest value
    above = flat > threshold
    equal = flat == threshold
    need = c - int(above.sum())
    selected = above | (equal & (np.cumsum(equal) <= need))
    return selected.reshape(k, n).sum(axis=0).astype(np.int64)


def greedy_heap(values: np.ndarray, budget: int) -> np.ndarray:
    """TETRIS greedy as the paper describes it: a max-heap over the row frontiers.

    The heap holds, per request, its next unselected entry keyed by (−value, j, row); C pops
    (each followed by pushing that row's next entry), O(C log N). Equal to :func:`greedy_topc`
    when rows are non-increasing; on other rows it only ever extends prefixes.

    values: # [N, K] non-negative
    returns # [N] int64
    """
    values, c = _check(values, budget)
    n, k = values.shape
    s = np.zeros(n, dtype=np.int64)
    if k == 0:
        return s
    heap = [(-values[i, 0], 0, i) for i in range(n)]
    heapq.heapify(heap)
    for _ in range(min(c, n * k)):
        _, j, i = heapq.heappop(heap)
        s[i] = j + 1
        if j + 1 < k:
            heapq.heappush(heap, (-values[i, j + 1], j + 1, i))
    return s


def optimal_dp(values: np.ndarray, budget: int) -> np.ndarray:
    """Exact optimum of the prefix-constrained knapsack, any non-negative values.

    The gains of verifying a prefix of length s are ``G[i, s] = Σ_{j<s} values[i, j]``; the
    optimum over them is :func:`optimal_dp_gains` (same tie-break).

    values: # [N, K] non-negative
    returns # [N] int64
    """
    values, c = _check(values, budget)
    n = values.shape[0]
    gains = np.concatenate([np.zeros((n, 1)), np.cumsum(values, axis=1)], axis=1)  # [N, K+1]
    return optimal_dp_gains(gains, c)


def optimal_milp(values: np.ndarray, budget: int, solver: str = "HIGHS") -> np.ndarray:
    """The same optimum as a cvxpy boolean MILP (twin of :func:`optimal_dp`).

    Variables ``x[i, j] ∈ {0, 1}`` (verify request i's (j+1)-th token), prefix constraints
    ``x[i, j+1] ≤ x[i, j]``, budget ``Σ x ≤ C``; maximise ``Σ values · x``; ``s_i = Σ_j x[i, j]``.
    Among optima the solver's choice is returned (compare values, not s, with the DP).

    values: # [N, K] non-negative
    returns # [N] int64
    """
    import cvxpy as cp

    values, c = _check(values, budget)
    n, k = values.shape
    if n == 0 or k == 0 or c == 0:
        return np.zeros(n, dtype=np.int64)
    # Scale the objective to max 1: HiGHS's tolerances are absolute (~1e-7), so gains of that
    # size would otherwise look like ties. Scaling does not change the maximiser.
    top = float(values.max())
    scaled = values / top if top > 0 else values
    x = cp.Variable((n, k), boolean=True)
    constraints = [cp.sum(x) <= c]
    if k > 1:
        constraints.append(x[:, 1:] <= x[:, :-1])
    problem = cp.Problem(cp.Maximize(cp.sum(cp.multiply(scaled, x))), constraints)
    # HiGHS stops at a 1e-4 relative MIP gap by default; ask for the exact optimum.
    options = {"mip_rel_gap": 0.0, "mip_abs_gap": 0.0} if solver.upper() == "HIGHS" else {}
    problem.solve(solver=solver, **options)
    require(
        problem.status in ("optimal", "optimal_inaccurate"),
        f"optimal_milp: solver {solver} returned status {problem.status}",
    )
    return np.rint(np.asarray(x.value)).astype(np.int64).sum(axis=1)


def allocate(values: np.ndarray, budget: int, rule: str) -> np.ndarray:
    """Prefix allocation under budget C for estimated ``P_{i,j}`` (THEORY.md §5).

    TV: global top-C (:func:`greedy_topc`), optimal because TV rows are non-increasing.
    BV: p may rise along a row, so the exact optimum of the DP problem (the optimum of
    :func:`optimal_dp`) on the prefix-sum gains ``G[i, s] = Σ_{j<s} values``, computed by
    :func:`optimal_tree_gains` (same value, ~5-10x faster at n = 64; ties: smaller total,
    then smaller left-subtree shares) — except when the rows are non-increasing anyway (e.g.
    TETRIS's cumulative-confidence surrogate), where :func:`monotone_optimum` reaches an
    optimum of the same problem in O(n·K) instead of O(n·C·K).

    values: # [n, K] estimated P_{i,j}, ≥ 0
    returns # [n] int64
    """
    if rule == "token":
        return greedy_topc(values, budget)
    if values.shape[1] < 2 or bool((values[:, 1:] <= values[:, :-1]).all()):
        return monotone_optimum(values, budget)
    gains = np.concatenate([np.zeros((values.shape[0], 1)), np.cumsum(values, axis=1)], axis=1)
    return optimal_tree_gains(gains, budget)  # [n, K + 1] gains -> [n]


def monotone_optimum(values: np.ndarray, budget: int) -> np.ndarray:
    """Exact optimum of ``max Σ_i Σ_{j≤s_i} values[i, j-1]``, ``Σ s_i ≤ C``, for rows that are
    non-increasing: the top-min(C, #positive) entries (exchange argument: any prefix family
    of that size is dominated entry by entry). Zero-valued entries are not verified (the DP's
    "smaller total" rule); ties among equal positive values follow :func:`greedy_topc`
    (smaller j, then smaller row), where :func:`optimal_dp` may pick another optimum of equal
    value.

    One partition decides both cases: when the C-th largest value is positive there are at
    least C positive entries (top-C, :func:`monotone_topc`); otherwise fewer, and the top
    #positive entries are exactly the positive ones (no ties to break).

    values: # [n, K] non-increasing rows, ≥ 0
    returns # [n] int64
    """
    return monotone_topc(values, budget, positive_only=True)


def monotone_topc(values: np.ndarray, budget: int, positive_only: bool = False) -> np.ndarray:
    """:func:`greedy_topc` for non-increasing rows, in fewer numpy calls.

    Rows being non-increasing, row i's entries ≥ the C-th largest value v are a prefix; when
    more than C entries are ≥ v, the surplus ties (entries equal to v) are dropped from the
    end of the (j, row) order, i.e. ties are taken in (j, row) order as greedy_topc takes
    them. Bit-identical to greedy_topc on such rows (parity test).

    positive_only: cap C at the number of positive entries (:func:`monotone_optimum`).

    values: # [n, K] non-increasing rows
    returns # [n] int64
    """
    n, k = values.shape
    c = min(int(budget), n * k)
    if c <= 0:
        return np.zeros(n, dtype=np.int64)
    kth = n * k - c
    threshold = np.partition(values, kth, axis=None)[kth]  # the C-th largest value
    if positive_only and not threshold > 0.0:  # fewer than C positive entries: take them all
        return np.add.reduce(values > 0.0, axis=1, dtype=np.int64)
    selected = values >= threshold  # [n, K]
    s = np.add.reduce(selected, axis=1, dtype=np.int64)
    excess = np.count_nonzero(selected) - c  # > 0 only when several entries equal the threshold
    if excess:
        flat = values.T.ravel()  # j-major, as greedy_topc ranks ties
        ties = np.flatnonzero(flat == threshold)  # in (j, row) order; keep the first ones
        s = s - np.bincount(ties[ties.shape[0] - excess:] % n, minlength=n)
    return s
