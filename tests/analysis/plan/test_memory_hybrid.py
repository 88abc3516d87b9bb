"""The planner's memory line and its pruning under vLLM's hybrid KV cache manager: a
sliding-window model's pool and footprints counted in tokens of one KV cache group."""

from __future__ import annotations

from specbatch.analysis.plan.entry import _memory_constants
from specbatch.analysis.plan.slo import memory_plan
from specbatch.analysis.plan.space import Deployment, lone_blocks
from specbatch.simulator.cost.analytic.kv_groups import KVGroup, KVLayout
from tests.analysis.plan.test_slo import table

#: one full and one sliding group, blocks of 4 tokens, window 8
LAYOUT = KVLayout((KVGroup(0, 4, 1), KVGroup(8, 4, 1)), 64, 1)


def test_a_footprint_is_its_blocks_over_the_groups_at_the_last_step():
    """prompt 10 + output 6 (and 10 + 46), no drafts: at the last step c = 14 (54), slots 16
    (56): full ⌈16/4⌉ = 4, sliding 4 − ⌊(14 − 7)/4⌋ = 3; full 14, sliding 14 − ⌊47/4⌋ = 3.
    Mean (7 + 17)/2 = 12 blocks = 48 tokens of a group; two at once need 96."""
    t = table([0, 0], [0, 0], [1, 1], [5, 5], prompt=10, output=[6, 46])
    plan = memory_plan(t, {"kv_capacity": 400, "preemptions": 0}, 64, depth=0,
                       weights_gb=1.0, kv_bytes_per_token=16, layout=LAYOUT, block_size=4)
    assert plan["footprint_tokens"] == 48.0 and plan["kv_needed_tokens"] == 96
    assert plan["kv_needed_gb"] == round(96 * 16 / 1e9, 2)


def test_gemma_runs_count_a_pool_token_as_one_group_s_bytes_and_the_knob_restores_all():
    """Gemma-3-270M: a pool block of 3 layers' pages (49,152 B / 16 tokens = 3,072 B a token);
    the knob: 18 layers' 18,432 B a token."""
    d = Deployment("h100", 1, 1)
    row = {"target": "gemma-3-270m", "draft": "ngram", "kv_mode": "paged", "block_size": 16}
    weights, per_token, layout, bs = _memory_constants(d, row)
    assert (per_token, len(layout.groups), bs) == (3_072, 6, 16)
    off = _memory_constants(d, {**row, "disable_hybrid_kv_cache_manager": True})
    assert off == (weights, 18_432)


def test_the_largest_request_alone_is_charged_a_window_per_sliding_group():
    """Gemma-3-270M, a request of 4,096 slots in steps of at most 8,192 (vllm-v1's budget):
    full ⌈4096/16⌉ = 256, each of 5 sliding groups min(256, ⌈(511 + 8192)/16⌉ + 1 = 545)
    = 256. Without windows: ⌈4096/16⌉."""
    d = Deployment("h100", 1, 1)
    assert lone_blocks(d, "gemma-3-270m", "ngram", 4096, 16) == 256 * 6
    assert lone_blocks(d, "llama-3.1-8b", "ngram", 4096, 16) == 256
