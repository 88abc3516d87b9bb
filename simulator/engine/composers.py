"""The step composers, one per scheduler: what the event loop calls to run a replica's step.

A composer decides which requests a replica's next step runs and with how many tokens, then
runs it: ``vllm-v1`` (simulator.engine.v1.step: one token budget per step, mixed steps,
vLLM V1's ``Scheduler.schedule``) and ``vllm-v0`` (simulator.engine.v0: prefill-only or decode
steps, vLLM V0's scheduler). The event loop (simulator.engine.core) knows only
:class:`StepComposer`: ``step(rep, time)`` runs replica ``rep``'s step starting at ``time`` and
returns its duration in seconds, or None when nothing runs (the replica idles until an
arrival wakes it).

A composer is a part of the engine (a subclass of simulator.engine.state.EngineState whose
methods run on the engine object, reading its declared state); ``Engine.__init__`` binds the
configured scheduler's ``step`` from :data:`COMPOSERS`. A third scheduler is one module with
its composer class plus one row here (and its name in
simulator.config.sim_config.SCHEDULERS, which a test keeps equal to these rows).
"""

from __future__ import annotations

from typing import ClassVar, Protocol

from specbatch.fields import fail
from specbatch.simulator.engine.request_state import Replica
from specbatch.simulator.engine.state import EngineState
from specbatch.simulator.engine.v0 import V0Step
from specbatch.simulator.engine.v1.step import V1Step


class StepComposer(Protocol):
    """What the event loop calls (module docstring), and what the engine's ``__init__`` asks
    its composer class."""

    #: whether the scheduler keeps vLLM's prefix cache in paged mode (``enable_prefix_caching``)
    prefix_caching: ClassVar[bool]

    def step(self, rep: Replica, time: float) -> float | None:
        """Run ``rep``'s next step from ``time``; its duration, or None (nothing runs)."""


#: ``config.scheduler`` -> its composer class (a part of the engine).
COMPOSERS: dict[str, type[EngineState]] = {
    "vllm-v1": V1Step,
    "vllm-v0": V0Step,
}


def composer_for(scheduler: str) -> type[EngineState]:
    """The composer class of ``scheduler``; one-line SpecbatchError naming ``scheduler``
    when there is none."""
    composer = COMPOSERS.get(scheduler)
    if composer is None:
        fail("config", "scheduler", f"one of {', '.join(COMPOSERS)}", scheduler)
    return composer
