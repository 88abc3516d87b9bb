"""The scheduler catalogue (simulator.config.schedulers) is the one home of a scheduler's identity.

Every list of schedulers is derived from its rows (the ``scheduler`` field's choices, the live
loop's), no module of simulator/, analysis/ or live/ tests a scheduler by name, a row's
composer is what the engine runs, and what a row does not support is refused naming the field.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
from pathlib import Path

import pytest

from specbatch.errors import SpecbatchError
from specbatch.live.config import SCHEDULERS as LIVE_SCHEDULERS
from specbatch.simulator.config import schedulers
from specbatch.simulator.config.field_values import SCHEDULERS
from specbatch.simulator.config.schedulers import (
    BY_NAME,
    CATALOGUE,
    SCHEDULING_POLICIES,
    names,
    scheduler_entry,
)
from specbatch.simulator.config.sim_config import load_config
from specbatch.simulator.defaults import V1_DEFAULT_BATCHED_TOKENS
from specbatch.simulator.engine.composers import StepComposer

ROOT = Path(__file__).resolve().parents[3]


def test_every_list_of_schedulers_is_the_catalogue_s():
    assert SCHEDULERS == names() == tuple(row.name for row in CATALOGUE) == ("vllm-v1", "vllm-v0")
    assert LIVE_SCHEDULERS == names(live=True)
    assert set(BY_NAME) == set(SCHEDULERS)


def test_no_module_tests_a_scheduler_by_name_outside_the_catalogue():
    """``grep -rn 'scheduler ==' simulator analysis live`` finds only the catalogue."""
    pattern = re.compile(r"scheduler\s*[!=]=")
    found = [f"{path.relative_to(ROOT)}:{i}" for folder in ("simulator", "analysis", "live")
             for path in sorted((ROOT / folder).rglob("*.py"))
             if path != Path(schedulers.__file__)
             for i, line in enumerate(path.read_text().splitlines(), 1) if pattern.search(line)]
    assert found == []


@pytest.mark.parametrize("row", CATALOGUE, ids=lambda row: row.name)
def test_each_row_names_a_composer_with_the_interface_s_step(row):
    composer = row.load()
    want = inspect.signature(StepComposer.step)
    assert list(inspect.signature(composer.step).parameters) == list(want.parameters)
    assert row.admission[0] == "fcfs" and set(row.admission) <= set(SCHEDULING_POLICIES)


@pytest.mark.parametrize("name, chunked, budget", [("vllm-v1", True, V1_DEFAULT_BATCHED_TOKENS),
                                                    ("vllm-v0", False, None)])
def test_the_defaults_of_a_scheduler_come_from_its_row(name, chunked, budget):
    config = load_config(None, scheduler=name)
    assert config.scheduler_row is BY_NAME[name]
    assert config.chunked is chunked and config.token_budget == budget


def test_an_unknown_scheduler_is_a_one_line_error_naming_scheduler():
    with pytest.raises(SpecbatchError) as err:
        scheduler_entry("vllm-v2")
    assert str(err.value) == ("config: field scheduler: expected one of vllm-v1, vllm-v0, "
                              "got 'vllm-v2'")


@pytest.mark.parametrize("lacks, settings, field", [
    ("paged_kv", {"kv_mode": "paged"}, "kv_mode"),
    ("chunked_prefill", {"enable_chunked_prefill": True, "max_num_batched_tokens": 64},
     "enable_chunked_prefill"),
    ("trees", {"verify": "specinfer", "policy": "static-tree"}, "verify"),
    ("admission", {"scheduling_policy": "priority"}, "scheduling_policy"),
])
def test_what_a_row_does_not_support_is_refused_naming_the_field(monkeypatch, lacks, settings,
                                                                 field):
    """A row without a support (a future compiled composer, say) refuses the config that asks
    for it, naming the field; the same config runs under the built-in row."""
    load_config(None, scheduler="vllm-v0", **settings)
    value = ("fcfs",) if lacks == "admission" else False
    monkeypatch.setitem(BY_NAME, "vllm-v0", dataclasses.replace(BY_NAME["vllm-v0"],
                                                                **{lacks: value}))
    with pytest.raises(SpecbatchError, match=f"field {field}: expected .* under scheduler "
                       "vllm-v0"):
        load_config(None, scheduler="vllm-v0", **settings)


def test_a_chunked_scheduler_without_a_budget_is_refused():
    with pytest.raises(SpecbatchError, match="field max_num_batched_tokens: expected a token "
                       "budget when enable_chunked_prefill is set"):
        load_config(None, scheduler="vllm-v0", enable_chunked_prefill=True)
