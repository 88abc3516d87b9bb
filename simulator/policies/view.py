"""What a policy may read before verification: the :class:`StepView` of a decode batch.

The simulator builds a view of trace rows (signals gathered on first access, so a step pays
only for what its policy reads); the live loop wraps the arrays of the draft it just ran
(:meth:`StepView.from_signals`). Tables a policy computes row by row from a trace's signals
(TETRIS's cumulative confidence, the threshold policy's lengths) are built once per run in a
:class:`TraceTables` the engine owns and hands to every view.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from specbatch.errors import SpecbatchError
from specbatch.simulator.replay.chain import request_keys, uniforms
from specbatch.simulator.replay.tree import TreeTables
from specbatch.simulator.replay.trie import TrieTables, tree_tables_for
from specbatch.theory.verify.path_stats import block_weights, token_weights

#: Trace column behind each per-position signal of a :class:`StepView`.
SIGNALS = {"conf": "draft_conf", "q": "q", "pt": "pt", "z": "z", "p": "p",
           "accept_tv": "accept_tv", "entropy": "entropy", "top1": "top1"}


def cumulative_confidence(conf: np.ndarray) -> np.ndarray:
    """``Π_{l≤j} min(1, conf_l)``: the draft's own estimate of P(τ ≥ j) (THEORY.md §5; the
    min absorbs the trace format's 1e-6 slack on probabilities), non-increasing along j.

    conf:    # [n, K] draft's temperature-1 probability of each drafted token
    returns  # [n, K]
    """
    return np.cumprod(np.minimum(conf, 1.0), axis=1)


class TraceTables:
    """Whole-trace tables keyed by the caller, each ``build(*args)`` run once on first use
    (a Trace's arrays are never modified once built, so a table never goes stale)."""

    __slots__ = ("trace", "built", "proposed")

    def __init__(self, trace: Any) -> None:
        self.trace = trace
        self.built: dict[tuple, Any] = {}
        #: the trace's optional ``proposed`` column # [rows] (n-gram drafts), or None
        self.proposed = getattr(trace, "proposed", None)

    def get(self, key: tuple, build: Callable[..., Any], *args: Any) -> Any:
        table = self.built.get(key)
        if table is None:
            table = self.built[key] = build(*args)
        return table

    def confidence(self, depth: int) -> np.ndarray:
        """TETRIS's surrogate for every trace row: :func:`cumulative_confidence` of the
        ``draft_conf`` column. Row-wise, so gathering rows of it equals the surrogate of the
        gathered rows bit for bit.  # [rows, depth]"""
        table = self.built.get(("cumulative_confidence", depth))  # the per-step lookup, inline
        if table is None:
            table = self.get(("cumulative_confidence", depth), _confidence_of, self.trace, depth)
        return table


def _confidence_of(trace: Any, depth: int) -> np.ndarray:
    return cumulative_confidence(trace.draft_conf[:, :depth])


class StepView:
    """The decode batch as a policy sees it at one step: per-request signals, gathered.

    n:          running requests
    kv:         # [n] int64 tokens in each request's KV cache (prompt + emitted)
    budget:     C, draft tokens the target may verify this step (set by
                :func:`simulator.policies.step_plan.plan_step`)
    depth:      columns of every per-position signal
    eta:        # [n, depth] the verifier's uniforms (hindsight only), or None
    cost:       the active cost model (dsd only), or None
    conf:       # [n, depth] draft's temperature-1 probability of each drafted token
    entropy:    # [n, depth] draft's temperature-1 entropy at each position (nats)
    top1:       # [n, depth] draft's temperature-1 top-1 probability at each position
    q, pt, z:   # [n, depth] the drafted path's true statistics (THEORY.md §3; oracle and
                hindsight only)
    p:          # [n, depth] BV's ``P(τ ≥ j | X^j)`` (from q, pt)
    accept_tv:  # [n, depth] TV's ``Π_{l≤j} min(1, r_l)`` (from q, pt)
    proposed:   # [n] real draft tokens per request (n-gram drafts), or None (all K)

    ``StepView(trace, rows, kv, budget, depth, eta, cost, tables)`` is the simulator's view
    of trace rows ``rows`` # [n] (``tables``: the run's :class:`TraceTables`; a fresh one when
    None). :meth:`from_signals` wraps arrays a caller already holds (the live loop's own
    draft). :meth:`row_table` serves tables computed row by row from the signals.
    """

    __slots__ = ("n", "kv", "budget", "depth", "eta", "cost", "_trace", "_rows", "_given",
                 "_proposed", "_tables")

    def __init__(self, trace: Any, rows: np.ndarray | None, kv: np.ndarray, budget: int,
                 depth: int, eta: np.ndarray | None, cost: Any = None,
                 tables: TraceTables | None = None) -> None:
        self.n = rows.shape[0] if rows is not None else kv.shape[0]
        self.kv, self.budget, self.depth, self.eta, self.cost = kv, budget, depth, eta, cost
        self._trace, self._rows, self._given, self._proposed = trace, rows, {}, None
        self._tables = tables if tables is not None or trace is None else TraceTables(trace)

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
    entropy = property(lambda self: self.signal("entropy"))
    top1 = property(lambda self: self.signal("top1"))
    q = property(lambda self: self.signal("q"))
    pt = property(lambda self: self.signal("pt"))
    z = property(lambda self: self.signal("z"))
    p = property(lambda self: self.signal("p"))
    accept_tv = property(lambda self: self.signal("accept_tv"))

    def row_table(self, key: tuple, build: Callable[..., Any], *names: str) -> Any:
        """``build(*signals)`` for this view's rows, where ``build`` works row by row on the
        signals ``names`` # [rows, depth] and returns arrays (or a tuple of arrays) with one
        row per input row. Trace views compute it once per run and ``key`` and gather their
        rows; array views call it on their own signals."""
        if self._trace is None:
            return build(*(self.signal(name) for name in names))
        trace, depth, rows = self._trace, self.depth, self._rows
        table = self._tables.get((key, depth), lambda: build(
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
        column = self._tables.proposed
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
    def rows(self) -> np.ndarray | None:
        """The trace rows of the batch # [n] (None for an array view)."""
        return self._rows

    @property
    def tree(self) -> TreeTables | TrieTables:
        """The trace's draft trees as :class:`~simulator.replay.tree.TreeTables` (or
        :class:`~simulator.replay.trie.TrieTables` for path tries; built once per run)."""
        return self._tables.get(("tree",), tree_tables_for, self._trace)

    def tree_table(self, key: tuple, build: Callable[..., Any]) -> Any:
        """``build(trace, tree)`` of the whole trace and its :attr:`tree`, computed once per
        run and ``key`` (per-row tables of a tree policy; the caller gathers its rows)."""
        if self._trace is None:
            raise SpecbatchError("StepView: tree tables need a tree trace view")
        return self._tables.get(("tree_table", key), build, self._trace, self.tree)

    @property
    def cum_conf(self) -> np.ndarray:
        """TETRIS's surrogate :func:`cumulative_confidence` of ``conf``.  # [n, depth]"""
        if self._trace is None:
            return cumulative_confidence(self.conf)
        return self._tables.confidence(self.depth).take(self._rows, axis=0)


def make_view(trace: Any, rows: np.ndarray, budget: int, depth: int, cost: Any = None,
              kv: np.ndarray | None = None, seed: int = 0) -> StepView:
    """A :class:`StepView` of arbitrary trace rows (tests, analysis): signals gathered to
    ``depth`` columns, uniforms keyed by (seed, batch index, row).

    rows: # [n] int trace row indices;  kv: # [n] (default zeros)
    """
    rows = np.asarray(rows, dtype=np.int64)
    n = rows.shape[0]
    kv = np.zeros(n, dtype=np.int64) if kv is None else np.asarray(kv, dtype=np.int64)
    eta = uniforms(request_keys(seed, np.arange(n)), rows, depth)
    return StepView(trace, rows=rows, kv=kv, budget=int(budget), depth=depth, eta=eta, cost=cost)
