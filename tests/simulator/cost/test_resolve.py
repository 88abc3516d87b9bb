"""cost = "auto" (simulator.cost.resolve): the best validated source covering the request."""

import pytest

from specbatch.simulator.config.sim_config import COSTS
from specbatch.simulator.cost import resolve
from specbatch.simulator.cost.registry import COST_NAMES, build_cost_model
from specbatch.simulator.cost.resolve import CostAsk, CostChoice, resolve_cost


def test_the_config_offers_every_registry_name():
    assert set(COSTS) == set(COST_NAMES)


def test_a_named_cost_is_taken_as_asked():
    choice = resolve_cost("Roofline", CostAsk("rtx4090", "llama-3.1-8b", "vicuna-68m"))
    assert choice == CostChoice("roofline", "roofline")
    assert choice.line() == "roofline" and not choice.fallback


def test_auto_walks_the_catalogue_and_says_why_it_passed_rows(monkeypatch):
    rows = (resolve.SourceRow("first", "-", lambda ask: "no table of " + ask.hardware),
            resolve.SourceRow("calibrated", "-", resolve.calibrated_covers),
            resolve.SourceRow("roofline", "-", lambda ask: None))
    monkeypatch.setattr(resolve, "SOURCES", rows)
    own = resolve_cost("auto", CostAsk("rtx4090", "llama-3.1-8b", "vicuna-68m"))
    assert own == CostChoice("auto", "calibrated", ("first: no table of rtx4090",))
    assert own.line() == "auto -> calibrated (first: no table of rtx4090)"
    # l40s has no profile of its own: it borrows the a40's laws, so the roofline prices it
    borrowed = resolve_cost("auto", CostAsk("l40s", "llama-3.1-8b", "vicuna-68m"))
    assert borrowed.name == "roofline" and borrowed.fallback
    assert borrowed.passed[1] == "calibrated: no measured profile of l40s (it borrows a40's laws)"
    assert borrowed.line().startswith("auto -> roofline (fallback: first: no table of l40s; ")


def test_auto_builds_the_model_it_resolves_to(monkeypatch):
    monkeypatch.setattr(resolve, "SOURCES", (resolve.SOURCES[-2], resolve.SOURCES[-1]))
    auto = build_cost_model("auto", "rtx4090", "llama-3.1-8b", "vicuna-68m")
    named = build_cost_model("calibrated", "rtx4090", "llama-3.1-8b", "vicuna-68m")
    assert type(auto) is type(named) and auto == named


def test_an_unknown_name_lists_auto_among_the_choices():
    from specbatch.errors import SpecbatchError

    with pytest.raises(SpecbatchError, match="expected one of auto, roofline"):
        build_cost_model("fast", "h100", "vicuna-33b", "vicuna-68m")
