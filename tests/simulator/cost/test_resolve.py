"""cost = "auto" (simulator.cost.resolve): the best validated source covering the request."""

import pytest

from specbatch.simulator.config.field_values import COSTS
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
            resolve.SourceRow("calibrated", "-", lambda ask: resolve.own_profiles(ask, "vidur")),
            resolve.SourceRow("roofline", "-", lambda ask: None))
    monkeypatch.setattr(resolve, "SOURCES", rows)
    own = resolve_cost("auto", CostAsk("a100", "vicuna-7b", "vicuna-68m"))
    assert own == CostChoice("auto", "calibrated", ("first: no table of a100",))
    assert own.line() == "auto -> calibrated (first: no table of a100)"
    # l40s has no profile of its own: it borrows the a40's laws, so the roofline prices it
    borrowed = resolve_cost("auto", CostAsk("l40s", "llama-3.1-8b", "vicuna-68m"))
    assert borrowed.name == "roofline" and borrowed.fallback
    assert borrowed.passed[1] == "calibrated: no vidur profile of l40s (it borrows a40's laws)"
    assert borrowed.line().startswith("auto -> roofline (fallback: first: no table of l40s; ")


@pytest.mark.parametrize("hardware, target, draft, ran", [
    ("rtxpro6000", "llama-3.1-8b", "eagle3", "calibrated"),  # its own vLLM layer profiles
    ("rtx4090", "llama-3.1-8b", "llama-3.2-1b", "calibrated"),
    ("h100", "vicuna-33b", "vicuna-68m", "aic"),  # AIConfigurator's H100 tables
    ("b200", "llama-3.1-70b", "llama-3.2-1b", "aic"),
    ("a100", "vicuna-7b", "vicuna-68m", "calibrated"),  # no A100 attention rows at width 64
    ("h100", "gemma-3-270m", "gemma-3-270m", "aic"),  # sliding windows: the law's shares
    ("h100", "meta-llama/Llama-4-Scout-17B-16E-Instruct", "llama-3.2-1b", "aic"),
    # width 64 from the FA2 rows forward-filled from 0.24.0 (aic_curves.SAME_KERNEL)
    ("l40s", "vicuna-7b", "vicuna-68m", "aic"),
    ("rtxpro6000", "deepseek-v3", "mtp", "aic"),  # MLA: AIConfigurator's module rows (aic_mla)
])
def test_the_catalogue_picks_the_best_validated_source(hardware, target, draft, ran):
    choice = resolve_cost("auto", CostAsk(hardware, target, draft))
    assert choice.name == ran
    assert choice.fallback == (ran == "roofline")


def test_gb200_is_priced_by_aic_where_its_all_reduce_is_timed_and_falls_back_past_it():
    # AIConfigurator's GB200 all-reduce table times 2 and 4 GPUs (one compute tray, its
    # gb200.yaml: num_gpus_per_node 4): tp 8 is refused by aic in one line, not extrapolated
    for tp in (1, 2, 4):
        assert resolve_cost("auto", CostAsk("gb200", "llama-3.1-70b", "llama-3.2-1b",
                                            tp=tp)).name == "aic"
    tp8 = resolve_cost("auto", CostAsk("gb200", "llama-3.1-70b", "llama-3.2-1b", tp=8))
    assert tp8.fallback
    assert "aic: target llama-3.1-70b: no all-reduce curve of 8 GPUs on gb200" in tp8.passed


def test_auto_builds_the_model_it_resolves_to():
    auto = build_cost_model("auto", "rtx4090", "llama-3.1-8b", "vicuna-68m")
    named = build_cost_model("calibrated", "rtx4090", "llama-3.1-8b", "vicuna-68m")
    assert type(auto) is type(named) and auto == named


def test_an_unknown_name_lists_auto_among_the_choices():
    from specbatch.errors import SpecbatchError

    with pytest.raises(SpecbatchError, match="expected one of auto, roofline"):
        build_cost_model("fast", "h100", "vicuna-33b", "vicuna-68m")


def test_auto_prices_dp_and_expert_parallel_with_aic_where_an_ep_row_times_the_rank():
    # H100: AIConfigurator times Qwen3-30B-A3B's experts at (tp 1, ep 2), not ep 3; the
    # RTX PRO 6000 keeps its LLMServingSim profile (calibrated) first
    ep = dict(expert_parallel=True)
    two = resolve_cost("auto", CostAsk("h100", "qwen3-30b-a3b", "vicuna-68m", **ep,
                                       data_parallel=2))
    assert two.name == "aic"
    three = resolve_cost("auto", CostAsk("h100", "qwen3-30b-a3b", "vicuna-68m", **ep,
                                         data_parallel=3))
    assert three.name == "roofline"
    assert any(p.startswith("aic: ") and "(2048, 768, 128, 8, 1, 3)" in p for p in three.passed)
    pro = resolve_cost("auto", CostAsk("rtxpro6000", "qwen3-30b-a3b", "vicuna-68m", **ep,
                                       data_parallel=2))
    assert pro.name == "calibrated"
