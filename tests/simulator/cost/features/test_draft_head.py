"""Specification of EAGLE / EAGLE-3 / MTP heads in the cost model
(simulator/cost/features/draft_head.py): their shapes derived from the target's by vLLM's modules,
one pass's roofline seconds, the KV capacity next to the head, and the one-line refusals."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from specbatch.errors import SpecbatchError
from specbatch.simulator.config.sim_config import load_config
from specbatch.simulator.cost.analytic.memory import memory_kv_tokens
from specbatch.simulator.cost.features.draft_head import head_shape
from specbatch.simulator.cost.gpus.hardware import get_execution, get_hardware
from specbatch.simulator.cost.registry import build_cost_model, step_split
from specbatch.traces.models.shapes import get_shape

H, I, KV = 4096, 14336, 8 * 128  # Llama-3.1-8B: hidden, MLP width, KV heads x head_dim


def test_eagle3_head_of_llama_3_1_8b_is_vllms_module():
    """Eagle3LlamaForCausalLM for Llama-3.1-8B: one layer (qkv over 2h: 2h (h + 2 d_kv);
    o h²; MLP 3 h I; input, post-attention and hidden norms; final norm), fc 3h -> h, its
    own LM head of 32000 draft tokens; the 128256-token embedding is the target's.
    424,689,664 weights = 849 MB (810 MiB) in bf16; the checkpoint's d2t / t2d token maps add
    < 0.4 MB and are not counted."""
    head = head_shape("eagle3", get_shape("llama-3.1-8b"))
    assert (head.hidden, head.layer.layers, head.layer.intermediate, head.lm_vocab) == (
        4096, 1, 14336, 32000)
    by_hand = (2 * H * (H + 2 * KV) + H * H + 3 * H * I + 3 * H  # the layer, 3 norms
               + H                                                # final norm
               + 3 * H * H                                        # fc
               + 32000 * H)                                       # draft-vocabulary head
    assert head.held_params == by_hand == 424_689_664
    assert head.own_lm_head and not head.fc_every_pass


def test_eagle_head_shares_the_targets_head_and_applies_fc_every_pass():
    head = head_shape("eagle", get_shape("llama-3.1-8b"))
    layer = 2 * H * H + 2 * H * KV + 3 * H * I + 2 * H
    assert head.held_params == layer + 2 * H * H
    assert head.fc_every_pass and not head.own_lm_head and head.lm_vocab == 128256


def test_deepseek_v3_mtp_module_is_one_moe_layer_plus_eh_proj():
    """DeepSeek-V3's MTP module (deepseek_mtp.py): enorm, hnorm, eh_proj 2h -> h, one MoE
    decoder layer (MLA: q_a h r_q + r_q, q_b r_q H 192, kv_a h 576 + r_kv, kv_b r_kv H 256,
    o H 128 h; router 256 h; 256 routed + 1 shared expert of 3 h 2048; 2 norms), the shared
    head's norm. With the checkpoint's own copies of the embedding and head (2 V h) it
    completes DeepSeek's 685 B = 671 B main model + the MTP module."""
    h, heads, r_q, r_kv = 7168, 128, 1536, 512
    attention = (h * r_q + r_q + r_q * heads * 192 + h * 576 + r_kv + r_kv * heads * 256
                 + heads * 128 * h)
    layer = attention + 2 * h + 256 * h + 257 * 3 * h * 2048
    by_hand = layer + 2 * h * h + 3 * h
    target = get_shape("deepseek-v3")
    head = head_shape("mtp", target)
    assert head.held_params == by_hand == 11_610_067_968
    assert abs(target.params / 1e9 - 671) < 0.1
    total = target.params + head.held_params + 2 * target.vocab * h
    assert abs(total / 685e9 - 1) < 1e-3


