"""The planner's verdict on one run: SLO percentiles, goodput share, queue growth, memory."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from specbatch.analysis.plan.slo import (
    Slos,
    judge,
    memory_plan,
    peak_concurrency,
    per_request,
    queue_growth,
)


def table(arrival, first, finish, tokens, replica=None, prompt=10, output=None):
    n = len(arrival)
    return pd.DataFrame({
        "arrival": np.asarray(arrival, float), "first_token": np.asarray(first, float),
        "finish": np.asarray(finish, float), "tokens": np.asarray(tokens),
        "replica": np.zeros(n, int) if replica is None else np.asarray(replica),
        "prompt_len": np.full(n, prompt), "output_len": np.asarray(tokens if output is None
                                                                     else output)})


def test_per_request_ttft_tpot_e2e():
    t = table([0, 1], [0.5, 1.2], [2.5, 1.2], [5, 1])
    got = per_request(t)
    assert got["ttft"].tolist() == pytest.approx([0.5, 0.2])
    assert got["e2e"].tolist() == pytest.approx([2.5, 0.2])
    assert got["tpot"].tolist() == pytest.approx([0.5, 0.0])  # (2.5 - 0.5) / 4; one token: 0


def test_a_run_within_every_slo_passes():
    t = table([0, 0, 0, 0], [0.1] * 4, [1.0] * 4, [10] * 4)
    verdict = judge(t, 0, Slos(ttft=0.2, tpot=0.1, e2e=2.0))
    assert verdict.passed and verdict.limits == ()
    assert verdict.latency["tpot"] == pytest.approx(0.1)
    assert verdict.latency["goodput"] == 1.0


def test_the_limit_names_the_quantity_percentile_and_bound():
    t = table([0] * 4, [0.1] * 4, [1.0, 1.0, 1.0, 4.0], [10] * 4)
    verdict = judge(t, 0, Slos(e2e=2.0, percentile=50, goodput=0.5))
    assert verdict.passed  # p50 e2e = 1 s; 3 of 4 meet it
    strict = judge(t, 0, Slos(e2e=2.0, percentile=50, goodput=0.9))
    assert strict.limits == ("goodput 0.750 < 0.9",)
    tail = judge(t, 0, Slos(e2e=2.0))
    assert tail.limits[0].startswith("E2E p99 3.9") and "> 2 s" in tail.limits[0]


def test_preemption_is_a_memory_limit_unless_allowed():
    t = table([0] * 4, [0.1] * 4, [1.0] * 4, [10] * 4)
    assert judge(t, 3, Slos()).limits == ("memory: KV cache ran out (3 preemptions)",)
    assert judge(t, 3, Slos(allow_preemption=True)).passed


def test_a_growing_queue_is_not_a_sustained_rate():
    n = 40
    arrival = np.arange(n, dtype=float)  # one request a second for 40 s
    steady = table(arrival, arrival + 0.2, arrival + 1.0, [10] * n)
    growing = table(arrival, arrival + 0.5 * arrival, arrival + 0.5 * arrival + 1, [10] * n)
    assert queue_growth(steady) == pytest.approx(0.0)
    assert queue_growth(growing) > 0.1
    verdict = judge(growing, 0, Slos())
    assert not verdict.passed and verdict.limits[0].startswith("rate not sustained")


def test_a_burst_has_no_queue_growth_test():
    assert queue_growth(table([0] * 10, np.arange(10), np.arange(10) + 1, [5] * 10)) is None


def test_peak_concurrency_counts_per_replica_and_caps_at_max_num_seqs():
    # replica 0: [0,3) [1,4) [2,5) overlap 3 deep; replica 1: [0,1) [1,2) never overlap
    t = table([0, 1, 2, 0, 1], [0] * 5, [3, 4, 5, 1, 2], [5] * 5, replica=[0, 0, 0, 1, 1])
    assert peak_concurrency(t, 64) == 3
    assert peak_concurrency(t, 2) == 2


def test_memory_plan_multiplies_concurrency_by_the_mean_footprint():
    t = table([0, 0], [0, 0], [1, 1], [5, 5], prompt=100, output=[20, 40])
    plan = memory_plan(t, {"kv_capacity": 4244, "preemptions": 0}, 64, depth=3,
                       weights_gb=65.2, kv_bytes_per_token=1_600_000)
    assert plan["concurrency"] == 2
    assert plan["footprint_tokens"] == 134.0  # 100 + 30 + 3 + 1
    assert plan["kv_needed_tokens"] == 268 and plan["kv_available_tokens"] == 4244
