"""Model shapes from a Hugging Face config.json (traces.hf_config) price like registry shapes."""

from __future__ import annotations

import json

import pytest

from specbatch.errors import SpecbatchError
from specbatch.simulator.hardware import weights_shortfall
from specbatch.simulator.roofline import kv_capacity_tokens
from specbatch.traces.shapes import SHAPES, find_shape, get_shape

VICUNA_33B = {"architectures": ["LlamaForCausalLM"], "hidden_size": 6656,
              "intermediate_size": 17920, "num_attention_heads": 52, "num_hidden_layers": 60,
              "num_key_value_heads": 52, "vocab_size": 32000, "torch_dtype": "float16",
              "tie_word_embeddings": False}


def write(tmp_path, data, name="config.json"):
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


def test_a_config_reads_as_the_registry_shape_of_the_same_model(tmp_path):
    path = write(tmp_path, VICUNA_33B)
    shape = get_shape(str(path))
    ref = SHAPES["vicuna-33b"]
    assert (shape.layers, shape.hidden, shape.heads, shape.kv_heads, shape.intermediate,
            shape.vocab, shape.params) == (ref.layers, ref.hidden, ref.heads, ref.kv_heads,
                                           ref.intermediate, ref.vocab, ref.params)
    assert get_shape(str(tmp_path)).params == ref.params  # the directory holding it
    assert kv_capacity_tokens("h100", str(path), "vicuna-68m") == 4244
    assert weights_shortfall("l40s", str(path), "vicuna-68m", 1, 0.9) is not None


def test_kv_heads_default_to_the_attention_heads(tmp_path):
    data = {k: v for k, v in VICUNA_33B.items() if k != "num_key_value_heads"}
    assert get_shape(str(write(tmp_path, data))).kv_heads == 52


@pytest.mark.parametrize(("change", "needle"), [
    ({"num_hidden_layers": None}, "num_hidden_layers"),
    ({"hidden_size": "big"}, "hidden_size"),
    ({"num_key_value_heads": 5}, "num_key_value_heads"),
    ({"torch_dtype": "int8"}, "torch_dtype"),
    ({"num_local_experts": 8}, "mixture-of-experts"),
    ({"head_dim": 0}, "head_dim"),
])
def test_shapes_the_roofline_cannot_price_are_one_line_errors(tmp_path, change, needle):
    data = {**VICUNA_33B, **change}
    data = {k: v for k, v in data.items() if v is not None}
    with pytest.raises(SpecbatchError, match=needle):
        get_shape(str(write(tmp_path, data)))


def test_unreadable_configs_are_one_line_errors(tmp_path):
    with pytest.raises(SpecbatchError, match="no such file"):
        get_shape(str(tmp_path / "missing.json"))
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(SpecbatchError, match="expected JSON"):
        get_shape(str(bad))
    with pytest.raises(SpecbatchError, match="JSON object"):
        get_shape(str(write(tmp_path, [1, 2], "list.json")))


def test_other_names_are_not_shapes():
    assert find_shape("ngram") is None and find_shape("Vicuna-7B") is SHAPES["vicuna-7b"]


def test_an_explicit_head_dim_sizes_the_attention_projections_and_the_kv(tmp_path):
    # Qwen3-32B: hidden 5120, 64 heads of 128 (not 5120 / 64 = 80), 8 KV heads, 64 layers
    qwen = {"num_hidden_layers": 64, "hidden_size": 5120, "num_attention_heads": 64,
            "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 25600,
            "vocab_size": 151936, "torch_dtype": "bfloat16"}
    shape = get_shape(str(write(tmp_path, qwen)))
    assert (shape.head_dim, shape.q_dim) == (128, 8192)
    # q/o 2 * 5120 * 8192, k/v 2 * 5120 * 1024, MLP 3 * 5120 * 25600, norms 2 * 5120
    per_layer = 2 * 5120 * 8192 + 2 * 5120 * 1024 + 3 * 5120 * 25600 + 2 * 5120
    assert shape.layer_params == per_layer
    assert shape.params == 64 * per_layer + 2 * 151936 * 5120 + 5120  # 32.8 B: Qwen3-32B
    assert shape.kv_bytes_per_token(2) == 2 * 64 * 8 * 128 * 2
    assert 32.7e9 < shape.params < 32.8e9
