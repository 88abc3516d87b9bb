"""An early stop's rule as numbers, so the compiled loop can evaluate it itself.

simulator.engine.core calls an early stop ``stop(time, records, workload)`` every ``stop.every``
events. A stop may also offer ``stop.limits(workload)`` returning :class:`StopLimits`: the
rule in the form the compiled loop checks at those same events without returning to Python
(simulator.engine.v1.kernel.stop.stop_rule; the driver packs it with :func:`pack_limits`).
The stop's own ``__call__`` stays its reference twin, and the stop is responsible for the two
agreeing bit for bit (analysis.plan.slo.EarlyStop: tests/analysis/plan/test_stop_limits.py). A
stop without ``limits`` is called from Python at each check (the kernel hands control back).

The rule, with each request's floors at ``time`` (a NaN first token or finish stands at
``time``: TTFT = first_token − arrival, e2e = finish − arrival, TPOT = (e2e − TTFT) /
(output − 1) for an output of 2+ tokens, else 0): no stop at or before ``first_due`` unless a
request was preempted; a preemption stops unless ``allow_preemption``; then stop when
``need`` requests exceed one bound, when fewer than ``goodput`` of them meet every bound, or
when ``need`` requests' e2e exceed ``beat``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: Slots of the packed limits # [N_LIMITS] float64 (NaN: a bound not given).
L_EVERY, L_DUE, L_ALLOW, L_NEED, L_TTFT, L_TPOT, L_E2E, L_GOODPUT, L_BEAT = range(9)
N_LIMITS = 9


@dataclass(frozen=True)
class StopLimits:
    """every_after: the stop's check interval in events from its first check on (the first
    check comes at ``stop.every``); first_due: before (and at) this time no request can be
    over a bound; need: requests over a bound that fix its percentile above it; ttft, tpot,
    e2e: the bounds (None: not given), goodput the share that must meet all of them; beat: an
    e2e the run must beat at the percentile (None: none)."""

    every_after: int
    first_due: float
    allow_preemption: bool
    need: int
    ttft: float | None = None
    tpot: float | None = None
    e2e: float | None = None
    goodput: float = 0.0
    beat: float | None = None


def pack_limits(limits: StopLimits) -> np.ndarray:
    """``limits`` as the kernel reads them # [N_LIMITS] float64 (the L_* slots)."""
    out = np.full(N_LIMITS, np.nan)
    out[L_EVERY] = max(int(limits.every_after), 1)
    out[L_DUE] = float(limits.first_due)
    out[L_ALLOW] = float(bool(limits.allow_preemption))
    out[L_NEED] = int(limits.need)
    for slot, value in ((L_TTFT, limits.ttft), (L_TPOT, limits.tpot), (L_E2E, limits.e2e),
                        (L_BEAT, limits.beat)):
        if value is not None:
            out[slot] = float(value)
    out[L_GOODPUT] = float(limits.goodput)
    return out
