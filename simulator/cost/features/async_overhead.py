"""vLLM's async scheduling: the engine's per-step CPU work overlaps the GPU pass.

Without it a step takes its passes plus the cost model's per-step ``overhead`` T_o
(scheduling, input preparation, output processing), serially. vLLM's ``--async-scheduling``
(``SchedulerConfig.async_scheduling``) schedules step N+1 while step N runs on the GPU
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

**The setting** (``async_scheduling``: "auto", true or false; :func:`resolve_async`, the one
place it is resolved; a run's is ``SimConfig.async_setting``). vLLM's flag is ``None`` when
not given, and ``VllmConfig.__post_init__`` (vllm/config/vllm.py) resolves it. Its rule for
``None`` (vLLM main at commit ``000fc94b``): off for a pooling model; off for a speculative
config whose ``method`` is none of ``EagleModelTypes`` (eagle, eagle3 and the MTP kinds;
vllm/config/speculative.py), ``NgramGPUTypes`` (``ngram_gpu``), ``"draft_model"`` and
``"dspark"`` (it warns "Async scheduling not supported with %s-based speculative decoding
and will be disabled"); off for ``disable_padded_drafter_batch = True``, for an executor
backend without async support and for ROCm DeepEP high-throughput DBO; on otherwise.
``"auto"`` here is that rule on what a SimConfig can say:

- on without a speculative config (``ar``; each arm of ``speedup_vs_ar`` resolves on its
  own, as two deployments with the flag unset would);
- on for an EAGLE / EAGLE-3 / MTP head (the default since PR 31998, vLLM 0.14, Jan 2026);
- on for a draft model (``method = "draft_model"``: the default since PR 48341, Jul 2026;
  before it the default turned it off with the warning above);
- off for the drafters vLLM runs on the host (:data:`HOST_DRAFTS`: the n-gram proposer,
  ``method = "ngram"``, vllm/v1/spec_decode/ngram_proposer.py ``NgramProposer``, a numba
  loop over the token ids on the CPU);
- off under ``scheduler = "vllm-v0"``: it models vLLM's V0 engine, which had no async
  scheduler (``AsyncScheduler`` is a V1 class).

vLLM's other conditions have no SimConfig knob (a text-generating model,
``disable_padded_drafter_batch = False``, the ``mp`` / ``uni`` executors, no ROCm). ``true``
is the flag given: on, and dropped for the n-gram drafter's speculative steps (vLLM refuses
the explicit flag there: "Currently, async scheduling is only supported with EAGLE/MTP/Draft
Model/NGram GPU/DSpark kind of speculative decoding"); ``false`` is ``--no-async-scheduling``:
synchronous steps.

**History of which speculative methods may overlap** (:func:`async_applies`). Async scheduling
needs a drafter that reads the step's sampled tokens on the GPU. EAGLE / EAGLE-3 / MTP heads
have it since PR 24799 ("Async Scheduling X Spec Decoding Compatibility", merged Nov 2025: an
explicit ``--async-scheduling`` with any other method raised "Currently, async scheduling is
only supported with EAGLE/MTP kind of speculative decoding"; before it, PR 19970's
``EngineArgs`` check refused any speculative config). PR 24799 overlapped the next step's
scheduling and input preparation with the drafting only (the next step still waited for the
target pass); PR 32951 (vLLM 0.19, "zero-bubble async scheduling + speculative decoding")
overlaps the whole step. The form here, draft passes + max(T_target, T_o), hides T_o under the
target pass: no more than 0.19 hides (max(T_target + drafts, T_o) ≤ it), more than 0.14-0.18
when T_o > drafts. A draft model (PR 24322) joined the explicit-flag whitelist ("EAGLE/MTP/Draft
Model", as vLLM 0.17.1 prints it) before PR 48341 turned its default on. The CPU n-gram
proposer never overlaps: it needs the sampled tokens on the host (only the GPU ``ngram_gpu``
of PR 29184 does).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from specbatch.fields import AUTO
from specbatch.simulator.cost.interface import takes_logit_rows
from specbatch.simulator.defaults import HEAD_DRAFTS

#: Where vLLM runs the proposer of each draft in FREE_DRAFTS (no draft model): "host" (the
#: CPU; vLLM's default turns async scheduling off, an explicit flag is refused) or "gpu".
#: ``ngram``: vllm/v1/spec_decode/ngram_proposer.py ``NgramProposer`` (numba on the CPU).
FREE_DRAFT_DEVICE = {"ngram": "host"}
#: The drafts vLLM runs on the host: never overlapped (module docstring).
HOST_DRAFTS = tuple(name for name, device in FREE_DRAFT_DEVICE.items() if device == "host")


def async_applies(draft: str, speculative: bool) -> bool:
    """Whether vLLM overlaps the host under ``--async-scheduling`` for a deployment drafting
    with ``draft`` (a model's name, a head, or "ngram") when ``speculative`` (it has a
    speculative config): always without one; with one, for every drafter but those vLLM runs
    on the host (:data:`HOST_DRAFTS`, module docstring)."""
    return not speculative or str(draft).lower() not in HOST_DRAFTS


@dataclass(frozen=True)
class AsyncSetting:
    """How one run's ``async_scheduling`` resolved (:func:`resolve_async`): ``asked`` as given
    ("auto", "true" or "false"), whether the host overlaps the pass (``on``), and why."""

    asked: str
    on: bool
    why: str

    def __str__(self) -> str:
        """``auto -> on (vLLM default without a speculative config)``."""
        return f"{self.asked} -> {'on' if self.on else 'off'} ({self.why})"


def resolve_async(asked: bool | str, draft: str, speculative: bool,
                  async_engine: bool = True) -> AsyncSetting:
    """``async_scheduling = asked`` ("auto", True or False) for one deployment drafting with
    ``draft`` when ``speculative`` (it has a speculative config: not ``ar``), on an engine
    that has vLLM V1's async scheduler (``async_engine``; vllm-v0 has none): vLLM's
    ``VllmConfig.__post_init__`` for the flag unset ("auto"), given (True) or
    ``--no-async-scheduling`` (False); module docstring."""
    if asked is False:
        return AsyncSetting("false", False, "set false: synchronous steps")
    host = speculative and not async_applies(draft, speculative)
    if asked is True:
        if host:
            return AsyncSetting("true", False, f"dropped for draft {draft}: vLLM runs the CPU "
                                "n-gram proposer only synchronously and refuses the flag")
        return AsyncSetting("true", True, "set true")
    if asked != AUTO:
        raise ValueError(f"async_scheduling: expected auto, true or false, got {asked!r}")
    if not async_engine:
        return AsyncSetting(AUTO, False, "vllm-v0: vLLM's V0 engine has no async scheduler")
    if not speculative:
        return AsyncSetting(AUTO, True, "vLLM default without a speculative config")
    if host:
        return AsyncSetting(AUTO, False, f"vLLM default for draft {draft}: off for the CPU "
                            "n-gram proposer")
    if str(draft).lower() in HEAD_DRAFTS:
        return AsyncSetting(AUTO, True, "vLLM default for an EAGLE/MTP head since vLLM 0.14")
    return AsyncSetting(AUTO, True, "vLLM default for a draft model since vLLM PR 48341")


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
