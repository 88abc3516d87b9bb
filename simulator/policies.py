"""Draft/verify policies: how many tokens each running request drafts and verifies per step.

A policy sees a :class:`StepView` of the decode batch and returns ``(drafted, verified)``,
both # [n] int64 with ``0 ≤ verified_i ≤ drafted_i ≤ depth``: the draft model runs
``max(drafted)`` sequential passes over the batch and the target verifies the prefix of
length ``s_i = verified_i`` (query ``s_i + 1``). Each class documents which signals of the
view it reads *before* verification; only ``oracle`` and ``hindsight`` read the truth (they
are bounds). The simulator builds views from trace rows, the live loop from the draft it
just ran, so both run the same ``decide``.

Drafters that may propose fewer than K tokens (the n-gram drafter: a trace with a ``proposed``
column) cap every policy: whatever ``decide`` returns, a request drafts and verifies at most its
row's proposed count (:meth:`StepView.cap`, applied to every subclass's ``decide``), so
``fixed`` at k verifies ``min(k, proposed)`` tokens, as vLLM verifies only what its n-gram
proposer found.

Registry :data:`POLICIES` maps a name to a class built with ``cls(config, trace_k)``; each
class states the draft depth it needs with :meth:`Policy.required_depth`.
Budget: ``view.budget`` is C (``config.budget``, default ``k × n``, THEORY.md §5). ``tetris``
and ``oracle`` allocate exactly under C; ``fixed``, ``dsd``, ``threshold`` and ``hindsight``
choose per-request lengths and ignore C (documented below).
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np

from specbatch.errors import SpecbatchError
from specbatch.simulator.verify import sample_tau
from specbatch.theory.allocate import (
    allocate,
    monotone_optimum,
    monotone_topc,
    optimal_tree_gains,
    prefix_gains,
)
from specbatch.theory.stats import block_weights, token_weights

#: Trace column behind each per-position signal of a :class:`StepView`.
SIGNALS = {"conf": "draft_conf", "q": "q", "pt": "pt", "z": "z", "p": "p",
           "accept_tv": "accept_tv"}

_TABLES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # trace -> {key: table}
_LAST: tuple = (None, None, None)  # (weakref to a trace, key, table): the last table served


def trace_table(trace: Any, key: tuple, build: Callable[..., Any], *args: Any) -> Any:
    """``build(*args)`` computed once per (trace, key) and cached (a Trace's arrays are not
    modified once built); the last table served is answered without a dictionary lookup
    (one tuple swapped whole, so threads never see a torn entry)."""
    global _LAST
    ref, last_key, table = _LAST
    if ref is not None and ref() is trace and last_key == key:
        return table
    cache = _TABLES.setdefault(trace, {})
    table = cache.get(key)
    if table is None:
        table = cache[key] = build(*args)
    _LAST = (weakref.ref(trace), key, table)
    return table


def confidence_table(trace: Any, depth: int) -> np.ndarray:
    """TETRIS's surrogate for every trace row: :func:`cumulative_confidence` of the
    ``draft_conf`` column, cached per trace. Row-wise, so gathering rows of it equals the
    surrogate of the gathered rows bit for bit.  # [rows, depth]"""
    return trace_table(trace, ("cumulative_confidence", depth), _confidence_of, trace, depth)


def _confidence_of(trace: Any, depth: int) -> np.ndarray:
    return cumulative_confidence(trace.draft_conf[:, :depth])


def cumulative_confidence(conf: np.ndarray) -> np.ndarray:
    """``Π_{l≤j} min(1, conf_l)``: the draft's own estimate of P(τ ≥ j) (THEORY.md §5; the
    min absorbs the trace format's 1e-6 slack on probabilities), non-increasing along j.

    conf:    # [n, K] draft's temperature-1 probability of each drafted token
    returns  # [n, K]
    """
    return np.cumprod(np.minimum(conf, 1.0), axis=1)


