"""The calibration split: by request, seeded, disjoint from replay, the same for every policy;
the statistics it yields."""

from __future__ import annotations

import numpy as np
import pytest

from specbatch.errors import SpecbatchError
from specbatch.simulator.config.sim_config import load_config
from specbatch.simulator.policies.calibration import (
    confidence_acceptance,
    position_acceptance,
    split_requests,
    split_trace,
)
from specbatch.simulator.run import simulate
from tests.simulator.helpers import LinearCost, const_trace


def test_split_is_by_request_seeded_disjoint_and_complete():
    calib, replay = split_requests(40, 0.25, seed=7)
    assert calib.size == 10 and replay.size == 30
    assert sorted(np.concatenate([calib, replay]).tolist()) == list(range(40))
    again, _ = split_requests(40, 0.25, seed=7)
    other, _ = split_requests(40, 0.25, seed=8)
    assert np.array_equal(calib, again) and not np.array_equal(calib, other)


@pytest.mark.parametrize("fraction", [0.01, 0.99])
def test_a_split_leaving_one_side_empty_is_a_one_line_error(fraction):
    with pytest.raises(SpecbatchError, match="field calibration_split: expected a fraction"):
        split_requests(10, fraction, 0)


def test_split_trace_keeps_the_requests_rows():
    trace = const_trace(n_requests=6, output_lens=np.array([3, 4, 5, 6, 7, 8]))
    calib, replay, replayed = split_trace(trace, 0.5, 1)
    assert calib.n_requests == replay.n_requests == 3
    assert replay.output_len.tolist() == trace.output_len[replayed].tolist()
    assert calib.n_rows + replay.n_rows == trace.n_rows


def test_position_acceptance_is_the_mean_probability_of_reaching_each_position():
    """Constant α: P(τ ≥ j) = α^j under TV; BV's p_j is α^j too on this trace."""
    trace = const_trace(alpha=0.6, depth=3)
    np.testing.assert_allclose(position_acceptance(trace, 3, "token"), [0.6, 0.36, 0.216])
    np.testing.assert_allclose(position_acceptance(trace, 2, "block"), [0.6, 0.36])


def test_confidence_acceptance_bins_confidence_against_min_one_r():
    trace = const_trace(alpha=0.7, depth=4)
    edges, rate = confidence_acceptance(trace, 4)
    assert rate[np.searchsorted(edges, 0.7, side="right")] == pytest.approx(0.7)


def test_every_policy_replays_the_same_requests_under_one_split():
    """A sweep stays paired: the split depends on the trace and the seed, not the policy."""
    trace = const_trace(n_requests=12, alpha=0.6)
    replayed = []
    for policy in ("fixed", "vllm-dynamic", "specdec++"):
        config = load_config(None, trace="synth", policy=policy, k=2, requests=9,
                             calibration_split=0.25, seed=5)
        req = simulate(config, trace, cost_model=LinearCost()).requests
        replayed.append(sorted(req["trace_index"]))
    calib, _ = split_requests(12, 0.25, 5)
    assert replayed[0] == replayed[1] == replayed[2]
    assert not set(replayed[0]) & set(calib.tolist())
