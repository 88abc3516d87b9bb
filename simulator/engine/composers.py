"""The step composers' one interface: what the event loop calls to run a replica's step.

A composer decides which requests a replica's next step runs and with how many tokens, then
runs it: ``vllm-v1`` (simulator.engine.v1.step: one token budget per step, mixed steps,
vLLM V1's ``Scheduler.schedule``) and ``vllm-v0`` (simulator.engine.v0: prefill-only or decode
steps, vLLM V0's scheduler). The event loop (simulator.engine.core) knows only
:class:`StepComposer`: ``step(rep, time, held)`` runs replica ``rep``'s step starting at
``time`` and returns its duration in seconds, or None when nothing runs (the replica idles
until an arrival wakes it). ``held`` slots of ``max_num_seqs`` are still taken by the requests
the step in flight finished: under vLLM's async scheduling (simulator.engine.async_lag,
vllm-v1 only) the lag passes them; it is 0 everywhere else.

Which composer a scheduler uses, and what it supports, is its row of the scheduler catalogue
(simulator.config.schedulers: ``SchedulerEntry.composer``, loaded by the engine). A third
scheduler is one module with its composer class plus one row there.
"""

from __future__ import annotations

from typing import Protocol

from specbatch.simulator.engine.request_state import Replica


class StepComposer(Protocol):
    """What the event loop calls (module docstring)."""

    def step(self, rep: Replica, time: float, held: int = 0) -> float | None:
        """Run ``rep``'s next step from ``time`` with ``held`` slots taken; its duration, or
        None (nothing runs)."""
