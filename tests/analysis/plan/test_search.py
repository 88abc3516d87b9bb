"""Skipping what the lower bounds rule out, and stopping runs early once their verdict is
certain, change nothing in the answer: the pruned search and the exhaustive one choose the
same configuration with the same numbers, draw the same frontier, search the same levels,
and every run both simulate whole is identical; a run the pruned search stopped fails in
the exhaustive one, no faster than the stopped run's lower bounds; what the pruned search
skipped is, in the exhaustive one, failing ("cannot pass") or neither the choice nor on the
frontier ("cannot beat the frontier")."""

from __future__ import annotations

import pytest

from specbatch.analysis.plan.planner import Question, run_plan
from specbatch.analysis.plan.slo import Slos
from specbatch.analysis.plan.space import Space
from specbatch.simulator.workload.lengths import parse_lengths

BASE = {"trace": "default", "requests": 10, "arrival": "poisson", "rate": 4.0,
        "target": "vicuna-33b", "draft": "vicuna-68m", "max_num_seqs": 64, "kv_mode": "paged",
        "gpu_memory_utilization": 0.9, "seed": 0}


def both(tmp_path, **question) -> tuple[dict, dict]:
    reports = []
    for prune in (True, False):
        q = Question(**question, prune=prune)
        reports.append(run_plan(q, tmp_path / f"prune-{prune}", workers=1))
    return tuple(reports)


def without_paths(choice: dict) -> dict:
    return {k: v for k, v in choice.items() if k not in ("config", "simulate")}


def assert_same_answer(pruned: dict, full: dict) -> None:
    assert without_paths(pruned["choice"]) == without_paths(full["choice"])
    assert pruned["pareto"] == full["pareto"]
    assert pruned["searched"]["levels"] == full["searched"]["levels"]
    assert pruned["acceptance"] == full["acceptance"]
    every = {c["label"]: c for c in full["configurations"]}
    for c in pruned["configurations"]:  # a run both simulate has the same numbers
        whole = every[c["label"]]
        if "stopped_at" not in c:
            assert whole == c
            continue
        assert not c["passed"] and not whole["passed"], (c, whole)
        for name in ("ttft", "tpot", "e2e"):  # the stopped run's latencies bound the run's
            assert c[name] <= whole[name], (name, c, whole)
        assert whole["preemptions"] >= c["preemptions"]
    frontier = {p["label"] for p in full["pareto"]} | {full["choice"]["label"]}
    for s in pruned["skipped"]:
        assert s["label"] not in frontier
        if s["reason"].startswith("cannot pass"):
            assert not every[s["label"]]["passed"], s
    rejected = {r["deployment"] for r in full["rejected"]}
    assert {r["deployment"] for r in pruned["rejected"]} <= rejected


def test_the_pruned_plan_is_the_exhaustive_plan(tmp_path):
    # tight TPOT: one GPU's settings cannot pass at all; two GPUs' slower settings cannot
    # beat the first passing one
    pruned, full = both(tmp_path, base=BASE, slos=Slos(tpot=0.02),
                        space=Space(tp=(1, 2), max_gpus=3, k=(2,), extra=(1,)),
                        lengths=(parse_lengths("fixed:200", "p"), parse_lengths("fixed:20", "o")))
    reasons = [s["reason"] for s in pruned["skipped"]]
    assert any(r.startswith("cannot pass") for r in reasons)
    assert any(r.startswith("cannot beat the frontier") for r in reasons)
    assert pruned["searched"]["runs"] < full["searched"]["runs"]
    assert pruned["searched"]["stopped"] > 0 and full["searched"]["stopped"] == 0
    assert_same_answer(pruned, full)


