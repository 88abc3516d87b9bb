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
  :func:`optimal_tree_gains` the fast one (a log2 N tree of max-plus convolutions).

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
from numpy.lib.stride_tricks import sliding_window_view

from specbatch.errors import require


def _check(values: np.ndarray, budget: int) -> tuple[np.ndarray, int]:
    """Validate ``values`` # [N, K] (finite, ≥ 0) and ``budget`` (int ≥ 0); return float64, C."""
    values = np.asarray(values, dtype=np.float64)
    require(values.ndim == 2, f"values: expected a 2-d [N, K] array, got shape {values.shape}")
    require(bool(np.isfinite(values).all()), "values: expected finite entries, got NaN or infinity")
    require(bool((values >= 0).all()), "values: expected non-negative entries, got a negative one")
    require(
        float(budget) == int(budget) and int(budget) >= 0,
        f"budget: expected an integer >= 0, got {budget!r}",
    )
    return values, int(budget)


def gains_value(gains: np.ndarray, s: np.ndarray) -> float:
    """``Σ_i G[i, s_i]`` for a gain table # [N, K+1] and allocation s # [N]."""
    gains = np.asarray(gains, dtype=np.float64)
    return float(gains[np.arange(gains.shape[0]), np.asarray(s, dtype=np.int64)].sum())


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


def _check_gains(gains: np.ndarray, budget: int) -> tuple[np.ndarray, int]:
    """Validate ``gains`` # [N, K+1] (finite) and ``budget`` (int ≥ 0); return float64, C."""
    gains = np.asarray(gains, dtype=np.float64)
    require(gains.ndim == 2 and gains.shape[1] >= 1, f"gains: expected [N, K+1], got {gains.shape}")
    require(bool(np.isfinite(gains).all()), "gains: expected finite entries, got NaN or infinity")
    _, c = _check(np.zeros((0, 0)), budget)
    return gains, c


def optimal_dp_gains(gains: np.ndarray, budget: int) -> np.ndarray:
    """Exact ``max Σ_i G[i, s_i]`` s.t. ``Σ s_i ≤ C``, ``s_i ∈ 0..K``, for any finite gains.

    ``G[i, s]`` is the value of verifying request i's first s draft tokens (``G[i, 0]`` is
    normally 0); it need not be a prefix sum of per-token values nor monotone (see
    :func:`prefix_gains` for BV's exact per-path gains, which can fall when s grows).

    Suffix dynamic programme over requests: ``H_i[c] = max_{s} G[i, s] + H_{i+1}[c − s]`` is
    the best value of requests i..N-1 using exactly c tokens (``H_N = [0]``). Each step is one
    max-plus convolution vectorised over c as a ``[K+1, c]`` window (no loop over budget
    values). The optimum is ``max_{c ≤ C} H_0[c]`` at the smallest such c (smaller total), and a
    forward pass takes the smallest s_i reaching each recorded maximum (lexicographically
    smaller s); it recomputes the same float expressions, so ties are exact. Cost
    O(N · min(C, N·K) · K) time, O(N · min(C, N·K)) memory.

    gains:  # [N, K+1] finite
    returns # [N] int64
    """
    gains, c = _check_gains(gains, budget)
    n, k = gains.shape[0], gains.shape[1] - 1
    cap = min(c, n * k)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    # best[i, c] = H_i[c]; -inf marks an infeasible total. Row N is H_N = [0, -inf, ...].
    best = np.full((n + 1, cap + k + 1), -np.inf)  # [N+1, K + cap + 1], K leading -inf pads
    best[n, k] = 0.0
    scratch = np.empty((k + 1, cap + 1))  # [K+1, cap+1] candidate table, reused
    width = 1  # number of feasible totals of H_{i+1}
    for i in range(n - 1, -1, -1):
        width = min(cap + 1, width + k)
        # window[s, c] = best[i+1, K + c − s]: row s is H_{i+1} shifted right by s.
        window = sliding_window_view(best[i + 1], width)[k::-1]  # [K+1, width]
        cand = np.add(window, gains[i][:, None], out=scratch[:, :width])
        np.max(cand, axis=0, out=best[i, k : k + width])
    totals = best[0, k:]  # [cap+1]
    s = np.zeros(n, dtype=np.int64)
    remaining = int(np.argmax(totals))  # smallest total reaching the maximum
    for i in range(n):
        top = min(k, remaining)
        # Same float expressions as the forward pass; the first argmax is the smallest s_i.
        cand = gains[i, : top + 1] + best[i + 1, k + remaining - np.arange(top + 1)]
        s[i] = int(np.argmax(cand))
        remaining -= int(s[i])
    return s


