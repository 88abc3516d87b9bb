"""Mixture-of-experts config.json targets (traces.models.hf_moe): every common spelling is read,
every spelling the roofline cannot price is a one-line error naming the field."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specbatch.errors import SpecbatchError
from specbatch.traces.models.hf_moe import moe_routing
from specbatch.traces.models.shapes import SHAPES, get_shape

BUNDLED = Path(__file__).resolve().parents[3] / "traces" / "data" / "configs"
QWEN3 = json.loads((BUNDLED / "qwen3-30b-a3b" / "config.json").read_text())
# mistralai/Mixtral-8x7B-v0.1 config.json (the fields read)
MIXTRAL = {"architectures": ["MixtralForCausalLM"], "hidden_size": 4096,
           "intermediate_size": 14336, "num_attention_heads": 32, "num_experts_per_tok": 2,
           "num_hidden_layers": 32, "num_key_value_heads": 8, "num_local_experts": 8,
           "router_aux_loss_coef": 0.02, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
           "vocab_size": 32000}


def read(tmp_path, data):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data))
    return get_shape(str(path))


def test_the_bundled_qwen3_config_is_the_registry_shape():
    shape = get_shape(str(BUNDLED / "qwen3-30b-a3b"))
    assert dataclasses.replace(shape, name="qwen3-30b-a3b") == SHAPES["qwen3-30b-a3b"]
    # published totals: 30.5 B parameters, 3.3 B active
    assert (round(shape.params / 1e9, 1), round(shape.active_params / 1e9, 1)) == (30.5, 3.4)
    assert shape.head_dim == 128 and shape.kv_bytes_per_token() == 2 * 48 * 4 * 128 * 2


def test_mixtral_reads_as_the_registry_shape(tmp_path):
    shape = read(tmp_path, MIXTRAL)
    assert dataclasses.replace(shape, name="mixtral-8x7b") == SHAPES["mixtral-8x7b"]
    # published: 46.7 B parameters, 12.9 B active
    assert (round(shape.params / 1e9, 1), round(shape.active_params / 1e9, 1)) == (46.7, 12.9)


def test_transformers_5_spelling_of_qwen3_reads_the_same(tmp_path):
    data = {k: v for k, v in QWEN3.items() if k != "num_experts"} | {"num_local_experts": 128}
    assert read(tmp_path, data).experts == 128


def test_qwen2_moe_shared_expert_and_sparse_step(tmp_path):
    # Qwen1.5-MoE-A2.7B-like: 60 experts, 4 per token, a shared expert of width 5632;
    # every 2nd layer sparse and layer 1 forced dense: MoE layers are 3, 5, 7 of 0..7
    data = {"hidden_size": 2048, "intermediate_size": 5632, "num_attention_heads": 16,
            "num_hidden_layers": 8, "vocab_size": 151936, "num_experts": 60,
            "num_experts_per_tok": 4, "moe_intermediate_size": 1408,
            "shared_expert_intermediate_size": 5632, "decoder_sparse_step": 2,
            "mlp_only_layers": [1]}
    shape = read(tmp_path, data)
    assert (shape.experts, shape.top_k, shape.expert_intermediate, shape.shared_intermediate,
            shape.moe_layers) == (60, 4, 1408, 5632, 3)


def test_deepseek_style_dense_prefix_layer_frequency_and_shared_experts(tmp_path):
    # first_k_dense_replace 1, moe_layer_freq 2 over 6 layers: MoE layers 2, 4
    data = {"hidden_size": 1024, "intermediate_size": 4096, "num_attention_heads": 8,
            "num_hidden_layers": 6, "vocab_size": 1000, "n_routed_experts": 16,
            "num_experts_per_tok": 2, "moe_intermediate_size": 256, "n_shared_experts": 2,
            "first_k_dense_replace": 1, "moe_layer_freq": 2}
    shape = read(tmp_path, data)
    assert (shape.experts, shape.moe_layers, shape.shared_intermediate) == (16, 2, 512)


@pytest.mark.parametrize(("change", "field"), [
    ({"moe_num_experts": 16}, "moe_num_experts"),
    ({"ffn_config": {"moe_num_experts": 16, "moe_top_k": 4}}, "ffn_config.moe_num_experts"),
    ({"num_experts": "128"}, "num_experts"),
    ({"num_experts": [128] * 48}, "num_experts"),
    ({"num_experts_per_tok": [8] * 48}, "num_experts_per_tok"),
    ({"num_experts_per_tok": 200}, "num_experts_per_tok"),
    ({"num_local_experts": 64}, "num_experts"),  # disagreeing spellings
    ({"mlp_only_layers": [48]}, "mlp_only_layers"),
    ({"mlp_only_layers": list(range(48))}, "decoder_sparse_step"),
    ({"quantization_config": {"quant_method": "bitsandbytes"}}, "quantization_config.quant_method"),
    ({"quantization_config": {"quant_method": "compressed-tensors"}},
     "quantization_config.config_groups"),
    ({"quantization_config": {"quant_method": "compressed-tensors", "config_groups": {
        "group_0": {"weights": {"num_bits": 4, "type": "int", "group_size": 128}}}}},
     "quantization_config.config_groups.group_0.weights"),
    ({"quantization_config": {"quant_method": "compressed-tensors", "config_groups": {
        "group_0": {"weights": {"num_bits": 8, "type": "float"}}},
        "ignore": ["re:.*self_attn.*"]}}, "quantization_config.ignore"),
    ({"quantization_config": {"bits": 3, "quant_method": "awq"}}, "quantization_config.bits"),
    ({"quantization_config": {"quant_method": "gptq", "group_size": 0}},
     "quantization_config.group_size"),
    ({"quantization_config": {"quant_method": "fp8",
                              "ignored_layers": ["model.layers.0.self_attn.q_proj"]}},
     "quantization_config.ignored_layers"),
    ({"quantization_config": {"quant_method": "mxfp4", "modules_to_not_convert": ["experts"]}},
     "quantization_config.modules_to_not_convert"),
    ({"bits": 4}, "bits"),
    ({"load_in_4bit": True}, "load_in_4bit"),
    ({"kv_lora_rank": 512}, "qk_nope_head_dim"),  # MLA without its head dims
    ({"qk_rope_head_dim": 64}, "kv_lora_rank"),
    ({"index_topk": 2048}, "index_topk"),  # DeepSeek-V3.2's sparse attention indexer
    ({"moe_num_experts": "16"}, "moe_num_experts"),
    ({"expert_layer_period": 2}, "expert_layer_period"),
])
def test_spellings_the_roofline_cannot_price_are_refused_naming_the_field(tmp_path, change,
                                                                           field):
    with pytest.raises(SpecbatchError, match=f"field {field}:") as err:
        read(tmp_path, {**QWEN3, **change})
    assert "\n" not in str(err.value)


DENSE = {"hidden_size": 1024, "intermediate_size": 4096, "num_attention_heads": 8,
         "num_hidden_layers": 2, "vocab_size": 1000, "torch_dtype": "float16"}


@pytest.mark.parametrize(("quant", "fields"), [
    ({"bits": 4, "group_size": 128, "quant_method": "awq", "zero_point": True,
      "modules_to_not_convert": None}, ("awq", 4, 128)),
    ({"bits": 8, "group_size": -1, "quant_method": "gptq", "desc_act": False}, ("gptq", 8, -1)),
    ({"quant_method": "GPTQ"}, ("gptq", 4, 128)),  # vLLM's defaults, any case
    ({"quant_method": "fp8", "activation_scheme": "dynamic", "weight_block_size": [128, 128],
      "ignored_layers": ["lm_head"]}, ("fp8", 0, 0)),
    # RedHatAI's FP8-dynamic checkpoints (llm-compressor): W8A8 float, lm_head and the MoE
    # router kept at 16 bits; vLLM's CompressedTensorsW8A8Fp8 scheme
    ({"quant_method": "compressed-tensors", "format": "float-quantized",
      "config_groups": {"group_0": {
          "targets": ["Linear"],
          "weights": {"num_bits": 8, "type": "float", "strategy": "channel", "dynamic": False},
          "input_activations": {"num_bits": 8, "type": "float", "strategy": "token",
                                "dynamic": True}}},
      "ignore": ["re:.*lm_head", "re:.*router$", "re:.*mlp.gate$"]}, ("fp8", 0, 0)),
])
def test_a_priced_quantisation_block_becomes_the_shapes_format(tmp_path, quant, fields):
    shape = read(tmp_path, {**DENSE, "quantization_config": quant})
    assert (shape.quantization, shape.quant_bits, shape.quant_group_size) == fields
    assert shape.params == read(tmp_path, DENSE).params  # the shape itself is unchanged


def fp8_group(weights: dict, activations: dict | None) -> dict:
    """A one-group compressed-tensors fp8 quantization_config (llm-compressor's spelling)."""
    group = {"targets": ["Linear"], "weights": {"num_bits": 8, "type": "float", **weights}}
    if activations is not None:
        group["input_activations"] = {"num_bits": 8, "type": "float", **activations}
    return {"quant_method": "compressed-tensors", "format": "float-quantized",
            "config_groups": {"group_0": group}, "ignore": ["re:.*lm_head", "re:.*router$"]}


@pytest.mark.parametrize("quant, scheme", [
    # RedHatAI's FP8-dynamic (e.g. Llama-4-Scout-17B-16E-Instruct-FP8-dynamic): ptpc
    (fp8_group({"strategy": "channel", "dynamic": False},
               {"strategy": "token", "dynamic": True}), "channel"),
    (fp8_group({"strategy": "block", "block_structure": [128, 128], "dynamic": False},
               {"strategy": "group", "group_size": 128, "dynamic": True}), "block"),
    (fp8_group({"strategy": "tensor", "dynamic": False},
               {"strategy": "tensor", "dynamic": False}), "static"),
    (fp8_group({"strategy": "tensor", "dynamic": False},
               {"strategy": "tensor", "dynamic": True}), ""),
    (fp8_group({"strategy": "channel"}, None), "channel"),  # weight-only (W8A16)
    # Qwen's FP8 checkpoints: vLLM's Fp8Config with 128 x 128 weight blocks
    ({"quant_method": "fp8", "activation_scheme": "dynamic", "weight_block_size": [128, 128]},
     "block"),
    ({"quant_method": "fp8", "activation_scheme": "static"}, "static"),
    ({"quant_method": "fp8", "activation_scheme": "dynamic"}, ""),
    ({"quant_method": "fp8"}, ""),  # Fp8Config's default: dynamic activation scales
])
def test_an_fp8_checkpoints_scale_granularity_becomes_its_quant_scheme(tmp_path, quant,
                                                                        scheme):
    shape = read(tmp_path, {**QWEN3, "quantization_config": quant})
    assert (shape.quantization, shape.quant_scheme) == ("fp8", scheme)


def test_compressed_tensors_groups_of_different_schemes_read_as_mixed(tmp_path):
    quant = fp8_group({"strategy": "channel"}, {"strategy": "token", "dynamic": True})
    quant["config_groups"]["group_1"] = fp8_group(
        {"strategy": "tensor"}, {"strategy": "tensor", "dynamic": False}
    )["config_groups"]["group_0"]
    assert read(tmp_path, {**QWEN3, "quantization_config": quant}).quant_scheme == "mixed"


def test_a_16_bit_or_integer_checkpoint_keeps_the_empty_scheme(tmp_path):
    assert read(tmp_path, QWEN3).quant_scheme == ""
    awq = read(tmp_path, {**QWEN3, "quantization_config": {"quant_method": "awq"}})
    assert awq.quant_scheme == ""


def test_a_dense_config_with_an_unpriced_quantisation_block_is_refused_naming_the_methods(
        tmp_path):
    with pytest.raises(SpecbatchError, match=r"field quantization_config.quant_method: expected "
                       r"one of fp8, awq, gptq, mxfp4 .*got 'bitsandbytes'") as err:
        read(tmp_path, {**DENSE, "quantization_config": {"quant_method": "bitsandbytes",
                                                         "load_in_4bit": True}})
    assert "\n" not in str(err.value)


def test_gpt_oss_mxfp4_block_reads_with_its_16_bit_modules(tmp_path):
    # openai/gpt-oss-20b config.json's quantization_config (attention, router, embeddings
    # and head named as kept: all 16-bit under mxfp4 anyway)
    quant = {"modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router",
                                        "model.embed_tokens", "lm_head"],
             "quant_method": "mxfp4"}
    shape = read(tmp_path, {**QWEN3, "quantization_config": quant})
    assert shape.quantization == "mxfp4" and shape.is_moe


