"""``plan --max-rate``: the largest Poisson request rate one given deployment serves within the
SLOs (analysis.plan.slo.judge: every SLO at the percentile, the goodput share, the rate
sustained, no preemption unless allowed).

**How.** Feasibility is probed by simulating the deployment at a rate r (same seed, same
requests: the simulator draws Poisson gaps as ``rng.exponential(1 / r)`` from one stream, so
a higher rate replays the same requests on a compressed clock, simulator.workload.arrivals).

1. *Bracket*: from ``start`` (``--rate`` or 1 req/s) double while the rate passes, or halve
   while it fails, until one passing rate ``lo`` and one failing rate ``hi = 2 lo`` are known
   (at most :data:`MAX_STEPS` steps each way; none passing down to ``start / 2^MAX_STEPS``:
   no rate is served).
2. *Bisect* on the geometric midpoint ``sqrt(lo hi)`` until ``hi / lo <= 1 + tolerance``
   (default 2 %): the answer is ``lo``, a rate that passed, and the true boundary lies in
   [lo, hi) provided feasibility is monotone in the rate.

Monotonicity is assumed, not proved (continuous batching can make a latency percentile
non-monotone in load over a short run). Every probe is reported; after the bisection the
rates 0.9 and 0.95 of the answer are probed once more, and any that fails is named in
``non_monotone`` (the answer is then doubtful).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from specbatch.errors import require

#: Doublings or halvings tried when bracketing.
MAX_STEPS = 24
#: Rates below the answer, as fractions of it, probed once more after the bisection: by
#: construction every earlier probe below the answer passed, so these are the only check of
#: monotonicity near the boundary.
CHECK_BELOW = (0.9, 0.95)


@dataclass(frozen=True)
class Probe:
    rate: float
    passed: bool
    limits: tuple[str, ...]


def search(passes: Callable[[float], Probe], start: float = 1.0, tolerance: float = 0.02
           ) -> dict:
    """The largest passing rate within ``tolerance`` (module docstring). ``passes(rate)``
    simulates and judges one rate."""
    require(start > 0 and math.isfinite(start), f"--rate: expected a start rate > 0, got {start}")
    require(0 < tolerance < 1, f"--rate-tolerance: expected 0 < tolerance < 1, got {tolerance}")
    probes: list[Probe] = []

    def probe(rate: float) -> Probe:
        p = passes(rate)
        probes.append(p)
        return p

    lo = hi = None
    first = probe(start)
    if first.passed:
        lo = start
        for _ in range(MAX_STEPS):
            p = probe(lo * 2)
            if not p.passed:
                hi = p.rate
                break
            lo = p.rate
    else:
        hi = start
        for _ in range(MAX_STEPS):
            p = probe(hi / 2)
            if p.passed:
                lo = p.rate
                break
            hi = p.rate
    if lo is None or hi is None:
        return {"max_rate": None if lo is None else lo, "bounded": False,
                "tolerance": tolerance, "probes": [vars(p) for p in probes],
                "non_monotone": [], "how": _how(tolerance)}
    while hi / lo > 1 + tolerance:
        mid = math.sqrt(lo * hi)
        if probe(mid).passed:
            lo = mid
        else:
            hi = mid
    odd = [p.rate for p in (probe(lo * f) for f in CHECK_BELOW) if not p.passed]
    return {"max_rate": lo, "first_failing": hi, "bounded": True, "tolerance": tolerance,
            "limits_above": list(next(p.limits for p in probes if p.rate == hi)),
            "probes": [vars(p) for p in sorted(probes, key=lambda p: p.rate)],
            "non_monotone": odd, "how": _how(tolerance)}


def _how(tolerance: float) -> str:
    return (f"bracket by doubling/halving, then bisection on the geometric midpoint until "
            f"first failing / max <= {1 + tolerance:g}; same seed and requests at every rate; "
            "monotone feasibility assumed (probes listed)")


def simulate_probe(fields: dict, slos) -> Callable[[float], Probe]:
    """``passes(rate)`` for SimConfig ``fields`` (Poisson arrivals at the probed rate)."""
    from specbatch.analysis.plan.slo import judge
    from specbatch.simulator.config.sim_config import load_config
    from specbatch.simulator.run import load_trace, simulate

    trace = {}

    def passes(rate: float) -> Probe:
        config = load_config(None, **{**fields, "arrival": "poisson", "rate": float(rate)})
        if "t" not in trace:
            trace["t"] = load_trace(config)
        result = simulate(config, trace["t"])
        verdict = judge(result.requests, int(result.summary.get("preemptions", 0) or 0), slos)
        return Probe(float(rate), bool(verdict.passed), tuple(verdict.limits))

    return passes
