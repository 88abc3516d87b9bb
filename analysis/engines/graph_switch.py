"""A batch-size schedule's CUDA-graph pathologies in vLLM (issue vllm-project/vllm#49548).

What #49548 measured (Qwen3.5-122B with MTP K = 2, vLLM V1 runner, v0.27.1 per the linked
#48494 thread; schedule ``[[1, 4, 2], [5, 512, 0]]``):

1. **The PIECEWISE fallback.** With ``num_speculative_tokens_per_batch_size`` set, vLLM
   overrides ``cudagraph_mode`` FULL_AND_PIECEWISE -> PIECEWISE (the V1 runner's warning):
   single-stream 59.6 -> 50.0 tok/s, i.e. every step ``59.6 / 50.0 = 1.192`` times as long
   (:data:`PIECEWISE_TAX` = 0.192). This is a per-step factor on every step of a schedule run,
   priced by tune's ``--tax``.
2. **The threshold collapse.** 8 concurrent 180-token requests: ~232 tok/s aggregate with the
   static K = 2, **24-157 tok/s** with the schedule (40-60 s wall against ~6.3 s). The
   report's hypothesis H3: vLLM keys K off ``len(num_scheduled_tokens)`` (every scheduled
   request, prefills included, vllm/v1/core/sched/scheduler.py), so as the running set
   oscillates around a threshold K flips step to step, changing the forward shapes and
   defeating CUDA-graph reuse. No per-switch time was measured, so the collapse is not priced:
   it is *detected* (:func:`assess`) and warned about, with the measured bracket
   (:data:`COLLAPSE_BRACKET`, 0.10-0.68 of the static throughput).

:func:`assess` reads a simulated run's step table: each step's scheduled-request count
(``decode_requests`` plus one when the step carries prefill tokens: a lower bound, the step
table does not record how many prefills), the K the schedule gives it, and the share of steps
whose K differs from the previous step's on the same replica (``switch_share``). An answer
*sits on a threshold* when ``switch_share >= SWITCH_WARN`` (1 % of steps).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: Per-step factor - 1 of the PIECEWISE fallback (#49548: 59.6 -> 50.0 tok/s single-stream).
PIECEWISE_TAX = 59.6 / 50.0 - 1.0
#: The schedule's aggregate throughput over the static K's at the threshold (#49548: 24 and
#: 157 of ~232 tok/s).
COLLAPSE_BRACKET = (24 / 232, 157 / 232)
#: Share of steps with a K switch from which an answer is said to sit on a threshold.
SWITCH_WARN = 0.01


@dataclass(frozen=True)
class SwitchReport:
    """thresholds: the batch sizes where the schedule's K changes (the first size of the new
    K); steps, switches: steps read and steps whose K differs from the previous one's;
    near: share of steps whose scheduled count is within 1 of a threshold."""

    thresholds: tuple[int, ...]
    steps: int
    switches: int
    near: float

    @property
    def switch_share(self) -> float:
        return self.switches / self.steps if self.steps else 0.0

    @property
    def on_threshold(self) -> bool:
        return self.switch_share >= SWITCH_WARN

    def warning(self, engine: str = "vLLM") -> str | None:
        """One line when the answer sits on a threshold, else None."""
        return warn(self.switch_share, self.thresholds, engine)


def warn(switch_share: float, cuts: tuple[int, ...] | list[int], engine: str = "vLLM"
         ) -> str | None:
    """The #49548 warning for a run whose K switches on ``switch_share`` of its steps."""
    if switch_share < SWITCH_WARN:
        return None
    lo, hi = COLLAPSE_BRACKET
    return (f"{engine} schedule sits on a threshold: K changes on {100 * switch_share:.1f} % "
            f"of steps (thresholds at batch {', '.join(map(str, cuts))}); vLLM #49548 "
            f"measured {lo:.2f}-{hi:.2f}x the static throughput there (not priced here)")


def thresholds(ranges: list[tuple[int, int, int]]) -> tuple[int, ...]:
    """Batch sizes where K changes: the ``lo`` of each range whose K differs from the
    previous range's."""
    return tuple(int(lo) for (lo, _, k), (_, _, k0) in zip(ranges[1:], ranges[:-1]) if k != k0)


def k_of(ranges: list[tuple[int, int, int]], count: np.ndarray) -> np.ndarray:
    """The schedule's K for each scheduled-request count (gaps and the tail inherit the
    previous range, as vLLM's lookup does).  count # [steps] -> # [steps]"""
    los = np.array([r[0] for r in ranges])
    ks = np.array([r[2] for r in ranges])
    i = np.searchsorted(los, np.maximum(count, 1), side="right") - 1
    return ks[np.clip(i, 0, len(ks) - 1)]


def assess(ranges: list[tuple[int, int, int]], steps) -> SwitchReport:
    """The switch statistics of one run's step table (``replica``, ``decode_requests``,
    ``prefill_tokens`` columns) under ``ranges``."""
    cuts = thresholds(ranges)
    if len(steps) == 0:
        return SwitchReport(cuts, 0, 0, 0.0)
    count = (steps["decode_requests"].to_numpy(np.int64)
             + (steps["prefill_tokens"].to_numpy(np.int64) > 0))  # [steps]
    k = k_of(ranges, count)
    replica = steps["replica"].to_numpy()
    same = replica[1:] == replica[:-1]
    switches = int(np.sum((k[1:] != k[:-1]) & same))
    near = float(np.mean(np.min(np.abs(count[:, None] - np.array(cuts)[None, :]), axis=1) <= 1)
                 ) if cuts else 0.0
    return SwitchReport(cuts, int(len(count)), switches, near)