def test_a_later_pass_is_the_roofline_of_the_heads_layer_and_head_by_hand():
    """One later EAGLE-3 pass of n = 32 requests at c = 1000 on one H100 (cuda_graph):
    F = 2 (P_layer + P_qkv+) Q + 4 h Σ(c + 1) + 2 h V_d n, B = b (P_layer + P_qkv+ + h +
    h V_d) + kv_b (Σc + 2Q) + b (9h + 2 d_kv + 6I) Q (no fc after pass 1); pass 1 over the
    same batch with q = 4 adds fc (F: 2·3h²·Q, B: b·3h²) and the LM head stays at n rows."""
    hw = get_hardware("h100")
    cost = build_cost_model("roofline", "h100", "llama-3.1-8b", "eagle3")
    n, c, b = 32, 1000, hw.dtype_bytes
    p_layer = 2 * H * H + 2 * H * KV + 3 * H * I + 2 * H
    qkv = H * (H + 2 * KV)
    kv_tok = 2 * KV * b  # one layer's K and V

    def seconds(q, fc):
        Q = n * q
        flops = (2 * (p_layer + qkv + (3 * H * H if fc else 0)) * Q
                 + 4 * H * n * q * (c + (q + 1) / 2) + 2 * H * 32000 * n)
        nbytes = (b * (p_layer + qkv + H + H * 32000 + (3 * H * H if fc else 0))
                  + kv_tok * (n * c + 2 * Q) + b * (9 * H + 2 * KV + 6 * I) * Q)
        pass_lat, layer_lat = get_execution("cuda_graph").latencies("draft", hw)
        return (max(flops / (hw.peak_flops * hw.compute_eff), nbytes / (hw.mem_bw * hw.memory_eff))
                + pass_lat + layer_lat)

    one, kv = np.ones(n, dtype=np.int64), np.full(n, c, dtype=np.int64)
    assert cost.step_time("draft", one, kv) == pytest.approx(seconds(1, False), rel=1e-12)
    assert cost.first_pass_step(4 * one, kv) == pytest.approx(seconds(4, True), rel=1e-12)


