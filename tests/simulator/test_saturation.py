"""simulator/saturation.py: the waiting count at each arrival, and when a queue grows without
bound."""

from __future__ import annotations

import numpy as np

from specbatch.simulator.saturation import QueueGrowth, queue_growth, waiting_at_arrival


def test_waiting_at_arrival_counts_arrived_requests_without_a_first_token():
    # arrivals 0, 1, 2, 3; first tokens 2.5, 1.5, 2.5, 3.5
    # at t=0: {0} -> 1; t=1: {0, 1} -> 2; t=2: {0, 2} (1 started at 1.5) -> 2; t=3: {3} -> 1
    w = waiting_at_arrival(np.array([0.0, 1.0, 2.0, 3.0]), np.array([2.5, 1.5, 2.5, 3.5]))
    assert w.tolist() == [1, 2, 2, 1]


def test_the_order_of_the_requests_does_not_matter():
    rng = np.random.default_rng(0)
    arrival = np.sort(rng.uniform(0, 10, 50))
    first = arrival + rng.uniform(0, 2, 50)
    perm = rng.permutation(50)
    assert (
        waiting_at_arrival(arrival, first) == waiting_at_arrival(arrival[perm], first[perm])
    ).all()


def test_an_overloaded_server_is_flagged_and_its_growth_estimates_one_minus_mu_over_lambda():
    # λ = 10/s, a single server admitting one request each 0.2 s (μ = 5/s): 1 − μ/λ = 0.5
    n = 400
    arrival = np.arange(n) / 10.0
    first = np.arange(1, n + 1) * 0.2
    g = queue_growth(arrival, first)
    assert g.growing and abs(g.growth - 0.5) < 0.05


def test_a_stationary_queue_is_not_flagged():
    # μ = 12.5/s > λ = 10/s: every request starts 0.05 s after it arrives
    arrival = np.arange(400) / 10.0
    g = queue_growth(arrival, arrival + 0.05)
    assert not g.growing and g.growth == 0.0 and g.waiting_start == g.waiting_end == 1.0


def test_a_burst_or_a_small_run_has_no_growth_statistic():
    assert queue_growth(np.zeros(100), np.linspace(1, 2, 100)) is None
    assert queue_growth(np.arange(39.0), np.arange(39.0) + 1) is None


def test_growing_needs_both_the_share_and_ten_requests():
    assert not QueueGrowth(window=30, waiting_start=0.0, waiting_end=9.0, growth=0.3).growing
    assert not QueueGrowth(window=1000, waiting_start=0.0, waiting_end=50.0, growth=0.05).growing
    assert QueueGrowth(window=100, waiting_start=0.0, waiting_end=10.0, growth=0.1).growing
