"""Llama-4's text model read from config.json (traces.models.hf_llama4): the nested
text_config, its MoE layers and shared expert, the dense MLP width, the chunked layers and the
refusals."""

from __future__ import annotations

import dataclasses
import json

import pytest

from specbatch.errors import SpecbatchError
from specbatch.traces.models.hf_config import read_hf_config
from specbatch.traces.models.model_shape import ModelShape
from specbatch.traces.models.shapes import get_shape

#: a minimal Llama-4 (Maverick-like: MoE every other layer) of 8 layers
TEXT = {"model_type": "llama4_text", "hidden_size": 256, "num_hidden_layers": 8,
        "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 64,
        "intermediate_size": 128, "intermediate_size_mlp": 512,
        "interleave_moe_layer_step": 2, "num_local_experts": 4, "num_experts_per_tok": 1,
        "attention_chunk_size": 1024, "vocab_size": 1000, "torch_dtype": "bfloat16"}


def config(tmp_path, nested: bool = True, top: dict | None = None, **text) -> str:
    body = {**TEXT, **text}
    data = ({"architectures": ["Llama4ForConditionalGeneration"], "model_type": "llama4",
             "text_config": body, "vision_config": {"hidden_size": 1408,
                                                    "num_hidden_layers": 34},
             "torch_dtype": "bfloat16", **(top or {})} if nested else body)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data))
    return str(path)


def test_a_nested_llama4_config_reads_field_by_field(tmp_path):
    shape = read_hf_config(config(tmp_path))
    expected = ModelShape(
        name=shape.name, layers=8, hidden=256, heads=8, kv_heads=2,
        intermediate=512,  # intermediate_size_mlp: the dense layers' MLP
        vocab=1000, attention_head_dim=64, experts=4, top_k=1,  # head_dim != hidden / heads
        expert_intermediate=128, shared_intermediate=128,  # one shared expert of that width
        moe_layers=4,  # layers 1, 3, 5, 7: (i + 1) mod 2 = 0
        sliding_window=1024, sliding_layers=6,  # all but the NoPE layers 3 and 7
        moe_routing="llama4")  # Llama4MoE.custom_routing_function
    assert shape == expected


def test_a_bare_llama4_text_config_reads_as_the_nested_one(tmp_path):
    (tmp_path / "bare").mkdir()
    nested = read_hf_config(config(tmp_path))
    bare = read_hf_config(config(tmp_path / "bare", nested=False))
    assert bare == dataclasses.replace(nested, name=bare.name)


def test_the_dense_layers_are_priced_at_intermediate_size_mlp(tmp_path):
    shape = read_hf_config(config(tmp_path))
    h = 256
    attention = 2 * h * 8 * 64 + 2 * h * 2 * 64
    dense = attention + 3 * h * 512 + 2 * h
    moe = attention + 2 * h + 4 * h + 3 * h * 128 + 4 * 3 * h * 128
    assert shape.decoder_params == 4 * dense + 4 * moe
    assert shape.active_decoder_params == 4 * dense + 4 * (moe - 3 * 3 * h * 128)


@pytest.mark.parametrize("text, moe", [
    ({"interleave_moe_layer_step": 1}, 8),
    ({"interleave_moe_layer_step": 4}, 2),  # layers 3 and 7
    ({"interleave_moe_layer_step": 2, "moe_layers": [1, 3, 5, 7]}, 4),
    ({"interleave_moe_layer_step": 1, "moe_layers": list(range(8))}, 8),
])
def test_moe_layers_follow_the_interleave_step(tmp_path, text, moe):
    assert read_hf_config(config(tmp_path, **text)).moe_layers == moe


@pytest.mark.parametrize("text, chunked", [
    ({}, 6),  # no_rope_layers absent: a NoPE layer every 4th
    ({"no_rope_layers": []}, 6),  # empty: filled the same way (transformers' Llama4TextConfig)
    ({"no_rope_layer_interval": 2}, 4),
    ({"no_rope_layers": [1, 0] * 4}, 4),
    ({"no_rope_layers": [1] * 8 + [0, 0]}, 8),  # longer than the layers: the first 8 count
    ({"no_rope_layers": [0] * 8}, 0),  # all NoPE: no chunked layer, no window
    ({"attention_chunk_size": None}, 0),  # no chunking: every layer global
    ({"layer_types": ["chunked_attention"] * 3 + ["full_attention"]
                     + ["chunked_attention"] * 3 + ["full_attention"]}, 6),
])
def test_the_chunked_layers_are_the_rope_layers(tmp_path, text, chunked):
    shape = read_hf_config(config(tmp_path, **text))
    assert shape.sliding_layers == chunked
    assert shape.sliding_window == (1024 if chunked else 0)


