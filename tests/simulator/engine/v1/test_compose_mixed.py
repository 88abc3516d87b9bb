"""Chunked prompts and preemptions at fast-path speed, checked against the slow twins.

Two fast paths, each against the path it replaces, on random workloads whose prompts are
split by small token budgets and whose small block pools preempt:

- the mixed step without the composer (``V1Fast.mixed_step``: every running request decodes
  but the newest, which prefills a chunked prompt's rest) against the composer
  (``fast_paths`` off): every step row and request row identical;
- the prefix cache's counting mode, which keeps a preempted request's freed blocks as one
  segment of the free queue (simulator.engine.prefix), against the exact per-block pool
  (``lazy=False``): every composition (who runs, tokens, blocks, who is preempted, the
  free pool, the prefix hits) and every request row identical.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from specbatch.simulator.config.sim_config import load_config
from specbatch.simulator.engine.core import Engine
from specbatch.simulator.engine.prefix import PrefixCache
from specbatch.simulator.metrics import request_table, step_frame
from specbatch.simulator.policies.registry import make_policy
from specbatch.simulator.workload.arrivals import build_workload
from tests.simulator.engine.v1.test_runs import ROOFLINE
from tests.simulator.helpers import LinearCost, const_trace


def build(trace, cost, kw: dict, fast: bool = True, exact_pool: bool = False) -> Engine:
    config = load_config(None, trace="synth", requests=trace.n_requests, arrival="trace", **kw)
    workload = build_workload(config, trace)
    eng = Engine(config, trace, workload, cost, make_policy(config, trace.K),
                 capacity=config.kv_capacity)
    eng.fast_paths = fast
    if exact_pool:
        group = np.full(workload.n, -1, dtype=np.int64)
        for rep in eng.replicas:
            rep.prefix = PrefixCache(eng.blocks.pool, eng.blocks.block_size, group,
                                     np.zeros_like(group), lazy=False)
    return eng


@st.composite
def cases(draw, paged_only: bool = False, sums_only: bool = False):
    n = draw(st.integers(2, 14))
    prompts = draw(st.lists(st.integers(1, 60), min_size=n, max_size=n))
    outputs = draw(st.lists(st.integers(1, 30), min_size=n, max_size=n))
    gaps = draw(st.lists(st.sampled_from([0.0, 0.0, 0.2, 1.0, 5.0]), min_size=n, max_size=n))
    block = draw(st.sampled_from([1, 2, 4, 16]))
    mode = "paged" if paged_only else draw(st.sampled_from(["paged", "paged", "reserve"]))
    policy = draw(st.sampled_from([{"policy": "ar"}, {"policy": "ar"},
                                   {"policy": "fixed", "k": 2},
                                   {"policy": "tetris", "k": 2, "extra": 1}]))
    depth = policy.get("k", 0)
    longest = max(p + o for p, o in zip(prompts, outputs))
    capacity = (-(-(longest + 2 * depth + 1) // block) + draw(st.integers(0, 4))) * block
    kw = dict(block_size=block, kv_mode=mode, kv_capacity=capacity if mode == "paged" else None,
              enable_prefix_caching=True if paged_only else draw(st.booleans()),
              max_num_batched_tokens=draw(st.integers(depth + 2, 24)),
              max_num_seqs=draw(st.integers(1, 6)),
              long_prefill_token_threshold=draw(st.sampled_from([0, 0, 0, 5])), **policy)
    trace = const_trace(n_requests=n, output_lens=outputs, prompt_lens=prompts, depth=4,
                        arrival=np.cumsum(gaps))
    cost = ROOFLINE if sums_only else draw(st.sampled_from([LinearCost(), ROOFLINE]))
    return trace, cost, kw


def counted(step, taken: list):
    """``step`` (an engine's mixed_step) appending each step it takes to ``taken``."""
    def wrapped(*args):
        duration = step(*args)
        if duration is not None:
            taken.append(duration)
        return duration
    return wrapped


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=cases(sums_only=True))  # the mixed step prices from sums (else: the composer)
def test_mixed_steps_without_the_composer_change_no_step_or_request(case):
    """Budgets of a few tokens split prompts into chunks next to the decoding requests;
    the steps the composer skips give the same step and request rows as the composer."""
    trace, cost, kw = case
    tables = []
    for fast in (True, False):
        eng = build(trace, cost, kw, fast=fast)
        eng.fast.mixed_step = counted(eng.fast.mixed_step, taken := [])
        rec = eng.run()
        tables.append((step_frame(rec.step_rows), request_table(rec, eng.w)))
        if fast:
            event(f"mixed steps taken: {min(len(taken), 3)}")
        else:
            assert not taken
    pd.testing.assert_frame_equal(tables[0][0], tables[1][0], check_exact=True)
    pd.testing.assert_frame_equal(tables[0][1], tables[1][1], check_exact=True)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=cases(paged_only=True))
def test_counting_prefix_cache_gives_the_exact_pools_compositions(case):
    """Pools a few blocks larger than the largest request preempt often; readmitted
    requests find what is left of their blocks. The counting cache's segments give every
    composition and request row the exact per-block pool gives."""
    trace, cost, kw = case
    logs, tables = [], []
    for exact in (False, True):
        eng = build(trace, cost, kw, exact_pool=exact)
        eng.compositions = []
        rec = eng.run()
        logs.append(eng.compositions)
        tables.append(request_table(rec, eng.w))
        assert eng.replicas[0].prefix.lazy is not exact
    hits = sum(1 for comp in logs[1] if any(comp[7]))
    event(f"preemptions: {min(sum(1 for comp in logs[1] if comp[5]), 3)}, "
          f"admissions with hits: {min(hits, 3)}")
    assert logs[0] == logs[1]
    pd.testing.assert_frame_equal(tables[0], tables[1], check_exact=True)


def test_a_segment_loses_its_last_blocks_first_and_turns_anonymous_when_readmitted():
    """Counting mode, a pool of 10 blocks of 4: request 0 (3 blocks, 2 hashed) is preempted
    behind 7 free blocks; taking 8 evicts its last block (unhashed) and 9 its second (so
    one hit is left, not two); readmitted, it touches that block and the rest of its
    segment holds no hash."""
    group = np.full(2, -1, dtype=np.int64)
    cache = PrefixCache(10, 4, group, np.zeros(2, dtype=np.int64))
    cache.allocate(0, 3)
    cache.note_done(np.array([0]), np.array([9]), every=True)  # 9 tokens computed: 2 full
    assert cache.release(0, 3) == 3 and cache.n_free == 10
    assert cache.segments == type(cache.segments)([[-1, 7, 0], [0, 3, 2]])
    assert cache.hits(0, 13) == [0, 1] and cache.hits(0, 8) == [0]  # ⌊(8 − 1) / 4⌋ = 1
    cache.take(8)  # 7 anonymous and block 2 (not hashed)
    assert cache.hits(0, 13) == [0, 1]
    cache.take(1)  # block 1 (hashed): one hit left
    assert cache.hits(0, 13) == [0] and cache.n_free == 1
    cache.admit(0, [0], 0, 1)
    assert cache.n_free == 0 and not cache.parked and not cache.segments
    assert cache.hits(0, 13) == []  # running: nothing of it in the free queue
