"""Workload: which trace requests are simulated, and when they arrive.

N simulated requests (index ``uid`` 0..N-1) each replay one trace request. Selection
(``config.sampling``): "auto" takes the first N trace requests in order when N ≤ R and draws
N with replacement (seeded) when N > R; "in_order" cycles through the trace; "resample"
always draws with replacement. Arrivals (``config.arrival``): "burst" all at t = 0 (the
TETRIS paper's offline setting); "poisson" exponential gaps at ``rate`` req/s; "gamma" Gamma
gaps with mean 1/rate and coefficient of variation ``cv`` (shape 1/cv², cv = 1 is Poisson);
"trace" the recorded offsets of the selected requests (a request replayed twice keeps its
offset). Arrival times are non-decreasing in uid except for "trace", which the engine sorts
(stable, ties by uid). Selection and arrivals use independent streams of ``seed``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from specbatch.errors import require


@dataclass(frozen=True)
class Workload:
    """The simulated requests. Every array is # [N]."""

    trace_index: np.ndarray  # int64 trace request index replayed by uid
    arrival: np.ndarray  # float64 seconds
    prompt_len: np.ndarray  # int64
    output_len: np.ndarray  # int64
    row_base: np.ndarray  # int64 trace row of output position 0 (trace.offsets[trace_index])

    @property
    def n(self) -> int:
        return int(self.trace_index.shape[0])


def select_requests(n: int, n_trace: int, sampling: str, rng: np.random.Generator) -> np.ndarray:
    """Trace request indices for N simulated requests.  returns # [N] int64"""
    if sampling == "resample" or (sampling == "auto" and n > n_trace):
        return rng.integers(0, n_trace, size=n).astype(np.int64)
    return (np.arange(n, dtype=np.int64) % n_trace).astype(np.int64)


def arrival_times(n: int, kind: str, rate: float, cv: float, rng: np.random.Generator,
                  offsets: np.ndarray | None = None) -> np.ndarray:
    """Arrival time of each simulated request (seconds, first gap counted from 0).

    offsets: # [N] recorded offsets (kind "trace" only)
    returns  # [N] float64
    """
    if kind == "burst":
        return np.zeros(n)
    if kind == "poisson":
        return np.cumsum(rng.exponential(1.0 / rate, size=n))
    if kind == "gamma":
        shape = 1.0 / (cv * cv)
        return np.cumsum(rng.gamma(shape, 1.0 / (rate * shape), size=n))
    if kind == "trace":
        require(offsets is not None and bool(np.all(np.isfinite(offsets))),
                "config: field arrival: expected a trace with recorded arrival offsets for "
                "arrival = 'trace', got NaN offsets")
        return np.asarray(offsets, dtype=np.float64) - float(np.min(offsets, initial=0.0))
    raise ValueError(f"arrival: unknown kind {kind!r}")


def build_workload(config: Any, trace: Any) -> Workload:
    """The workload of ``config`` on ``trace`` (deterministic in ``config.seed``)."""
    select_seq, arrival_seq = np.random.SeedSequence([int(config.seed), 0x5EED]).spawn(2)
    idx = select_requests(int(config.requests), trace.n_requests, config.sampling,
                          np.random.default_rng(select_seq))
    offsets = np.asarray(trace.arrival, dtype=np.float64)[idx] if config.arrival == "trace" else None
    arrival = arrival_times(idx.shape[0], config.arrival, float(config.rate), float(config.cv),
                            np.random.default_rng(arrival_seq), offsets)
    return Workload(
        trace_index=idx,
        arrival=arrival.astype(np.float64),
        prompt_len=np.asarray(trace.prompt_len, dtype=np.int64)[idx],
        output_len=np.asarray(trace.output_len, dtype=np.int64)[idx],
        row_base=np.asarray(trace.offsets, dtype=np.int64)[idx],
    )
