"""analysis/sensitivity.py: every pass scaled by f, the same run otherwise; the ±5 % check."""

from __future__ import annotations

import json

import numpy as np
import pytest

from specbatch.analysis.sensitivity import ScaledCost, capacity_check, step_time_sensitivity
from specbatch.errors import SpecbatchError
from specbatch.simulator.config.sim_config import load_config
from specbatch.simulator.cost.interface import SumsCostModel
from specbatch.simulator.run import build_cost, simulate
from specbatch.traces.synth import SynthConfig, synth_trace
from tests.cli.oneline import run_cli
from tests.simulator.helpers import LinearCost


@pytest.fixture(scope="module")
def synth_trace_natural():
    return synth_trace(SynthConfig(requests=32, output_mean=48, prompt_mean=32, seed=3))


class ArraysOnly:
    """A cost model with step_time only (no sums fast path)."""

    overhead = 0.5

    def step_time(self, role, query, kv):
        return 1.0 + float(np.sum(query))


def test_scaled_cost_scales_every_pass_and_the_overhead():
    inner = build_cost(load_config(None))  # the default roofline: a SumsCostModel
    cost = ScaledCost(inner, 1.05)
    q, kv = np.array([1, 3]), np.array([10, 20])
    assert cost.step_time("target", q, kv) == 1.05 * inner.step_time("target", q, kv)
    assert cost.overhead == 1.05 * inner.overhead
    assert isinstance(cost, SumsCostModel)
    assert cost.time_from_sums("draft", 2, 4.0, 30.0, 70.0, 10.0) == (
        1.05 * inner.time_from_sums("draft", 2, 4.0, 30.0, 70.0, 10.0))


def test_scaled_cost_keeps_the_protocols_of_the_model_it_wraps():
    cost = ScaledCost(ArraysOnly(), 2.0)
    assert not isinstance(cost, SumsCostModel) and not hasattr(cost, "first_pass_time")
    assert cost.step_time("target", np.array([2]), np.array([0])) == 6.0 and cost.overhead == 1.0


@pytest.mark.parametrize("factor", [0.0, -1.0, float("nan")])
def test_a_factor_must_be_positive(factor):
    with pytest.raises(SpecbatchError, match="factor"):
        ScaledCost(LinearCost(), factor)


def test_factor_one_is_the_same_run_bit_for_bit(synth_trace_natural):
    config = load_config(None, trace="synth", policy="tetris", k=2, extra=1, requests=60,
                         arrival="poisson", rate=3.0, seed=4)
    base = simulate(config, synth_trace_natural, cost_model=LinearCost())
    same = simulate(config, synth_trace_natural, cost_model=ScaledCost(LinearCost(), 1.0))
    assert base.requests.equals(same.requests) and base.summary == same.summary


def test_factor_one_under_the_roofline_prices_the_same_logit_rows(synth_trace_natural):
    config = load_config(None, trace="synth", policy="fixed", k=2, requests=40,
                         arrival="poisson", rate=50.0, max_num_batched_tokens=64, seed=1)
    cost = build_cost(config)
    assert ScaledCost(cost, 1.0).logit_rows  # the engine names the rows it samples
    base = simulate(config, synth_trace_natural, cost_model=cost)
    same = simulate(config, synth_trace_natural, cost_model=ScaledCost(cost, 1.0))
    assert base.requests.equals(same.requests) and base.summary == same.summary


def test_a_burst_of_fixed_k_runs_the_same_steps_each_one_f_times_longer(synth_trace_natural):
    config = load_config(None, trace="synth", policy="fixed", k=3, requests=40, seed=2)
    base = simulate(config, synth_trace_natural, cost_model=LinearCost())
    slow = simulate(config, synth_trace_natural, cost_model=ScaledCost(LinearCost(), 1.05))
    assert slow.summary["steps"] == base.summary["steps"]
    assert slow.summary["accepted"] == base.summary["accepted"]
    assert np.isclose(slow.summary["target_time"], 1.05 * base.summary["target_time"], rtol=1e-12)
    assert np.isclose(slow.summary["overhead_time"], 1.05 * base.summary["overhead_time"],
                      rtol=1e-12)


def test_capacity_check_skips_bursts_and_off_and_reruns_open_loop_runs(synth_trace_natural):
    burst = load_config(None, trace="synth", policy="fixed", k=2, requests=40)
    result = simulate(burst, synth_trace_natural)
    assert capacity_check(burst, result, "auto", trace=synth_trace_natural) is None
    assert capacity_check(burst, result, "off", trace=synth_trace_natural) is None
    on = capacity_check(burst, result, "on", trace=synth_trace_natural)
    assert on["queue_growth"] is None and on["sensitivity"]["factors"] == [0.95, 1.05]
    with pytest.raises(SpecbatchError, match="sensitivity"):
        capacity_check(burst, result, "sometimes")


def test_sensitivity_ratios_are_against_the_unscaled_summary(synth_trace_natural):
    config = load_config(None, trace="synth", policy="fixed", k=2, requests=40)
    base = simulate(config, synth_trace_natural)
    sens = step_time_sensitivity(config, base.summary, trace=synth_trace_natural)
    lo, hi = sens.ratios["throughput"]
    assert lo > 1.0 > hi  # faster steps, more tokens per second
    assert not sens.fragile  # a burst: latency moves about as much as step time


def test_an_overloaded_open_loop_run_warns_and_json_carries_the_check(tmp_path):
    args = ["simulate", "--requests", "300", "--arrival", "poisson", "--rate", "40", "--policy",
            "fixed", "--k", "2"]
    done = run_cli([*args, "--json"], tmp_path)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)  # exactly one object
    check = summary["capacity"]
    assert check["near_capacity"] and check["queue_growth"]["growing"]
    assert len(check["sensitivity"]["ratios"]["ttft_mean"]) == 2
    assert "queue grows without bound" in done.stderr
    off = run_cli([*args, "--json", "--sensitivity", "off"], tmp_path)
    assert "capacity" not in json.loads(off.stdout)