class StepView:
    """The decode batch as a policy sees it at one step: per-request signals, gathered.

    n:          running requests
    kv:         # [n] int64 tokens in each request's KV cache (prompt + emitted)
    budget:     C, draft tokens the target may verify this step
    depth:      columns of every per-position signal
    eta:        # [n, depth] the verifier's uniforms (hindsight only), or None
    cost:       the active cost model (dsd only), or None
    conf:       # [n, depth] draft's temperature-1 probability of each drafted token
    q, pt, z:   # [n, depth] the drafted path's true statistics (THEORY.md §3; oracle and
                hindsight only)
    p:          # [n, depth] BV's ``P(τ ≥ j | X^j)`` (from q, pt)
    accept_tv:  # [n, depth] TV's ``Π_{l≤j} min(1, r_l)`` (from q, pt)

    ``StepView(trace, rows, kv, budget, depth, eta, cost)`` is the simulator's view of trace
    rows ``rows`` # [n]: each signal is gathered from the trace on first access, so a step
    pays only for what its policy reads. :meth:`from_signals` wraps arrays a caller already
    holds (the live loop's own draft). :meth:`row_table` serves tables computed row by row
    from the signals, cached per trace for trace views.
    """

    __slots__ = ("n", "kv", "budget", "depth", "eta", "cost", "_trace", "_rows", "_given",
                 "_proposed")

    def __init__(self, trace: Any, rows: np.ndarray, kv: np.ndarray, budget: int, depth: int,
                 eta: np.ndarray | None, cost: Any = None) -> None:
        self.n = int(rows.shape[0]) if rows is not None else int(kv.shape[0])
        self.kv, self.budget, self.depth, self.eta, self.cost = kv, budget, depth, eta, cost
        self._trace, self._rows, self._given, self._proposed = trace, rows, {}, None

    @classmethod
    def from_signals(cls, kv: np.ndarray, budget: int, depth: int, eta: np.ndarray | None = None,
                     cost: Any = None, proposed: np.ndarray | None = None,
                     **signals: np.ndarray) -> StepView:
        """A view of arrays the caller holds: ``signals`` among :data:`SIGNALS`, each
        # [n, depth]; p and accept_tv are derived from q and pt when not given; ``proposed``
        # [n] the drafter's real tokens per request (None: all K)."""
        unknown = set(signals) - set(SIGNALS)
        if unknown:
            raise SpecbatchError(f"StepView: unknown signals {sorted(unknown)}")
        view = cls(None, None, np.asarray(kv, dtype=np.int64), int(budget), int(depth), eta,
                   cost)
        view._given = dict(signals)
        view._proposed = None if proposed is None else np.asarray(proposed, dtype=np.int64)
        return view

    def signal(self, name: str) -> np.ndarray:
        """The per-position signal ``name`` (:data:`SIGNALS`).  # [n, depth]"""
        value = self._given.get(name)
        if value is None:
            if self._trace is not None:
                value = getattr(self._trace, SIGNALS[name])[self._rows, : self.depth]
            elif name in ("p", "accept_tv") and "q" in self._given and "pt" in self._given:
                weights = block_weights if name == "p" else token_weights
                value = weights(self._given["q"], self._given["pt"])
            else:
                raise SpecbatchError(f"StepView: signal {name!r} was not given to this view")
            self._given[name] = value
        return value

    conf = property(lambda self: self.signal("conf"))
    q = property(lambda self: self.signal("q"))
    pt = property(lambda self: self.signal("pt"))
    z = property(lambda self: self.signal("z"))
    p = property(lambda self: self.signal("p"))
    accept_tv = property(lambda self: self.signal("accept_tv"))

    def row_table(self, key: tuple, build: Callable[..., Any], *names: str) -> Any:
        """``build(*signals)`` for this view's rows, where ``build`` works row by row on the
        signals ``names`` # [rows, depth] and returns arrays (or a tuple of arrays) with one
        row per input row. Trace views compute it once per trace and ``key`` and gather
        their rows; array views call it on their own signals."""
        if self._trace is None:
            return build(*(self.signal(name) for name in names))
        trace, depth, rows = self._trace, self.depth, self._rows
        table = trace_table(trace, (key, depth), lambda: build(
            *(getattr(trace, SIGNALS[name])[:, :depth] for name in names)))  # built once
        if isinstance(table, tuple):
            return tuple(t.take(rows, axis=0) for t in table)
        return table.take(rows, axis=0)

    @property
    def proposed(self) -> np.ndarray | None:
        """Real draft tokens of each request's row # [n] int64, or None (all K): the trace's
        optional ``proposed`` column (n-gram drafts), or what an array view was given."""
        if self._trace is None:
            return self._proposed
        column = getattr(self._trace, "proposed", None)
        return None if column is None else column[self._rows]

    def cap(self, drafted: np.ndarray, verified: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(min(drafted, proposed), min(verified, proposed))``: nothing is drafted or verified
        past what the drafter proposed (the trace's fillers there are never accepted, so only
        the counted work changes).  drafted, verified # [n]"""
        proposed = self.proposed
        if proposed is None:
            return drafted, verified
        return np.minimum(drafted, proposed), np.minimum(verified, proposed)

    @property
    def cum_conf(self) -> np.ndarray:
        """TETRIS's surrogate :func:`cumulative_confidence` of ``conf``.  # [n, depth]"""
        if self._trace is None:
            return cumulative_confidence(self.conf)
        return confidence_table(self._trace, self.depth).take(self._rows, axis=0)


class Policy:
    """Base class. ``depth``: the most draft tokens (trace columns) this policy may request."""

    name = "base"
    #: Whether the policy drafts at all (``ar`` does not, so it pays no draft prefill either).
    speculates = True
    #: The :class:`StepView` fields ``decide`` reads besides n, budget and depth.
    reads: tuple[str, ...] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Each subclass's own ``decide`` returns lengths capped by :meth:`StepView.cap`."""
        super().__init_subclass__(**kwargs)
        decide = cls.__dict__.get("decide")
        if decide is not None:
            cls.decide = _capped(decide)

    def __init__(self, config: Any, trace_k: int) -> None:
        self.k = int(config.num_speculative_tokens)
        self.depth = self.required_depth(config)
        self.rule = config.verify

    @classmethod
    def required_depth(cls, config: Any) -> int:
        """Draft tokens per request this policy may ask for under ``config`` (a
        :class:`simulator.config.SimConfig`): the trace must hold at least this many columns
        and the live loop drafts this many. Default K = k + e (THEORY.md §5)."""
        return int(config.num_speculative_tokens) + int(config.extra)

    def decide(self, view: StepView) -> tuple[np.ndarray, np.ndarray]:
        raise NotImplementedError

    def observe(self, verified: np.ndarray, accepted: np.ndarray) -> None:
        """Feedback after verification (``verified``, ``accepted`` # [n] int64)."""


def _capped(decide: Callable) -> Callable:
    @functools.wraps(decide)
    def capped(self: Policy, view: StepView) -> tuple[np.ndarray, np.ndarray]:
        return view.cap(*decide(self, view))
    return capped


class AutoRegressive(Policy):
    """``ar``: no speculation; one target token per request per step. Reads nothing."""

    name = "ar"
    speculates = False

    @classmethod
    def required_depth(cls, config: Any) -> int:
        return 0

    def decide(self, view: StepView) -> tuple[np.ndarray, np.ndarray]:
        zero = np.zeros(view.n, dtype=np.int64)
        return zero, zero


class Fixed(Policy):
    """``fixed``: standard SD, every request drafts and verifies k tokens. Reads nothing.

    Ignores the budget (its verified total is k·n, equal to the default C).
    """

    name = "fixed"

    @classmethod
    def required_depth(cls, config: Any) -> int:
        return int(config.num_speculative_tokens)

    def decide(self, view: StepView) -> tuple[np.ndarray, np.ndarray]:
        s = np.full(view.n, self.k, dtype=np.int64)
        return s, s


class DynamicSD(Policy):
    """``dsd``: the goodput policy of Liu et al. 2024 (SmartSpec) as in THEORY.md §5.

    One k for the whole batch, re-planned every ``dsd_interval`` steps by scanning
    k = 0..min(6, trace K) for ``goodput(k) = n (1 − α^{k+1}) / (1 − α) / (T_draft(k) +
    T_target(k) + T_overhead)``, stopping at the first drop, k = 0 favoured ×1.1. Step times
    come from the active cost model on the current batch's KV lengths.

    α is the per-token acceptance rate of the i.i.d. model behind that formula, an EMA
    ``0.85 α + 0.15 α̂`` started at 0.7. Each step's α̂ is the maximum-likelihood estimate
    under that model: a request verifying s tokens accepts τ ~ min(Geometric, s), so
    α̂ = Σ τ / (Σ τ + #{τ < s}) (accepted tokens over accepted tokens plus rejections; the
    ratio accepted / verified would understate α whenever s > 1).

    Keeping α alive at k = 0: with nothing verified α never updates, and a plan of k = 0
    would stand for the rest of the run. So when a plan picks k = 0, the first step of the
    interval probes with k = 1 (one draft pass per ``dsd_interval`` steps) and feeds α̂;
    the other steps run at k = 0. Reads: ``kv``, ``cost`` and past acceptance. Ignores the
    budget.
    """

    name = "dsd"
    reads = ("kv", "cost")
    #: The largest window the goodput scan considers.
    MAX_K = 6
    #: The acceptance-rate estimate before any step is observed.
    INITIAL_ALPHA = 0.7

    def __init__(self, config: Any, trace_k: int) -> None:
        super().__init__(config, trace_k)
        self.k_max = min(self.MAX_K, int(trace_k))
        self.depth = self.k_max
        self.k_now = min(self.k, self.k_max)
        self.interval = int(config.dsd_interval)
        self.alpha = self.INITIAL_ALPHA
        self.steps = 0

    @classmethod
    def required_depth(cls, config: Any) -> int:
        """The starting window min(k, 6) must be in the trace; later plans scan
        k = 0..min(6, trace K), so a deeper trace only widens the scan."""
        return min(int(config.num_speculative_tokens), cls.MAX_K)

    def goodput(self, k: int, kv: np.ndarray, cost: Any) -> float:
        """Expected tokens per second of window k on a batch with KV lengths ``kv`` # [n]."""
        n = kv.shape[0]
        a = self.alpha
        tokens = n * (k + 1.0 if a >= 1.0 else (1.0 - a ** (k + 1)) / (1.0 - a))
        ones = np.ones(n, dtype=np.int64)
        t = cost.overhead + cost.step_time("target", ones * (k + 1), kv)
        for d in range(k):
            t += cost.step_time("draft", ones, kv + d)
        return tokens / t if t > 0 else float("inf")

    def plan(self, kv: np.ndarray, cost: Any) -> int:
        """The goodput scan (class docstring).  kv # [n]"""
        best_k, best = 0, -np.inf
        for k in range(self.k_max + 1):
            g = self.goodput(k, kv, cost) * (1.1 if k == 0 else 1.0)
            if g < best:
                break
            best_k, best = k, g
        return best_k

    def decide(self, view: StepView) -> tuple[np.ndarray, np.ndarray]:
        k = self.k_now
        if self.steps % self.interval == 0 and view.cost is not None:
            self.k_now = k = self.plan(view.kv, view.cost)
            if k == 0 and self.k_max >= 1:
                k = 1  # the probe (class docstring)
        self.steps += 1
        s = np.full(view.n, k, dtype=np.int64)
        return s, s

    def observe(self, verified: np.ndarray, accepted: np.ndarray) -> None:
        """Update α with this step's α̂ = Σ τ / (Σ τ + #{τ < s}).  verified, accepted # [n]"""
        tried = verified > 0
        successes = int(accepted[tried].sum())
        trials = successes + int((accepted[tried] < verified[tried]).sum())
        if trials > 0:
            self.alpha = 0.85 * self.alpha + 0.15 * successes / trials


class Tetris(Policy):
    """``tetris``: every request drafts K = k + e tokens; verify the C-best prefixes.

    Estimates P_{i,j} by the cumulative draft confidence ``Π_{l≤j} min(conf_l, 1)`` (the
    official code's surrogate, ``StepView.cum_conf``), then allocates under C: greedy top-C for TV
    (:func:`theory.allocate.monotone_topc`, bit-identical to
    :func:`theory.allocate.greedy_topc` on these non-increasing rows); for BV the exact
    optimum of theory's DP problem on these estimates, which
    :func:`theory.allocate.monotone_optimum` computes in O(n·K) — the same allocation as
    :func:`theory.allocate.optimal_dp` up to ties (parity tests).
    Reads: ``conf`` (known before verification). With C = 0 nothing is drafted, so the run
    does the work of autoregressive decoding.
    """

    name = "tetris"
    reads = ("conf",)

    def __init__(self, config: Any, trace_k: int) -> None:
        super().__init__(config, trace_k)
        # C = budget, or k per running request when unset: C = 0 never drafts (nor prefills)
        self.speculates = (self.k if config.budget is None else int(config.budget)) > 0

    def decide(self, view: StepView) -> tuple[np.ndarray, np.ndarray]:
        values = view.cum_conf  # [n, depth] non-increasing rows
        if self.rule == "token":
            s = monotone_topc(values, view.budget)  # = greedy_topc (parity test)
        else:
            s = monotone_optimum(values, view.budget)  # = optimal_dp's optimum (parity test)
        depth = self.depth if view.budget > 0 else 0  # C = 0: nothing to verify, draft nothing
        return np.full(view.n, depth, dtype=np.int64), s


class Threshold(Policy):
    """``threshold``: each request drafts until its confidence falls below a threshold
    (SpecDec++ / AdaEDL style), at most K = k + e tokens, and verifies what it kept.

    ``cumulative`` mode keeps token j while ``Π_{l≤j} conf_l ≥ threshold``, ``per_token``
    while ``conf_j ≥ threshold``. The token that fails the test was drafted (it costs a draft
    pass) but is not verified. Reads: ``conf``. Ignores the budget.
    """

    name = "threshold"
    reads = ("conf",)

    def __init__(self, config: Any, trace_k: int) -> None:
        super().__init__(config, trace_k)
        self.threshold = float(config.threshold)
        self.cumulative = config.threshold_mode == "cumulative"

    def decide(self, view: StepView) -> tuple[np.ndarray, np.ndarray]:
        key = ("threshold", self.threshold, self.cumulative)
        return view.row_table(key, self.lengths, "conf")

    def lengths(self, conf: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(drafted, kept) of rows with confidences ``conf`` # [rows, depth]; each depends on
        its row alone.  returns # [rows] int64 each"""
        depth = conf.shape[1]
        if self.cumulative:
            conf = np.cumprod(conf, axis=1)
        ok = conf >= self.threshold
        kept = np.where(ok.all(axis=1), depth, np.argmin(ok, axis=1)).astype(np.int64)
        return np.minimum(kept + 1, depth), kept


class Oracle(Policy):
    """``oracle``: knows the drafted path's true statistics and allocates the budget C to
    maximise the expected accepted tokens ``Σ_i E[τ_i | X^{s_i}]`` exactly.

    TV: ``E[τ | X^s] = Σ_{j≤s} Π_{l≤j} min(1, r_l)`` is additive with non-increasing terms,
    so greedy top-C is optimal. BV: ``E[τ | X^s] = s − (1 − p_s) T_s`` is neither additive nor
    monotone in s (theory.allocate.prefix_gains), so the exact optimum over the per-request
    gain tables is used: :func:`theory.allocate.optimal_tree_gains` (the value of the reference
    DP :func:`theory.allocate.optimal_dp_gains`, ~5-10x faster at n = 64; ties: smaller total,
    then smaller left-subtree shares). Every request drafts K = k + e.
    Reads: ``accept_tv`` (TV) or ``q``, ``pt``, ``z`` (BV) of the drafted path (the truth,
    not the coins).
    """

    name = "oracle"
    reads = ("accept_tv", "q", "pt", "z")

    def decide(self, view: StepView) -> tuple[np.ndarray, np.ndarray]:
        if self.rule == "token":
            s = allocate(view.accept_tv, view.budget, self.rule)
        else:
            gains = prefix_gains(view.q, view.pt, view.z, self.rule)  # [n, depth + 1]
            s = optimal_tree_gains(gains, view.budget)
        return np.full(view.n, self.depth, dtype=np.int64), s


class Hindsight(Policy):
    """``hindsight``: knows the coins and verifies, per request, the prefix that accepts the
    most tokens, so VSR = 1. An upper bound on per-step accepted tokens, not a realisable policy.

    With draft length γ = s the accepted length is ``τ^{(s)} = max{i ≤ s : η_i ≤ h_i^{(s)}}``.
    TV: ``τ^{(s)} = min(s, τ_K)``, maximised by s = τ_K. BV: the last threshold is
    ``h_s^{(s)} = p_s ≥ h_s`` (Z_{s+1} ≤ p_s), so a *shorter* draft can accept more than the
    full one; ``max_s τ^{(s)} = max{m ≤ K : η_m ≤ p_m}`` and verifying exactly that m accepts
    all m tokens. (Verifying τ_K, the full-depth outcome, would not be an upper bound.)
    Reads: ``q``, ``pt``, ``z`` (TV) or ``p`` (BV), and ``eta``. Ignores the budget.
    """

    name = "hindsight"
    reads = ("q", "pt", "z", "p", "eta")

    def decide(self, view: StepView) -> tuple[np.ndarray, np.ndarray]:
        full = np.full(view.n, self.depth, dtype=np.int64)
        if self.rule == "token":
            return full, sample_tau(view.q, view.pt, view.z, full, view.eta, self.rule)
        ok = view.eta[:, : self.depth] <= view.p  # [n, depth]
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
    """A :class:`StepView` of arbitrary trace rows (tests, analysis): signals gathered to
    ``depth`` columns, uniforms keyed by (seed, batch index, row).

    rows: # [n] int trace row indices;  kv: # [n] (default zeros)
    """
    from specbatch.simulator.verify import request_keys, uniforms

    rows = np.asarray(rows, dtype=np.int64)
    n = rows.shape[0]
    kv = np.zeros(n, dtype=np.int64) if kv is None else np.asarray(kv, dtype=np.int64)
    eta = uniforms(request_keys(seed, np.arange(n)), rows, depth)
    return StepView(trace, rows, kv, int(budget), depth, eta, cost)
