"""The planner's verdict on one run: SLO percentiles, goodput share, queue growth, memory;
and the early stop, whose verdict on part of a run is the whole run's."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from specbatch.analysis.plan.slo import (
    EarlyStop,
    Slos,
    StopRule,
    judge,
    judge_stopped,
    memory_plan,
    over_needed,
    peak_concurrency,
    per_request,
    queue_growth,
)
from specbatch.analysis.sweep.executors import _cached_trace
from specbatch.simulator.config.sim_config import make_config
from specbatch.simulator.run import simulate


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


# ------------------------------------------------------------------ early stop


@pytest.mark.parametrize(("n", "p", "need"), [
    (256, 99, 4),  # h = 255 x 0.99 = 252.45: x[252] and above, 4 samples
    (10, 99, 2),  # h = 8.91
    (100, 50, 51),  # h = 49.5
    (5, 100, 2),  # h = 4 exactly: one more than the maximum alone (see over_needed)
    (5, 50, 4),  # h = 2 exactly: x[2] is the median; asked one sample more
])
def test_over_needed_is_n_minus_the_floor_of_the_virtual_index(n, p, need):
    assert over_needed(n, p) == need


@settings(max_examples=100, deadline=None)
@given(st.lists(st.floats(0, 10), min_size=1, max_size=40), st.floats(0, 10),
       st.sampled_from([50.0, 90.0, 99.0, 99.9, 100.0]))
def test_over_needed_samples_above_a_bound_fix_the_percentile_above_it(x, bound, p):
    x = np.asarray(x)
    over = int(np.count_nonzero(x > bound))
    if over >= over_needed(len(x), p):
        assert np.percentile(x, p) > bound
    below = np.where(x > bound, x, bound)  # the same count above, the rest at the bound
    if over < over_needed(len(x), p) and over:  # one fewer may leave it at the bound
        lowest = np.sort(below)
        lowest[len(x) - over:] = bound + 1.0
        lowest[:len(x) - over] = bound
        assert np.percentile(lowest, p) <= bound + 1.0


RUN = {"trace": "default", "requests": 16, "target": "vicuna-33b", "draft": "vicuna-68m",
       "max_num_seqs": 64, "kv_mode": "paged", "gpu_memory_utilization": 0.9,
       "arrival": "poisson", "cost": "roofline"}


def same_summary(a: dict, b: dict) -> bool:
    return pd.Series(a).equals(pd.Series(b))  # NaN equals NaN


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from([{"tp": 1}, {"tp": 2}, {"tp": 4}]),
       st.sampled_from([{"policy": "ar"},
                        {"policy": "fixed", "num_speculative_tokens": 3, "verify": "block"},
                        {"policy": "tetris", "num_speculative_tokens": 2, "extra": 1}]),
       st.sampled_from([2.0, 8.0, 40.0]), st.integers(0, 3),
       st.lists(st.floats(0.3, 1.3), min_size=4, max_size=4),
       st.sampled_from([50.0, 90.0, 99.0]), st.sampled_from([0.5, 0.9, 0.99]),
       st.booleans(), st.sets(st.sampled_from(["ttft", "tpot", "e2e"]), max_size=2),
       st.booleans())
def test_an_early_stop_gives_the_whole_runs_verdict(deployment, policy, rate, seed, scale, p,
                                                    goodput, allow, names, beat):
    config = make_config({**RUN, **deployment, **policy, "rate": rate, "seed": seed})
    trace = _cached_trace(config)
    whole = simulate(config, trace)
    values = per_request(whole.requests)
    # bounds around the run's own percentiles, so runs stop, fail and pass
    at = {n: float(np.percentile(values[n], p)) for n in ("ttft", "tpot", "e2e")}
    bounds = {n: at[n] * f for n, f in zip(("ttft", "tpot", "e2e"), scale) if n in names}
    slos = Slos(**bounds, percentile=p, goodput=goodput, allow_preemption=allow)
    rule = StopRule(slos, at["e2e"] * scale[3] if beat else None, "a run")
    stop = EarlyStop(rule)
    part = simulate(config, trace, stop=stop)
    truth = judge(whole.requests, int(whole.summary["preemptions"]), slos)
    event("whole run" if stop.stopped_at is None else "stopped")
    if stop.stopped_at is None:  # never stopped: the whole run, bit for bit
        assert part.requests.equals(whole.requests)
        assert same_summary(part.summary, whole.summary)
        return
    done = part.requests["finish"].notna().to_numpy()  # what ran is the whole run's start
    assert (part.requests["finish"][done] == whole.requests["finish"][done]).all()
    kind, verdict = judge_stopped(part.requests, part.summary, rule)
    event(kind)
    if kind == "fails":
        assert not truth.passed, (verdict.limits, truth)
        for name in ("ttft", "tpot", "e2e"):
            assert verdict.latency[name] <= truth.latency[name]
        assert verdict.latency["goodput"] >= truth.latency["goodput"]
    else:
        assert kind == "cannot beat" and truth.latency["e2e"] > rule.beat


def test_a_preemption_stops_the_run_as_a_memory_failure():
    config = make_config({**RUN, "tp": 1, "rate": 40.0, "requests": 24})  # ~4k KV tokens
    trace = _cached_trace(config)
    whole = simulate(config, trace)
    assert whole.summary["preemptions"] > 0
    stop = EarlyStop(StopRule(Slos(tpot=10.0)))
    part = simulate(config, trace, stop=stop)
    assert stop.stopped_at is not None and part.summary["stopped_at"] == stop.stopped_at
    assert 0 < part.summary["preemptions"] <= whole.summary["preemptions"]
    kind, verdict = judge_stopped(part.requests, part.summary, stop.rule)
    assert kind == "fails" and verdict.limits[0].startswith("memory: KV cache ran out")
    allowed = EarlyStop(StopRule(Slos(tpot=10.0, allow_preemption=True)))
    assert simulate(config, trace, stop=allowed).requests.equals(whole.requests)


def test_the_fast_early_stop_check_is_the_stop_reason_on_the_floors():
    from types import SimpleNamespace

    from specbatch.analysis.plan.slo import latency_floors, stop_reason

    rng = np.random.default_rng(11)
    rules = [StopRule(Slos(tpot=0.05)), StopRule(Slos(ttft=0.5, tpot=0.08, e2e=3.0)),
             StopRule(Slos(e2e=2.0, percentile=50, goodput=0.9), beat=1.5, beat_label="x"),
             StopRule(Slos(), beat=2.0), StopRule(Slos(tpot=0.05, allow_preemption=True))]
    seen = set()
    for trial in range(400):
        n = int(rng.integers(0, 40))
        arrival = np.sort(rng.uniform(0.0, 5.0, n))
        w = SimpleNamespace(n=n, arrival=arrival, output_len=rng.integers(1, 60, n))
        time = float(rng.uniform(0.0, 10.0))
        started = rng.random(n) < 0.7
        first = np.where(started, arrival + rng.uniform(0.0, 1.0, n), np.nan)
        finish = np.where(started & (rng.random(n) < 0.6), first + rng.uniform(0, 4, n), np.nan)
        preempted = bool(rng.random() < 0.1)
        for rule in rules:
            stop = EarlyStop(rule)
            for _ in range(2):  # the second call reuses the per-workload constants
                got = stop.stops(time, first, finish, preempted, w)
                want = stop_reason(rule, latency_floors(time, arrival, first, finish,
                                                        w.output_len), preempted, time)
                assert got == (want is not None), (trial, rule)
                seen.add(got)
    assert seen == {True, False}
