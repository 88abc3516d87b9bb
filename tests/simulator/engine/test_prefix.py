"""The prefix cache's counting mode (simulator.engine.prefix): without shared-prefix groups it
counts blocks instead of numbering them until a preemption, and a run is identical to the one the
exact per-block pool gives."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from specbatch.simulator.config.sim_config import load_config
from specbatch.simulator.engine.core import Engine
from specbatch.simulator.engine.prefix import PrefixCache
from specbatch.simulator.metrics import request_table
from specbatch.simulator.policies.registry import make_policy
from specbatch.simulator.workload.arrivals import build_workload
from tests.simulator.helpers import LinearCost, const_trace


def no_groups(n: int) -> tuple[np.ndarray, np.ndarray]:
    return np.full(n, -1, dtype=np.int64), np.zeros(n, dtype=np.int64)


def test_counting_mode_only_without_shared_prefix_groups():
    assert PrefixCache(8, 4, *no_groups(3)).lazy
    assert not PrefixCache(8, 4, *no_groups(3), lazy=False).lazy
    group = np.array([-1, 0, -1])
    assert not PrefixCache(8, 4, group, np.array([0, 8, 0])).lazy


def test_materialise_numbers_held_blocks_and_hashes_the_computed_ones():
    """Pool of 10 blocks of 4: request 0 holds 3 blocks with 2 hashed at admission, request 1
    holds 2 with 5 tokens computed (1 full block). Materialised, 5 blocks are free; released,
    each finds its hashed leading blocks again (at most ⌊(tokens − 1) / 4⌋)."""
    cache = PrefixCache(10, 4, *no_groups(2))
    cache.allocate(0, 3)
    cache.cache_full(0, 2)
    cache.allocate(1, 2)
    cache.note_done(np.array([1]), np.array([5]), every=True)
    assert cache.n_free == 5 and cache.hits(0, 13) == []  # counting: nobody was preempted
    cache.materialise(np.array([0, 1]), np.array([3, 2]))
    assert not cache.lazy and len(cache.free) == cache.n_free == 5
    assert cache.release(0) == 3 and cache.n_free == 8
    assert cache.hits(0, 13) == [0, 1]
    assert len(cache.hits(0, 13)) == 2 and cache.hits(0, 8) == cache.hits(0, 13)[:1]
    assert cache.release(1) == 2 and len(cache.hits(1, 9)) == 1


def run_engine(trace, lazy: bool, **kw):
    config = load_config(None, trace="synth", requests=trace.n_requests, kv_mode="paged",
                         enable_prefix_caching=True, **kw)
    workload = build_workload(config, trace)
    groups, shared = no_groups(workload.n)
    workload = dataclasses.replace(workload, prefix_group=groups, prefix_len=shared)
    engine = Engine(config, trace, workload, LinearCost(), make_policy(config, trace.K),
                    capacity=config.kv_capacity)
    if not lazy:
        for rep in engine.replicas:
            rep.prefix = PrefixCache(engine.blocks.pool, engine.blocks.block_size, groups,
                                     shared, lazy=False)
    engine.compositions = []
    rec = engine.run()
    return engine, request_table(rec, engine.w)


def test_a_victim_preempted_first_finds_its_output_blocks_again():
    """Two prompts of 4 decode side by side (block size 2, a pool of 24 blocks) until request
    1, the newest, is preempted after 20 tokens: its 12 full blocks (2 of prompt, 10 of
    output, counted while the cache only counted) go to the free queue's tail, request 0's
    growth to 17 blocks evicts 5 of them, and readmitted it finds 7 blocks = 14 tokens."""
    trace = const_trace(n_requests=2, output_lens=[30, 40], prompt_lens=[4, 4], depth=4)
    kw = dict(policy="ar", k=0, block_size=2, kv_capacity=2 * 24)
    for lazy in (True, False):
        engine, _ = run_engine(trace, lazy, **kw)
        events = [(comp[2], comp[5], comp[7]) for comp in engine.compositions
                  if comp[5] or any(comp[7])]
        assert events == [((0,), (1,), ()), ((1,), (), (14,))]


@pytest.mark.parametrize("kw", [
    dict(policy="ar", k=0, block_size=2, kv_capacity=2 * 48, max_num_seqs=4,
         max_num_batched_tokens=256),
    dict(policy="ar", k=0, block_size=4, kv_capacity=4 * 14, max_num_batched_tokens=24),
    dict(policy="tetris", k=2, extra=1, block_size=2, kv_capacity=2 * 30, max_num_seqs=5,
         max_num_batched_tokens=12, long_prefill_token_threshold=5),
])
def test_counting_mode_runs_exactly_as_the_per_block_pool(kw):
    """Prompts of 6-21 tokens in a pool small enough to preempt (first: four requests admitted
    at once that decode until the pool runs out, so the victim has hashed output blocks):
    the counting cache and the exact one give the same composition at every step (who runs,
    tokens, blocks, who is preempted, the pool, the prefix hits) and the same per-request
    results."""
    trace = const_trace(n_requests=10, output_lens=[12, 30, 7, 25, 18, 9, 40, 14, 22, 5],
                        prompt_lens=[6, 21, 9, 14, 8, 17, 11, 6, 19, 10], depth=4)
    fast, fast_table = run_engine(trace, lazy=True, **kw)
    exact, exact_table = run_engine(trace, lazy=False, **kw)
    assert any(comp[5] for comp in exact.compositions)  # someone was preempted
    assert any(any(comp[7]) for comp in exact.compositions)  # and found its blocks again
    assert fast.replicas[0].prefix.lazy  # the counting mode outlived the preemptions
    assert fast.compositions == exact.compositions
    assert fast_table.equals(exact_table)
