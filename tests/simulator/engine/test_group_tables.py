"""Paged KV under vLLM V1's hybrid KV cache manager (simulator.engine.group_tables,
simulator.engine.kv): each group's table charged as vLLM charges it, worked by hand."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specbatch.errors import SpecbatchError
from specbatch.simulator.config.sim_config import load_config
from specbatch.simulator.cost.analytic.kv_groups import KVGroup, KVLayout
from specbatch.simulator.engine.core import Engine
from specbatch.simulator.engine.group_tables import GroupTables, lone_peak_blocks
from specbatch.simulator.engine.kv import hybrid_layout, hybrid_notes
from specbatch.simulator.metrics import request_table, step_frame
from specbatch.simulator.policies.registry import make_policy
from specbatch.simulator.workload.arrivals import build_workload
from specbatch.traces.models.model_shape import ModelShape
from specbatch.traces.models.shapes import SHAPES
from tests.simulator.engine.v1.test_compose_mixed import build as build_mixed
from tests.simulator.engine.v1.test_compose_mixed import cases
from tests.simulator.helpers import LinearCost, const_trace


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as mp:
        yield mp

#: one full and one sliding group, blocks of 4 tokens, window 8
LAYOUT = KVLayout((KVGroup(0, 4, 1), KVGroup(8, 4, 1)), 64, 1)
#: a two-layer model, layer 1 sliding with W = 8
TINY = ModelShape("tiny-window", 2, 64, 2, 1, 128, 100, sliding_window=8, sliding_layers=1)


def test_a_table_frees_the_blocks_wholly_behind_the_window_of_the_next_token():
    """get_num_skipped_tokens(c) = max(0, c − W + 1): c = 11 skips 4 tokens = block 0 of the
    sliding group; c = 15 skips 8 = blocks 0 and 1. The full group never frees."""
    t = GroupTables(LAYOUT)
    assert t.to_allocate(0, 10) == 3 + 3  # a fresh table: ⌈10 / 4⌉ in each group
    t.commit(0, 10)
    assert t.remove_skipped(0, 10) == 0 and t.held(0) == 6
    assert t.remove_skipped(0, 11) == 1 and t.held(0) == 5
    assert t.to_allocate(0, 12) == 0  # both tables already have 3 entries (nulls count)
    assert t.to_allocate(0, 13) == 1 + 1
    t.commit(0, 13)
    assert t.remove_skipped(0, 15) == 1 and t.held(0) == 4 + 2
    assert t.remove_skipped(0, 15) == 0  # done once
    assert t.release(0) == 6 and t.held(0) == 0


def test_a_lone_requests_peak_is_the_window_plus_one_step_in_a_sliding_group():
    """slots 100, steps of at most 5 slots: full ⌈100 / 4⌉ = 25, sliding
    min(25, ⌈(8 − 1 + 5) / 4⌉ + 1 = 4)."""
    assert lone_peak_blocks(LAYOUT, 100, 5) == 25 + 4
    assert lone_peak_blocks(LAYOUT, 6, 5) == 2 + 2


def build(monkeypatch, **kw) -> Engine:
    monkeypatch.setitem(SHAPES, TINY.name, TINY)
    trace = const_trace(2, output_len=6, prompt_lens=[10, 6], depth=2,
                        arrival=np.zeros(2))
    config = load_config(None, trace="synth", requests=2, arrival="trace", policy="ar",
                         target=TINY.name, draft="ngram", kv_mode="paged", block_size=4,
                         enable_prefix_caching=False, **kw)
    workload = build_workload(config, trace)
    eng = Engine(config, trace, workload, LinearCost(), make_policy(config, trace.K),
                 capacity=config.kv_capacity)
    eng.compositions = []
    return eng


def test_two_requests_sliding_group_frees_blocks_behind_the_window(monkeypatch):
    """A: prompt 10, B: prompt 6, 6 tokens each, no drafts (lookahead 0), blocks of 4, W = 8.
    Step 1 prefills both: A ⌈10/4⌉ = 3 per group (6), B 2 per group (4). Decoding at output
    position t, computed c = prompt + t − 1 and slots c + 1:
    step 2: A c 10 (skips 3 tokens: no block), slots 11 -> 3 + 3; B c 6 -> 2 + 2;
    step 3: A c 11 skips 4 = one block -> 3 + 2; B c 7, slots 8 -> 2 + 2;
    step 4: A c 12, slots 13 -> 4 + (4 − 1); B c 8 (skips 1), slots 9 -> 3 + 3;
    steps 5, 6: A c 13, 14 (skips 6, 7: one block) -> 4 + 3; B slots 10, 11 -> 3 + 3.
    The pool of 20 blocks ends each step with 20 − held free."""
    eng = build(monkeypatch, kv_capacity=20 * 4)
    eng.run()
    blocks = [c[4] for c in eng.compositions]
    assert blocks == [(6, 4), (6, 4), (5, 4), (7, 6), (7, 6), (7, 6)]
    assert [c[6] for c in eng.compositions] == [20 - a - b for a, b in blocks]
    assert not any(c[5] for c in eng.compositions)  # nobody preempted
    assert eng.blocks.tables.tables == {}  # both finished: their tables dropped
    assert not eng.fast_paths  # every step through the per-request walk


def test_the_knob_charges_one_group_of_every_layer(monkeypatch):
    """disable_hybrid_kv_cache_manager: one full group, a block holds both layers: A
    ⌈10/4⌉ = 3 ... 4, B 2 ... 3 (today's accounting, the vectorised composer)."""
    eng = build(monkeypatch, kv_capacity=20 * 4, disable_hybrid_kv_cache_manager=True)
    eng.fast_paths = False  # every step composed and logged
    eng.run()
    assert [c[4] for c in eng.compositions] == [(3, 2)] * 3 + [(4, 3)] * 3
    assert eng.blocks.tables is None
    assert hybrid_layout(eng.config) is None


def test_preemption_returns_every_group_s_blocks(monkeypatch):
    """A pool of 11 blocks: step 3 holds 5 + 4 = 9, step 4 would need A +2 (7) and B +2
    (6) = 13 > 11: B, the newest, is preempted (its 4 blocks back), A grows to 7."""
    eng = build(monkeypatch, kv_capacity=11 * 4)
    eng.run()
    comp = eng.compositions[3]
    assert comp[2] == (0,) and comp[4] == (7,) and comp[5] == (1,) and comp[6] == 11 - 7


def test_prefix_caching_is_noted_and_vllm_v0_refused(monkeypatch):
    monkeypatch.setitem(SHAPES, TINY.name, TINY)
    config = load_config(None, target=TINY.name, draft="ngram", kv_mode="paged")
    assert "not modelled" in hybrid_notes(config)[0]
    with pytest.raises(SpecbatchError, match="disable_hybrid_kv_cache_manager: expected true"):
        hybrid_layout(config.replace(scheduler="vllm-v0"))
    assert hybrid_layout(config.replace(scheduler="vllm-v0",
                                        disable_hybrid_kv_cache_manager=True)) is None


class ListTables:
    """:class:`GroupTables`'s twin with vLLM's data: per group a list of block ids, freed ones
    replaced by None (the null block), taken from and returned to one free list."""

    def __init__(self, layout: KVLayout, pool: int):
        self.layout, self.free, self.tables = layout, list(range(pool)), {}

    def allocate(self, uid: int, computed: int, slots: int) -> bool:
        table = self.tables.setdefault(uid, [[] for _ in self.layout.groups])
        for g, blocks in zip(self.layout.groups, table):
            if g.window:
                for i in range(min(max(0, computed - g.window + 1) // g.block_size, len(blocks))):
                    if blocks[i] is not None:
                        self.free.append(blocks[i])
                        blocks[i] = None
        need = [max(-(-slots // g.block_size) - len(b), 0)
                for g, b in zip(self.layout.groups, table)]
        if sum(need) > len(self.free):
            return False
        for n, blocks in zip(need, table):
            blocks.extend(self.free.pop() for _ in range(n))
        return True

    def release(self, uid: int) -> None:
        for blocks in self.tables.pop(uid, []):
            self.free.extend(b for b in blocks if b is not None)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 6), st.booleans()), max_size=60),
       st.sampled_from([LAYOUT, KVLayout((KVGroup(0, 2, 1), KVGroup(5, 2, 1), KVGroup(5, 2, 1)),
                                         1, 1)]))
def test_counted_tables_match_vllms_block_lists(ops, layout):
    """Random requests grow (context advancing by 0..6 tokens, slots = computed + 1..3), or
    finish; the counting tables free and take exactly the blocks of the list twin."""
    pool = 40
    twin, tables, free = ListTables(layout, pool), GroupTables(layout), pool
    computed: dict[int, int] = {}
    for uid, step, done in ops:
        if done:
            free += tables.release(uid)
            twin.release(uid)
            computed.pop(uid, None)
            continue
        c = computed.get(uid, 0) + step
        slots = c + 1 + step % 3
        free += tables.remove_skipped(uid, c)
        new = tables.to_allocate(uid, slots)
        ok = twin.allocate(uid, c, slots)
        assert ok == (new <= free)
        if ok:
            tables.commit(uid, slots)
            free -= new
            computed[uid] = c
        assert free == len(twin.free)
        assert tables.held(uid) == sum(b is not None for t in twin.tables.get(uid, [])
                                       for b in t)


#: TINY with a window no request reaches: its sliding group never frees a block
WIDE = ModelShape("tiny-wide-window", 2, 64, 2, 1, 128, 100, sliding_window=10**6,
                  sliding_layers=1)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=cases(paged_only=True))
