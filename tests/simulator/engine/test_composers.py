"""The step composers (simulator.engine.composers): one interface, one catalogue row per scheduler.

The event loop calls only ``step(rep, time)``; the configured scheduler's row of the scheduler
catalogue (simulator.config.schedulers) decides which composer that is, so a composer
registered there is what runs.
"""

from __future__ import annotations

import dataclasses

import pytest

from specbatch.simulator.config.field_values import SCHEDULERS
from specbatch.simulator.config.schedulers import BY_NAME
from specbatch.simulator.engine.state import EnginePart
from specbatch.simulator.engine.v0 import V0Step
from tests.simulator.engine.test_state import small_engine


@pytest.mark.parametrize("scheduler", SCHEDULERS)
def test_each_composer_is_an_engine_part(scheduler):
    assert issubclass(BY_NAME[scheduler].load(), EnginePart)


@pytest.mark.parametrize("scheduler", SCHEDULERS)
def test_the_engine_holds_its_scheduler_row_s_composer(scheduler):
    engine = small_engine(scheduler=scheduler)
    assert type(engine.composer) is BY_NAME[scheduler].load()
    assert not hasattr(engine, "step")  # one composer object, no method bound per engine


@pytest.mark.parametrize("scheduler", SCHEDULERS)
def test_only_a_composer_that_caches_prefixes_gets_a_prefix_cache(scheduler):
    engine = small_engine(scheduler=scheduler, kv_mode="paged", kv_capacity=64, block_size=4)
    has_cache = engine.replicas[0].prefix is not None
    assert has_cache == BY_NAME[scheduler].prefix_caching == (scheduler == "vllm-v1")


class CountingV0(V0Step):
    """A composer registered in place of vllm-v0's: the same step, counted."""

    calls = 0

    def step(self, rep, time):
        CountingV0.calls += 1
        return V0Step.step(self, rep, time)


def test_the_catalogue_row_is_what_runs(monkeypatch):
    """Registering a composer in a scheduler's row makes the engine call it for every step
    start, and only it: the records equal the registered class's parent's."""
    plain = small_engine(scheduler="vllm-v0").run()
    row = dataclasses.replace(BY_NAME["vllm-v0"], composer=f"{__name__}:CountingV0")
    monkeypatch.setitem(BY_NAME, "vllm-v0", row)
    CountingV0.calls = 0
    counted = small_engine(scheduler="vllm-v0").run()
    steps = len(counted.step_rows)
    assert steps == len(plain.step_rows) > 0
    assert CountingV0.calls >= steps  # each step's start (a start may find nothing to run)
    assert counted.finish.tolist() == plain.finish.tolist()
