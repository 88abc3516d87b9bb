"""The scheduler catalogue: one row per step composer, the single place its identity is written.

Every former name list and ``scheduler == "vllm-v1"`` test is derived from :data:`CATALOGUE`:
the ``scheduler`` field's choices (simulator.config.field_values.SCHEDULERS), its defaults
(``enable_chunked_prefill``, ``max_num_batched_tokens``), the checks a configuration must
pass (simulator.config.checks, simulator.run), the composer object the engine holds
(simulator.engine.core builds :meth:`SchedulerEntry.load`'s class), whether the prefix cache and
vLLM's hybrid KV cache manager exist under it (simulator.engine.core, simulator.engine.kv), the
planner's closed-form bound (analysis.plan.bound) and the live loop's schedulers
(live.config). A new scheduler (a compiled vllm-v1 loop, say) is one composer class plus one
row here; what it does not support is refused by
:func:`simulator.config.checks.check_scheduler_supports` with a one-line error naming the field,
never run wrong.

The module imports nothing of the engine (a row names its composer as ``module:Class``,
imported when the engine is built), so the configuration modules and ``--help`` read it
without loading numpy.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

from specbatch.fields import fail
from specbatch.simulator.defaults import V1_DEFAULT_BATCHED_TOKENS

#: Admission orders of the waiting queue (``scheduling_policy``), as vLLM's
#: ``SchedulingPolicy`` (vllm/v1/core/sched/request_queue.py): "fcfs" in arrival order,
#: "priority" by (priority, arrival time, uid), smaller priority first
#: (simulator.engine.admission.waiting_queue).
SCHEDULING_POLICIES = ("fcfs", "priority")


@dataclass(frozen=True)
class SchedulerEntry:
    """One step composer.

    name:            its public name (``scheduler`` field, ``--scheduler``)
    composer:        ``module:Class`` of its composer (simulator.engine.composers.StepComposer),
                     built by the engine with the engine as its one argument
    admission:       the ``scheduling_policy`` values it admits by (the first is the default)
    mixed_steps:     one token budget per step, spent on the running requests first and then
                     on waiting prompt chunks in the same step (vLLM V1); else prefill-only
                     steps beside decode steps (vLLM V0)
    chunks_prompts:  ``enable_chunked_prefill``'s value when unset
    default_budget:  ``max_num_batched_tokens``'s value when unset (None: unlimited)
    chunked_prefill: whether it can chunk prompts at all (``enable_chunked_prefill = true``)
    paged_kv:        whether it runs ``kv_mode = "paged"`` (blocks, preemption by recompute)
    prefix_caching:  whether paged mode keeps vLLM's prefix cache (``enable_prefix_caching``;
                     ignored, as vLLM V0 did, where False)
    hybrid_kv:       whether it has vLLM's hybrid KV cache manager (sliding-window groups)
    trees:           whether it runs tree verification rules (simulator.replay.rules)
    dp_lockstep:     whether an MoE model's data-parallel ranks can step in lockstep under it
                     (simulator.engine.lockstep)
    live:            whether the live loop composes its steps this way (live.loop)
    compiled:        whether the numba loop (simulator.engine.v1.compiled) runs its steps, for
                     the runs it covers (its ``compiled_gap`` names the rest)
    async_engine:    whether the engine it models has vLLM V1's async scheduler
                     (vllm/v1/core/sched/async_scheduler.py), which ``async_scheduling =
                     "auto"`` turns on as vLLM does (simulator.cost.features.async_overhead)
    """

    name: str
    composer: str
    admission: tuple[str, ...] = ("fcfs",)
    mixed_steps: bool = False
    chunks_prompts: bool = False
    default_budget: int | None = None
    chunked_prefill: bool = True
    paged_kv: bool = True
    prefix_caching: bool = False
    hybrid_kv: bool = False
    trees: bool = True
    dp_lockstep: bool = True
    live: bool = False
    compiled: bool = False
    async_engine: bool = False

    def load(self) -> type:
        """The composer class this row names (imports its module)."""
        module, cls = self.composer.split(":")
        return getattr(importlib.import_module(module), cls)


#: The built-in schedulers; the first is the default.
CATALOGUE: tuple[SchedulerEntry, ...] = (
    SchedulerEntry(
        name="vllm-v1", composer="specbatch.simulator.engine.v1.step:V1Step",
        admission=SCHEDULING_POLICIES, mixed_steps=True, chunks_prompts=True,
        default_budget=V1_DEFAULT_BATCHED_TOKENS, prefix_caching=True, hybrid_kv=True,
        live=True, compiled=True, async_engine=True),
    SchedulerEntry(
        name="vllm-v0", composer="specbatch.simulator.engine.v0:V0Step",
        admission=SCHEDULING_POLICIES, live=True),
)

#: Each row by name.
BY_NAME: dict[str, SchedulerEntry] = {row.name: row for row in CATALOGUE}


def names(**want: Any) -> tuple[str, ...]:
    """The names of the rows whose fields equal ``want`` (all rows without arguments), in
    catalogue order: ``names(live=True)`` is the live loop's schedulers."""
    return tuple(row.name for row in CATALOGUE
                 if all(getattr(row, key) == value for key, value in want.items()))


def scheduler_entry(name: str) -> SchedulerEntry:
    """The row of ``name``; a one-line SpecbatchError naming ``scheduler`` when there is none."""
    row = BY_NAME.get(name)
    if row is None:
        fail("config", "scheduler", f"one of {', '.join(BY_NAME)}", name)
    return row