def test_groups_that_never_free_run_as_one_group_of_half_the_pool(case, monkeypatch_module):
    """With W beyond every context the two groups are charged alike, 2 ⌈S / b⌉ per request,
    so a pool of 2M blocks under the hybrid walk (simulator.engine.v1.reference) gives every
    step and request the vectorised composer and its fast paths give one group of M blocks
    (the knob): the per-request walk's parity with today's engine, drafts, chunks and
    preemptions included."""
    trace, cost, kw = case
    monkeypatch_module.setitem(SHAPES, WIDE.name, WIDE)
    kw = {**kw, "target": WIDE.name, "draft": "ngram", "enable_prefix_caching": False}
    tables = []
    for hybrid in (True, False):
        cap = kw["kv_capacity"] * (2 if hybrid else 1)
        eng = build_mixed(trace, cost, {**kw, "kv_capacity": cap,
                                        "disable_hybrid_kv_cache_manager": not hybrid},
                          fast=not hybrid)  # the hybrid engine turns its fast paths off
        assert (eng.blocks.tables is not None) is hybrid
        rec = eng.run()
        tables.append((step_frame(rec.step_rows), request_table(rec, eng.w)))
    pd.testing.assert_frame_equal(tables[0][0], tables[1][0], check_exact=True)
    pd.testing.assert_frame_equal(tables[0][1], tables[1][1], check_exact=True)
