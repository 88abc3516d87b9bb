"""gpt-oss-20b's config.json (MoE + MXFP4 experts + alternating sliding-window layers) reads
into one shape whose sizes match OpenAI's model card: the three readers (hf_moe, precision,
hf_window) meet on a real config."""

from __future__ import annotations

import json

import pytest

from specbatch.simulator.cost.analytic.precision import held_weight_bytes
from specbatch.simulator.cost.gpus.hardware import get_hardware
from specbatch.traces.models.hf_config import read_hf_config

#: openai/gpt-oss-20b config.json (huggingface.co/openai/gpt-oss-20b, the fields that shape it;
#: rope and token ids left out).
GPT_OSS_20B = {
    "architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "attention_bias": True,
    "head_dim": 64, "hidden_size": 2880, "intermediate_size": 2880,
    "layer_types": ["sliding_attention", "full_attention"] * 12,
    "num_attention_heads": 64, "num_experts_per_tok": 4, "experts_per_token": 4,
    "num_hidden_layers": 24, "num_key_value_heads": 8, "num_local_experts": 32,
    "quantization_config": {"quant_method": "mxfp4", "modules_to_not_convert": [
        "model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens",
        "lm_head"]},
    "rms_norm_eps": 1e-05, "sliding_window": 128, "tie_word_embeddings": False,
    "vocab_size": 201088, "torch_dtype": "bfloat16",
}


@pytest.fixture()
def shape(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(GPT_OSS_20B))
    return read_hf_config(str(path))


def test_gpt_oss_20b_reads_as_moe_mxfp4_with_every_other_layer_sliding(shape):
    assert (shape.experts, shape.top_k, shape.moe_layers) == (32, 4, 24)
    assert shape.quantization == "mxfp4"
    assert (shape.sliding_layers, shape.sliding_window) == (12, 128)
    assert (shape.heads, shape.kv_heads, shape.head_dim) == (64, 8, 64)


def test_gpt_oss_20b_sizes_match_the_model_card(shape):
    """Model card (openai.com, gpt-oss-20b): 20.91 B parameters in all, 3.61 B active per
    token (the unembedding counted, the input embedding not: 2880 x 201088 = 0.58 B each).
    Biases and attention sinks (~1 M) are not priced."""
    assert shape.params == pytest.approx(20.91e9, rel=0.002)
    unembedding = 2880 * 201088
    assert shape.active_decoder_params + unembedding == pytest.approx(3.61e9, rel=0.005)


def test_gpt_oss_20b_weights_held_match_its_checkpoint(shape):
    """Experts at 4.25 bits (e2m1 + one e8m0 scale per 32), everything else bf16: ~13.75 GB,
    the size of the published MXFP4 checkpoint (13.8 GB of safetensors), what lets it run in
    16 GB."""
    held = held_weight_bytes(shape, get_hardware("h100"))
    assert held == pytest.approx(13.8e9, rel=0.03)
    assert held < 16e9
