"""The vllm-v1 step's fast paths: runs of identical decode steps taken at once
(simulator.engine.v1.runs) and the step without the composer where its answer is known
(simulator.engine.v1.fast).

They change nothing a simulation reports: with ``fast_paths`` on and off, every step row,
every request row and every logged composition is identical, on random workloads that
admit, finish, run out of blocks and wait for arrivals, with and without drafts, under an
exact dyadic cost model and under the roofline's sums. A hand-computed case pins what one
run does.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from specbatch.simulator.config.sim_config import load_config
from specbatch.simulator.engine.core import Engine
from specbatch.simulator.engine.request_state import Row
from specbatch.simulator.metrics import request_table, step_frame
from specbatch.simulator.policies.registry import make_policy
from specbatch.simulator.run import build_cost
from specbatch.simulator.workload.arrivals import build_workload
from tests.simulator.helpers import LinearCost, const_trace

ROOFLINE = build_cost(load_config(None))


def engine(trace, cost, fast: bool, **kw) -> Engine:
    kw = {"policy": "ar", **kw}
    config = load_config(None, trace="synth", requests=trace.n_requests, **kw)
    eng = Engine(config, trace, build_workload(config, trace), cost,
                 make_policy(config, trace.K), capacity=config.kv_capacity)
    eng.fast_paths = fast
    return eng


def counted(run, taken: list):
    """``run`` (an engine's decode_run) appending the duration of each run taken to ``taken``."""
    def wrapped(rep, time):
        duration = run(rep, time)
        if duration is not None:
            taken.append(duration)
        return duration
    return wrapped


@st.composite
def cases(draw):
    n = draw(st.integers(1, 12))
    prompts = draw(st.lists(st.integers(1, 40), min_size=n, max_size=n))
    outputs = draw(st.lists(st.integers(1, 30), min_size=n, max_size=n))
    gaps = draw(st.lists(st.sampled_from([0.0, 0.0, 0.3, 1.0, 4.0, 40.0]), min_size=n,
                         max_size=n))
    block = draw(st.sampled_from([1, 2, 4, 16]))
    mode = draw(st.sampled_from(["paged", "paged", "reserve"]))
    longest = max(p + o for p, o in zip(prompts, outputs))
    capacity = (-(-(longest + 3) // block) + draw(st.integers(0, 12))) * block
    kw = dict(block_size=block, kv_mode=mode, kv_capacity=capacity if mode == "paged" else None,
              enable_prefix_caching=draw(st.booleans()),
              enable_chunked_prefill=draw(st.booleans()),
              max_num_batched_tokens=draw(st.integers(longest, longest + 40)),
              max_num_seqs=draw(st.integers(1, 6)), arrival="trace",
              **draw(st.sampled_from([{"policy": "ar"}, {"policy": "ar"},
                                      {"policy": "fixed", "k": 2}])))
    trace = const_trace(n_requests=n, output_lens=outputs, prompt_lens=prompts, depth=4,
                        arrival=np.cumsum(gaps) + draw(st.sampled_from([0.0, 1000.0])))
    cost = draw(st.sampled_from([LinearCost(), ROOFLINE]))
    return trace, cost, kw


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=cases())
def test_fast_paths_change_no_step_request_or_composition(case):
    """Each step row and request row identical with the fast paths on and off, and with the
    compositions logged (which turns the step without the composer off, not the runs), each
    composition too."""
    trace, cost, kw = case
    tables, logs = [], []
    for fast in (True, False):
        eng = engine(trace, cost, fast, **kw)
        eng.runs.decode_run = counted(eng.runs.decode_run, taken := [])
        rec = eng.run()
        tables.append((step_frame(rec.step_rows), request_table(rec, eng.w)))
        if fast:
            event(f"runs taken: {min(len(taken), 3)}")
        eng = engine(trace, cost, fast, **kw)
        eng.compositions = []
        eng.run()
        logs.append(eng.compositions)
    pd.testing.assert_frame_equal(tables[0][0], tables[1][0], check_exact=True)
    pd.testing.assert_frame_equal(tables[0][1], tables[1][1], check_exact=True)
    assert logs[0] == logs[1]


def test_a_run_lasts_until_the_first_request_finishes():
    """Two requests decoding at t = 2 and 5 of outputs 6 and 20 (prompt 4, block size 4,
    nothing waiting, no arrival due): one call takes 4 steps (the first request's 4 tokens
    left), each recorded with batch 2 and 2 tokens emitted. Both hold 2 blocks; the last step
    (t = 5 and 8) needs prompt + t − 1 + 1 slots: 9 and 12, 3 blocks each. The first request
    finishes and frees its 3: of the 16 blocks 3 are held, the second request's, at t = 9
    (synchronously: under async scheduling vLLM frees them a step later, simulator.engine.
    async_lag)."""
    trace = const_trace(n_requests=2, prompt_len=4, output_lens=[6, 20])
    eng = engine(trace, LinearCost(), True, kv_mode="paged", kv_capacity=64, block_size=4,
                 enable_prefix_caching=False, async_scheduling=False)
    rep = eng.replicas[0]
    state = eng.initial.take([0, 1], axis=1)
    state[Row.POS] = [2, 5]
    state[Row.PREFILLED] = state[Row.FILL]
    state[Row.BLOCKS] = [2, 2]
    rep.state, rep.free_blocks = state, eng.blocks.pool - 4
    duration = eng.runs.decode_run(rep, 100.0)
    rows = [eng.rec.step_rows[i] for i in range(len(eng.rec.step_rows))]
    assert len(rows) == 4 and {(r.batch, r.emitted) for r in rows} == {(2, 2)}
    assert [r.time for r in rows[1:]] == [r.end for r in rows[:-1]]
    assert duration == rows[-1].end - 100.0
    assert rep.state[Row.UID].tolist() == [1] and rep.state[Row.POS].tolist() == [9]
    assert rep.state[Row.BLOCKS].tolist() == [3] and rep.free_blocks == 16 - 3
    assert np.isfinite(eng.rec.finish[0]) and eng.rec.finish[0] == rows[-1].end


def test_no_run_while_a_waiting_request_has_room():
    trace = const_trace(n_requests=3, prompt_len=4, output_len=20)
    eng = engine(trace, LinearCost(), True, max_num_seqs=4)
    rep = eng.replicas[0]
    state = eng.initial.take([0, 1], axis=1)
    state[Row.POS] = 1
    state[Row.PREFILLED] = state[Row.FILL]
    rep.state = state
    rep.waiting.append(2)  # room for it: the next step admits it
    assert eng.runs.decode_run(rep, 0.0) is None
    assert len(eng.rec.step_rows) == 0