def test_coefficients_and_flags_named_after_experts_pass(tmp_path):
    data = {**QWEN3, "moe_aux_loss_coeff": 0.01, "output_router_logits": False,
            "quantization_config": None, "moe_router_dtype": "float32"}
    assert read(tmp_path, data).experts == 128


# deepseek-ai/DeepSeek-V2-Lite config.json (the fields read): MLA and MoE
DEEPSEEK_V2_LITE = {"hidden_size": 2048, "num_hidden_layers": 27, "intermediate_size": 10944,
                    "moe_intermediate_size": 1408, "num_attention_heads": 16,
                    "num_key_value_heads": 16, "vocab_size": 102400, "q_lora_rank": None,
                    "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
                    "v_head_dim": 128, "n_routed_experts": 64, "num_experts_per_tok": 6,
                    "n_shared_experts": 2, "first_k_dense_replace": 1, "moe_layer_freq": 1,
                    "tie_word_embeddings": False, "torch_dtype": "bfloat16"}


def test_deepseek_v2_lite_reads_mla_and_moe(tmp_path):
    shape = read(tmp_path, DEEPSEEK_V2_LITE)
    assert dataclasses.replace(shape, name="deepseek-v2-lite") == SHAPES["deepseek-v2-lite"]
    assert (shape.kv_lora_rank, shape.q_lora_rank, shape.moe_layers, shape.shared_intermediate) == (
        512, 0, 26, 2 * 1408)
    # published: 15.7 B parameters, 2.4 B activated (without the 0.21 B input embedding)
    assert round(shape.params / 1e9, 1) == 15.7
    assert 2.4e9 <= shape.active_params - 102400 * 2048 < 2.5e9
    # the cache holds the latent and the rope key: 27 layers x (512 + 64) x 2 bytes
    assert shape.kv_bytes_per_token() == 27 * 576 * 2


