"""Engine specification: event tie-break, admission limits, routing, conservation, parity."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specbatch.simulator.config.sim_config import load_config
from specbatch.simulator.engine import request_state as state
from specbatch.simulator.engine.request_state import RECORD_ROWS, Outcome, Row
from specbatch.simulator.metrics import SCHEDULE_STEP_COLUMNS
from specbatch.simulator.run import simulate
from tests.simulator.helpers import (
    CHAIN_POLICIES,
    LinearCost,
    StepTimeOnly,
    const_trace,
    policy_settings,
)

COST = LinearCost()


def run(trace, **kw):
    return simulate(load_config(None, trace="synth", **kw), trace, cost_model=COST)


def test_arrival_at_step_end_joins_the_next_step():
    """Tie-break: an arrival at t is queued before the replica ending a step at t composes the
    next one. A's prefill ends at 0.25·4 + 0.5 = 1.5 exactly; B arrives at 1.5 and is prefilled
    in the step starting at 1.5 (prefill first). Synchronous scheduling: under vLLM's async
    scheduling the step at 1.5 was composed at 0 (tests/simulator/engine/test_async_lag.py)."""
    trace = const_trace(n_requests=2, output_len=3, prompt_len=4, arrival=np.array([0.0, 1.5]))
    steps = run(trace, policy="ar", requests=2, arrival="trace", async_scheduling=False).steps
    assert steps["end"].iloc[0] == 1.5
    assert steps["time"].iloc[1] == 1.5
    assert steps["prefill_tokens"].iloc[1] == 4
    late = const_trace(n_requests=2, output_len=3, prompt_len=4,
                       arrival=np.array([0.0, 1.5 + 2**-20]))
    steps = run(late, policy="ar", requests=2, arrival="trace", async_scheduling=False).steps
    assert steps["prefill_tokens"].iloc[1] == 0  # B missed the boundary: A decodes first


def test_burst_arrivals_all_join_the_first_step():
    trace = const_trace(n_requests=8)
    steps = run(trace, policy="fixed", requests=8, max_num_seqs=8).steps
    assert steps["time"].iloc[0] == 0.0
    assert steps["prefill_tokens"].iloc[0] == 8 * 4
    assert steps["batch"].iloc[1] == 8


def check_conservation(result, trace_lens):
    req, steps = result.requests, result.steps
    assert sorted(req["uid"]) == list(range(len(req)))  # nobody lost or duplicated
    assert (req["tokens"] == req["output_len"]).all()
    assert req["output_len"].tolist() == trace_lens[req["trace_index"]].tolist()
    assert int(steps["emitted"].sum()) == int(req["output_len"].sum())
    assert result.summary["tokens"] == int(req["output_len"].sum())
    assert (req["arrival"] <= req["first_token"]).all()
    assert (req["first_token"] <= req["finish"]).all()
    assert (req["accepted"] <= req["verified"]).all() and (req["verified"] <= req["drafted"]).all()


@pytest.mark.parametrize("kw", [
    dict(policy="fixed", verify="token"),
    dict(policy="tetris", extra=1, verify="block", replicas=3, router="least_outstanding",
         arrival="poisson", rate=5.0),
    dict(policy="threshold", extra=2, enable_chunked_prefill=True, max_num_batched_tokens=64,
         replicas=2, arrival="gamma", rate=20.0, cv=3.0),
    dict(policy="dsd", max_num_seqs=5, kv_capacity=2000, max_num_batched_tokens=300),
    dict(policy="hindsight", verify="block", requests=100),
    dict(policy="oracle", verify="block", extra=2, budget=7),
])
def test_conservation(synth_trace_natural, kw):
    kw = {"requests": 40, **kw}
    result = run(synth_trace_natural, **kw)
    check_conservation(result, synth_trace_natural.output_len)


def test_max_num_seqs_and_kv_capacity_bound_the_batch(synth_trace_natural):
    result = run(synth_trace_natural, policy="fixed", requests=30, max_num_seqs=6)
    assert result.steps["batch"].max() == 6
    trace = const_trace(n_requests=6, output_len=10, prompt_len=4, depth=4)
    footprint = 4 + 10 + 3 + 1  # prompt + output + K + 1 (fixed k = 3)
    result = run(trace, policy="fixed", requests=6, kv_capacity=2 * footprint + 1)
    assert result.steps["batch"].max() == 2
    check_conservation(result, trace.output_len)


def test_round_robin_and_least_outstanding_routing():
    trace = const_trace(n_requests=12)
    rr = run(trace, policy="fixed", requests=12, replicas=3).requests
    assert rr["replica"].tolist() == [u % 3 for u in range(12)]
    lo = run(trace, policy="fixed", requests=12, replicas=3, router="least_outstanding").requests
    assert np.bincount(lo["replica"]).tolist() == [4, 4, 4]


def test_vectorised_step_matches_per_request_reference(synth_trace_natural):
    """The vectorised decode (hash, τ, emission) equals its per-request loop twin exactly."""
    for kw in (dict(policy="tetris", extra=1, verify="block"),
               dict(policy="threshold", extra=1, enable_chunked_prefill=True,
                    max_num_batched_tokens=128)):
        config = load_config(None, trace="synth", requests=24, **kw)
        fast = simulate(config, synth_trace_natural, cost_model=COST)
        slow = simulate(config, synth_trace_natural, cost_model=COST, reference=True)
        pd.testing.assert_frame_equal(fast.requests, slow.requests)
        pd.testing.assert_frame_equal(fast.steps, slow.steps)


def test_chunked_prefill_respects_token_budget(synth_trace_natural):
    result = run(synth_trace_natural, policy="fixed", requests=20, enable_chunked_prefill=True,
                 max_num_batched_tokens=100)
    steps = result.steps
    assert (steps["prefill_tokens"] <= 100).all()
    decode_tokens = steps["verified"] + steps["batch"]
    assert (steps["prefill_tokens"][steps["prefill_tokens"] > 0]
            <= np.maximum(100 - decode_tokens, 0)[steps["prefill_tokens"] > 0]).all()


@settings(max_examples=25, deadline=None)
@given(
    policy=st.sampled_from(CHAIN_POLICIES),
    verify=st.sampled_from(["token", "block"]),
    k=st.integers(1, 4),
    extra=st.integers(0, 3),
    max_num_seqs=st.integers(1, 12),
    replicas=st.integers(1, 3),
    router=st.sampled_from(["round_robin", "least_outstanding"]),
    chunk=st.sampled_from([None, 7, 64]),
    arrival=st.sampled_from(["burst", "poisson", "gamma"]),
    kv_slack=st.sampled_from([None, 0, 150]),
    budget=st.sampled_from([None, 0, 5]),
    seed=st.integers(0, 3),
)
def test_conservation_property(synth_trace_natural, policy, verify, k, extra, max_num_seqs,
                               replicas, router, chunk, arrival, kv_slack, budget, seed):
    """Any valid config: every request finishes exactly once with its recorded length."""
    trace = synth_trace_natural
    depth = max(6 if policy == "dsd" else (k if policy == "fixed" else k + extra), 2)
    footprint = int((trace.prompt_len + trace.output_len).max()) + depth + 1
    kw = dict(policy=policy, verify=verify, k=k, extra=extra, max_num_seqs=max_num_seqs,
              **policy_settings(policy),
              replicas=replicas, router=router, arrival=arrival, rate=30.0, cv=2.0, seed=seed,
              budget=budget, requests=18,
              kv_capacity=None if kv_slack is None else footprint + kv_slack)
    if chunk is not None:
        kw.update(enable_chunked_prefill=True, max_num_batched_tokens=chunk)
    check_conservation(run(trace, **kw), trace.output_len)


@pytest.mark.parametrize("kw", [
    dict(policy="tetris", extra=1, verify="block"),
    dict(policy="threshold", extra=2, verify="token", threshold_mode="per_token"),
    dict(policy="dsd", max_num_seqs=7, enable_chunked_prefill=True, max_num_batched_tokens=90),
    dict(policy="ar", max_num_seqs=5),
])
def test_cost_sums_fast_path_matches_per_pass_calls(synth_trace_natural, kw):
    """Draft passes and the verify pass timed from one step's batch sums
    (``time_from_sums``) give bit-identical step times to one ``step_time`` call per pass,
    uniform and ragged draft lengths alike (roofline and profiled-style models)."""
    from specbatch.simulator.run import build_cost

    config = load_config(None, trace="synth", requests=30, **kw)
    roofline = build_cost(config)
    fast = simulate(config, synth_trace_natural, cost_model=roofline)
    slow = simulate(config, synth_trace_natural, cost_model=StepTimeOnly(roofline))
    assert fast.steps["draft_time"].tolist() == slow.steps["draft_time"].tolist()
    pd.testing.assert_frame_equal(fast.steps, slow.steps, check_exact=True)
    pd.testing.assert_frame_equal(fast.requests, slow.requests, check_exact=True)


def test_state_and_outcome_rows_line_up_as_the_decode_step_assumes():
    """One add gives (c, trace row) = (PROMPT, BASE) + t; the outcome rows EMITTED..ACCEPTED
    are the increments of the last state rows POS..N_ACCEPTED, which are the per-request
    record at finish; the Gram product weighs by ONE and VERIFIED. check_layout asserts it
    at import and fails on a range that would silently sum the wrong rows."""
    state.check_layout()
    assert list(Row)[state.CONTEXT_ROWS] == [Row.PROMPT, Row.BASE]
    assert list(Outcome)[state.POSITION_OUTCOMES] == [Outcome.KV, Outcome.ROW]
    assert [r.name for r in list(Row)[state.COMMITTED_ROWS]] == [
        "POS", "N_STEPS", "N_DRAFTED", "N_VERIFIED", "N_ACCEPTED"]
    assert len(RECORD_ROWS) == len(list(Outcome)[state.INCREMENT_OUTCOMES])


@pytest.mark.parametrize("name, broken", [
    ("WEIGHT_OUTCOMES", slice(1, 4)), ("CONTEXT_ROWS", slice(5, 7)),
    ("COUNTER_OUTCOMES", slice(2, 5))])
def test_a_misaligned_named_range_fails_the_layout_check(monkeypatch, name, broken):
    monkeypatch.setattr(state, name, broken)
    with pytest.raises(AssertionError, match="simulator.engine.request_state layout"):
        state.check_layout()


def test_every_step_is_one_named_record_and_the_columns_are_its_fields(synth_trace_natural):
    result = simulate(load_config(None, trace="synth", policy="tetris", extra=1, requests=6),
                      synth_trace_natural, cost_model=LinearCost())
    assert state.STEP_COLUMNS == state.StepRecord._fields
    assert tuple(result.steps.columns) == state.STEP_COLUMNS + SCHEDULE_STEP_COLUMNS
    assert state.FLOAT_STEP_COLUMNS == ("time", "end", "draft_time", "target_time",
                                        "verify_time", "overhead_time")
    assert all(result.steps[c].dtype == np.float64 for c in state.FLOAT_STEP_COLUMNS)


def test_step_record_takes_every_field_by_keyword_in_field_order():
    """The engines' fast constructor names each field; its parameters are the record's."""
    import inspect

    params = inspect.signature(state.step_record).parameters
    assert tuple(params) == state.StepRecord._fields
    assert all(p.kind is p.KEYWORD_ONLY and p.default is p.empty for p in params.values())
    values = {name: i for i, name in enumerate(state.StepRecord._fields)}
    record = state.step_record(**values)
    assert type(record) is state.StepRecord and record == state.StepRecord(**values)
