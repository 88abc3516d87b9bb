"""vLLM's DP ranks of an MoE model in lockstep (simulator.engine.lockstep): every rank's step
ends when the slowest rank's pass ends, an idle rank runs the 1-token dummy pass, and each
rank's MoE layers see every rank's tokens; checked against passes priced by hand."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from specbatch.simulator.config.sim_config import make_config
from specbatch.simulator.cost.features.expert_parallel import rank_pass_seconds
from specbatch.simulator.run import build_cost, simulate

BASE = {"trace": "synth", "target": "qwen3-30b-a3b", "draft": "ngram", "policy": "ar",
        "num_speculative_tokens": 0, "hardware": "rtxpro6000", "arrival": "trace",
        "data_parallel_size": 2, "enable_expert_parallel": True, "seed": 0}


def run(tmp_path, rows, **changes):
    path = tmp_path / "w.csv"
    pd.DataFrame(rows, columns=["prompt_len", "output_len", "arrival"]).to_csv(path, index=False)
    config = make_config({**BASE, "workload": str(path), "requests": len(rows), **changes})
    return config, simulate(config)


@pytest.mark.parametrize("cost", ["roofline", "calibrated"])
def test_two_rank_prefill_step_ends_with_the_slower_rank(tmp_path, cost):
    # round robin: rank 0 prefills 100 tokens, rank 1 500; both at t = 0, one output token
    config, res = run(tmp_path, [(100, 1, 0.0), (500, 1, 0.0)], cost=cost)
    model = build_cost(config)
    total = 600.0  # the step's tokens through every MoE layer
    t0 = rank_pass_seconds(model, (1, 100.0, 0.0, 0.0, 100.0 ** 2), total) + model.overhead
    t1 = rank_pass_seconds(model, (1, 500.0, 0.0, 0.0, 500.0 ** 2), total) + model.overhead
    assert t1 > t0
    t1 += res.steps["verify_time"].iloc[1]  # the sampler's seconds (simulator.cost.verify_cost)
    steps = res.steps
    assert list(steps["replica"]) == [0, 1] and (steps["time"] == 0.0).all()
    assert steps["end"].tolist() == pytest.approx([t1, t1], rel=1e-12)
    c = config.client_ttft_s  # the client sees the step's token c later
    assert res.requests["first_token"].tolist() == pytest.approx([t1 + c, t1 + c], rel=1e-12)
    # the faster rank's row carries the wait in its target time: its parts still sum to end
    parts = steps[["draft_time", "target_time", "verify_time", "overhead_time"]].sum(axis=1)
    assert parts.tolist() == pytest.approx(steps["end"].tolist(), rel=1e-12)


def test_an_idle_rank_runs_the_dummy_pass_and_the_busy_rank_sees_its_token(tmp_path):
    config, res = run(tmp_path, [(64, 3, 0.0)], cost="calibrated")
    model = build_cost(config)
    steps = res.steps
    assert (steps["replica"] == 0).all() and len(steps) == 3  # no step row for the dummy
    durations = (steps["end"] - steps["time"] - steps["verify_time"]).to_numpy()  # sampler
    prefill = rank_pass_seconds(model, (1, 64.0, 0.0, 0.0, 64.0 ** 2), 65.0)
    dummy = rank_pass_seconds(model, (1, 1.0, 0.0, 0.0, 1.0), 65.0)
    assert prefill > dummy
    assert durations[0] == pytest.approx(prefill + model.overhead, rel=1e-12)
    decode = rank_pass_seconds(model, (1, 1.0, 65.0, 65.0, 1.0), 2.0)  # 1 token + the dummy's
    assert durations[1] == pytest.approx(decode + model.overhead, rel=1e-12)


def test_symmetric_repricing_is_the_composed_price(tmp_path):
    """At T = N · Q the repriced pass is the pass the composer priced (parity twin)."""
    for cost in ("roofline", "calibrated"):
        config = make_config({**BASE, "cost": cost, "requests": 4})
        model = build_cost(config)
        for sums in [(8, 8.0, 4000.0, 4000.0, 8.0), (2, 300.0, 100.0, 20000.0, 45000.0)]:
            want = model.time_from_sums("target", *sums)
            got = rank_pass_seconds(model, sums, 2 * sums[1])
            assert got == pytest.approx(want, rel=1e-12)


def test_lockstep_runs_are_deterministic_and_finish_every_request(tmp_path):
    rng = np.random.default_rng(1)
    rows = [(int(p), int(o), float(a)) for p, o, a in zip(
        rng.integers(5, 300, 12), rng.integers(1, 20, 12), np.sort(rng.random(12)) * 0.2)]
    _, a = run(tmp_path, rows, cost="calibrated", kv_mode="paged")
    _, b = run(tmp_path, rows, cost="calibrated", kv_mode="paged")
    pd.testing.assert_frame_equal(a.requests, b.requests)
    assert np.isfinite(a.requests["finish"]).all()
    ends = a.steps.groupby("time")["end"].nunique()
    assert (ends == 1).all()  # ranks that step together end together


def test_event_kinds_are_the_engines():
    from specbatch.simulator.engine import core, lockstep

    assert (lockstep.STEP_END, lockstep.SCHEDULE) == (core.STEP_END, core.SCHEDULE)


def test_every_request_gets_its_stamps_at_a_common_step_end(tmp_path):
    """Stamps land on step ends (never on a faster rank's own, unshifted end)."""
    rows = [(int(p), int(o), 0.013 * i) for i, (p, o) in
            enumerate(zip([37, 150, 9, 260, 71, 18, 99, 5], [4, 9, 2, 7, 3, 12, 5, 6]))]
    config, res = run(tmp_path, rows, cost="roofline", router="vllm_dp_lb")
    ends = {end + config.client_ttft_s for end in res.steps["end"].tolist()}  # as clients see
    assert set(res.requests["first_token"].tolist()) <= ends
    assert set(res.requests["finish"].tolist()) <= ends


@pytest.mark.parametrize("prompts, pad_to, total", [
    ((3, 6), 8.0, 16.0),  # both within the graphs: both padded to 8 (4 and 8 alone)
    ((3, 20), -1.0, 23.0),  # 20 > 16 runs eager, so both ranks do: no padding at all
])
def test_dp_ranks_pad_to_the_largest_graph_or_none(tmp_path, prompts, pad_to, total):
    from specbatch.simulator.cost.features.graph_padding import pad_to_graphs

    config, res = run(tmp_path, [(p, 1, 0.0) for p in prompts], cost="roofline",
                      cuda_graph_sizes="1,2,4,8,16")
    model = pad_to_graphs(build_cost(config), config.cuda_graph_sizes)
    want = max(rank_pass_seconds(model, (1, float(p), 0.0, 0.0, float(p * p)), total, pad_to)
               for p in prompts) + model.overhead + res.steps["verify_time"].max()
    assert res.steps["end"].tolist() == pytest.approx([want, want], rel=1e-12)
    # each rank at its own graph size instead (what the pricer alone would do) differs
    own_total = sum(p + model.padding(p) for p in prompts)
    own = max(rank_pass_seconds(model, (1, float(p), 0.0, 0.0, float(p * p)), own_total)
              for p in prompts) + model.overhead + res.steps["verify_time"].max()
    assert abs(own - want) > 1e-9


def test_replicas_with_expert_parallelism_over_tp_alone_step_independently(tmp_path):
    """EP with data_parallel_size 1 splits the experts over tp only: separate servers
    (replicas) are not coupled, so each step ends at its own rank's pass."""
    config, res = run(tmp_path, [(100, 1, 0.0), (500, 1, 0.0)], cost="roofline",
                      data_parallel_size=1, replicas=2)
    model = build_cost(config)
    ends = [model.time_from_sums("target", 1, float(p), 0.0, 0.0, float(p * p))
            + model.overhead for p in (100, 500)]
    ends = [e + v for e, v in zip(ends, res.steps["verify_time"])]
    assert res.steps["end"].tolist() == pytest.approx(ends, rel=1e-12)
