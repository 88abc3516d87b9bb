"""vLLM V1's KV cache groups and pool (simulator.cost.analytic.kv_groups), the numbers worked by
hand.

One H100 (80 GB) at gpu_memory_utilization 0.9 leaves 72e9 bytes for weights and KV; bf16 KV.
"""

from __future__ import annotations

import json

import pytest

from specbatch.errors import SpecbatchError
from specbatch.simulator.cost.analytic.kv_groups import KVGroup, kv_layout
from specbatch.simulator.cost.analytic.memory import memory_kv_tokens
from specbatch.simulator.cost.analytic.precision import held_weight_bytes
from specbatch.simulator.cost.analytic.roofline import RooflineCost
from specbatch.simulator.cost.gpus.hardware import get_hardware
from specbatch.traces.models.model_shape import ModelShape
from specbatch.traces.models.shapes import get_shape
from tests.traces.models.test_gpt_oss import GPT_OSS_20B

H100 = get_hardware("h100")


@pytest.fixture()
def gpt_oss(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(GPT_OSS_20B))
    return get_shape(str(path))


def test_gemma3_270m_pool_on_one_h100_by_hand():
    """18 layers: 3 full + 15 sliding (W 512), 1 KV head of 256. A layer's page of 16 tokens
    is 2 · 16 · 1 · 256 · 2 B = 16,384 B; group_size = 3 (15 >= 1.5 · 3), so one full group
    and five sliding groups of 3 layers, a pool block 3 pages = 49,152 B. Weights
    2 · 268,065,920 B, so 72e9 − 536,131,840 = 71,463,868,160 B hold 1,453,936 blocks
    (23,262,976 tokens of one group); vLLM logs 1,453,936 // 6 · 16 = 3,877,152 tokens."""
    gemma = get_shape("gemma-3-270m")
    layout = kv_layout(gemma, None, 2, 16)
    assert layout.groups == (KVGroup(0, 16, 3),) + (KVGroup(512, 16, 3),) * 5
    assert (layout.group_size, layout.block_bytes) == (3, 49_152)
    assert layout.num_blocks(72e9 - 2 * 268_065_920) == 1_453_936
    assert memory_kv_tokens(H100, gemma, None, 1, 0.9) == 1_453_936 * 16 == 23_262_976
    assert layout.vllm_tokens(1_453_936, 16) == 3_877_152
    # the knob off: every layer's KV per token, 18 · 2 · 256 · 2 = 18,432 B
    assert memory_kv_tokens(H100, gemma, None, 1, 0.9,
                            disable_hybrid_kv_cache_manager=True) == 71_463_868_160 // 18_432


def test_gpt_oss_20b_pool_on_one_h100_by_hand(gpt_oss):
    """24 layers alternating sliding (W 128) and full, 8 KV heads of 64: a page is
    2 · 16 · 8 · 64 · 2 = 32,768 B; 12 + 12 layers make two groups of 12, a pool block
    12 pages = 393,216 B. Its MXFP4 checkpoint holds 13,747,605,120 B, leaving
    58,252,394,880 B = 148,143 blocks (2,370,288 tokens of one group, twice what the knob's
    one group of 24 layers holds: 58,252,394,880 // 49,152 = 1,185,148 tokens)."""
    layout = kv_layout(gpt_oss, None, 2, 16)
    assert layout.groups == (KVGroup(0, 16, 12), KVGroup(128, 16, 12))
    assert layout.block_bytes == 393_216
    assert held_weight_bytes(gpt_oss, H100) == 13_747_605_120
    assert memory_kv_tokens(H100, gpt_oss, None, 1, 0.9) == 148_143 * 16
    assert memory_kv_tokens(H100, gpt_oss, None, 1, 0.9,
                            disable_hybrid_kv_cache_manager=True) == 1_185_148
    assert layout.vllm_tokens(148_143, 16) == 74_071 * 16


def test_group_size_takes_the_most_layers_within_one_and_a_half_times_the_fewest():
    """gpt-oss-20b with one more full layer (an EAGLE head's, kv_groups docstring): 12 sliding
    + 13 full, 13 < 1.5 · 12, so group_size 13 and the sliding group is padded."""
    target = ModelShape("t", 24, 2880, 64, 8, 2880, 1000, attention_head_dim=64,
                        sliding_window=128, sliding_layers=12)
    head = ModelShape("h", 1, 2880, 64, 8, 2880, 1000, attention_head_dim=64)
    layout = kv_layout(target, head, 2, 16)
    assert layout.group_size == 13
    assert sorted(layout.groups, key=lambda g: g.window) == [KVGroup(0, 16, 13),
                                                             KVGroup(128, 16, 12)]
    assert layout.block_bytes == 13 * 32_768


def test_smaller_pages_take_larger_blocks_and_a_page_that_does_not_divide_is_refused():
    """Gemma-3-270M's page (16,384 B) next to vicuna-68m's (2 · 16 · 12 · 64 · 2 = 49,152 B):
    Gemma's groups take blocks of 16 · 3 = 48 tokens; types of 3, 15 and 2 layers make
    group_size 2: 2 full + 8 sliding + 1 draft groups, a pool block 2 pages of 49,152 B.
    SmolLM2-135M's page (2 · 16 · 3 · 64 · 2 = 12,288 B) does not divide 16,384: refused."""
    layout = kv_layout(get_shape("gemma-3-270m"), get_shape("vicuna-68m"), 2, 16)
    assert layout.group_size == 2 and layout.block_bytes == 2 * 49_152
    assert [g.block_size for g in layout.groups] == [48] * 10 + [16]
    assert [g.window for g in layout.groups] == [0] * 2 + [512] * 8 + [0]
    assert [g.layers for g in layout.groups] == [2, 1] + [2] * 7 + [1, 2]
    with pytest.raises(SpecbatchError, match="disable_hybrid_kv_cache_manager: expected true"):
        kv_layout(get_shape("gemma-3-270m"), get_shape("smollm2-135m"), 2, 16)


def test_every_layer_sliding_keeps_its_window_whatever_the_knob():
    """Mistral-7B-v0.1: every layer's spec is the same sliding one, so
    unify_hybrid_kv_cache_specs leaves it: one sliding group of 32 layers either way."""
    mistral = get_shape("mistral-7b-v0.1")
    for disable in (False, True):
        layout = kv_layout(mistral, None, 2, 16, disable)
        assert layout.groups == (KVGroup(4096, 16, 32),) and layout.hybrid
        assert layout.block_bytes == 32 * 2 * 16 * 8 * 128 * 2
    assert (memory_kv_tokens(H100, mistral, None, 1, 0.9)
            == memory_kv_tokens(H100, mistral, None, 1, 0.9,
                                disable_hybrid_kv_cache_manager=True))


def test_models_without_windows_keep_their_capacity_whatever_the_knob():
    cost = RooflineCost(H100, get_shape("llama-3.1-8b"), get_shape("vicuna-68m"))
    base = cost.kv_capacity_tokens(0.9)
    assert base == cost.kv_capacity_tokens(0.9, 32, True) == cost.kv_capacity_tokens(0.9, 16)
    layout = kv_layout(get_shape("llama-3.1-8b"), get_shape("vicuna-68m"), 2, 16)
    assert not layout.hybrid and len(layout.groups) == 1
