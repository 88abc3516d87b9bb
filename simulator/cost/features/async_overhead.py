"""vLLM's async scheduling: the engine's per-step CPU work overlaps the GPU pass.

Without it (the simulator's default) a step takes its passes plus the cost model's per-step
``overhead`` T_o (scheduling, input preparation, output processing), serially. vLLM's
``--async-scheduling`` (``SchedulerConfig.async_scheduling``; on by default in the vLLM 0.19
runs of docs/fidelity.md) schedules step N+1 while step N runs on the GPU
(vllm/v1/core/sched/async_scheduler.py, ``AsyncScheduler``; vLLM PR 19970) and, since PR
23569 ("Fully overlap model execution"), prepares its inputs and processes the previous
step's sampled tokens on the host while the forward pass runs. The step then takes the larger
of the two::

    t_step = max(T_target, T_o)          # instead of T_target + T_o

:class:`AsyncOverheadCost` prices it: per-step overhead 0 and every target pass at least T_o.
A model drafter's passes are still added before it (vLLM 0.19 overlaps spec decoding's host
work too; the draft passes here are GPU time, not host time). T_o itself stays the hardware
preset's assumption (1 ms on the presets; no public measurement of it is known): it shows
only when a pass is shorter.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from specbatch.simulator.cost.interface import takes_logit_rows


@dataclass(frozen=True)
class AsyncOverheadCost:
    """``inner`` with its per-step overhead overlapped by the target pass (module docstring)."""

    inner: Any  # a CostModel

    @property
    def overhead(self) -> float:
        return 0.0

    @property
    def host_overhead(self) -> float:
        """T_o: the inner model's per-step CPU time, now hidden under the target pass."""
        return float(self.inner.overhead)

    @property
    def logit_rows(self) -> bool:
        """Whether the inner model takes the logit rows (interface.takes_logit_rows)."""
        return takes_logit_rows(self.inner)

    def step_time(self, role: str, query: np.ndarray, kv: np.ndarray, **rows) -> float:
        """Seconds of one pass; a non-empty target pass lasts at least T_o (``rows``: the
        logit rows, passed on)."""
        t = float(self.inner.step_time(role, query, kv, **rows))
        return max(t, self.host_overhead) if role == "target" and t > 0.0 else t

    def __getattr__(self, name: str) -> Any:
        """``time_from_sums`` (when the inner model has it) with the same floor; everything
        else is the inner model's."""
        if name == "inner" or name.startswith("__"):
            raise AttributeError(name)
        attr = getattr(self.inner, name)
        if name != "time_from_sums":
            return attr

        def time_from_sums(role: str, n: int, sq: float, skv: float, sqkv: float,
                           sqq: float, **rows) -> float:
            t = float(attr(role, n, sq, skv, sqkv, sqq, **rows))
            return max(t, self.host_overhead) if role == "target" and t > 0.0 else t

        return time_from_sums
