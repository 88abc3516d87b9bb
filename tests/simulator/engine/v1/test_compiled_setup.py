"""The compiled loop's set-up arrays kept across runs (simulator.engine.v1.setup_cache: a cost
model's pass tables, a trace's confidence surrogate): a run set up from the kept arrays equals
one set up afresh, bit for bit, and a second run on the same cost model reuses them."""

from __future__ import annotations

import pytest

from specbatch.analysis.sweep.executors import _cached_trace
from specbatch.simulator.config.sim_config import make_config
from specbatch.simulator.engine.v1 import compiled, setup_cache
from specbatch.simulator.run import build_cost, simulate
from tests.simulator.engine.v1.test_compiled import assert_bit_identical

pytestmark = pytest.mark.skipif(not compiled.numba_installed(),
                                reason="numba not installed (the fast extra)")

RUN = {"trace": "default", "requests": 16, "target": "vicuna-33b", "draft": "vicuna-68m",
       "max_num_seqs": 64, "kv_mode": "paged", "arrival": "poisson", "rate": 4.0,
       "cost": "calibrated", "engine": "compiled", "tp": 2}


@pytest.mark.parametrize("policy", [{"policy": "fixed", "num_speculative_tokens": 2},
                                    {"policy": "tetris", "num_speculative_tokens": 2,
                                     "extra": 1}])
def test_kept_setup_arrays_give_the_fresh_runs(monkeypatch, policy):
    config = make_config({**RUN, **policy})
    trace = _cached_trace(config)
    cost = build_cost(config)
    monkeypatch.setattr(setup_cache, "_SETUP", {})
    first = simulate(config, trace=trace, cost_model=cost)
    kept = dict(setup_cache._SETUP)
    assert any(key[0] == "pass" for key in kept)
    assert any(key[0] == "conf" for key in kept) == (policy["policy"] == "tetris")
    again = simulate(make_config({**RUN, **policy, "seed": 0}), trace=trace, cost_model=cost)
    assert setup_cache._SETUP.keys() == kept.keys()  # nothing built twice
    assert all(setup_cache._SETUP[k][1] is v[1] for k, v in kept.items())
    monkeypatch.setattr(setup_cache, "_SETUP", {})  # afresh: a new cost model, nothing kept
    fresh = simulate(config, trace=trace, cost_model=build_cost(config))
    for other in (again, fresh):
        assert_bit_identical(other.requests, first.requests)
        assert_bit_identical(other.steps, first.steps)
