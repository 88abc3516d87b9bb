"""How much a simulated answer moves when every step time moves by ±5 %.

A cost model's validated error is a few percent per step (docs/fidelity.md), so an answer that
swings by far more than that under a ±5 % step time is decided by the cost model's error, not by
the setting: that is what happens near an engine's capacity, where the mean wait grows like
ρ / (1 − ρ) (:mod:`specbatch.simulator.saturation`). :func:`step_time_sensitivity` reruns the
same config and seed (common random numbers: the same workload, arrivals and acceptance draws)
with every pass of the cost model scaled by a factor f (:class:`ScaledCost`: draft and target
passes, the head drafter's first pass and the per-step host overhead), and reports each
metric's ratio to the unscaled run. The rejection sampler's time (``verify_cost``, ~0.15 % of a
step) is not scaled.

A run is *fragile* when a 5 % change moves TTFT or e2e latency by more than 25 % (an
elasticity above 5): such an answer is reported with that range, never as one number.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from specbatch.errors import require
from specbatch.simulator.cost.interface import SumsCostModel, takes_logit_rows

if TYPE_CHECKING:
    from specbatch.simulator.config.sim_config import SimConfig

#: The step-time factors of the sensitivity runs.
FACTORS = (0.95, 1.05)
#: Metrics whose ratios are reported.
METRICS = ("ttft_mean", "tpot_mean", "e2e_mean", "e2e_p99", "throughput")
#: A latency ratio outside [1/(1 + FRAGILE), 1 + FRAGILE] under ±5 % marks the answer fragile.
FRAGILE = 0.25


class ScaledCost:
    """A cost model whose every pass, and the per-step overhead, takes ``factor`` times as long.

    Methods the wrapped model lacks are not defined here either, so the engine's protocol checks
    (``isinstance(cost, SumsCostModel)``, a head drafter's ``first_pass_time``) see the same
    model; every other attribute (memory, KV capacity, names) is the wrapped model's.
    """

    def __init__(self, inner: Any, factor: float) -> None:
        require(factor > 0 and np.isfinite(factor), "factor: expected a positive number, got "
                                                    f"{factor!r}")
        self.inner = inner
        self.factor = float(factor)
        self.overhead = self.factor * float(inner.overhead)
        if isinstance(inner, SumsCostModel):
            self.time_from_sums = self._time_from_sums
        for name in ("first_pass_time", "first_pass_step"):
            if callable(getattr(inner, name, None)):
                setattr(self, name, self._scaled(getattr(inner, name)))
        if hasattr(inner, "host_overhead"):
            self.host_overhead = self.factor * float(inner.host_overhead)

    def __getattr__(self, name: str) -> Any:
        if name == "inner":  # not set yet (copy, unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.inner, name)

    @property
    def logit_rows(self) -> bool:
        """Whether the engine may name a pass's logit rows: as the wrapped model
        (simulator.cost.interface.takes_logit_rows); ``rows`` and ``window`` pass through."""
        return takes_logit_rows(self.inner)

    def _scaled(self, method):
        def scaled(*args, **kwargs):
            return self.factor * method(*args, **kwargs)
        return scaled

    def step_time(self, role: str, query: np.ndarray, kv: np.ndarray, **kwargs) -> float:
        return self.factor * self.inner.step_time(role, query, kv, **kwargs)

    def _time_from_sums(self, role: str, n: int, sq: float, skv: float, sqkv: float,
                        sqq: float, **kwargs) -> float:
        return self.factor * self.inner.time_from_sums(role, n, sq, skv, sqkv, sqq, **kwargs)


@dataclass(frozen=True)
class Sensitivity:
    """Each metric's ratio to the unscaled run, per step-time factor."""

    factors: tuple[float, ...]
    ratios: dict[str, tuple[float, ...]]  # metric -> ratio at each factor

    @property
    def fragile(self) -> bool:
        """Whether ±5 % step time moves TTFT or e2e (mean or p99) by more than FRAGILE."""
        lo, hi = 1.0 / (1.0 + FRAGILE), 1.0 + FRAGILE
        return any(not lo <= r <= hi for name in ("ttft_mean", "e2e_mean", "e2e_p99")
                   for r in self.ratios.get(name, ()) if np.isfinite(r))

    def as_dict(self) -> dict:
        return {"factors": list(self.factors), "fragile": self.fragile,
                "ratios": {name: list(v) for name, v in self.ratios.items()}}


def step_time_sensitivity(config: SimConfig, base_summary: dict, trace=None,
                          factors: tuple[float, ...] = FACTORS) -> Sensitivity:
    """Rerun ``config`` with step times scaled by each factor; ratios to ``base_summary`` (the
    unscaled run's summary, same config and seed)."""
    from specbatch.simulator.run import build_cost, simulate

    ratios: dict[str, list[float]] = {name: [] for name in METRICS}
    for f in factors:
        summary = simulate(config, trace=trace, cost_model=ScaledCost(build_cost(config), f),
                           progress=False).summary
        for name in METRICS:
            base, value = base_summary.get(name), summary.get(name)
            ok = base is not None and value is not None and base > 0
            ratios[name].append(float(value) / float(base) if ok else float("nan"))
    return Sensitivity(factors=tuple(factors), ratios={k: tuple(v) for k, v in ratios.items()})


#: Arrival processes whose queue can grow (a burst queues everything at t = 0).
OPEN_LOOP = ("poisson", "gamma", "trace")
#: ``--sensitivity`` modes: rerun at ±5 % always, never, or when the run is near capacity.
MODES = ("auto", "on", "off")


#: ``auto`` reruns runs of at most this many requests (two more runs: 3x the CPU); larger ones
#: only when their queue grows without bound.
AUTO_MAX_REQUESTS = 20_000


def capacity_check(config: SimConfig, result, mode: str = "auto", trace=None) -> dict | None:
    """The run's place against its capacity: the queue's growth
    (:mod:`specbatch.simulator.saturation`) and the ±5 % :class:`Sensitivity`.

    ``mode``: ``on`` reruns always; ``auto`` reruns open-loop runs (poisson, gamma, trace
    arrivals) of at most :data:`AUTO_MAX_REQUESTS` requests, and larger ones whose queue grows;
    ``off`` never. None when nothing was checked (``off``, or a burst under ``auto``: a burst
    queues every request at t = 0 by construction). The run is *near capacity* when its queue
    grows without bound or ±5 % step time moves its latency by more than :data:`FRAGILE`.
    """
    from specbatch.simulator.saturation import queue_growth

    require(mode in MODES, f"sensitivity: expected one of {', '.join(MODES)}, got {mode!r}")
    open_loop = config.arrival in OPEN_LOOP
    if mode == "off" or (not open_loop and mode != "on"):
        return None
    requests = result.requests
    growth = None
    if open_loop:
        growth = queue_growth(requests["arrival"].to_numpy(), requests["first_token"].to_numpy())
    growing = growth is not None and growth.growing
    sens = None
    if mode == "on" or (open_loop and (len(requests) <= AUTO_MAX_REQUESTS or growing)):
        sens = step_time_sensitivity(config, result.summary, trace=trace)
    return {"near_capacity": bool(growing or (sens is not None and sens.fragile)),
            "queue_growth": None if growth is None else {
                "growth": growth.growth, "waiting_start": growth.waiting_start,
                "waiting_end": growth.waiting_end, "window": growth.window,
                "growing": growing},
            "sensitivity": None if sens is None else sens.as_dict()}


def capacity_lines(check: dict | None) -> list[str]:
    """The ``capacity`` block as warning lines (none when the run is clear of its capacity)."""
    if not check or not check["near_capacity"]:
        return []
    lines = []
    growth = check.get("queue_growth")
    if growth and growth["growing"]:
        lines.append(
            "warning: the queue grows without bound: waiting requests "
            f"{growth['waiting_start']:.0f}"
            f" -> {growth['waiting_end']:.0f} over the last {growth['window']} arrivals "
            f"(g = {growth['growth']:.2f}); latencies measure the run's length, not the setting")
    sens = check.get("sensitivity")
    if sens:
        parts = [f"{name} x{sens['ratios'][name][0]:.3g} .. x{sens['ratios'][name][1]:.3g}"
                 for name in ("ttft_mean", "e2e_p99", "throughput")]
        lines.append(f"warning: near capacity: step time x0.95 .. x1.05 moves {', '.join(parts)}"
                     " (the cost model's error, a few %, decides this answer)"
                     if sens["fragile"] else
                     f"step time x0.95 .. x1.05 moves {', '.join(parts)}")
    return lines