def test_the_pruned_plan_is_the_exhaustive_plan_under_the_calibrated_cost(tmp_path):
    # the planner's default cost model: its floor is its PassTable's (analysis.plan.pass_floor)
    pruned, full = both(tmp_path, base={**BASE, "cost": "calibrated"}, slos=Slos(tpot=0.02),
                        space=Space(tp=(1, 2), max_gpus=3, k=(2,), extra=(1,)),
                        lengths=(parse_lengths("fixed:200", "p"), parse_lengths("fixed:20", "o")))
    reasons = [s["reason"] for s in pruned["skipped"]]
    assert any(r.startswith("cannot pass") for r in reasons)
    assert any(r.startswith("cannot beat the frontier") for r in reasons)
    assert pruned["searched"]["runs"] < full["searched"]["runs"]
    assert_same_answer(pruned, full)


@pytest.mark.parametrize("cost", ["aic", pytest.param("auto", marks=pytest.mark.slow)])
def test_the_pruned_plan_is_the_exhaustive_plan_under_the_aic_cost(tmp_path, cost):
    # AIConfigurator's measured curves (auto picks them on h100): the bound is the floor of
    # their PassTable (analysis.plan.pass_floor), and it skips runs here too
    pruned, full = both(tmp_path, base={**BASE, "cost": cost}, slos=Slos(tpot=0.02),
                        space=Space(tp=(1, 2), max_gpus=3, k=(2,), extra=(1,)),
                        lengths=(parse_lengths("fixed:200", "p"), parse_lengths("fixed:20", "o")))
    reasons = [s["reason"] for s in pruned["skipped"]]
    assert any(r.startswith("cannot pass") for r in reasons)
    assert pruned["searched"]["runs"] < full["searched"]["runs"]
    assert_same_answer(pruned, full)


@pytest.mark.slow
def test_the_pruned_plan_is_the_exhaustive_plan_on_four_gpus_and_a_band(tmp_path):
    pruned, full = both(tmp_path, base={**BASE, "requests": 24}, slos=Slos(tpot=0.02),
                        space=Space(tp=(1, 2, 4), max_gpus=4, k=(1, 3), extra=(1,)),
                        band=(0.5, 0.9),
                        lengths=(parse_lengths("fixed:200", "p"), parse_lengths("fixed:40", "o")))
    assert pruned["searched"]["skipped"] > 0
    assert_same_answer(pruned, full)
    assert pruned["acceptance_band"] == full["acceptance_band"]


def test_a_rerun_exhaustive_into_the_same_folder_reuses_the_pruned_runs(tmp_path):
    question = {"base": BASE, "slos": Slos(tpot=0.02),
                "space": Space(tp=(2,), max_gpus=2, policies=("ar", "fixed"), k=(2,)),
                "lengths": (parse_lengths("fixed:100", "p"), parse_lengths("fixed:10", "o"))}
    first = run_plan(Question(**question), tmp_path / "p", workers=1)
    again = run_plan(Question(**question, prune=False), tmp_path / "p", workers=1)
    assert again["searched"]["reused"] == first["searched"]["runs"]
    assert again["searched"]["computed"] == again["searched"]["runs"] - first["searched"]["runs"]


def test_a_shared_cost_model_prices_a_run_as_a_fresh_one():
    # the planner prices every run of a deployment with one model (analysis.plan.cost_source), whose
    # lazy tables other runs have filled: the run is bit-identical to one on a fresh model
    from specbatch.analysis.plan.cost_source import shared_cost
    from specbatch.analysis.sweep.executors import _cached_trace
    from specbatch.simulator.config.sim_config import make_config
    from specbatch.simulator.run import build_cost, simulate

    fields = {**BASE, "cost": "calibrated", "tp": 2, "requests": 12}
    first = make_config({**fields, "policy": "ar"})
    config = make_config({**fields, "policy": "fixed", "num_speculative_tokens": 3,
                          "verify": "block"})
    trace = _cached_trace(config)
    simulate(first, trace, cost_model=shared_cost(first))
    shared = simulate(config, trace, cost_model=shared_cost(config))
    fresh = simulate(config, trace, cost_model=build_cost(config))
    assert shared_cost(config) is shared_cost(first)
    assert shared.requests.equals(fresh.requests) and shared.steps.equals(fresh.steps)