def test_deepseek_v3_2_with_fp8_weights_is_refused_for_its_sparse_indexer(tmp_path):
    data = {**DEEPSEEK_V2_LITE, "index_topk": 2048, "index_n_heads": 64,
            "quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]}}
    with pytest.raises(SpecbatchError, match="field index_topk: "):
        read(tmp_path, data)


@pytest.mark.parametrize(("change", "field"), [
    ({"num_experts": 10**30}, "num_experts"),
    ({"num_hidden_layers": 10**9}, "num_hidden_layers"),
    ({"decoder_sparse_step": 10**400}, "decoder_sparse_step"),
    ({"hidden_size": 10**400}, "hidden_size"),  # too large for a float: still one line
])
def test_absurd_sizes_are_one_line_errors_not_hangs(tmp_path, change, field):
    with pytest.raises(SpecbatchError, match=f"field {field}:"):
        read(tmp_path, {**QWEN3, **change})


def test_deeply_nested_objects_are_refused(tmp_path):
    nested: dict = {"x": 1}
    for _ in range(40):
        nested = {"inner": nested}
    with pytest.raises(SpecbatchError, match="nested"):
        read(tmp_path, {**QWEN3, "extra": nested})


JSON_VALUES = st.one_of(st.none(), st.booleans(), st.integers(-3, 10**20),
                        st.floats(allow_nan=False), st.text(max_size=4),
                        st.lists(st.integers(-2, 60), max_size=4))
MOE_KEYS = ["num_experts", "num_local_experts", "n_routed_experts", "num_experts_per_tok",
            "experts_per_token", "moe_intermediate_size", "shared_expert_intermediate_size",
            "n_shared_experts", "decoder_sparse_step", "mlp_only_layers",
            "first_k_dense_replace", "moe_layer_freq", "kv_lora_rank", "q_lora_rank",
            "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "moe_num_experts", "bits",
            "head_dim"]


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(st.sampled_from(MOE_KEYS), JSON_VALUES, max_size=6))
def test_any_mix_of_moe_fields_gives_a_shape_or_a_one_line_error(change):
    from specbatch.traces.models.hf_config import shape_from_fields

    try:
        shape = shape_from_fields({**QWEN3, **change}, "fuzz", "model config fuzz")
    except SpecbatchError as exc:
        assert "\n" not in str(exc) and "field " in str(exc)
        return
    assert shape.params >= shape.active_params > 0 and shape.kv_bytes_per_token() > 0