def test_the_head_costs_a_fraction_of_a_1b_draft_model_and_adds_one_layer_of_kv():
    """At batch 32, k = 3: EAGLE-3's three passes cost less than Llama-3.2-1B's three;
    the KV capacity counts the target's 32 layers plus the head's one (and the head's
    0.85 GB), against the 1B draft's 16 layers and 2.5 GB."""
    head = build_cost_model("roofline", "h100", "llama-3.1-8b", "eagle3")
    small = build_cost_model("roofline", "h100", "llama-3.1-8b", "llama-3.2-1b")
    assert step_split(head, 32, 1000, 3)["draft_s"] < step_split(small, 32, 1000, 3)["draft_s"]
    hw, target = get_hardware("h100"), get_shape("llama-3.1-8b")
    free = 0.9 * hw.memory_bytes - 2 * target.params - 2 * 424_689_664
    assert head.kv_capacity_tokens(0.9) == int(free // (2 * 33 * KV * 2))
    assert head.kv_capacity_tokens(0.9) > small.kv_capacity_tokens(0.9)
    alone = memory_kv_tokens(hw, target, None, 1, 0.9)
    assert head.kv_capacity_tokens(0.9) < alone


def test_mtp_prices_the_experts_its_tokens_touch():
    """DeepSeek-V3's MTP pass over more tokens reads more experts (THEORY.md §8): pass 1
    over a verify batch costs more than a later pass of one token per request."""
    cost = build_cost_model("roofline", "h200", "deepseek-v3", "mtp", tp=8)
    one, kv = np.ones(16, dtype=np.int64), np.full(16, 2000, dtype=np.int64)
    assert cost.first_pass_step(4 * one, kv) > cost.step_time("draft", one, kv) > 0


@pytest.mark.parametrize("draft, target, message", [
    ("mtp", "llama-3.1-8b", "has no MTP layers"),
    ("eagle3", "qwen3-30b-a3b", "cannot derive an EAGLE head"),
    ("eagle", "deepseek-v3", "cannot derive an EAGLE head"),
])
def test_a_head_the_target_cannot_have_is_refused_in_one_line(draft, target, message):
    with pytest.raises(SpecbatchError, match=message) as err:
        load_config(None, target=target, draft=draft)
    assert "\n" not in str(err.value) and "field draft" in str(err.value)


@pytest.mark.parametrize("kw, field", [
    (dict(draft_weight_bits=4), "draft_weight_bits"),
    (dict(cost="profiled", profile="x.csv"), "cost"),
])
def test_settings_a_head_does_not_price_are_refused(kw, field):
    with pytest.raises(SpecbatchError, match=f"field {field}"):
        load_config(None, target="llama-3.1-8b", draft="eagle3", **kw)


def test_the_cli_refuses_mtp_on_a_dense_target_with_exit_code_2():
    out = subprocess.run([sys.executable, "-m", "specbatch", "simulate", "--target",
                          "llama-3.1-8b", "--draft", "mtp", "--requests", "2"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2
    assert out.stderr.strip().count("\n") == 0 and "num_nextn_predict_layers" in out.stderr


def head_config(tmp_path, **fields):
    """A head's config.json as yuhuili/EAGLE3-LLaMA3.1-Instruct-8B publishes it, ``fields``
    changed."""
    import json

    data = {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama",
            "hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32,
            "num_key_value_heads": 8, "num_hidden_layers": 1, "vocab_size": 128256,
            "draft_vocab_size": 32000, "tie_word_embeddings": False, "torch_dtype": "float16",
            **fields}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data))
    return str(path)


def test_a_head_config_json_reads_to_the_derived_head_and_its_layers_count(tmp_path):
    from specbatch.simulator.cost.features.draft_head import read_head_config

    target = get_shape("llama-3.1-8b")
    assert (read_head_config(head_config(tmp_path), "eagle3", target).held_params
            == head_shape("eagle3", target).held_params)
    two = read_head_config(head_config(tmp_path, num_hidden_layers=2), "eagle3", target)
    layer = 2 * H * H + 2 * H * KV + 3 * H * I + 2 * H
    assert two.held_params == 424_689_664 + layer + H  # one more layer and its hidden_norm
    small = read_head_config(head_config(tmp_path, draft_vocab_size=16000), "eagle3", target)
    assert small.held_params == 424_689_664 - 16000 * H
    same = read_head_config(head_config(tmp_path, target_hidden_size=4096), "eagle3", target)
    assert same.held_params == 424_689_664  # the target's own width, written out


@pytest.mark.parametrize("fields, draft, message", [
    (dict(architectures=["LlamaForCausalLM"]), "eagle3", "field architectures: expected one of"),
    (dict(architectures=["EagleLlamaForCausalLM"]), "eagle3", "is an eagle head"),
    (dict(draft_vocab_size=200000), "eagle3", "field draft_vocab_size"),
    # issue 46: 0 is not "absent", a string is not coerced, the fc's width is the target's
    (dict(draft_vocab_size=0), "eagle3", r"field draft_vocab_size: .*got 0$"),
    (dict(draft_vocab_size=True), "eagle3", "field draft_vocab_size"),
    (dict(draft_vocab_size="32000"), "eagle3", "field draft_vocab_size"),
    (dict(target_hidden_size=8192), "eagle3",
     r"field target_hidden_size: expected the target's hidden size 4096 \(llama-3.1-8b\), "
     "got 8192"),
    (dict(target_hidden_size="4096"), "eagle3", "field target_hidden_size: .*got '4096'"),
    (dict(hidden_size="4096"), "eagle3", "field hidden_size"),
    (dict(eagle_config={"use_aux_hidden_state": "no"}), "eagle3", "use_aux_hidden_state"),
])
def test_a_head_config_json_that_does_not_fit_is_refused_naming_the_field(tmp_path, fields, draft,
                                                                          message):
    with pytest.raises(SpecbatchError, match=message) as err:
        load_config(None, target="llama-3.1-8b", draft=draft,
                    draft_head=head_config(tmp_path, **fields))
    assert "\n" not in str(err.value) and "config.json" in str(err.value)


def test_draft_head_needs_a_head_drafter(tmp_path):
    with pytest.raises(SpecbatchError, match="field draft_head"):
        load_config(None, target="llama-3.1-8b", draft="llama-3.2-1b",
                    draft_head=head_config(tmp_path))


def test_a_config_json_target_with_mtp_layers_takes_an_mtp_head(tmp_path):
    """A dense target whose config.json has num_nextn_predict_layers (MiMo-7B-style): its MTP
    head is one of its dense layers plus eh_proj and three norms."""
    import json

    path = tmp_path / "config.json"
    path.write_text(json.dumps({"hidden_size": 4096, "intermediate_size": 11008,
                                "num_attention_heads": 32, "num_key_value_heads": 8,
                                "num_hidden_layers": 36, "vocab_size": 151680,
                                "num_nextn_predict_layers": 1, "torch_dtype": "bfloat16"}))
    target = get_shape(str(path))
    assert target.mtp_layers == 1
    head = head_shape("mtp", target)
    assert head.held_params == (2 * H * H + 2 * H * KV + 3 * H * 11008 + 2 * H) + 2 * H * H + 3 * H
    cost = build_cost_model("roofline", "h100", str(path), "mtp")
    assert cost.step_time("draft", np.ones(4), np.full(4, 100)) > 0


def test_the_docs_eagle3_versus_1b_table_is_what_cost_show_prints():
    """docs/simulate.md's table: `specbatch cost show --target llama-3.1-8b --draft D --batch
    1 32 128 --kv 1024 --k 3 [--host fixed]` (fused sampler, token rule), draft and step ms
    per row; host vllm wraps the model in vLLM's host share (simulator.cost.features.host)."""
    from pathlib import Path

    from specbatch.simulator.cost.features.host import with_host
    from specbatch.simulator.cost.verify_cost import build_verify_cost
    from specbatch.simulator.replay.rules import rule_entry

    root = Path(__file__).resolve().parents[4]
    page = (root / "docs" / "simulate.md").read_text()
    section = page.split("### EAGLE, EAGLE-3 and MTP drafters")[1].split("\n## ")[0]
    section = section.split("\n### ")[0]  # not the next subsection's tables
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in section.splitlines()
            if line.startswith("| roofline") or line.startswith("| calibrated")]
    assert len(rows) == 12
    sampler = build_verify_cost("fused", rule_entry("token").sampler_cost, "h100", 128256)
    for cost, host, batch, *cells in rows:
        got = []
        for draft in ("eagle3", "llama-3.2-1b"):
            model = build_cost_model(cost, "h100", "llama-3.1-8b", draft)
            if host == "vllm":
                model = with_host(model, draft, overlap=False)
            split = step_split(model, int(batch), 1024, 3, sampler)
            got += [f"{1e3 * split['draft_s']:.2f}", f"{1e3 * split['step_s']:.2f}"]
        assert cells == got


