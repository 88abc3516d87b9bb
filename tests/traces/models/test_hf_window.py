"""Sliding-window layers read from config.json (traces.models.hf_window): each family's rule."""

from __future__ import annotations

import dataclasses
import json

import pytest

from specbatch.errors import SpecbatchError
from specbatch.traces.models.hf_window import window_fields
from specbatch.traces.models.model_shape import ModelShape
from specbatch.traces.models.shapes import SHAPES, get_shape

WHERE = "model config x"


def fields(layers: int, **data) -> dict:
    return window_fields(data, layers, WHERE)


def test_mistral_v01_slides_every_layer_and_v02_none():
    assert fields(32, model_type="mistral", sliding_window=4096) == {
        "sliding_window": 4096, "sliding_layers": 32}
    assert fields(32, model_type="mistral", sliding_window=None) == {}
    assert fields(32, model_type="llama") == {}


def test_gemma2_slides_the_even_layers():
    # Gemma-2-2B: 26 layers, layers 0, 2, ..., 24 slide
    assert fields(26, model_type="gemma2", sliding_window=4096) == {
        "sliding_window": 4096, "sliding_layers": 13}
    assert fields(27, model_type="gemma2", sliding_window=4096)["sliding_layers"] == 14


def test_gemma3_pattern_leaves_every_sixth_layer_full():
    # layers 5, 11, 17, 23 full of 26 (Gemma-3-1B)
    assert fields(26, model_type="gemma3_text", sliding_window=512,
                  sliding_window_pattern=6)["sliding_layers"] == 22
    assert fields(26, model_type="gemma3_text", sliding_window=512)["sliding_layers"] == 22
    assert fields(26, model_type="gemma3_text", sliding_window=512,
                  _sliding_window_pattern=2)["sliding_layers"] == 13


def test_layer_types_win_over_every_other_rule():
    # gpt-oss: 24 layers alternating sliding / full, W = 128
    types = ["sliding_attention", "full_attention"] * 12
    assert fields(24, model_type="gpt_oss", sliding_window=128, layer_types=types) == {
        "sliding_window": 128, "sliding_layers": 12}
    full = ["full_attention"] * 4
    assert fields(4, model_type="gemma2", sliding_window=8, layer_types=full) == {}


def test_qwen2_slides_from_max_window_layers_on_and_only_when_asked():
    assert fields(28, model_type="qwen2", sliding_window=131072, max_window_layers=28,
                  use_sliding_window=False) == {}
    assert fields(28, model_type="qwen2", sliding_window=4096, max_window_layers=21,
                  use_sliding_window=True) == {"sliding_window": 4096, "sliding_layers": 7}


@pytest.mark.parametrize("data, field", [
    ({"sliding_window": "4k"}, "sliding_window"),
    ({"sliding_window": 8, "layer_types": ["full_attention"]}, "layer_types"),
    ({"sliding_window": 8, "layer_types": ["chunked_attention"] * 2}, "layer_types"),
    ({"sliding_window": 8, "sliding_window_pattern": 0}, "sliding_window_pattern"),
    ({"sliding_window": 8, "max_window_layers": -1}, "max_window_layers"),
])
def test_bad_window_fields_are_one_line_errors_naming_the_field(data, field):
    with pytest.raises(SpecbatchError, match=f"^{WHERE}: field {field}: expected"):
        window_fields(data, 2, WHERE)


def test_gemma3_270m_config_reads_as_the_registry_shape(tmp_path):
    types = (["sliding_attention"] * 5 + ["full_attention"]) * 3
    data = {"architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text",
            "hidden_size": 640, "intermediate_size": 2048, "num_attention_heads": 4,
            "num_key_value_heads": 1, "head_dim": 256, "num_hidden_layers": 18,
            "vocab_size": 262144, "sliding_window": 512, "layer_types": types,
            "torch_dtype": "bfloat16", "tie_word_embeddings": True}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data))
    shape = get_shape(str(path))
    assert dataclasses.replace(shape, name="gemma-3-270m") == SHAPES["gemma-3-270m"]


def test_shape_rejects_more_sliding_layers_than_layers():
    with pytest.raises(SpecbatchError, match="sliding_layers 3"):
        ModelShape("x", 2, 64, 4, 4, 128, 100, sliding_window=8, sliding_layers=3)
    with pytest.raises(SpecbatchError, match="window >= 1"):
        ModelShape("x", 2, 64, 4, 4, 128, 100, sliding_layers=1)


def test_a_zero_window_and_sliding_layers_without_a_window_are_refused():
    """Issue 46: ``sliding_window: 0`` and a ``layer_types`` naming sliding layers with no
    window were read as full attention everywhere; null stays "no window", and
    ``use_sliding_window: false`` turns any window off."""
    with pytest.raises(SpecbatchError, match=r"field sliding_window: expected an integer >= 1, "
                       r"or null for no window, got 0"):
        fields(32, model_type="mistral", sliding_window=0)
    types = ["sliding_attention", "full_attention"] * 2
    for window in (None, False):
        with pytest.raises(SpecbatchError, match="field sliding_window: expected the window W"):
            fields(4, layer_types=types, sliding_window=window)
    assert fields(4, layer_types=["full_attention"] * 4) == {}
    assert fields(32, sliding_window=0, use_sliding_window=False) == {}
