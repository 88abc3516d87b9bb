"""Workload specification: request selection and arrival processes."""

from __future__ import annotations

import numpy as np
import pytest
from specbatch.simulator.config import load_config
from specbatch.simulator.workload import build_workload

from specbatch.errors import SpecbatchError
from tests.simulator.helpers import const_trace


def test_in_order_when_enough_requests_else_seeded_resample():
    trace = const_trace(n_requests=10)
    w = build_workload(load_config(None, requests=6), trace)
    assert w.trace_index.tolist() == [0, 1, 2, 3, 4, 5]
    big = build_workload(load_config(None, requests=50, seed=1), trace)
    again = build_workload(load_config(None, requests=50, seed=1), trace)
    other = build_workload(load_config(None, requests=50, seed=2), trace)
    assert np.array_equal(big.trace_index, again.trace_index)
    assert not np.array_equal(big.trace_index, other.trace_index)
    assert set(big.trace_index.tolist()) <= set(range(10))
    cyc = build_workload(load_config(None, requests=13, sampling="in_order"), trace)
    assert cyc.trace_index.tolist() == list(range(10)) + [0, 1, 2]


@pytest.mark.parametrize("arrival, cv", [("poisson", 1.0), ("gamma", 3.0), ("gamma", 0.5)])
def test_arrival_processes_have_the_requested_rate_and_cv(arrival, cv):
    trace = const_trace(n_requests=4)
    w = build_workload(load_config(None, requests=20000, arrival=arrival, rate=8.0, cv=cv), trace)
    gaps = np.diff(np.concatenate([[0.0], w.arrival]))
    assert (gaps >= 0).all()
    assert abs(gaps.mean() - 1 / 8) < 0.01
    assert abs(gaps.std() / gaps.mean() - cv) < 0.1 * cv


def test_burst_and_trace_offsets():
    trace = const_trace(n_requests=3, arrival=np.array([0.0, 2.0, 1.0]))
    assert build_workload(load_config(None, requests=3), trace).arrival.tolist() == [0, 0, 0]
    w = build_workload(load_config(None, requests=3, arrival="trace"), trace)
    assert w.arrival.tolist() == [0.0, 2.0, 1.0]
    with pytest.raises(SpecbatchError, match="field arrival"):
        build_workload(load_config(None, requests=3, arrival="trace"), const_trace(n_requests=3))
