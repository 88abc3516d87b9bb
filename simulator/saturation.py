"""Is the simulated engine keeping up with its arrivals? The queue's growth and the GPU's busy
share.

Near an engine's capacity a serving answer is fragile: with offered load λ and service rate μ,
the mean wait of a stable queue grows like ρ / (1 − ρ) (ρ = λ / μ), so a few percent of step
time moves TTFT by orders of magnitude, and past ρ = 1 the queue grows without bound and every
latency percentile only measures how long the run lasted. The queue's growth is read from the
request table (no rerun needed); how close a stable queue is to the edge needs reruns
(:mod:`specbatch.analysis.sensitivity`). The GPU's busy share is no guide: a batched engine
steps without pause while any request runs, so it is busy ~100 % of the run at a tenth of its
capacity too.

**Queue growth** g. W_i = the requests waiting for their first token when request i arrives
  (arrived at or before it, first token after it, request i included). Over the last 75 % of
  arrivals (the first quarter is warm-up), ΔW = mean W over that window's last tenth − mean W over
  its first tenth, and g = ΔW / (arrivals between the two tenths' centres, 0.9 of the window).
  Admissions there are arrivals − ΔW, so g estimates 1 − μ/λ when the queue grows, and is ≈ 0
  (either sign) when it is stationary. The run is flagged as *growing without bound* when g ≥ 0.1
  and ΔW ≥ 10
  requests: at least a tenth of the arrivals pile up, beyond a stationary queue's fluctuation
  at the run sizes simulate uses (its W has s.d. ≈ √(ρ)/(1 − ρ) for M/M/1).

It is defined for open-loop arrivals only (``poisson``, ``gamma``, ``trace``): a burst puts
every request in the queue at t = 0 by construction.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: Flag thresholds (module docstring): growth share of the window's arrivals, and requests.
GROWTH_SHARE = 0.1
GROWTH_REQUESTS = 10


@dataclass(frozen=True)
class QueueGrowth:
    """The queue-growth statistic of one run (module docstring)."""

    window: int  # arrivals in the window (the last 75 % of arrivals)
    waiting_start: float  # mean W over the window's first tenth
    waiting_end: float  # mean W over the window's last tenth
    growth: float  # g = (waiting_end − waiting_start) / (window − window // 10)

    @property
    def growing(self) -> bool:
        """Whether the queue grows without bound (g ≥ GROWTH_SHARE and ΔW ≥ GROWTH_REQUESTS)."""
        return (self.growth >= GROWTH_SHARE
                and self.waiting_end - self.waiting_start >= GROWTH_REQUESTS)


def waiting_at_arrival(arrival: np.ndarray, first_token: np.ndarray) -> np.ndarray:
    """W_i: requests with arrival ≤ arrival_i < first_token, for arrivals in time order.

    ``arrival``, ``first_token`` # [n] (any order); returns # [n] in arrival order. Counted with
    two sorted searches, O(n log n): arrived = #{arrival_j ≤ a_i}, started = #{first_token_j ≤ a_i}.
    """
    a = np.sort(np.asarray(arrival, dtype=np.float64))
    f = np.sort(np.asarray(first_token, dtype=np.float64))
    arrived = np.searchsorted(a, a, side="right")
    started = np.searchsorted(f, a, side="right")
    return (arrived - started).astype(np.int64)


def queue_growth(arrival: np.ndarray, first_token: np.ndarray) -> QueueGrowth | None:
    """The run's :class:`QueueGrowth`, or None when it is undefined: fewer than 40 requests
    (a window's tenth under 3 arrivals) or every arrival at one instant (a burst)."""
    n = int(np.size(arrival))
    if n < 40 or float(np.ptp(arrival)) == 0.0:
        return None
    waiting = waiting_at_arrival(arrival, first_token)[n // 4:]  # [window]
    window = waiting.shape[0]
    tenth = max(window // 10, 1)
    start = float(waiting[:tenth].mean())
    end = float(waiting[-tenth:].mean())
    return QueueGrowth(window=window, waiting_start=start, waiting_end=end,
                       growth=(end - start) / (window - tenth))
