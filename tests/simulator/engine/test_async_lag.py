"""vLLM's async scheduling lag (simulator.engine.async_lag), pinned by hand: every step takes
exactly 1 s (LinearCost: a 1 s pass whatever it holds, no overhead, no sampler), so step j runs
from j to j + 1 while the engine stays busy. With the lag, the step starting at j was scheduled
at j − 1: it sees the arrivals up to j − 1, and the slots of the requests that finished in the
step ending at j are still held."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import pytest

from specbatch.simulator.config.sim_config import load_config
from specbatch.simulator.cost.features.host import CLIENT_TTFT_S as C
from specbatch.simulator.engine.core import Engine
from specbatch.simulator.engine.request_state import Row
from specbatch.simulator.engine.v1.fast import V1Fast
from specbatch.simulator.engine.v1.step import V1Step
from specbatch.simulator.policies.registry import make_policy
from specbatch.simulator.run import simulate
from specbatch.simulator.workload.arrivals import build_workload
from tests.simulator.helpers import LinearCost, const_trace

ONE_SECOND = LinearCost(overhead=0.0, fixed=1.0, per_token=0.0)


def run(tmp_path, rows: dict, lag: bool, **kw):
    """The workload ``rows`` (prompt 4 tokens each) under policy ar; returns (first token,
    finish) per request, engine times (the client's constant C taken off, to 1 ns)."""
    path = tmp_path / "workload.csv"
    n = len(rows["output_len"])
    pd.DataFrame({"prompt_len": [4] * n, **rows}).to_csv(path, index=False)
    trace = const_trace(n_requests=n, output_len=8, prompt_len=4)
    config = load_config(None, trace="synth", requests=n, workload=str(path), arrival="trace",
                         policy="ar", verify_cost="none", async_scheduling=lag, **kw)
    req = simulate(config, trace, cost_model=ONE_SECOND).requests
    return ([round(t - C, 9) for t in req["first_token"].tolist()],
            [round(t - C, 9) for t in req["finish"].tolist()])


@pytest.mark.parametrize("arrival", [0.5, 1.0])
def test_an_arrival_while_a_step_runs_joins_the_second_step_after_it(tmp_path, arrival):
    """uid 0 prefills in step 0 (0-1) and decodes on; uid 1 arrives at 0.5 (while step 0
    runs) or at 1.0 (as step 1 starts, scheduled at 0). Without the lag step 1 admits it
    (first token at 2); with it step 1 was scheduled at 0, so step 2, scheduled at 1, admits
    it: first token at 3, and its 4 tokens end at 6 instead of 5."""
    rows = {"output_len": [4, 4], "arrival": [0.0, arrival]}
    assert run(tmp_path, rows, lag=False, max_num_seqs=2) == ([1.0, 2.0], [4.0, 5.0])
    assert run(tmp_path, rows, lag=True, max_num_seqs=2) == ([1.0, 3.0], [4.0, 6.0])


def test_a_slot_freed_in_a_step_is_reused_one_step_later(tmp_path):
    """max_num_seqs = 2: uids 0 and 1 prefill in step 0; uid 0's second token ends step 1
    (at 2); uid 2 waits from 0. Without the lag step 2 (2-3) admits it; with it step 2 was
    scheduled at 1, while uid 0 still held its slot, so uid 2 joins step 3: first token at 4,
    finish at 5. uid 1 decodes throughout, unchanged."""
    rows = {"output_len": [2, 6, 2], "arrival": [0.0, 0.0, 0.0]}
    assert run(tmp_path, rows, lag=False, max_num_seqs=2) == ([1.0, 1.0, 3.0],
                                                              [2.0, 6.0, 4.0])
    assert run(tmp_path, rows, lag=True, max_num_seqs=2) == ([1.0, 1.0, 4.0],
                                                             [2.0, 6.0, 5.0])


def test_an_empty_lagged_schedule_is_made_again_with_everything_known(tmp_path):
    """max_num_seqs = 1: uid 0 finishes in step 1 (at 2) and nothing else runs, so the
    schedule made at 1 for step 2 is empty (uid 1 has no slot yet); vLLM then waits for step
    1's output and schedules uid 1 at 2, as without the lag."""
    rows = {"output_len": [2, 2], "arrival": [0.0, 0.0]}
    want = ([1.0, 3.0], [2.0, 4.0])
    assert run(tmp_path, rows, lag=False, max_num_seqs=1) == want
    assert run(tmp_path, rows, lag=True, max_num_seqs=1) == want


def test_an_idle_engine_schedules_an_arrival_at_once(tmp_path):
    """uid 0 finishes at 2; uid 1 arrives at 5 to an idle engine (and uid 2 at 5.5, while
    uid 1's prefill runs): uid 1 runs at once under both rules; uid 2, arriving at a busy
    engine, waits one more step with the lag (step 6-7 was scheduled at 5)."""
    rows = {"output_len": [2, 3, 2], "arrival": [0.0, 5.0, 5.5]}
    assert run(tmp_path, rows, lag=False, max_num_seqs=4) == ([1.0, 6.0, 7.0],
                                                              [2.0, 8.0, 8.0])
    assert run(tmp_path, rows, lag=True, max_num_seqs=4) == ([1.0, 6.0, 8.0],
                                                             [2.0, 8.0, 9.0])


@dataclass(frozen=True)
class OneSecondSums(LinearCost):
    """ONE_SECOND priced from the batch sums too (simulator.cost.interface.SumsCostModel),
    so the steps without the general composer (simulator.engine.v1.fast) take what they
    cover."""

    def time_from_sums(self, role, n, sq, skv, sqkv, sqq) -> float:
        return self.step_time(role, np.array([sq]), np.array([skv]))


@pytest.mark.parametrize("path", ["fast", "composer", "reference"])
def test_slots_held_by_the_finished_are_passed_to_the_composer_not_written(
        tmp_path, monkeypatch, path):
    """max_num_seqs = 4: uids 0-2 prefill in step 0 (0-1), uids 3-5 arrive at 0.5; uids 0
    and 1 finish in step 1 (1-2). Step 2, scheduled at 1, sees uids 3-5 waiting while uids 0
    and 1 still hold their slots: the composer is told held = 2 and seats uid 3 only (4 − 2
    held − 1 running); step 3 (held = 0) seats uids 4 and 5. At no step does the running
    batch (those finishing in it included) pass max_num_seqs − held, and the engine's
    ``max_seqs`` reads 4 before, during and after every step: nothing writes it. Through the
    step without the general composer (its admission after the decoding requests commit),
    the general composer, and its per-request reference twin."""
    csv = tmp_path / "workload.csv"
    pd.DataFrame({"prompt_len": [4] * 6, "output_len": [2, 2, 6, 6, 6, 6],
                  "arrival": [0.0] * 3 + [0.5] * 3}).to_csv(csv, index=False)
    trace = const_trace(n_requests=6, output_len=8, prompt_len=4)
    config = load_config(None, trace="synth", requests=6, workload=str(csv), arrival="trace",
                         policy="ar", verify_cost="none", async_scheduling=True,
                         max_num_seqs=4, engine="numpy")
    cost = OneSecondSums(**vars(ONE_SECOND)) if path == "fast" else ONE_SECOND
    engine = Engine(config, trace, build_workload(config, trace), cost,
                    make_policy(config, trace.K), capacity=config.kv_capacity,
                    reference=path == "reference")
    engine.fast_paths = path == "fast"
    seqs = engine.max_seqs
    seen, fast_admissions = [], []
    step, admit_after = V1Step.step, V1Fast.admit_after

    def step_spy(composer, rep, time, held=0):
        assert engine.max_seqs == seqs  # during: the engine's field as it was built
        deferred = rep.deferred
        duration = step(composer, rep, time, held)
        finished = (0 if rep.deferred is None or rep.deferred is deferred
                    else rep.deferred.shape[1])
        seen.append((round(time, 9), held, sorted(rep.state[Row.UID].tolist()), finished))
        assert rep.state.shape[1] + finished <= seqs - held
        return duration

    def admit_spy(fast, rep, left, free, held=0):
        fast_admissions.append(held)
        return admit_after(fast, rep, left, free, held)

    monkeypatch.setattr(V1Step, "step", step_spy)
    monkeypatch.setattr(V1Fast, "admit_after", admit_spy)
    assert engine.lag and engine.max_seqs == 4
    engine.run()
    assert engine.max_seqs == seqs
    assert seen[:4] == [(0.0, 0, [0, 1, 2], 0), (1.0, 0, [2], 2), (2.0, 2, [2, 3], 0),
                        (3.0, 0, [2, 3, 4, 5], 0)]
    assert (2 in fast_admissions) == (path == "fast")


def test_the_ngram_drafters_speculative_run_keeps_the_synchronous_rule():
    """vLLM turns async scheduling off for the CPU n-gram proposer (async_overhead), asked
    for or by default; its AR arm, and every run under auto but n-gram's and vllm-v0's, lag."""
    from specbatch.simulator.engine.async_lag import lags

    for asked in (True, "auto"):
        on = load_config(None, async_scheduling=asked)
        assert lags(on) and lags(on.replace(policy="ar"))
        ngram = load_config(None, async_scheduling=asked, draft="ngram")
        assert not lags(ngram) and lags(ngram.replace(policy="ar"))
        assert not lags(load_config(None, async_scheduling=asked, scheduler="vllm-v0"))
    assert not lags(load_config(None, async_scheduling=False, policy="ar"))


@pytest.mark.parametrize("kw", [
    dict(policy="ar", max_num_seqs=4),  # runs of identical decode steps (simulator.engine.v1.runs)
    dict(policy="ar", kv_mode="paged", kv_capacity=300, block_size=8, max_num_seqs=6,
         enable_prefix_caching=True),
    dict(policy="tetris", k=2, extra=1, kv_mode="paged", kv_capacity=250, block_size=8),
    dict(policy="dsd", k=4, kv_mode="paged", kv_capacity=240, block_size=16, max_num_seqs=10,
         replicas=2, max_num_batched_tokens=64),
    dict(policy="fixed", k=3, kv_capacity=400, max_num_seqs=5, scheduling_policy="priority"),
])
def test_the_lagged_engine_matches_its_per_request_reference(synth_trace_natural, kw):
    """Open arrivals into few slots and a small pool (preemptions), lagged: the vectorised
    vllm-v1 engine, its fast paths and runs, equal the composer's per-request twin."""
    config = load_config(None, trace="synth", requests=32, arrival="poisson", rate=40.0,
                         async_scheduling=True, **kw)
    cost = LinearCost(overhead=0.0, fixed=0.03125, per_token=0.0009765625)
    fast = simulate(config, synth_trace_natural, cost_model=cost)
    slow = simulate(config, synth_trace_natural, cost_model=cost, reference=True)
    pd.testing.assert_frame_equal(fast.requests, slow.requests, check_exact=True)
    pd.testing.assert_frame_equal(fast.steps, slow.steps, check_exact=True)
    sync = simulate(config.replace(async_scheduling=False), synth_trace_natural,
                    cost_model=cost)
    assert not fast.requests["first_token"].equals(sync.requests["first_token"])
