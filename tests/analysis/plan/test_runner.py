"""The planner's runner (analysis.plan.runner): a run, whole or early-stopped, under ``engine =
"auto"`` tries the compiled loop first at any size (the kernel's load is paid once per
process), falls back to auto's engine where the loop does not cover the run, and returns what
the numpy engine would, bit for bit."""

from __future__ import annotations

import pytest

from specbatch.analysis.plan.runner import compiled_first, simulate_point
from specbatch.simulator.config.sim_config import make_config
from specbatch.simulator.engine.v1.compiled import numba_installed
from specbatch.simulator.metrics import frame

BASE = {"trace": "default", "requests": 12, "arrival": "poisson", "rate": 4.0,
        "target": "vicuna-33b", "draft": "vicuna-68m", "max_num_seqs": 64, "kv_mode": "paged",
        "cost": "calibrated", "policy": "fixed", "num_speculative_tokens": 2, "seed": 0}


def test_only_auto_with_numba_tries_the_compiled_loop_first():
    assert compiled_first(make_config(BASE)) == numba_installed()
    assert not compiled_first(make_config({**BASE, "engine": "numpy"}))


@pytest.mark.skipif(not numba_installed(), reason="numba not installed (the fast extra)")
def test_a_whole_run_is_compiled_and_equals_the_numpy_run():
    summary, requests = simulate_point(dict(BASE))
    numpy_summary, numpy_requests = simulate_point({**BASE, "engine": "numpy"})
    assert (summary["engine_ran"], numpy_summary["engine_ran"]) == ("compiled", "numpy")
    assert frame(requests).equals(frame(numpy_requests))
    assert {k: v for k, v in summary.items() if k != "engine_ran"} == {
        k: v for k, v in numpy_summary.items() if k != "engine_ran"}


@pytest.mark.skipif(not numba_installed(), reason="numba not installed (the fast extra)")
def test_a_run_the_loop_does_not_cover_falls_back_to_numpy():
    # sliding-window layers: the calibrated model has no PassTable for them
    summary, _ = simulate_point({**BASE, "target": "gemma-3-270m", "draft": "gemma-3-270m"})
    assert summary["engine_ran"] == "numpy"


@pytest.mark.skipif(not numba_installed(), reason="numba not installed (the fast extra)")
@pytest.mark.parametrize("tpot", [0.001, 10.0])  # a rule that stops, one that never does
def test_an_early_stopped_run_is_compiled_and_equals_the_numpy_run(monkeypatch, tpot):
    from specbatch.analysis.plan.runner import STOP_FIELD
    from specbatch.analysis.plan.slo import Slos, StopRule
    from specbatch.simulator.engine.v1 import driver

    ran = []
    real = driver.CompiledEngine.run
    monkeypatch.setattr(driver.CompiledEngine, "run", lambda self: ran.append(1) or real(self))
    rule = StopRule(Slos(tpot=tpot))
    summary, requests = simulate_point({**BASE, STOP_FIELD: rule})
    assert ran == [1]
    numpy_summary, numpy_requests = simulate_point({**BASE, "engine": "numpy", STOP_FIELD: rule})
    assert ran == [1]
    assert ("stopped_at" in summary) == (tpot < 1.0)
    assert frame(requests).equals(frame(numpy_requests))
    assert {k: v for k, v in summary.items() if k != "engine_ran"} == {
        k: v for k, v in numpy_summary.items() if k != "engine_ran"}


def test_the_default_workers_are_one_on_two_cores_or_fewer():
    from specbatch.analysis.plan.runner import default_workers

    assert [default_workers(c) for c in (1, 2, 3, 4, 16)] == [1, 1, 3, 4, 4]


def test_the_pool_takes_only_rounds_of_enough_runs():
    from specbatch.analysis.plan.runner import POOL_MIN_RUNS, PlanPool

    assert not PlanPool(1).pays(100)
    assert not PlanPool(2).pays(POOL_MIN_RUNS - 1)
    assert PlanPool(2).pays(POOL_MIN_RUNS)


def test_one_shared_pool_forked_after_a_run_here_gives_the_serial_entries(tmp_path):
    from specbatch.analysis.plan.runner import POOL_MIN_RUNS, PlanPool, Runner
    from specbatch.analysis.plan.slo import Slos
    from specbatch.analysis.plan.space import Deployment, Speculation

    base = {k: v for k, v in BASE.items() if k not in ("policy", "num_speculative_tokens")}
    cands = [(Deployment("h100", 2, 1), Speculation("fixed", k, 0, v))
             for k in (1, 2, 3) for v in ("token", "block")][:POOL_MIN_RUNS + 1]
    slos = Slos(tpot=0.1)
    with Runner(base, tmp_path / "serial") as serial:
        want = serial.run(cands, slos)
    with PlanPool(2) as pool:
        with Runner(base, tmp_path / "a", workers=2, pool=pool) as first:
            got = first.run(cands, slos)
            assert pool.started and pool.parent_runs == 1  # one run here, then the fork
        with Runner({**base, "seed": 1}, tmp_path / "b", workers=2, pool=pool) as second:
            second.run(cands, slos)  # the same pool: nothing more runs here
            assert pool.parent_runs == 1
    assert got == want


def test_the_compiled_config_is_the_made_one_with_its_engine_changed():
    import dataclasses

    from specbatch.simulator.config.sim_config import make_config

    for fields in ({"target": "vicuna-33b", "draft": "vicuna-68m", "hardware": "h100",
                    "policy": "fixed", "num_speculative_tokens": 2, "tp": 2},
                   {"target": "llama-3.1-8b", "draft": "llama-3.2-1b", "policy": "dsd",
                    "num_speculative_tokens": 4, "cost": "aic"}):
        made = make_config({**fields, "engine": "compiled"})
        assert dataclasses.replace(make_config(fields), engine="compiled") == made