@pytest.mark.parametrize("change, field", [
    ({"num_experts": 0}, "field num_experts: expected an integer >= 1"),
    ({"num_experts": None}, "field num_experts: expected an integer >= 1"),
])
def test_moe_fields_without_experts_are_refused_not_read_as_dense(tmp_path, change, field):
    """Issue 46: Qwen3-30B-A3B's config.json with num_experts 0 or null still routes
    num_experts_per_tok = 8 tokens to experts: a damaged MoE config, not a dense model."""
    with pytest.raises(SpecbatchError, match=field) as err:
        read(tmp_path, {**QWEN3, **change})
    assert "num_experts_per_tok" in str(err.value) and "\n" not in str(err.value)


def test_a_dense_config_with_zero_experts_and_no_routing_stays_dense(tmp_path):
    dense = {k: v for k, v in QWEN3.items()
             if k not in ("num_experts_per_tok", "moe_intermediate_size")}
    assert not read(tmp_path, {**dense, "num_experts": 0}).is_moe


def test_an_empty_quantization_config_is_refused_not_read_as_16_bit(tmp_path):
    with pytest.raises(SpecbatchError, match=r"field quantization_config: expected an object "
                       r"with quant_method .* got \{\}"):
        read(tmp_path, {**MIXTRAL, "quantization_config": {}})


