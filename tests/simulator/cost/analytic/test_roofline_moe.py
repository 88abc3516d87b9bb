"""The roofline's mixture-of-experts pricing (simulator.cost.analytic.roofline, THEORY.md §8)
against hand computation: expert weights streamed by E_touched(Q), FLOPs by active, memory by
total."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import numpy as np
import pytest

from specbatch.errors import SpecbatchError
from specbatch.simulator.cost.analytic.memory import kv_capacity_tokens
from specbatch.simulator.cost.analytic.roofline import RooflineCost, pass_constants
from specbatch.simulator.cost.gpus.hardware import get_hardware
from specbatch.traces.models.model_shape import ModelShape
from specbatch.traces.models.shapes import SHAPES

H100 = get_hardware("h100")
# 1 MoE layer, h = 8, 2 heads (head_dim 4), 4 experts of width 4, 2 per token, vocab 10
TINY = ModelShape("tiny-moe", 1, 8, 2, 2, 16, 10, experts=4, top_k=2, expert_intermediate=4,
                  moe_layers=1)


def test_parameter_counts_by_hand():
    # attention q/o/k/v 4 * 8 * 8 = 256, norms 16, router 4 * 8 = 32 -> 304 always read;
    # one expert 3 * 8 * 4 = 96; embedding + head 2 * 10 * 8 + final norm 8 = 168
    assert TINY.moe_layer_dense_params == 304 and TINY.expert_params == 96
    assert TINY.params == 304 + 4 * 96 + 168 == 856
    assert TINY.active_params == 304 + 2 * 96 + 168 == 664


def test_weight_bytes_and_expert_count_of_one_pass_by_hand():
    cost = RooflineCost(H100, TINY, TINY)
    # Q = 2 tokens: an expert escapes both with (1 - 2/4)^2 = 1/4 -> E_touched = 3
    row = cost.breakdown("target", np.array([1, 1]), np.array([0, 0]))
    assert row["experts_touched"] == 3.0
    # bf16: dense 2 * (304 + 80 head + 8 norm) = 784, experts 2 * 96 * 3 = 576
    assert row["weight_bytes"] == 784 + 576 == 1360
    assert row["expert_bytes"] == 576
    c = pass_constants(TINY, H100)
    assert c.flops_per_token == 2.0 * (304 + 2 * 96 + 80)  # active weights + head


def test_qwen3_decode_reads_eight_experts_and_a_verify_pass_more():
    cost = RooflineCost(H100, SHAPES["qwen3-30b-a3b"], SHAPES["qwen2.5-0.5b"])
    decode = cost.breakdown("target", np.ones(1), np.full(1, 512.0))
    verify = cost.breakdown("target", np.full(1, 4.0), np.full(1, 512.0))
    assert (round(decode["experts_touched"], 1), round(verify["experts_touched"], 1)) == (8.0, 29.1)
    expert = 2 * 48 * 3 * 2048 * 768  # bytes of one expert in every layer
    assert verify["weight_bytes"] - decode["weight_bytes"] == pytest.approx(
        expert * (verify["experts_touched"] - 8.0))


def test_when_every_token_uses_every_expert_it_prices_as_the_dense_model_plus_router():
    moe = ModelShape("all", 4, 64, 4, 2, 256, 100, experts=2, top_k=2, expert_intermediate=128,
                     moe_layers=4)
    dense = ModelShape("dense", 4, 64, 4, 2, 256, 100)
    q, kv = np.array([3, 1]), np.array([10, 20])
    a = RooflineCost(H100, moe, moe).breakdown("target", q, kv)
    b = RooflineCost(H100, dense, dense).breakdown("target", q, kv)
    router = 4 * 2 * 64
    assert a["weight_bytes"] == pytest.approx(b["weight_bytes"] + 2 * router)
    assert a["flops"] == pytest.approx(b["flops"] + 2 * router * 4)
    assert moe.params == dense.params + router


def test_verify_cost_per_token_falls_slower_for_moe_than_for_dense_at_batch_1():
    moe = RooflineCost(H100, SHAPES["qwen3-30b-a3b"], SHAPES["qwen2.5-0.5b"])
    one, four, kv = np.ones(1), np.full(1, 4.0), np.full(1, 512.0)
    moe_ratio = moe.step_time("target", four, kv) / moe.step_time("target", one, kv)
    dense = RooflineCost(H100, SHAPES["llama-3.1-8b"], SHAPES["llama-3.2-1b"])
    dense_ratio = dense.step_time("target", four, kv) / dense.step_time("target", one, kv)
    assert moe_ratio > 2.0 > 1.05 > dense_ratio


def test_memory_counts_every_expert():
    target, draft = SHAPES["qwen3-30b-a3b"], SHAPES["qwen2.5-0.5b"]
    free = 0.9 * 80e9 - 2 * (target.params + draft.params)
    per_token = target.kv_bytes_per_token() + draft.kv_bytes_per_token()
    assert kv_capacity_tokens("h100", "qwen3-30b-a3b", "qwen2.5-0.5b") == int(free // per_token)


def test_skew_reads_fewer_experts_and_is_refused_for_dense_pairs():
    q, kv = np.full(8, 4.0), np.full(8, 512.0)
    uniform = RooflineCost(H100, SHAPES["qwen3-30b-a3b"], SHAPES["qwen2.5-0.5b"])
    skewed = dataclasses.replace(uniform, routing_skew=0.8)
    assert skewed.step_time("target", q, kv) < uniform.step_time("target", q, kv)
    with pytest.raises(SpecbatchError, match="routing_skew"):
        RooflineCost(H100, SHAPES["vicuna-33b"], SHAPES["vicuna-68m"], routing_skew=0.5)


def test_a_quantised_moe_draft_is_refused():
    with pytest.raises(SpecbatchError, match="mixture-of-experts"):
        RooflineCost(H100, SHAPES["vicuna-33b"], TINY, draft_weight_bits=4)


def test_cost_show_json_names_the_routing_in_a_subprocess():
    out = subprocess.run([sys.executable, "-m", "specbatch", "cost", "show", "--target",
                          "qwen3-30b-a3b", "--draft", "qwen2.5-0.5b", "--batch", "1", "16",
                          "--cost", "roofline",
                          "--json"], capture_output=True, text=True, check=True).stdout
    data = json.loads(out)
    assert data["moe"]["experts"] == 128 and data["moe"]["top_k"] == 8
    assert round(data["rows"][0]["experts_touched_verify"], 1) == 29.1
    assert round(data["rows"][1]["experts_touched_decode"], 1) == 82.4


def test_an_unpriced_quantised_config_target_is_a_one_line_error_exit_2(tmp_path):
    cfg = {"hidden_size": 1024, "intermediate_size": 4096, "num_attention_heads": 8,
           "num_hidden_layers": 2, "vocab_size": 1000,
           "quantization_config": {"bits": 4, "quant_method": "bitsandbytes"}}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    run = subprocess.run([sys.executable, "-m", "specbatch", "cost", "show", "--target",
                          str(path)], capture_output=True, text=True)
    assert run.returncode == 2 and run.stdout == ""
    assert run.stderr.count("\n") == 1 and "field quantization_config.quant_method" in run.stderr


def test_the_docs_dense_versus_moe_table_is_what_the_cost_model_prints():
    from pathlib import Path

    from specbatch.simulator.cost.registry import build_cost_model, pass_times

    root = Path(__file__).resolve().parents[4]
    page = (root / "docs" / "simulate.md").read_text()
    table = [line for line in page.split("### Mixture-of-experts targets")[1].splitlines()
             if line.startswith("| ") and line[2].isdigit()]
    configs = root / "traces" / "data" / "configs"
    moe, dense = (pass_times(build_cost_model(target=str(configs / name), draft="qwen2.5-0.5b"),
                             [int(line.split("|")[1]) for line in table], 512, 3)
                  for name in ("qwen3-30b-a3b", "qwen3-30b-a3b-dense-twin"))
    for line, m, d in zip(table, moe, dense):
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert cells[1:3] == [
            f"{1e3 * m['target_decode_s']:.3f}",
            f"{1e3 * m['target_verify_s']:.3f}",
        ]
        assert cells[4] == (f"{m['experts_touched_decode']:.1f} → "
                            f"{m['experts_touched_verify']:.1f}")
        assert cells[5:7] == [
            f"{1e3 * d['target_decode_s']:.3f}",
            f"{1e3 * d['target_verify_s']:.3f}",
        ]
    assert len(table) == 6


def test_simulate_prices_a_moe_target_and_its_routing_skew():
    from specbatch.simulator.config.sim_config import make_config
    from specbatch.simulator.run import simulate

    base = {"trace": "synth", "target": "qwen3-30b-a3b", "draft": "qwen2.5-0.5b", "requests": 8,
            "max_num_seqs": 8}
    uniform = simulate(make_config(base))
    skewed = simulate(make_config({**base, "routing_skew": 1.0}))
    assert skewed.summary["target_time"] < uniform.summary["target_time"]
    assert skewed.summary["accepted"] == uniform.summary["accepted"]  # the trace is the same
    with pytest.raises(SpecbatchError, match="routing_skew"):
        simulate(make_config({"trace": "synth", "requests": 2, "routing_skew": 0.5}))


def test_a_verify_pass_touches_experts_for_every_query_token_of_the_batch():
    from specbatch.theory.moe import expected_touched

    cost = RooflineCost(H100, SHAPES["qwen3-30b-a3b"], SHAPES["qwen2.5-0.5b"])
    drafts = np.array([3, 1, 0])  # s_i drafts: Q = sum(s_i + 1) = 7
    row = cost.breakdown("target", drafts + 1, np.array([100, 50, 10]))
    assert row["experts_touched"] == pytest.approx(expected_touched(7, 128, 8))
    # the hot path (time_from_sums) and the term-by-term breakdown agree
    assert row["step_time_s"] == pytest.approx(max(row["compute_s"], row["memory_s"],
                                                   row["host_floor_s"])
                                               + row["fixed_s"] + row["comm_s"], rel=1e-12)


# one MLA layer: h = 16, 2 heads, r_q = 4, r_kv = 6, d_n = 3, d_r = 2, d_v = 5, MLP 8, vocab 10
MLA = ModelShape("tiny-mla", 1, 16, 2, 2, 8, 10, kv_lora_rank=6, q_lora_rank=4,
                 qk_nope_head_dim=3, qk_rope_head_dim=2, v_head_dim=5)


def test_mla_parameters_cache_and_attention_flops_by_hand():
    # q_a 16*4 + norm 4 + q_b 4*2*(3+2) = 108; kv_a 16*(6+2) + norm 6 + kv_b 6*2*(3+5) = 230;
    # o 2*5*16 = 160
    assert MLA.attention_params == 108 + 230 + 160
    assert MLA.layer_params == 498 + 3 * 16 * 8 + 2 * 16
    assert MLA.kv_bytes_per_token(2) == 1 * (6 + 2) * 2
    c = pass_constants(MLA, H100, tp=2)
    assert c.kv_bytes == 16.0  # the latent is replicated, not split by tp
    assert c.attn_flops == 2 * 2 * (3 + 2 + 5) / 2  # 2 H (d_n + d_r + d_v) per pair, over tp
    assert c.flops_per_token == 2.0 * (MLA.layer_params + 16 * 10) / 2


def test_an_mla_target_s_cache_is_charged_on_every_tp_rank():
    hw = get_hardware("h100")
    target, draft = MLA, SHAPES["vicuna-68m"]
    from specbatch.simulator.cost.analytic.memory import memory_kv_tokens

    free = 4 * hw.memory_bytes * 0.9 - 2 * (target.params + draft.params)
    per_token = 4 * target.kv_bytes_per_token() + draft.kv_bytes_per_token()
    assert memory_kv_tokens(hw, target, draft, 2 * 2, 0.9) == int(free // per_token)
