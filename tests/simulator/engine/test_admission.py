"""The admission hook (simulator.engine.admission): the waiting queue's order is the config's
``scheduling_policy``, vLLM's ``SchedulingPolicy`` (vllm/v1/core/sched/request_queue.py).

"fcfs" admits in arrival order; "priority" by (priority, arrival, uid), smaller first, as
``PriorityRequestQueue`` orders requests by ``Request.__lt__`` (vllm/v1/request.py). The
hand-computed runs use the exact LinearCost (tests/simulator/helpers.py, no sampler time): one
request at a time (max_num_seqs 1), ``ar`` (one token a step), prompts of 4 and outputs of 2, so a
request's prefill step lasts 0.25·4 + 0.5 = 1.5 s and its decode step 0.25·1 + 0.5 = 0.75 s: the
k-th request served emits its first token at 2.25·k − 0.75 and finishes at 2.25·k; its client
sees both C = ``client_ttft_s`` (the default, 2 ms) later.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specbatch.errors import SpecbatchError
from specbatch.simulator.config.sim_config import load_config
from specbatch.simulator.cost.features.host import CLIENT_TTFT_S as C
from specbatch.simulator.engine.admission import PriorityWaiting, priority_rank
from specbatch.simulator.run import simulate
from specbatch.simulator.workload.arrivals import Workload
from tests.simulator.helpers import LinearCost, const_trace


def run_file(tmp_path, rows: dict, **kw):
    path = tmp_path / "workload.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    n = len(rows["prompt_len"])
    trace = const_trace(n_requests=n, output_len=2, prompt_len=4)
    config = load_config(None, trace="synth", requests=n, workload=str(path), arrival="trace",
                         policy="ar", max_num_seqs=1, verify_cost="none", **kw)
    return simulate(config, trace, cost_model=LinearCost())


@pytest.mark.parametrize("scheduler", ["vllm-v1", "vllm-v0"])
@pytest.mark.parametrize("policy, served", [("fcfs", [0, 1, 2]), ("priority", [1, 2, 0])])
def test_burst_is_served_in_the_policy_s_order(tmp_path, scheduler, policy, served):
    """Three requests at t = 0 with priorities (2, 0, 1): FCFS serves uid 0, 1, 2; priority
    serves uid 1 (priority 0), then 2, then 0."""
    rows = {"prompt_len": [4, 4, 4], "output_len": [2, 2, 2], "arrival": [0.0, 0.0, 0.0],
            "priority": [2, 0, 1]}
    req = run_file(tmp_path, rows, scheduler=scheduler, scheduling_policy=policy).requests
    finish = {uid: 2.25 * (k + 1) for k, uid in enumerate(served)}
    assert req["finish"].tolist() == [finish[u] + C for u in range(3)]
    assert req["first_token"].tolist() == [finish[u] - 0.75 + C for u in range(3)]


def test_a_later_arrival_of_better_priority_overtakes_the_waiting_not_the_running(tmp_path):
    """uid 0 (priority 0) runs from t = 0; uid 1 (priority 5) waits; uid 2 (priority 1)
    arrives at 0.1 and is admitted before uid 1 when uid 0 finishes at 2.25."""
    rows = {"prompt_len": [4, 4, 4], "output_len": [2, 2, 2], "arrival": [0.0, 0.0, 0.1],
            "priority": [0, 5, 1]}
    req = run_file(tmp_path, rows, scheduling_policy="priority").requests
    assert req["finish"].tolist() == [2.25 + C, 6.75 + C, 4.5 + C]
    fcfs = run_file(tmp_path, rows, scheduling_policy="fcfs").requests
    assert fcfs["finish"].tolist() == [2.25 + C, 4.5 + C, 6.75 + C]


def test_equal_priorities_fall_back_to_arrival_then_uid(tmp_path):
    """vLLM's tie-breaks: arrival time, then the request id (here the uid); a workload of
    equal priorities runs exactly as FCFS."""
    rows = {"prompt_len": [4, 4, 4], "output_len": [2, 2, 2], "arrival": [0.0, 0.0, 0.2],
            "priority": [7, 7, 7]}
    prio = run_file(tmp_path, rows, scheduling_policy="priority").requests
    assert prio["finish"].tolist() == [2.25 + C, 4.5 + C, 6.75 + C]
    fcfs = run_file(tmp_path, rows, scheduling_policy="fcfs").requests
    pd.testing.assert_frame_equal(prio, fcfs)


def workload(priority, arrival) -> Workload:
    n = len(priority)
    zeros = np.zeros(n, dtype=np.int64)
    return Workload(trace_index=zeros, arrival=np.asarray(arrival, dtype=np.float64),
                    prompt_len=zeros + 1, output_len=zeros + 1, row_base=zeros,
                    priority=np.asarray(priority, dtype=np.int64))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(-3, 3), st.sampled_from([0.0, 0.5, 1.0])),
                min_size=1, max_size=12),
       st.lists(st.booleans(), max_size=30))
def test_the_priority_queue_pops_in_vllm_s_request_order(requests, ops):
    """Any interleaving of adds (``append`` or ``appendleft``: a preempted request is re-added
    by priority, not to the front) and pops returns what a list sorted by vLLM's key
    (priority, arrival, uid) returns."""
    priority, arrival = zip(*requests)
    queue = PriorityWaiting(priority_rank(workload(priority, arrival)))
    model: list[int] = []
    pending = list(range(len(requests)))
    for i, pop in enumerate(ops):
        if pop and model:
            model.sort(key=lambda u: (priority[u], arrival[u], u))
            assert queue[0] == model[0]
            assert queue.popleft() == model.pop(0)
        elif pending:
            u = pending.pop()
            (queue.append if i % 2 else queue.appendleft)(u)
            model.append(u)
        assert len(queue) == len(model) and bool(queue) == bool(model)
        assert list(queue) == sorted(model, key=lambda u: (priority[u], arrival[u], u))


def test_priority_admission_refuses_paged_kv():
    with pytest.raises(SpecbatchError, match="field scheduling_policy: expected fcfs with "
                       "kv_mode paged"):
        load_config(None, scheduling_policy="priority", kv_mode="paged")


def test_a_priority_column_must_hold_integers(tmp_path):
    rows = {"prompt_len": [4, 4], "output_len": [2, 2], "priority": [1, 0.5]}
    with pytest.raises(SpecbatchError, match=r"field priority: expected an integer .* got "
                       r"0\.5 in row 1"):
        run_file(tmp_path, rows)