@pytest.mark.parametrize("fields, routing", [
    ({"model_type": "qwen3_moe", "norm_topk_prob": True}, "renormalize"),
    ({"model_type": "qwen2_moe", "norm_topk_prob": False}, "default"),
    ({"model_type": "qwen3_moe"}, "default"),  # Qwen3MoeConfig's norm_topk_prob: false
    ({"model_type": "mixtral"}, "renormalize"),  # vLLM's mixtral.py: renormalize=True
    ({"model_type": "deepseek_v3", "scoring_func": "sigmoid", "topk_method": "noaux_tc",
      "n_group": 8, "topk_group": 4, "norm_topk_prob": True,
      "routed_scaling_factor": 2.5}, "deepseek_v3"),
    ({"scoring_func": "sigmoid", "topk_method": "noaux_tc", "norm_topk_prob": True},
     "minimax2"),
    ({"scoring_func": "sigmoid", "topk_method": "noaux_tc", "norm_topk_prob": True,
      "routed_scaling_factor": 2.5}, "unspecified"),
    ({"model_type": "deepseek_v2", "topk_method": "group_limited_greedy", "n_group": 8,
      "norm_topk_prob": False}, "default"),
    ({"scoring_func": "sqrtsoftplus", "norm_topk_prob": True}, "deepseek_v4"),
])
def test_the_routing_method_is_vllms_for_the_configs_scoring_and_renormalisation(fields,
                                                                                  routing):
    assert moe_routing(fields) == routing
