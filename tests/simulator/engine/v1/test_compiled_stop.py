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


class CalledStop(EarlyStop):
    """The planner's early stop without its limits: the kernel hands control back at each
    check and the driver calls it (the in-kernel rule's reference twin)."""

    limits = None


def assert_three_ways(fields: dict, rule: StopRule):
    """The numpy engine, the compiled loop calling the rule from Python and the compiled loop
    checking the rule's limits itself: the same stop, tables and summary."""
    (a, sa), (b, sb) = assert_same_run(fields, lambda: EarlyStop(rule))
    (_, sc), (c, _) = both(fields, lambda: CalledStop(rule))
    assert sc.stopped_at == sb.stopped_at
    assert_bit_identical(c.requests, b.requests)
    assert_bit_identical(c.steps, b.steps)
    assert sa.every == sb.every
    return (a, sa), (b, sb)


def rule_near(fields: dict, scale: tuple[float, float], beat: bool, tpot: bool = True,
              p: float = 90.0) -> StopRule:
    """A rule with bounds at ``scale`` times the whole run's p90 TPOT and e2e."""
    config = make_config(fields)
    values = per_request(simulate(config, _cached_trace(config)).requests)
    at = {n: float(np.percentile(values[n], p)) for n in ("tpot", "e2e")}
    slos = (Slos(tpot=at["tpot"] * scale[0], percentile=p) if tpot
            else Slos(e2e=at["e2e"] * scale[0], percentile=p, goodput=0.8))
    return StopRule(slos, at["e2e"] * scale[1] if beat else None, "a run")


@settings(max_examples=16, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from([{"policy": "dsd", "num_speculative_tokens": 4},
                        {"policy": "fixed", "num_speculative_tokens": 3},
                        {"policy": "ar"},
                        {"policy": "ar", "tp": 1, "requests": 32, "rate": 40.0},
                        {"policy": "fixed", "num_speculative_tokens": 2,
                         "async_scheduling": True, "host": "vllm"}]),
       st.sampled_from([2.0, 8.0, 40.0]), st.integers(0, 3),
       st.lists(st.floats(0.3, 1.3), min_size=2, max_size=2), st.booleans(), st.booleans())
def test_the_planners_early_stop_ends_both_engines_at_the_same_event(policy, rate, seed, scale,
                                                                     beat, tpot):
    fields = {**RUN, "rate": rate, **policy, "seed": seed}
    assert_three_ways(fields, rule_near(fields, scale, beat, tpot))


def test_over_1024_requests_the_checks_space_out_alike_in_the_kernel():
    # N = 1100: the first check at event 16, the later ones every 1100 // 64 = 17 events
    fields = {**RUN, "requests": 1100, "rate": 40.0, "policy": "fixed",
              "num_speculative_tokens": 2}
    rule = rule_near(fields, (0.9, 1.0), False)
    (a, sa), (b, sb) = assert_three_ways(fields, rule)
    assert sb.stopped_at is not None and sb.every == 17


def test_the_kernels_stop_rule_is_the_early_stops_call():
    # bounds drawn from the records' own floors at the check's time (some floors exactly at
    # a bound, counts over it near the percentile's need), so every comparison matters
    from types import SimpleNamespace

    from specbatch.analysis.plan.slo import latency_floors
    from specbatch.simulator.engine.stop_limits import pack_limits

    kernel = compiled.load_kernel()
    rng = np.random.default_rng(5)
    seen = set()
    for trial in range(300):
        n = int(rng.integers(0, 40))
        arrival = np.sort(rng.uniform(0.0, 5.0, n))
        w = SimpleNamespace(n=n, arrival=arrival, output_len=rng.integers(1, 60, n))
        started = rng.random(n) < 0.7
        first = np.where(started, arrival + rng.uniform(0.0, 1.0, n), np.nan)
        finish = np.where(started & (rng.random(n) < 0.6), first + rng.uniform(0, 4, n), np.nan)
        preemptions = (rng.random(n) < (0.1 if rng.random() < 0.3 else 0.0)).astype(np.int64)
        rec = SimpleNamespace(first_token=first, finish=finish, preemptions=preemptions)
        time = float(rng.uniform(0.0, 10.0))
        floors = latency_floors(time, arrival, first, finish, w.output_len)

        def at(name, floors=floors, n=n):  # a floor of some request, or a nearby value
            if not n:
                return 1.0
            v = float(floors[name][rng.integers(0, n)])
            return v if rng.random() < 0.5 else v * float(rng.uniform(0.8, 1.2))

        p = float(rng.choice([50.0, 90.0, 99.0]))
        g = float(rng.choice([0.5, 0.9, 0.99]))
        rules = [StopRule(Slos(tpot=at("tpot"), percentile=p, goodput=g)),
                 StopRule(Slos(ttft=at("ttft"), tpot=at("tpot"), e2e=at("e2e"), percentile=p,
                               goodput=g)),
                 StopRule(Slos(e2e=at("e2e"), percentile=p, goodput=g), beat=at("e2e"),
                          beat_label="x"),
                 StopRule(Slos(percentile=p), beat=at("e2e")), StopRule(Slos()),
                 StopRule(Slos(ttft=at("ttft"), goodput=g)),
                 StopRule(Slos(tpot=at("tpot"), allow_preemption=True))]
        for rule in rules:
            stop = EarlyStop(rule)
            limits = pack_limits(stop.limits(w))
            for t in (time, stop.first_due(w)):
                got = kernel.stop_rule(t, limits, arrival, w.output_len.astype(np.int64),
                                       first, finish, preemptions)
                assert got == stop(t, rec, w), (trial, rule, t)
                seen.add(got)
    assert seen == {True, False}
