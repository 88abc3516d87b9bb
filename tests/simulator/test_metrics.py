"""simulator/metrics.py: a run's tables held as columns (no pandas) summarise to the same
numbers, bit for bit, as their DataFrames (the slow twin); ``SimResult.requests`` and
``step_table`` are still DataFrames, built from those columns on first read."""

from __future__ import annotations

import pickle

import numpy as np
import pandas as pd
import pytest

from specbatch.simulator.config.sim_config import load_config
from specbatch.simulator.cost.features.host import CLIENT_TTFT_S
from specbatch.simulator.engine_run import run_engine
from specbatch.simulator.metrics import (
    client_view,
    column_sum,
    rows,
    step_totals,
    summarize,
)
from specbatch.simulator.policies.registry import make_policy
from specbatch.simulator.run import simulate
from specbatch.simulator.sim_result import SimResult
from specbatch.simulator.workload.arrivals import build_workload
from tests.simulator.helpers import LinearCost

COST = LinearCost(fixed=0.25, per_token=2**-8, draft_fixed=2**-5, draft_per_token=2**-10,
                  per_kv=2**-16, overhead=2**-6)


@pytest.mark.parametrize("n", [0, 1, 7, 8, 9, 129, 5000])
def test_column_sum_is_pandas_sum_bit_for_bit(n):
    """numpy's pairwise sum of the same contiguous values, NaN counted as 0 (pandas' skipna),
    so a held column, a DataFrame's and one read back from a file sum to the same float."""
    rng = np.random.default_rng(n)
    values = rng.lognormal(-6, 2, n)  # step seconds: many magnitudes, round-off matters
    if n > 3:
        values[::4] = np.nan
    assert float(column_sum(values)).hex() == float(pd.Series(values).sum()).hex()
    counts = rng.integers(0, 2**40, n)
    assert int(column_sum(counts)) == int(pd.Series(counts).sum())


def test_the_summary_of_columns_is_the_summary_of_their_frames(synth_trace_natural):
    config = load_config(None, trace="synth", policy="tetris", extra=1, requests=30,
                         arrival="poisson", rate=4.0, slo=10.0, seed=2)
    result = simulate(config, synth_trace_natural, cost_model=COST)
    columns = vars(SimResult)["requests"].held(result)  # the FrameFields' contents
    steps = vars(SimResult)["step_table"].held(result)
    assert isinstance(columns, dict) and isinstance(steps, dict)  # nothing built yet
    frames = (pd.DataFrame(columns), pd.DataFrame(steps))
    assert rows(columns) == 30 and rows(steps) == len(frames[1])
    assert step_totals(steps) == step_totals(frames[1])
    want = summarize(*frames, slo=10.0)
    got = summarize(columns, steps, slo=10.0)
    assert list(got) == list(want)
    for key, value in want.items():  # bit for bit, NaN included
        assert repr(got[key]) == repr(value), key


def test_a_result_reads_as_dataframes_equal_to_the_engines_tables(synth_trace_natural):
    config = load_config(None, trace="synth", policy="fixed", requests=20, seed=4)
    result = simulate(config, synth_trace_natural, cost_model=COST)
    assert isinstance(result.requests, pd.DataFrame) and result.requests is result.requests
    assert isinstance(result.step_table, pd.DataFrame) and result.steps is result.step_table
    workload = build_workload(config, synth_trace_natural)
    requests, steps = run_engine(config, synth_trace_natural, workload, COST,
                                 make_policy(config, synth_trace_natural.K), None)
    pd.testing.assert_frame_equal(result.requests, requests, check_exact=True)
    pd.testing.assert_frame_equal(result.step_table, steps, check_exact=True)
    again = pickle.loads(pickle.dumps(result))  # a sweep's worker hands results back
    pd.testing.assert_frame_equal(again.requests, result.requests, check_exact=True)


def test_a_frame_field_is_required_and_keeps_none():
    with pytest.raises(TypeError):
        SimResult(config=None, step_table=None, summary={})  # requests has no default
    result = SimResult(config=None, requests={"uid": np.arange(3)}, step_table=None,
                       summary={})
    assert result.step_table is None and result.requests["uid"].tolist() == [0, 1, 2]


def test_client_view_adds_the_client_share_and_keeps_nan():
    engine = np.array([0.5, np.nan, 2.0])  # [requests]; NaN: never reached by a stopped run
    got = client_view(engine, 0.002)
    assert got[0] == 0.502 and np.isnan(got[1]) and got[2] == 2.002
    assert client_view(engine, 0.0) is engine  # 0: the engine's stamps themselves


@pytest.mark.parametrize("client", [None, 0.05])  # None: the default, 2 ms (assumed)
def test_the_client_share_moves_ttft_and_e2e_by_itself_and_nothing_else(synth_trace_natural,
                                                                         client):
    base = dict(trace="synth", policy="fixed", requests=20, arrival="poisson", rate=8.0,
                seed=4)
    engine = simulate(load_config(None, client_ttft_s=0.0, **base), synth_trace_natural,
                      cost_model=COST)
    extra = {} if client is None else {"client_ttft_s": client}
    result = simulate(load_config(None, **base, **extra), synth_trace_natural, cost_model=COST)
    c = CLIENT_TTFT_S if client is None else client
    assert CLIENT_TTFT_S == 0.002
    pd.testing.assert_frame_equal(result.step_table, engine.step_table, check_exact=True)
    for name in ("first_token", "finish"):  # the client sees each stamp c later
        assert (result.requests[name] == engine.requests[name] + c).all()
    rest = [n for n in engine.requests.columns if n not in ("first_token", "finish")]
    pd.testing.assert_frame_equal(result.requests[rest], engine.requests[rest], check_exact=True)
    got, want = result.summary, engine.summary
    # TTFT_new = TTFT_old + c, e2e likewise; TPOT = (e2e - TTFT) / (tokens - 1) unchanged
    for key in ("ttft_mean", "e2e_mean", "e2e_p50", "e2e_p99", "makespan"):
        assert got[key] == pytest.approx(want[key] + c, rel=1e-12), key
    assert got["tpot_mean"] == pytest.approx(want["tpot_mean"], rel=1e-9)
    assert got["throughput"] == pytest.approx(want["tokens"] / (want["makespan"] + c),
                                              rel=1e-12)