def optimal_tree_gains(gains: np.ndarray, budget: int) -> np.ndarray:
    """The optimum of :func:`optimal_dp_gains` (``max Σ_i G[i, s_i]`` s.t. ``Σ s_i ≤ C``,
    ``s_i ∈ 0..K``, any finite gains) by a balanced binary tree of max-plus convolutions.

    A node's table ``H[c]`` is the best value of its requests using exactly c tokens
    (−inf: infeasible); a leaf's is its gain row, a parent's the max-plus convolution of its
    children's, ``H[c] = max_a H_left[a] + H_right[c − a]``. Each of the ⌈log2 N⌉ − 1 lower
    levels convolves all its pairs at once as one ``[pairs, width, child width]`` strided
    window (an odd count gets an identity child ``[0, −inf, …]``), every width clipped to
    ``min(C, Σ K) + 1``, and keeps the argmax split of every (node, c). The root needs only
    ``max_{a+b ≤ C} H_left[a] + H_right[b]``: a running max over b finds the value in
    O(C), then only the a reaching it are expanded. A top-down pass hands each child its
    share with vectorised gathers. Same O(N · min(C, N·K) · K) arithmetic as the DP (up to
    a factor 2), but O(log N) numpy calls instead of O(N): ~5-10x faster at N = 64.

    Tie-break (deterministic, in the tree's float64 arithmetic; not the DP's lexicographic
    rule): the smallest total Σ s_i reaching the root's maximum, then at every node, top
    down, the smallest share to its left subtree (the requests with smaller indices) among
    the splits reaching that node's maximum at its total. Values equal
    :func:`optimal_dp_gains`' up to float rounding (the sums associate differently).

    gains:  # [N, K+1] finite
    returns # [N] int64
    """
    gains, c = _check_gains(gains, budget)
    n, k = gains.shape[0], gains.shape[1] - 1
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    cap = min(c, n * k)
    width = min(k, cap) + 1  # columns s > C can never be feasible
    table = gains[:, :width]  # [nodes, width] H of each node at this level
    levels = []  # (left share [pairs, merged], node count below) for the top-down pass
    while table.shape[0] > 2:
        count = table.shape[0]
        if count % 2:
            identity = np.full((1, width), -np.inf)
            identity[0, 0] = 0.0
            table = np.concatenate([table, identity])
        merged = min(cap, 2 * (width - 1)) + 1
        table, left_share = _convolve_pairs(table[0::2], table[1::2], merged)
        levels.append((left_share, count))
        width = merged
    if table.shape[0] == 1:
        totals = np.array([int(np.argmax(table[0]))])  # smallest total reaching the maximum
    else:
        totals = np.array(_root_split(table[0], table[1], cap))
    for left_share, count in reversed(levels):
        share = left_share[np.arange(totals.shape[0]), totals]  # [pairs]
        totals = np.stack([share, totals - share], axis=1).ravel()[:count]
    return totals.astype(np.int64)


#: Candidate entries per chunk of a tree level (512 KiB of float64, cache-sized).
_CHUNK = 1 << 16


