"""Model shapes from a Hugging Face config.json (traces.models.hf_config) price like registry
shapes."""

from __future__ import annotations

import json

import pytest

from specbatch.errors import SpecbatchError
from specbatch.simulator.cost.analytic.memory import kv_capacity_tokens, weights_shortfall
from specbatch.traces.models.shapes import SHAPES, find_shape, get_shape

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
    ({"num_local_experts": 8}, "num_experts_per_tok"),  # MoE without k (tests/traces/test_hf_moe)
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