def test_the_top_level_quantization_config_is_read_for_the_text_model(tmp_path):
    fp8 = {"quant_method": "compressed-tensors", "config_groups": {"group_0": {
        "weights": {"type": "float", "num_bits": 8}}},
        "ignore": ["re:.*lm_head", "re:.*router", "re:.*vision_model.*",
                   "re:.*multi_modal_projector.*"]}
    shape = read_hf_config(config(tmp_path, top={"quantization_config": fp8}))
    assert shape.quantization == "fp8" and shape.experts == 4


@pytest.mark.parametrize("text, field", [
    ({"moe_layers": [0, 2, 4, 6]}, "moe_layers"),  # not the step's layers
    ({"moe_layers": "all"}, "moe_layers"),
    ({"moe_layers": [1, 3, 5, 9]}, "moe_layers"),
    ({"interleave_moe_layer_step": 0}, "interleave_moe_layer_step"),
    ({"no_rope_layers": [1, 2] * 4}, "no_rope_layers"),
    ({"no_rope_layers": [1, 0]}, "no_rope_layers"),  # shorter than the layers
    ({"layer_types": ["chunked_attention"] * 8}, "layer_types"),
    ({"attention_chunk_size": 0}, "attention_chunk_size"),
    ({"sliding_window": 4096}, "sliding_window"),
    ({"moe_intermediate_size": 64}, "moe_intermediate_size"),
    ({"n_shared_experts": 2}, "n_shared_experts"),
    ({"num_local_experts": None}, "num_local_experts"),
    ({"num_experts_per_tok": 8}, "num_experts_per_tok"),
    ({"intermediate_size_mlp": "16k"}, "intermediate_size_mlp"),
    ({"moe_num_experts": 8}, "text_config.moe_num_experts"),  # the scan still runs
])
def test_llama4_fields_not_read_are_one_line_errors_naming_the_field(tmp_path, text, field):
    path = config(tmp_path, **text)
    field = field.removeprefix("text_config.")
    with pytest.raises(SpecbatchError, match=f"^model config {path}: field {field}: expected"):
        read_hf_config(path)


def test_unknown_expert_spellings_elsewhere_are_still_refused(tmp_path):
    path = config(tmp_path, top={"vision_config": {"moe_num_experts": 8}})
    with pytest.raises(SpecbatchError, match="field vision_config.moe_num_experts: expected"):
        read_hf_config(path)


def test_the_interleave_step_is_read_only_for_llama4(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "mixtral", "hidden_size": 64,
                                "num_hidden_layers": 2, "num_attention_heads": 4,
                                "intermediate_size": 128, "vocab_size": 100,
                                "num_local_experts": 4, "num_experts_per_tok": 2,
                                "interleave_moe_layer_step": 2}))
    with pytest.raises(SpecbatchError, match="field interleave_moe_layer_step: expected"):
        read_hf_config(str(path))


def test_the_bundled_scout_resolves_offline_to_its_published_shape():
    shape = get_shape("meta-llama/Llama-4-Scout-17B-16E-Instruct")
    assert (shape.layers, shape.hidden, shape.heads, shape.kv_heads, shape.head_dim) == (
        48, 5120, 40, 8, 128)
    assert (shape.experts, shape.top_k, shape.expert_intermediate, shape.shared_intermediate,
            shape.moe_layers, shape.intermediate, shape.vocab) == (
        16, 1, 8192, 8192, 48, 16384, 202048)
    assert (shape.sliding_window, shape.sliding_layers) == (8192, 36)
    assert shape.quantization == "none" and not shape.tie_embeddings
    # the model card: 109 B parameters with the vision tower (not read), 17 B active
    assert shape.params / 1e9 == pytest.approx(107.77, abs=0.01)
    assert shape.active_params / 1e9 == pytest.approx(17.17, abs=0.01)
    assert get_shape("meta-llama/Llama-4-Scout-17B-16E").params == shape.params
