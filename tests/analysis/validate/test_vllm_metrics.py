"""Serving metrics as vLLM's benchmark defines them, and the KS / TOST comparisons, on
hand-computed examples (analysis.validate.vllm_metrics)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from specbatch.analysis.validate.vllm_metrics import (
    compare,
    counts_at,
    ks,
    per_request,
    rel_error,
    summary,
    throughput,
    timeseries,
    tost,
)

#: Three requests: arrivals 0, 1, 2 s; first tokens 0.5, 1.5, 4; finishes 2.5, 1.5, 8;
#: 5, 1 and 3 output tokens.
THREE = pd.DataFrame({"arrival": [0.0, 1.0, 2.0], "first_token": [0.5, 1.5, 4.0],
                      "finish": [2.5, 1.5, 8.0], "output_len": [5, 1, 3]})


def test_three_requests_by_hand():
    m = per_request(THREE)
    assert m["ttft"].tolist() == [0.5, 0.5, 2.0]
    assert m["e2e"].tolist() == [2.5, 0.5, 6.0]
    # TPOT = (e2e - TTFT) / (out - 1), the 1-token request left out (vLLM's tpots list)
    assert m["tpot"].tolist() == [(2.5 - 0.5) / 4, (6.0 - 2.0) / 2]
    ttft = summary(m["ttft"])
    assert ttft["mean"] == pytest.approx(1.0)
    assert ttft["p50"] == 0.5
    assert ttft["p90"] == pytest.approx(0.5 + 0.8 * 1.5)  # linear: rank 0.9 * 2 = 1.8
    assert summary(m["tpot"])["mean"] == pytest.approx(1.25)
    assert summary(m["e2e"])["p99"] == pytest.approx(2.5 + 0.98 * 3.5)
    assert throughput(THREE) == pytest.approx(9 / 8)  # 9 tokens over 0 .. 8 s


def test_signed_error_is_simulated_over_measured_minus_one():
    assert rel_error(1.1, 1.0) == pytest.approx(0.1)
    assert rel_error(0.9, 1.0) == pytest.approx(-0.1)
    assert np.isnan(rel_error(1.0, 0.0))
    slower = THREE.assign(first_token=THREE["first_token"] + 0.5,
                          finish=THREE["finish"] + 0.5)
    row = compare(THREE, slower)["metrics"]["ttft_mean"]
    assert (row["measured"], row["simulated"]) == pytest.approx((1.0, 1.5))
    assert row["error"] == pytest.approx(0.5)


def test_tost_is_two_one_sided_welch_tests_at_ten_percent_of_the_measured_mean():
    rng = np.random.default_rng(0)
    meas = rng.normal(10.0, 1.0, 200)
    sim = rng.normal(10.3, 1.5, 150)
    delta = 0.1 * meas.mean()
    res = tost(meas, sim)
    p_low = stats.ttest_ind(sim + delta, meas, equal_var=False, alternative="greater").pvalue
    p_high = stats.ttest_ind(sim - delta, meas, equal_var=False, alternative="less").pvalue
    assert res["p_low"] == pytest.approx(p_low, rel=1e-9)
    assert res["p_high"] == pytest.approx(p_high, rel=1e-9)
    assert res["p"] == pytest.approx(max(p_low, p_high), rel=1e-9) and res["equivalent"]
    far = tost(meas, rng.normal(12.0, 1.0, 200))  # 20 % off: not equivalent
    assert far["p"] > 0.5 and not far["equivalent"]


def test_ks_is_scipy_s_two_sample_test():
    a, b = np.array([1.0, 2.0, 3.0]), np.array([2.5, 3.5, 4.5, 5.5])
    assert ks(a, b)["D"] == pytest.approx(stats.ks_2samp(a, b).statistic)
    assert ks(a, a)["D"] == 0.0 and ks(a, a)["p"] == pytest.approx(1.0)


def test_running_and_waiting_counts_at_ticks():
    running, waiting = counts_at(THREE, np.array([0.25, 1.0, 2.0, 3.0]), "first_token")
    # t = 0.25: #0 waits; t = 1: #0 runs, #1 waits; t = 2: #2 waits (#1 finished at 1.5)
    assert waiting.tolist() == [1, 1, 1, 1] and running.tolist() == [0, 1, 1, 0]


def test_timeseries_compares_logged_ticks_with_simulated_counts():
    logged = pd.DataFrame({"t": [0.25, 1.0, 2.0, 3.0], "running": [0, 2, 1, 0],
                           "waiting": [1, 1, 1, 1]})
    ts = timeseries(logged, THREE)  # simulated running [0, 1, 1, 0], waiting [1, 1, 1, 1]
    assert ts["ticks"] == 4
    assert ts["running"] == {"measured_mean": 0.75, "simulated_mean": 0.5,
                             "mean_abs_gap": 0.25}
    assert ts["waiting"]["mean_abs_gap"] == 0.0


def test_single_token_outputs_leave_tpot_empty_not_zero():
    one = THREE.assign(output_len=1)
    assert per_request(one)["tpot"].size == 0
    assert all(np.isnan(v) for v in summary(per_request(one)["tpot"]).values())