def _convolve_pairs(
    left: np.ndarray, right: np.ndarray, merged: int
) -> tuple[np.ndarray, np.ndarray]:
    """Max-plus convolutions of many pairs: ``H[p, c] = max_a left[p, a] + right[p, c − a]``
    for c < merged, and the smallest maximising a (the left share) of every (p, c).

    Candidates ``[pairs, c, j]`` are a strided window over the left tables (padded with −inf)
    plus the reversed right tables (j = width − 1 − b), built in chunks of c of at most
    :data:`_CHUNK` entries so that they stay in cache; each chunk spans only the j that are in
    range for some of its c (about half of the full window is out of range).

    left, right: # [pairs, width] (−inf: infeasible)
    returns      # [pairs, merged] H, # [pairs, merged] int64 left shares
    """
    pairs, width = left.shape
    span = width - 1 + merged
    padded = np.full((pairs, span), -np.inf)  # [pairs, span] left at offset width − 1
    padded[:, width - 1 : 2 * width - 1] = left
    reverse = right[:, ::-1]  # [pairs, width] reverse[p, j] = right[p, width − 1 − j]
    table = np.empty((pairs, merged))
    share = np.empty((pairs, merged), dtype=np.int64)
    step = max(1, _CHUNK // (pairs * width))
    for lo in range(0, merged, step):
        hi = min(merged, lo + step)
        j_lo, j_hi = max(0, width - hi), min(width, 2 * width - 1 - lo)  # j in range for c
        # window[p, c, j] = padded[p, lo + c + j_lo + j] = left[p, c − b] (−inf off range);
        # a strided view built directly (sliding_window_view costs ~40 µs a call).
        window = np.ndarray(
            (pairs, hi - lo, j_hi - j_lo),
            np.float64,
            buffer=padded,
            offset=8 * (lo + j_lo),
            strides=(8 * span, 8, 8),
        )
        cand = window + reverse[:, None, j_lo:j_hi]  # [pairs, hi − lo, j_hi − j_lo]
        # First maximum over j: the largest right share b, i.e. the smallest left share.
        j = np.argmax(cand, axis=2)  # [pairs, hi − lo]
        flat = cand.reshape(-1, j_hi - j_lo)[np.arange(j.size), j.ravel()]
        table[:, lo:hi] = flat.reshape(pairs, hi - lo)
        share[:, lo:hi] = np.arange(lo - width + 1 + j_lo, hi - width + 1 + j_lo) + j
    return table, share


def _root_split(left: np.ndarray, right: np.ndarray, cap: int) -> tuple[int, int]:
    """Shares (a, b) of the root's two children: ``max left[a] + right[b]`` s.t. a + b ≤ C,
    then the smallest a + b, then the smallest a (exactly the pair the full convolution and
    its argmax would pick, without building its ``[C+1, width]`` table).

    ``M[a] = left[a] + max_{b ≤ C−a} right[b]`` is ≥ every ``left[a] + right[b]`` in float64
    too (rounding is monotone), so the maximum V = max M is the root's and every pair reaching
    V has ``M[a] = V``; only those rows a are expanded to find the pairs themselves.

    left, right: # [width] child tables (−inf: infeasible), entry 0 finite
    """
    width = left.shape[0]
    best_right = np.maximum.accumulate(right)  # [width] max over b ≤ index
    a = np.arange(width)
    m = left + best_right[np.minimum(cap - a, width - 1)]  # [width]; a ≤ width − 1 ≤ C
    value = m.max()
    rows = np.flatnonzero(m == value)  # [r] the a reaching V
    b = np.arange(width)
    hit = (left[rows, None] + right[None, :] == value) & (rows[:, None] + b[None, :] <= cap)
    total = np.where(hit, rows[:, None] + b[None, :], 2 * width)  # [r, width]
    pick = int(np.argmin(total.min(axis=1)))  # rows ascend: first is the smallest a
    share = int(rows[pick])
    return share, int(total[pick].min()) - share


def prefix_gains(q: np.ndarray, pt: np.ndarray, z: np.ndarray, rule: str) -> np.ndarray:
    """Exact ``G[i, s] = E[τ_i | X^s]``, s = 0..K: expected accepted tokens when request i
    verifies its first s drafted tokens, given the drafted path (trace statistics, THEORY §3).

    TV: ``Σ_{j≤s} Π_{l≤j} min(1, r_l)``, the prefix sums of :func:`theory.stats.token_weights`
    (additive, so top-C on those values is optimal). BV with draft length s: thresholds
    ``h_1..h_{s-1}`` and ``h_s = p_s``, so ``P(τ ≥ j | X^s) = 1 − (1 − p_s) Π_{l=j}^{s-1} (1 − h_l)``
    and ``E[τ | X^s] = s − (1 − p_s) T_s`` with ``T_1 = 1``, ``T_{s+1} = 1 + (1 − h_s) T_s``.
    This is **not** ``Σ_{j≤s} p_j``: that sum is the mean of E[τ | X^s] over the later draft
    tokens (``P(τ ≥ j | X^j) = p_j``), the right value for an allocator that has not seen them,
    while a replay that samples τ from the path (theory.stats.accept_from_stats) realises these
    gains. They need not even grow with s (a drafted token the target rules out lowers h_s).
    Use with :func:`optimal_dp_gains`.

    q, pt, z: # [N, K] recorded statistics (z[:, j] holds Z_{j+1})
    returns   # [N, K+1] float64, column 0 is 0
    """
    from specbatch.theory.stats import block_thresholds, block_weights, token_weights

    q, pt, z = (np.asarray(a, dtype=np.float64) for a in (q, pt, z))
    n, k = q.shape
    gains = np.zeros((n, k + 1))
    if rule == "token":
        gains[:, 1:] = np.cumsum(token_weights(q, pt), axis=1)
        return gains
    require(rule == "block", f"rule: expected 'token' or 'block', got {rule!r}")
    p = block_weights(q, pt)  # [N, K]
    h = block_thresholds(p, z, np.full(n, k))  # column l-1 holds h_l (l < K)
    t = np.ones(n)  # T_s
    for size in range(1, k + 1):
        gains[:, size] = size - (1.0 - p[:, size - 1]) * t
        if size < k:
            t = 1.0 + (1.0 - h[:, size - 1]) * t
    return gains


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
