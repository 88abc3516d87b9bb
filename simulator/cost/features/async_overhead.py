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

**Which speculative methods may overlap** (:func:`async_applies`; vLLM's rule in
``VllmConfig.__post_init__``, vllm/config/vllm.py). Async scheduling needs a drafter that
reads the step's sampled tokens on the GPU. EAGLE / EAGLE-3 / MTP heads have it since PR 24799
("Async Scheduling X Spec Decoding Compatibility", merged Nov 2025: an explicit
``--async-scheduling`` with any other method raised "Currently, async scheduling is only
supported with EAGLE/MTP kind of speculative decoding"; before it, PR 19970's ``EngineArgs``
check refused any speculative config: "Currently, speculative decoding is not supported with
async scheduling"), and since PR 31998 (vLLM 0.14, Jan 2026) it is on by default for them. PR
24799 overlapped the next step's scheduling and input preparation with the drafting only (the
next step still waited for the target pass); PR 32951 (vLLM 0.19, "zero-bubble async
scheduling + speculative decoding") overlaps the whole step. The form here, draft passes +
max(T_target, T_o), hides T_o under the target pass: no more than 0.19 hides (max(T_target +
drafts, T_o) ≤ it), more than 0.14-0.18 when T_o > drafts. A draft model (``method =
"draft_model"``, PR 24322) joined the explicit-flag whitelist ("EAGLE/MTP/Draft Model", as
vLLM 0.17.1 prints it) but the default resolution turned async scheduling off for it, with a
warning, until PR 48341 (Jul 2026). The CPU n-gram proposer (``method = "ngram"``) never: it
needs the sampled tokens on the host, so an explicit flag is a ``ValueError`` and the default
resolution logs "Async scheduling not supported with ngram-based speculative decoding and will
be disabled" (only the GPU ``ngram_gpu`` of PR 29184 overlaps). specbatch models vLLM 0.14 or
later with the flag given: ``async_scheduling = true`` overlaps the host for no speculation,
heads and draft models, and is dropped for the n-gram drafter's speculative steps (the AR arm
of ``speedup_vs_ar`` keeps it, as a vLLM deployment without a speculative config does).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from specbatch.simulator.cost.interface import takes_logit_rows
from specbatch.simulator.defaults import FREE_DRAFTS


def async_applies(draft: str, speculative: bool) -> bool:
    """Whether vLLM overlaps the host under ``--async-scheduling`` for a deployment drafting
    with ``draft`` (a model's name, a head, or "ngram") when ``speculative`` (it has a
    speculative config): always without one; with one, for every drafter but the CPU n-gram
    proposer (module docstring)."""
    return not speculative or str(draft).lower() not in FREE_DRAFTS


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
