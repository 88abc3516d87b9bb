"""Draft/verify policies: how many tokens each running request drafts and verifies per step.

A policy sees a :class:`StepView` of the decode batch and returns ``(drafted, verified)``,
both # [n] int64 with ``0 ≤ verified_i ≤ drafted_i ≤ depth``: the draft model runs
``max(drafted)`` sequential passes over the batch and the target verifies the prefix of
length ``s_i = verified_i`` (query ``s_i + 1``). Each class documents what it may look at
*before* verification; only ``oracle`` and ``hindsight`` read the truth (they are bounds).

Registry :data:`POLICIES` maps a name to a class built with ``cls(config, trace_k)``.
Budget: ``view.budget`` is C (``config.budget``, default ``k × n``, THEORY.md §5). ``tetris``
and ``oracle`` allocate exactly under C; ``fixed``, ``dsd``, ``threshold`` and ``hindsight``
choose per-request lengths and ignore C (documented below).
"""

from __future__ import annotations

import weakref
from typing import Any

import numpy as np
from specbatch.simulator.verify import sample_tau, true_accept_probs, true_gains
from specbatch.theory.allocate import greedy_topc, optimal_tree_gains


class StepView:
    """The decode batch as a policy sees it (one step).

    trace:    the trace (policies read only the columns they document)
    rows:     # [n] int64 trace row of each request (its current output position)
    kv:       # [n] int64 tokens in each request's KV cache (prompt + emitted)
    budget:   C, draft tokens the target may verify this step
    depth:    columns gathered for q, pt, z, eta
    eta:      # [n, depth] the verifier's uniforms (hindsight only)
    cost:     the active cost model (dsd only)
    q, pt, z: # [n, depth] the drafted path's true statistics (oracle / hindsight only),
              gathered on first access
    """

    __slots__ = ("trace", "rows", "kv", "budget", "depth", "eta", "cost", "_q", "_pt", "_z")

    def __init__(self, trace: Any, rows: np.ndarray, kv: np.ndarray, budget: int, depth: int,
                 eta: np.ndarray, cost: Any = None) -> None:
        self.trace, self.rows, self.kv, self.budget = trace, rows, kv, budget
        self.depth, self.eta, self.cost = depth, eta, cost
        self._q = self._pt = self._z = None

    @property
    def q(self) -> np.ndarray:
        if self._q is None:
            self._q = self.trace.q[self.rows, : self.depth]
        return self._q

    @property
    def pt(self) -> np.ndarray:
        if self._pt is None:
            self._pt = self.trace.pt[self.rows, : self.depth]
        return self._pt

    @property
    def z(self) -> np.ndarray:
        if self._z is None:
            self._z = self.trace.z[self.rows, : self.depth]
        return self._z


class Policy:
    """Base class. ``depth``: the most draft tokens (trace columns) this policy may request."""

    name = "base"
    #: Whether the policy drafts at all (``ar`` does not, so it pays no draft prefill either).
    speculates = True

    def __init__(self, config: Any, trace_k: int) -> None:
        self.k = int(config.num_speculative_tokens)
        self.depth = int(config.depth)
        self.rule = config.verify

    def decide(self, view: StepView) -> tuple[np.ndarray, np.ndarray]:
        raise NotImplementedError

    def observe(self, verified: np.ndarray, accepted: np.ndarray) -> None:
        """Feedback after verification (``verified``, ``accepted`` # [n] int64)."""


class AutoRegressive(Policy):
    """``ar``: no speculation; one target token per request per step. Looks at nothing."""

    name = "ar"
    speculates = False

    def __init__(self, config: Any, trace_k: int) -> None:
        super().__init__(config, trace_k)
        self.depth = 0

    def decide(self, view: StepView) -> tuple[np.ndarray, np.ndarray]:
        zero = np.zeros(view.rows.shape[0], dtype=np.int64)
        return zero, zero


class Fixed(Policy):
    """``fixed``: standard SD, every request drafts and verifies k tokens. Looks at nothing.

    Ignores the budget (its verified total is k·n, equal to the default C).
    """

    name = "fixed"

    def __init__(self, config: Any, trace_k: int) -> None:
        super().__init__(config, trace_k)
        self.depth = self.k

    def decide(self, view: StepView) -> tuple[np.ndarray, np.ndarray]:
        s = np.full(view.rows.shape[0], self.k, dtype=np.int64)
        return s, s


