"""The step composers (simulator.engine.composers): one interface, one table row per scheduler.

The event loop calls only ``step(rep, time)``; the configured scheduler's row of
:data:`COMPOSERS` decides which class's ``step`` that is, so a composer registered there is
what runs, and an unknown scheduler is a one-line error naming ``scheduler``.
"""

from __future__ import annotations

import inspect

import pytest

from specbatch.errors import SpecbatchError
from specbatch.simulator.config.sim_config import SCHEDULERS
from specbatch.simulator.engine.composers import COMPOSERS, StepComposer, composer_for
from specbatch.simulator.engine.state import EngineState
from specbatch.simulator.engine.v0 import V0Step
from specbatch.simulator.engine.v1.step import V1Step
from tests.simulator.engine.test_state import small_engine


def test_the_table_has_one_row_per_configurable_scheduler():
    assert tuple(COMPOSERS) == SCHEDULERS
    assert COMPOSERS == {"vllm-v1": V1Step, "vllm-v0": V0Step}


@pytest.mark.parametrize("composer", list(COMPOSERS.values()), ids=lambda c: c.__name__)
def test_each_composer_is_an_engine_part_with_the_interface_s_step(composer):
    assert issubclass(composer, EngineState)
    want = inspect.signature(StepComposer.step)
    got = inspect.signature(composer.step)
    assert list(got.parameters) == list(want.parameters) == ["self", "rep", "time"]
    assert isinstance(composer.prefix_caching, bool)


@pytest.mark.parametrize("scheduler", SCHEDULERS)
def test_the_engine_binds_its_scheduler_s_composer(scheduler):
    engine = small_engine(scheduler=scheduler)
    assert engine.step.__func__ is COMPOSERS[scheduler].step
    assert engine.step.__self__ is engine


@pytest.mark.parametrize("scheduler", SCHEDULERS)
def test_only_a_composer_that_caches_prefixes_gets_a_prefix_cache(scheduler):
    engine = small_engine(scheduler=scheduler, kv_mode="paged", kv_capacity=64, block_size=4)
    has_cache = engine.replicas[0].prefix is not None
    assert has_cache == COMPOSERS[scheduler].prefix_caching == (scheduler == "vllm-v1")


def test_an_unknown_scheduler_is_a_one_line_error_naming_scheduler():
    with pytest.raises(SpecbatchError) as err:
        composer_for("vllm-v2")
    assert str(err.value) == ("config: field scheduler: expected one of vllm-v1, vllm-v0, "
                              "got 'vllm-v2'")


class CountingV0(V0Step):
    """A composer registered in place of vllm-v0's: the same step, counted."""

    calls = 0

    def step(self, rep, time):
        CountingV0.calls += 1
        return V0Step.step(self, rep, time)


def test_the_table_row_is_what_runs(monkeypatch):
    """Registering a composer under a scheduler's name makes the engine call it for every
    step start, and only it: the records equal the registered class's parent's."""
    plain = small_engine(scheduler="vllm-v0").run()
    monkeypatch.setitem(COMPOSERS, "vllm-v0", CountingV0)
    CountingV0.calls = 0
    counted = small_engine(scheduler="vllm-v0").run()
    steps = len(counted.step_rows)
    assert steps == len(plain.step_rows) > 0
    assert CountingV0.calls >= steps  # each step's start (a start may find nothing to run)
    assert counted.finish.tolist() == plain.finish.tolist()
