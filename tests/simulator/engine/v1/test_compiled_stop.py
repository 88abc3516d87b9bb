"""The compiled vllm-v1 loop under an early stop (simulator.engine.core's ``stop`` hook): the
kernel hands control back where the numpy engine calls the rule (same event count, same time,
same records), so a stopped run's request and step tables and its ``stopped_at`` equal the
numpy engine's bit for bit, and a rule that never stops leaves the whole run's."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specbatch.analysis.plan.slo import EarlyStop, Slos, StopRule, per_request
from specbatch.analysis.sweep.executors import _cached_trace
from specbatch.simulator.config.sim_config import make_config
from specbatch.simulator.engine.v1 import compiled
from specbatch.simulator.run import simulate
from tests.simulator.engine.v1.test_compiled import assert_bit_identical

pytestmark = pytest.mark.skipif(not compiled.numba_installed(),
                                reason="numba not installed (the fast extra)")

RUN = {"trace": "default", "requests": 24, "target": "vicuna-33b", "draft": "vicuna-68m",
       "max_num_seqs": 64, "kv_mode": "paged", "gpu_memory_utilization": 0.9,
       "arrival": "poisson", "cost": "roofline", "host": "fixed"}


class Probe:
    """A stop rule that logs every call (time and the records it reads) and stops at call
    ``at`` (None: never); ``grow`` sets ``every`` at the first call, as EarlyStop does."""

    def __init__(self, every: int, at: int | None, grow: int | None = None) -> None:
        self.every, self.at, self.grow = every, at, grow
        self.stopped_at = None
        self.calls: list = []

    def __call__(self, time, rec, workload) -> bool:
        self.calls.append((time, rec.first_token.copy(), rec.finish.copy(),
                           rec.preemptions.copy()))
        if self.grow is not None:
            self.every = self.grow
        return self.at is not None and len(self.calls) >= self.at


def both(fields: dict, make_stop):
    """(numpy result, its stop), (compiled result, its stop) of one configuration."""
    out = []
    for engine in ("numpy", "compiled"):
        config = make_config({**fields, "engine": engine})
        stop = make_stop()
        out.append((simulate(config, _cached_trace(config), stop=stop), stop))
    return out


def assert_same_run(fields: dict, make_stop) -> tuple:
    (a, sa), (b, sb) = both(fields, make_stop)
    assert sa.stopped_at == sb.stopped_at
    assert_bit_identical(a.requests, b.requests)
    assert_bit_identical(a.steps, b.steps)
    assert list(a.summary) == list(b.summary)
    return (a, sa), (b, sb)


def assert_same_calls(sa: Probe, sb: Probe) -> None:
    assert len(sa.calls) == len(sb.calls)
    for x, y in zip(sa.calls, sb.calls):
        assert x[0] == y[0]
        for u, v in zip(x[1:], y[1:]):
            assert np.array_equal(u, v, equal_nan=True)


def test_a_rule_that_never_stops_is_called_at_the_numpy_engines_events_and_leaves_the_run():
    (a, sa), (b, sb) = assert_same_run({**RUN, "rate": 8.0, "policy": "fixed",
                                        "num_speculative_tokens": 3},
                                       lambda: Probe(every=1, at=None))
    assert sa.stopped_at is None and len(sa.calls) > 2 * 24  # every arrival and step end
    assert_same_calls(sa, sb)
    assert "stopped_at" not in b.summary
    # stopping at the last call: before the last step's end, every request finished
    last = len(sa.calls)
    (a, sa), (b, sb) = assert_same_run({**RUN, "rate": 8.0, "policy": "fixed",
                                        "num_speculative_tokens": 3},
                                       lambda: Probe(every=1, at=last))
    assert sb.stopped_at == a.steps["end"].iloc[-1] and b.requests["finish"].notna().all()


def test_a_burst_counts_every_arrival_and_the_schedule_event():
    # 24 arrivals at t = 0, their SCHEDULE, then one STEP_END per step: the 26th event is the
    # first step's end (one call per event, the first 25 at t = 0)
    (a, sa), (b, sb) = assert_same_run({**RUN, "arrival": "burst", "policy": "fixed",
                                        "num_speculative_tokens": 2},
                                       lambda: Probe(every=1, at=None))
    times = [c[0] for c in sb.calls]
    assert times[:25] == [0.0] * 25 and times[25] == a.steps["end"].iloc[0]
    assert len(times) == 24 + 1 + len(a.steps)
    assert_same_calls(sa, sb)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from([{"policy": "fixed", "num_speculative_tokens": 1},
                        {"policy": "ar"},
                        {"policy": "dsd", "num_speculative_tokens": 4},
                        {"policy": "fixed", "num_speculative_tokens": 3, "verify": "block"},
                        {"policy": "tetris", "num_speculative_tokens": 2, "extra": 1}]),
       st.sampled_from([{}, {"kv_mode": "reserve"}, {"enable_chunked_prefill": False},
                        {"arrival": "burst"}, {"tp": 1, "requests": 32},
                        {"tp": 1, "requests": 32, "enable_prefix_caching": True},
                        {"long_prefill_token_threshold": 64},
                        {"scheduling_policy": "priority", "kv_mode": "reserve",
                         "kv_capacity": 4000},
                        {"async_scheduling": True, "host": "vllm"},  # engine.async_lag
                        {"async_scheduling": True, "host": "vllm", "max_num_seqs": 4,
                         "kv_mode": "reserve", "kv_capacity": 4000}]),
       st.sampled_from([1.0, 8.0, 40.0]), st.integers(0, 3), st.integers(1, 20),
       st.one_of(st.none(), st.integers(1, 40)), st.one_of(st.none(), st.integers(1, 9)))
def test_a_stopped_run_is_the_numpy_engines_bit_for_bit(policy, knobs, rate, seed, every, at,
                                                        grow):
    fields = {**RUN, **policy, **knobs, "rate": rate, "seed": seed}
    (a, sa), (b, sb) = assert_same_run(fields, lambda: Probe(every, at, grow))
    assert_same_calls(sa, sb)
    if sa.stopped_at is not None:
        assert a.summary["stopped_at"] == b.summary["stopped_at"] == sa.stopped_at


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from([{"policy": "dsd", "num_speculative_tokens": 4},
                        {"policy": "fixed", "num_speculative_tokens": 3}]),
       st.sampled_from([2.0, 8.0, 40.0]), st.integers(0, 3),
       st.lists(st.floats(0.3, 1.3), min_size=2, max_size=2), st.booleans())
def test_the_planners_early_stop_ends_both_engines_at_the_same_event(policy, rate, seed, scale,
                                                                     beat):
    fields = {**RUN, **policy, "rate": rate, "seed": seed}
    config = make_config(fields)
    whole = simulate(config, _cached_trace(config))
    values = per_request(whole.requests)
    at = {n: float(np.percentile(values[n], 90)) for n in ("tpot", "e2e")}
    rule = StopRule(Slos(tpot=at["tpot"] * scale[0], percentile=90),
                    at["e2e"] * scale[1] if beat else None, "a run")
    assert_same_run(fields, lambda: EarlyStop(rule))


def test_a_preemption_stops_both_engines_as_a_memory_failure():
    # ~4k KV tokens: preempts
    fields = {**RUN, "tp": 1, "rate": 40.0, "policy": "fixed", "num_speculative_tokens": 2}
    (a, sa), _ = assert_same_run(fields, lambda: EarlyStop(StopRule(Slos(tpot=10.0))))
    assert sa.stopped_at is not None and a.summary["preemptions"] > 0


def test_early_stops_with_several_replicas_stay_on_numpy():
    config = make_config({**RUN, "replicas": 2, "policy": "fixed", "engine": "compiled"})
    with pytest.raises(compiled.NotCovered, match="early stop with several replicas"):
        simulate(config, _cached_trace(config), stop=Probe(1, None))


AR_RUNS = [{},  # runs end at each finish and at the arrival a free slot would admit
           {"max_num_seqs": 4},  # a full batch: arrivals pop while a run goes on
           {"tp": 1, "requests": 32, "rate": 40.0},  # a short pool: runs cut to its blocks
           {"enable_prefix_caching": True, "tp": 1, "requests": 32},
           {"async_scheduling": True, "host": "vllm"},  # pending arrivals and held slots
           {"async_scheduling": True, "host": "vllm", "max_num_seqs": 4},
           {"kv_mode": "reserve", "scheduling_policy": "priority", "kv_capacity": 4000},
           {"max_num_batched_tokens": 6, "enable_chunked_prefill": True}]


@pytest.mark.parametrize("knobs", AR_RUNS, ids=[str(i) for i in range(len(AR_RUNS))])
def test_ars_runs_of_identical_steps_are_one_event_as_in_the_numpy_engine(knobs):
    # every event checked: the numpy engine takes runs of several decode steps as one event
    # (fewer calls than arrivals + steps), and the kernel calls the rule at the same events
    # with the same records (a run's later steps, finishes included, committed at its start)
    fields = {**RUN, "policy": "ar", "rate": 8.0, **knobs}
    (a, sa), (b, sb) = assert_same_run(fields, lambda: Probe(every=1, at=None))
    assert_same_calls(sa, sb)
    assert sb.stopped_at is None
    assert len(sa.calls) < len(a.steps) + fields["requests"]  # runs were taken
    # stopped at every 7th event in turn: the same stop, rows and records
    for at in range(1, len(sa.calls) + 1, 7):
        (_, sa2), (_, sb2) = assert_same_run(fields, lambda: Probe(every=1, at=at))
        assert sa2.stopped_at == sb2.stopped_at == sa.calls[at - 1][0]