def test_an_fp8_targets_mtp_layer_is_held_and_streamed_in_fp8_and_eh_proj_in_bf16():
    """The MTP module is the target checkpoint's own layer: under quantization = fp8 its
    projections and experts take the format's bytes (simulator.cost.analytic.precision), while
    eh_proj (a plain nn.Linear in vLLM) and the norms stay at 2 bytes."""
    from specbatch.simulator.cost.analytic.precision import held_weight_bytes, resolve_quantization

    hw = get_hardware("h200")
    fp8 = head_shape("mtp", resolve_quantization("fp8", get_shape("deepseek-v3")))
    bf16 = head_shape("mtp", get_shape("deepseek-v3"))
    h = 7168
    assert fp8.layer.quantization == "fp8"
    assert fp8.held_bytes(hw) == held_weight_bytes(fp8.layer, hw) - 2 * h + 2 * (2 * h * h + 3 * h)
    assert bf16.held_bytes(hw) == 2 * bf16.held_params
    assert fp8.held_bytes(hw) < 0.55 * bf16.held_bytes(hw)
    one, kv = np.ones(16, dtype=np.int64), np.full(16, 2000, dtype=np.int64)
    slow = build_cost_model("roofline", "h200", "deepseek-v3", "mtp", tp=8)
    fast = build_cost_model("roofline", "h200", "deepseek-v3", "mtp", tp=8, quantization="fp8")
    assert fast.step_time("draft", one, kv) < slow.step_time("draft", one, kv)


def test_a_sliding_window_target_pools_the_heads_full_attention_layer_as_vllms_groups():
    """Mistral-7B (32 sliding layers) with an EAGLE-3 head: vLLM V1's hybrid KV cache manager
    groups the head's full-attention layer with the target's sliding ones
    (simulator.cost.analytic.kv_groups), so the pool is kv_layout(target, head layer)'s blocks of
    the memory left next to both weights; the engine's group tables see the same layer."""
    from specbatch.simulator.cost.analytic.kv_groups import kv_layout
    from specbatch.simulator.engine.kv import windowed_shapes

    hw, target = get_hardware("h100"), get_shape("mistral-7b-v0.1")
    head = head_shape("eagle3", target)
    cost = build_cost_model("roofline", "h100", "mistral-7b-v0.1", "eagle3")
    free = 0.9 * hw.memory_bytes - 2 * target.params - 2 * head.held_params
    layout = kv_layout(target, head.layer, 2, 16)
    assert layout.hybrid
    assert cost.kv_capacity_tokens(0.9, 16, False) == layout.num_blocks(free) * 16
    config = load_config(None, target="mistral-7b-v0.1", draft="eagle3", kv_mode="paged")
    assert windowed_shapes(config) == (target, head.layer)
