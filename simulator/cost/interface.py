"""The step-time cost-model interface: what the engine and the policies ask of a cost model.

A cost model says how long one forward pass of the draft or target model takes.
``step_time(role, query, kv)`` returns the seconds of one forward pass of ``role`` ("draft" |
"target") over a batch whose request i processes ``query[i]`` new tokens with ``kv[i]`` tokens
already in its KV cache, and ``overhead`` is the fixed CPU-side time of one engine step (added
once per step by the simulator, not by ``step_time``). Prefill is the same call:
``step_time(role, chunk, kv_before)``. THEORY.md §5 (DSD) takes ``T_draft(k)``,
``T_target(k)`` and ``T_overhead(k)`` from here: ``T_draft(k) = k · step_time("draft", 1,
kv)``, ``T_target(k) = step_time("target", k+1, kv)``.

Every model in this package is a function of the batch sums (n, Σq, Σc, Σq·c, Σq²) only
(:func:`batch_sums`, one small Gram product, then scalar arithmetic: ~5 µs per call at batch 64
on an unloaded core, ``benchmarks/cost_bench.py``). A :class:`SumsCostModel` also exposes that
scalar half, ``time_from_sums(role, n, Σq, Σc, Σq·c, Σq²)``: the engine computes one decode
step's sums once and derives every draft pass from them (pass d of a batch with query 1 has
Σc + n_d·d cached tokens, exact in float64 below 2^53, so the times are bit-identical to one
``step_time`` call per pass). A model with ``step_time`` only is priced one call per pass, and
so is one whose optional ``windowed`` attribute is true (sliding-window layers,
:func:`sums_path`).

Implementations: :mod:`simulator.cost.analytic.roofline` (analytic),
:mod:`simulator.cost.measured.profiled` (fitted to a measured latency profile); the registry is
:func:`simulator.cost.registry.build_cost_model`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol, TypeVar, runtime_checkable

import numpy as np

from specbatch.errors import SpecbatchError

ROLES = ("draft", "target")
T = TypeVar("T")


@runtime_checkable
class CostModel(Protocol):
    """Step time of one forward pass plus a fixed per-step overhead (seconds): everything the engine
    (simulator.engine.core) and the policies (simulator.policies.registry, DSD) call on a cost
    model."""

    overhead: float

    def step_time(self, role: str, query: np.ndarray, kv: np.ndarray) -> float:
        """Seconds for one pass of ``role`` over ``query`` # [n] new and ``kv`` # [n] cached
        tokens per request (0 for an empty batch)."""
        ...


@runtime_checkable
class SumsCostModel(CostModel, Protocol):
    """A :class:`CostModel` whose step time is a function of the batch sums, exposed so the
    engine can price a step's draft and verify passes from sums it already has."""

    def time_from_sums(self, role: str, n: int, sq: float, skv: float, sqkv: float,
                       sqq: float) -> float:
        """``step_time`` of a batch with n requests, Σq = ``sq``, Σc = ``skv``, Σq·c = ``sqkv``
        and Σq² = ``sqq``; bit-identical to ``step_time`` on arrays with those sums."""
        ...


@runtime_checkable
class HeadCostModel(CostModel, Protocol):
    """A :class:`CostModel` whose draft is a head on the target's hidden states (EAGLE,
    EAGLE-3, MTP; simulator.cost.features.draft_head): ``step_time("draft", ...)`` prices its passes
    after the first, and the first pass, over the target's whole pass, is priced apart. The
    engine detects it by the optional ``first_pass_time`` attribute."""

    def first_pass_time(self, n: int, sq: float, skv: float, sqkv: float, sqq: float) -> float:
        """Seconds of the head's first pass over the target pass with these batch sums."""
        ...

    def first_pass_step(self, query: np.ndarray, kv: np.ndarray) -> float:
        """:meth:`first_pass_time` of the target pass's arrays ``query``, ``kv`` # [n]."""
        ...


def sums_path(cost) -> bool:
    """Whether the engine may price ``cost`` from the five batch sums: a
    :class:`SumsCostModel` without sliding-window layers. A model whose optional ``windowed``
    attribute is true (simulator.cost.analytic.window: a sliding layer's work needs per-request
    minima the sums do not determine) is priced one ``step_time`` call per pass on arrays."""
    return isinstance(cost, SumsCostModel) and not getattr(cost, "windowed", False)


def batch_sums(query, kv) -> tuple[int, float, float, float, float]:
    """(n, Σq, Σc, Σq·c, Σq²) of query # [n] and kv # [n] (the sums as floats).

    The hot path of every cost model: one [2, n] x [n, 3] Gram product of the rows
    (q, c, 1), which is cheaper than four separate numpy reductions for small arrays.
    Exact for integer token counts below 2^53.
    """
    n = query.shape[0] if isinstance(query, np.ndarray) else int(np.size(query))
    b = np.empty((3, n))
    b[0] = query
    b[1] = kv
    b[2] = 1.0
    (qq, qc, sq), (_, _, sc) = (b[:2] @ b.T).tolist()
    return n, sq, sc, qc, qq


def for_role(by_role: Mapping[str, T], role: str) -> T:
    """``by_role[role]``, or the one-line error naming the roles a cost model prices."""
    item = by_role.get(role)
    if item is None:
        raise SpecbatchError(f"cost role {role!r}: expected one of {', '.join(ROLES)}")
    return item


def takes_logit_rows(cost) -> bool:
    """Whether ``cost`` prices a pass's LM head at the logit rows the engine names (its class
    declares ``logit_rows`` and it is true: simulator.cost.analytic.roofline's ``rows``). A wrapper
    that does not declare it (``__getattr__`` forwarding only) takes none."""
    return hasattr(type(cost), "logit_rows") and bool(cost.logit_rows)


class WrappedCost:
    """Base of a cost model around ``inner`` (a head or free drafter's cost): the per-step
    overhead and whether it takes the engine's logit rows (:func:`takes_logit_rows`) are the
    inner model's."""

    inner: CostModel

    @property
    def overhead(self) -> float:
        return float(self.inner.overhead)

    @property
    def logit_rows(self) -> bool:
        """Whether the inner model takes the target's logit rows."""
        return takes_logit_rows(self.inner)
