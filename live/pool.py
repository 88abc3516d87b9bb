"""The live engine's request pool: arrivals, the FCFS waiting queue and the clock rule.

Arrival times come from the simulator's own workload code
(:func:`specbatch.simulator.workload.arrivals.build_workload` on the run's
:meth:`LiveConfig.sim_config`), so a live run and its simulation see the same arrivals for
the same seed (burst, poisson at ``rate``, gamma with ``rate`` and ``cv``).

Clock rule. The live clock is in workload seconds (arrivals on the same axis). Each engine
step lasts its measured wall duration: the step starts at the clock and ends at clock +
duration, and the clock moves to its end. Between steps, the engine admits every request that
has arrived by the clock (arrival ≤ clock, so a request arriving exactly at a step's end joins
the next step, as the simulator processes arrivals first at equal times). When nothing runs
and nobody is waiting, the clock jumps to the next arrival: the engine does not sleep, and the
idle time costs no wall time (the simulator's idle replica wakes at the arrival the same way).
"""

from __future__ import annotations

from collections import deque
from types import SimpleNamespace

import numpy as np


def arrival_times(cfg, prompt_len: np.ndarray, output_len: np.ndarray) -> np.ndarray:
    """Arrival second of each request # [N], drawn by the simulator's workload builder for
    ``cfg.sim_config(N)`` (the same streams of ``cfg.seed``)."""
    from specbatch.simulator.workload.arrivals import build_workload

    n = int(prompt_len.shape[0])
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(output_len, out=offsets[1:])
    requests = SimpleNamespace(n_requests=n, prompt_len=prompt_len, output_len=output_len,
                               offsets=offsets, arrival=np.zeros(n))
    return build_workload(cfg.sim_config(n), requests).arrival


class Pool:
    """Requests not yet running: arrival times # [N], FCFS order (by arrival, ties by uid)
    and ``rank`` # [N] = a request's place in that order (the simulator's batch order)."""

    def __init__(self, arrival: np.ndarray, max_num_seqs: int) -> None:
        self.arrival = np.asarray(arrival, dtype=np.float64)
        self.order = np.argsort(self.arrival, kind="stable")
        self.rank = np.empty_like(self.order)
        self.rank[self.order] = np.arange(self.order.shape[0])
        self.max_num_seqs = int(max_num_seqs)
        self.cursor = 0  # requests of ``order`` that have arrived
        self.waiting: deque[int] = deque()

    @property
    def drained(self) -> bool:
        """Every request has arrived and left the queue."""
        return self.cursor == self.order.shape[0] and not self.waiting

    def arrive(self, now: float) -> None:
        """Queue every request with arrival ≤ ``now``."""
        order, arrival = self.order, self.arrival
        while self.cursor < order.shape[0] and arrival[order[self.cursor]] <= now:
            self.waiting.append(int(order[self.cursor]))
            self.cursor += 1

    def admit(self, running: int, left: int | None = None,
              prompt_len: np.ndarray | None = None) -> list[int]:
        """FCFS: the waiting requests that fit in ``max_num_seqs − running`` free slots and,
        with a token budget ``left`` (vllm-v1), whose whole prompts (``prompt_len`` # [N])
        fit what is left of it; the first that does not fit stops admission (FCFS blocking,
        vLLM's ``break`` without chunked prefill)."""
        take = []
        while self.waiting and running + len(take) < self.max_num_seqs:
            if left is not None:
                need = int(prompt_len[self.waiting[0]])
                if need > left:
                    break
                left -= need
            take.append(self.waiting.popleft())
        return take

    def next_arrival(self) -> float:
        """The arrival time of the next request not yet queued (the idle clock's jump)."""
        return float(self.arrival[self.order[self.cursor]])