class DynamicSD(Policy):
    """``dsd``: the goodput policy of Liu et al. 2024 (SmartSpec) as in THEORY.md §5.

    One k for the whole batch, re-planned every ``dsd_interval`` steps by scanning
    k = 0..min(6, trace K) for ``goodput(k) = n (1 − α^{k+1}) / (1 − α) / (T_draft(k) +
    T_target(k) + T_overhead)``, stopping at the first drop, k = 0 favoured ×1.1. α is an EMA
    ``0.85 α + 0.15 · observed`` (observed = accepted / verified of the last step) started at
    0.7. Step times come from the active cost model on the current batch's KV lengths.
    Looks at: the KV lengths, the cost model and past acceptance (no trace columns).
    Ignores the budget.
    """

    name = "dsd"

    def __init__(self, config: Any, trace_k: int) -> None:
        super().__init__(config, trace_k)
        self.k_max = min(6, int(trace_k))
        self.depth = self.k_max
        self.k_now = min(self.k, self.k_max)
        self.interval = int(config.dsd_interval)
        self.alpha = 0.7
        self.steps = 0

    def goodput(self, k: int, kv: np.ndarray, cost: Any) -> float:
        n = kv.shape[0]
        a = self.alpha
        tokens = n * (k + 1.0 if a >= 1.0 else (1.0 - a ** (k + 1)) / (1.0 - a))
        ones = np.ones(n, dtype=np.int64)
        t = cost.overhead + cost.step_time("target", ones * (k + 1), kv)
        for d in range(k):
            t += cost.step_time("draft", ones, kv + d)
        return tokens / t if t > 0 else float("inf")

    def plan(self, kv: np.ndarray, cost: Any) -> int:
        best_k, best = 0, -np.inf
        for k in range(self.k_max + 1):
            g = self.goodput(k, kv, cost) * (1.1 if k == 0 else 1.0)
            if g < best:
                break
            best_k, best = k, g
        return best_k

    def decide(self, view: StepView) -> tuple[np.ndarray, np.ndarray]:
        if self.steps % self.interval == 0 and view.cost is not None:
            self.k_now = self.plan(view.kv, view.cost)
        self.steps += 1
        s = np.full(view.rows.shape[0], self.k_now, dtype=np.int64)
        return s, s

    def observe(self, verified: np.ndarray, accepted: np.ndarray) -> None:
        total = int(verified.sum())
        if total > 0:
            self.alpha = 0.85 * self.alpha + 0.15 * float(accepted.sum()) / total


def cumulative_confidence(view: StepView, depth: int) -> np.ndarray:
    """TETRIS surrogate ``Π_{l≤j} draft_conf_l`` (the draft's own temperature-1 probability of
    its drafted tokens, THEORY.md §5).  # [n, depth]

    A gather from :func:`confidence_table` (the same products, computed once per trace)."""
    return confidence_table(view.trace, depth).take(view.rows, axis=0)


_TABLES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # trace -> {key: table}


def confidence_table(trace: Any, depth: int) -> np.ndarray:
    """``Π_{l≤j} min(1, draft_conf_l)`` for every trace row, j < depth (min: validation slack
    1e-6), cached per trace (a Trace's arrays are not modified once built): the row-wise
    cumprod of the whole column equals the cumprod of any gathered rows bit for bit.
    # [rows, depth]"""
    cache = _TABLES.setdefault(trace, {})
    key = ("cumulative_confidence", depth)
    table = cache.get(key)
    if table is None:
        table = np.cumprod(np.minimum(trace.draft_conf[:, :depth], 1.0), axis=1)
        cache[key] = table
    return table


def allocate(values: np.ndarray, budget: int, rule: str) -> np.ndarray:
    """Prefix allocation under budget C (THEORY.md §5).

    TV: global top-C (:func:`theory.allocate.greedy_topc`), optimal because TV rows are
    non-increasing. BV: the exact optimum of theory's DP problem (the optimum of
    :func:`theory.allocate.optimal_dp`) on the prefix-sum gains ``G[i, s] = Σ_{j<s} values``,
    computed by :func:`theory.allocate.optimal_tree_gains` (same value, ~5-10x faster at
    n = 64; ties: smaller total, then smaller left-subtree shares), since p may rise along a
    row — except when the rows given are non-increasing anyway (e.g. TETRIS's
    cumulative-confidence surrogate), where :func:`monotone_optimum` gives an optimum of the
    same problem in O(n·K) instead of O(n·C·K).

    values: # [n, depth] estimated P_{i,j};  returns # [n] int64
    """
    if rule == "token":
        return greedy_topc(values, budget)
    if values.shape[1] < 2 or bool((values[:, 1:] <= values[:, :-1]).all()):
        return monotone_optimum(values, budget)
    gains = np.concatenate([np.zeros((values.shape[0], 1)), np.cumsum(values, axis=1)], axis=1)
    return optimal_tree_gains(gains, budget)  # [n, depth + 1] gains -> [n]


