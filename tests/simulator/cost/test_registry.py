"""Specification of the cost-model interface and registry: simulator/cost/interface.py and
simulator/cost/registry.py (every model satisfies the protocol the engine relies on)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from specbatch.errors import SpecbatchError
from specbatch.simulator.config.sim_config import load_config
from specbatch.simulator.cost.interface import CostModel, SumsCostModel, batch_sums
from specbatch.simulator.cost.measured.profiled import fit_profile
from specbatch.simulator.cost.registry import (
    COST_MODELS,
    build_cost_model,
    execution_info,
    pass_times,
    step_split,
)
from specbatch.simulator.cost.verify_cost import build_verify_cost
from specbatch.simulator.run import simulate
from tests.simulator.cost.measured.test_profiled import synthetic_profile
from tests.simulator.helpers import LinearCost, ones


@pytest.fixture(scope="module")
def profiled(tmp_path_factory):
    path = tmp_path_factory.mktemp("profile") / "profile.csv"
    synthetic_profile().to_csv(path, index=False)
    return fit_profile(path)


def test_every_model_satisfies_the_protocol(h100, profiled):
    """Roofline and profiled models have the sums fast path; the tests' LinearCost is a plain
    CostModel (the engine then prices one ``step_time`` call per pass)."""
    for model in (h100, profiled):
        assert isinstance(model, CostModel) and isinstance(model, SumsCostModel)
        q, c = np.array([1, 4, 2]), np.array([10, 0, 700])
        assert model.time_from_sums("target", *batch_sums(q, c)) == model.step_time("target", q, c)
    assert isinstance(LinearCost(), CostModel) and not isinstance(LinearCost(), SumsCostModel)


class Recorder:
    """Wraps a cost model and records every attribute the simulator reads off it."""

    def __init__(self, model):
        self._model, self.seen = model, set()

    def __getattr__(self, name):
        self.seen.add(name)
        return getattr(self._model, name)


@pytest.mark.parametrize("policy", ["tetris", "dsd", "ar"])
def test_the_simulator_calls_only_what_the_protocol_declares(synth_trace_natural, h100, policy):
    # optional: windowed (sliding layers), first_pass_time (a head drafter, HeadCostModel)
    declared = {"overhead", "step_time", "time_from_sums", "windowed", "first_pass_time"}
    assert "overhead" in CostModel.__annotations__
    assert {"step_time", "time_from_sums"} <= set(vars(CostModel)) | set(vars(SumsCostModel))
    recorder = Recorder(h100)
    config = load_config(None, trace="synth", requests=16, policy=policy, extra=1,
                         enable_chunked_prefill=True, max_num_batched_tokens=64)
    fast = simulate(config, synth_trace_natural, cost_model=recorder)
    assert recorder.seen and recorder.seen <= declared
    pd.testing.assert_frame_equal(fast.steps,
                                  simulate(config, synth_trace_natural, cost_model=h100).steps)


def test_unknown_role_cost_or_model_are_one_line_errors(h100):
    with pytest.raises(SpecbatchError, match="role 'verifier'"):
        h100.step_time("verifier", ones(1), ones(1))
    with pytest.raises(SpecbatchError, match="cost 'magic'"):
        build_cost_model("magic")
    with pytest.raises(SpecbatchError, match="model shape"):
        build_cost_model(target="gpt-5")
    with pytest.raises(SpecbatchError, match="profile"):
        build_cost_model("profiled")
    assert set(COST_MODELS) == {"roofline", "profiled", "calibrated", "aic"}


def test_batch_sums_agree_with_numpy():
    rng = np.random.default_rng(1)
    q, c = rng.integers(0, 9, 100), rng.integers(0, 5000, 100)
    assert batch_sums(q, c) == (100, q.sum(), c.sum(), q @ c, q @ q)
    assert batch_sums(list(q.astype(np.int32)), c) == (100, q.sum(), c.sum(), q @ c, q @ q)
    assert batch_sums(4, 10) == (1, 4, 10, 40, 16)
    big = np.full(20000, 3, dtype=np.int64)
    assert batch_sums(big, big) == (20000, 60000, 60000, 180000, 180000)


def test_pass_times_price_draft_decode_and_verify_passes(h100, profiled):
    rows = pass_times(h100, [1, 64], kv=512, k=3)
    assert [r["batch"] for r in rows] == [1, 64]
    assert rows[1]["target_verify_s"] == h100.step_time("target", ones(64, 4), ones(64, 512))
    assert rows[0]["draft_s"] < rows[0]["target_decode_s"] <= rows[0]["target_verify_s"]
    assert rows[0]["verify_bound"] == "memory"
    assert "verify_bound" not in pass_times(profiled, [8], kv=0, k=1)[0]


def test_step_split_adds_k_draft_passes_verify_and_overhead(h100):
    s = step_split(h100, 8, 512, 3)
    passes = [h100.step_time("draft", ones(8), ones(8, 512 + d)) for d in range(3)]
    assert s["draft_passes"] == 3 and s["draft_pass_s"] == passes[0]
    assert s["draft_s"] == pytest.approx(sum(passes))
    assert s["target_verify_s"] == h100.step_time("target", ones(8, 4), ones(8, 512))
    assert s["step_s"] == pytest.approx(s["draft_s"] + s["target_verify_s"] + h100.overhead)
    assert s["draft_share"] == pytest.approx(s["draft_s"] / s["step_s"])
    eager = build_cost_model(execution="eager")
    assert step_split(eager, 8, 512, 3)["draft_share"] > 5 * s["draft_share"]
    assert step_split(h100, 8, 512, 0)["draft_s"] == 0.0
    assert s["sampler_s"] == 0.0 == s["sampler_share"]  # no sampler given
    info = execution_info(eager)
    assert info["name"] == "eager" and "h100-*.parquet" in info["source"]
    assert info["roles"]["draft"]["layers"] == 2
    assert execution_info(Recorder(h100)) is None


def test_step_split_adds_the_sampler_of_k_drafts_per_request(h100):
    sampler = build_verify_cost("fused", "token", "h100", 32000)
    s = step_split(h100, 8, 512, 3, sampler)
    assert s["sampler_s"] == sampler.seconds(8, 24, np.full(8, 3))
    assert s["step_s"] == pytest.approx(s["draft_s"] + s["target_verify_s"] + s["sampler_s"]
                                        + h100.overhead)
    assert s["sampler_share"] == pytest.approx(s["sampler_s"] / s["step_s"])