def monotone_optimum(values: np.ndarray, budget: int) -> np.ndarray:
    """Exact optimum of ``max Σ_i Σ_{j≤s_i} values[i, j-1]``, ``Σ s_i ≤ C``, for rows that are
    non-increasing: the top-min(C, #positive) entries (exchange argument: any prefix family
    of that size is dominated entry by entry). Zero-valued entries are not verified (the DP's
    "smaller total" rule); ties among equal positive values follow greedy_topc (smaller j,
    then smaller row), where :func:`optimal_dp` may pick another optimum of equal value.

    values: # [n, K] non-increasing rows, ≥ 0;  returns # [n] int64

    One partition decides both cases: when the C-th largest value is positive there are at
    least C positive entries (top-C, :func:`monotone_topc`); otherwise fewer, and the top
    #positive entries are exactly the positive ones (no ties to break).
    """
    return monotone_topc(values, budget, positive_only=True)


def monotone_topc(values: np.ndarray, budget: int, positive_only: bool = False) -> np.ndarray:
    """:func:`theory.allocate.greedy_topc` for non-increasing rows, in fewer numpy calls.

    Rows being non-increasing, row i's entries ≥ the C-th largest value v are a prefix;
    when more than C entries are ≥ v, the surplus ties (entries equal to v) are dropped from
    the end of the (j, row) order, i.e. ties are taken in (j, row) order as greedy_topc does. Bit-identical to greedy_topc on such rows (parity test).

    positive_only: cap C at the number of positive entries (:func:`monotone_optimum`).

    values: # [n, K] non-increasing rows;  returns # [n] int64
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


class Tetris(Policy):
    """``tetris``: every request drafts K = k + e tokens; verify the C-best prefixes.

    Estimates P_{i,j} by the cumulative draft confidence (the official code's surrogate),
    then allocates under C: greedy top-C for TV (:func:`monotone_topc`, bit-identical to
    :func:`theory.allocate.greedy_topc` on these non-increasing rows); for BV the exact
    optimum of theory's DP problem on these estimates, which :func:`monotone_optimum`
    computes in O(n·K) — the same allocation as :func:`theory.allocate.optimal_dp` up to
    ties (parity tests).
    Looks at: ``draft_conf`` of the drafted tokens (known before verification).
    """

    name = "tetris"
    _memo: tuple | None = None  # (weakref to the trace, its confidence_table)

    def decide(self, view: StepView) -> tuple[np.ndarray, np.ndarray]:
        n = view.rows.shape[0]
        memo = self._memo
        if memo is None or memo[0]() is not view.trace:
            memo = self._memo = (weakref.ref(view.trace), confidence_table(view.trace, self.depth))
        values = memo[1].take(view.rows, axis=0)  # = cumulative_confidence: non-increasing rows
        if self.rule == "token":
            s = monotone_topc(values, view.budget)  # = greedy_topc (parity test)
        else:
            s = monotone_optimum(values, view.budget)  # = optimal_dp's optimum (parity test)
        return np.full(n, self.depth, dtype=np.int64), s


class Threshold(Policy):
    """``threshold``: each request drafts until its confidence falls below a threshold
    (SpecDec++ / AdaEDL style), at most K = k + e tokens, and verifies what it kept.

    ``cumulative`` mode keeps token j while ``Π_{l≤j} draft_conf_l ≥ threshold``,
    ``per_token`` while ``draft_conf_j ≥ threshold``. The token that fails the test was
    drafted (it costs a draft pass) but is not verified. Looks at: ``draft_conf``.
    Ignores the budget.
    """

    name = "threshold"

    def __init__(self, config: Any, trace_k: int) -> None:
        super().__init__(config, trace_k)
        self.threshold = float(config.threshold)
        self.cumulative = config.threshold_mode == "cumulative"

    def decide(self, view: StepView) -> tuple[np.ndarray, np.ndarray]:
        drafted, kept = self.lengths(view.trace)
        return drafted.take(view.rows), kept.take(view.rows)

    def lengths(self, trace: Any) -> tuple[np.ndarray, np.ndarray]:
        """(drafted, kept) for every trace row (they depend on the row alone), cached per
        trace.  # [rows] int64 each"""
        cache = _TABLES.setdefault(trace, {})
        key = ("threshold", self.depth, self.threshold, self.cumulative)
        out = cache.get(key)
        if out is None:
            conf = trace.draft_conf[:, : self.depth]
            if self.cumulative:
                conf = np.cumprod(conf, axis=1)
            ok = conf >= self.threshold
            kept = np.where(ok.all(axis=1), self.depth, np.argmin(ok, axis=1)).astype(np.int64)
            out = cache[key] = (np.minimum(kept + 1, self.depth), kept)
        return out


class Oracle(Policy):
    """``oracle``: knows the drafted path's true statistics and allocates the budget C to
    maximise the expected accepted tokens ``Σ_i E[τ_i | X^{s_i}]`` exactly.

    TV: ``E[τ | X^s] = Σ_{j≤s} Π_{l≤j} min(1, r_l)`` is additive with non-increasing terms,
    so greedy top-C is optimal. BV: ``E[τ | X^s] = s − (1 − p_s) T_s`` is neither additive nor
    monotone in s (theory.allocate.prefix_gains), so the exact optimum over the per-request
    gain tables is used: :func:`theory.allocate.optimal_tree_gains` (the value of the reference
    DP :func:`theory.allocate.optimal_dp_gains`, ~5-10x faster at n = 64; ties: smaller total,
    then smaller left-subtree shares). Every request drafts K = k + e.
    Looks at: q, pt, z of the drafted path (the truth, not the coins).
    """

    name = "oracle"

    def decide(self, view: StepView) -> tuple[np.ndarray, np.ndarray]:
        n = view.rows.shape[0]
        if self.rule == "token":
            values = true_accept_probs(view.trace, view.rows, self.depth, self.rule)
            s = allocate(values, view.budget, self.rule)
        else:
            gains = true_gains(view.trace, view.rows, self.depth, self.rule)  # [n, depth + 1]
            s = optimal_tree_gains(gains, view.budget)
        return np.full(n, self.depth, dtype=np.int64), s


class Hindsight(Policy):
    """``hindsight``: knows the coins and verifies, per request, the prefix that accepts the
    most tokens, so VSR = 1. An upper bound on per-step accepted tokens, not a realisable policy.

    With draft length γ = s the accepted length is ``τ^{(s)} = max{i ≤ s : η_i ≤ h_i^{(s)}}``.
    TV: ``τ^{(s)} = min(s, τ_K)``, maximised by s = τ_K. BV: the last threshold is
    ``h_s^{(s)} = p_s ≥ h_s`` (Z_{s+1} ≤ p_s), so a *shorter* draft can accept more than the
    full one; ``max_s τ^{(s)} = max{m ≤ K : η_m ≤ p_m}`` and verifying exactly that m accepts
    all m tokens. (Verifying τ_K, the full-depth outcome, would not be an upper bound.)
    Looks at: q, pt, z and the uniforms. Ignores the budget.
    """

    name = "hindsight"

    def decide(self, view: StepView) -> tuple[np.ndarray, np.ndarray]:
        n = view.rows.shape[0]
        full = np.full(n, self.depth, dtype=np.int64)
        if self.rule == "token":
            return full, sample_tau(view.q, view.pt, view.z, full, view.eta, self.rule)
        ok = view.eta[:, : self.depth] <= view.trace.p[view.rows, : self.depth]  # [n, depth]
        best = np.where(ok.any(axis=1), self.depth - np.argmax(ok[:, ::-1], axis=1), 0)
        return full, best.astype(np.int64)


POLICIES: dict[str, type[Policy]] = {
    cls.name: cls for cls in (AutoRegressive, Fixed, DynamicSD, Tetris, Threshold, Oracle, Hindsight)
}


def make_policy(config: Any, trace_k: int) -> Policy:
    """Instantiate ``config.policy`` from :data:`POLICIES`."""
    return POLICIES[config.policy](config, trace_k)


def make_view(trace: Any, rows: np.ndarray, budget: int, depth: int, cost: Any = None,
              kv: np.ndarray | None = None, seed: int = 0) -> StepView:
    """A :class:`StepView` of arbitrary trace rows (tests, analysis): truth gathered to
    ``depth`` columns, uniforms keyed by (seed, batch index, row).

    rows: # [n] int trace row indices;  kv: # [n] (default zeros)
    """
    from specbatch.simulator.verify import request_keys, uniforms

    rows = np.asarray(rows, dtype=np.int64)
    n = rows.shape[0]
    kv = np.zeros(n, dtype=np.int64) if kv is None else np.asarray(kv, dtype=np.int64)
    eta = uniforms(request_keys(seed, np.arange(n)), rows, depth)
    return StepView(trace, rows, kv, int(budget), depth, eta, cost)
