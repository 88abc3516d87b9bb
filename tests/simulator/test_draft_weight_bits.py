"""Specification of ``draft_weight_bits``: a weight-quantised draft in the roofline.

Hand-computed for SmolLM2-135M (L = 30, h = 576, kv_heads · head_dim = 192, I = 1536,
V = 49152, tied head): one decoder layer holds 2·576² + 2·576·192 + 3·576·1536 = 3,538,944
projection weights and 2·576 norm weights, so P_lin = 30 · 3,538,944 = 106,168,320 and a pass
streams P_layers + h·V + h = 134,515,008 weights. At bf16 that is 269,030,016 bytes; at 4 bits
the projections take 4/8 + 4/128 = 0.53125 bytes each: 2 · 28,346,688 + 0.53125 ·
106,168,320 = 113,095,296 bytes, 155,934,720 fewer, i.e. 155,934,720 / (3.35e12 · 0.8) =
58.2 µs less per memory-bound pass on an H100.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from specbatch.cli import main
from specbatch.errors import SpecbatchError
from specbatch.simulator.config.sim_config import load_config
from specbatch.simulator.cost.analytic.memory import check_weights_fit, kv_capacity_tokens
from specbatch.simulator.cost.gpus.hardware import (
    get_hardware,
    linear_params,
    model_weight_bytes,
    quantized_weight_bytes,
)
from specbatch.simulator.cost.registry import build_cost_model, weight_bits_notes
from specbatch.simulator.engine.kv import kv_capacity
from specbatch.simulator.run import simulate
from specbatch.traces.models.shapes import get_shape

SMOLLM2_BF16_BYTES = 269_030_016
SMOLLM2_Q4_BYTES = 113_095_296


def smollm2(bits: int):
    return build_cost_model("roofline", "h100", "smollm2-135m", "smollm2-135m",
                            draft_weight_bits=bits)


def test_a_quantised_weight_takes_bits_over_8_plus_a_fp16_scale_and_min_per_128():
    assert quantized_weight_bytes(4) == 0.53125
    assert quantized_weight_bytes(8) == 1.03125
    assert quantized_weight_bytes(2) == 0.28125


def test_the_projections_are_counted_without_norms_embeddings_or_head():
    shape = get_shape("smollm2-135m")
    assert linear_params(shape) == 106_168_320
    assert model_weight_bytes(shape, 2) == 2 * shape.params == SMOLLM2_BF16_BYTES
    assert model_weight_bytes(shape, 2, 4) == SMOLLM2_Q4_BYTES


def test_draft_pass_streams_the_quantised_bytes_and_saves_their_time():
    full, q4 = smollm2(16), smollm2(4)
    one = np.ones(1, dtype=np.int64)
    b16, b4 = full.breakdown("draft", one, one * 0), q4.breakdown("draft", one, one * 0)
    assert b16["weight_bytes"] == SMOLLM2_BF16_BYTES and b4["weight_bytes"] == SMOLLM2_Q4_BYTES
    assert b16["bound"] == b4["bound"] == "memory"
    assert b16["flops"] == b4["flops"] and b16["kv_bytes"] == b4["kv_bytes"]
    saved = (SMOLLM2_BF16_BYTES - SMOLLM2_Q4_BYTES) / (3.35e12 * 0.8)
    assert saved == pytest.approx(58.18e-6, rel=1e-3)
    assert b16["step_time_s"] - b4["step_time_s"] == pytest.approx(saved, rel=1e-9)


def test_the_target_is_never_quantised():
    one = np.ones(4, dtype=np.int64)
    kv = np.full(4, 100, dtype=np.int64)
    assert smollm2(4).step_time("target", one * 4, kv) == smollm2(16).step_time(
        "target", one * 4, kv)


def test_sixteen_bits_is_bit_identical_to_the_unquantised_model():
    default = build_cost_model("roofline", "h100", "vicuna-33b", "vicuna-68m")
    explicit = build_cost_model("roofline", "h100", "vicuna-33b", "vicuna-68m",
                                draft_weight_bits=16)
    q = np.array([1, 1, 1], dtype=np.int64)
    kv = np.array([10, 200, 3000], dtype=np.int64)
    assert default.step_time("draft", q, kv) == explicit.step_time("draft", q, kv)
    assert default.kv_capacity_tokens(0.9) == explicit.kv_capacity_tokens(0.9)


def test_kv_capacity_gains_the_saved_weight_bytes():
    """Llama-3.2-1B as draft of Llama-3.1-8B: 16 · 60,817,408 projection weights save
    1.46875 bytes each = 1,429,209,088 bytes; a cached token needs 131,072 + 32,768 bytes of
    KV, so 8,723.2 more tokens fit."""
    assert linear_params(get_shape("llama-3.2-1b")) == 973_078_528
    full = kv_capacity_tokens("h100", "llama-3.1-8b", "llama-3.2-1b")
    q4 = kv_capacity_tokens("h100", "llama-3.1-8b", "llama-3.2-1b", draft_weight_bits=4)
    assert q4 - full in (8723, 8724)
    cost = build_cost_model("roofline", "h100", "llama-3.1-8b", "llama-3.2-1b",
                            draft_weight_bits=4)
    assert cost.kv_capacity_tokens(0.9) == q4


def test_weights_fit_counts_the_quantised_draft():
    """A self-draft of Llama-3.1-8B: 32.1 GB at bf16, 21.9 GB with a 4-bit draft, against
    0.35 of an 80 GB H100 = 28 GB."""
    with pytest.raises(SpecbatchError, match="the weights do not fit"):
        check_weights_fit("h100", "llama-3.1-8b", "llama-3.1-8b", 1, 0.35)
    check_weights_fit("h100", "llama-3.1-8b", "llama-3.1-8b", 1, 0.35, draft_weight_bits=4)
    hw = get_hardware("h100")
    shape = get_shape("llama-3.1-8b")
    assert 2 * shape.params + model_weight_bytes(shape, 2, 4) < 0.35 * hw.memory_bytes
    config = load_config(None, target="llama-3.1-8b", draft="llama-3.1-8b", kv_mode="paged",
                         gpu_memory_utilization=0.35, draft_weight_bits=4)
    cost = build_cost_model("roofline", "h100", "llama-3.1-8b", "llama-3.1-8b",
                            draft_weight_bits=4)
    assert kv_capacity(config, cost) == cost.kv_capacity_tokens(0.35) > 0
    with pytest.raises(SpecbatchError, match="the weights do not fit"):
        kv_capacity(config.replace(draft_weight_bits=16), build_cost_model(
            "roofline", "h100", "llama-3.1-8b", "llama-3.1-8b"))


@pytest.mark.parametrize("changes, words", [
    (dict(draft_weight_bits=1), "bits per weight in [2, 16]"),
    (dict(draft_weight_bits=17), "bits per weight in [2, 16]"),
    (dict(draft="ngram", draft_weight_bits=4), "draft ngram runs no model"),
    (dict(cost="profiled", profile="p.csv", draft_weight_bits=4), "the profile measured"),
])
def test_bits_that_cannot_apply_are_one_line_errors(changes, words):
    with pytest.raises(SpecbatchError, match="field draft_weight_bits") as err:
        load_config(None, **changes)
    assert words in str(err.value) and "\n" not in str(err.value)


def test_the_builders_refuse_bits_they_cannot_price():
    with pytest.raises(SpecbatchError, match="draft_weight_bits"):
        build_cost_model("roofline", "h100", "smollm2-135m", "ngram", draft_weight_bits=4)
    with pytest.raises(SpecbatchError, match="draft_weight_bits"):
        build_cost_model("roofline", "h100", "smollm2-135m", "smollm2-135m",
                         draft_weight_bits=1)


def q4_config(bits: int):
    return load_config(None, trace="smollm2-q4", target="smollm2-135m", draft="smollm2-135m",
                       draft_weight_bits=bits, requests=4, cost="roofline",  # both runs one model
                       host="fixed")  # GPU passes: vLLM's loop floor would hide the saving


def test_a_trace_with_a_quantised_draft_names_the_knob_and_is_not_repriced_silently():
    from specbatch.simulator.run import load_trace

    trace = load_trace(q4_config(16))
    (note,) = weight_bits_notes(q4_config(16), trace)
    assert "4-bit weights (group 128)" in note and "draft_weight_bits = 4" in note
    assert weight_bits_notes(q4_config(4), trace) == ()
    (note,) = weight_bits_notes(q4_config(8), trace)
    assert "priced at 8-bit weights" in note


def test_a_quantised_price_on_a_full_precision_draft_is_noted():
    from specbatch.simulator.run import load_trace

    config = q4_config(4).replace(trace="smollm2-drop2")
    (note,) = weight_bits_notes(config, load_trace(config))
    assert "not recorded as quantised" in note
    assert weight_bits_notes(config.replace(draft_weight_bits=16), load_trace(config)) == ()


def test_the_quantised_draft_speeds_up_the_run_and_only_its_draft_time_changes():
    full, q4 = simulate(q4_config(16)), simulate(q4_config(4))
    assert q4.summary["draft_time"] < full.summary["draft_time"]
    assert q4.summary["target_time"] == full.summary["target_time"]
    assert q4.summary["accepted"] == full.summary["accepted"]  # the trace is the same
    assert q4.summary["throughput"] > full.summary["throughput"]
    assert any("draft_weight_bits = 4" in n for n in full.notes)
    assert not any("draft_weight_bits" in n for n in q4.notes)


def test_the_flag_reaches_the_json_run(capsys):
    argv = ["simulate", "--trace", "smollm2-q4", "--target", "smollm2-135m", "--draft",
            "smollm2-135m", "--requests", "4", "--host", "fixed", "--json"]
    assert main([*argv, "--draft-weight-bits", "4"]) == 0
    q4 = json.loads(capsys.readouterr().out)
    assert main(argv) == 0
    full = json.loads(capsys.readouterr().out)
    assert q4["draft_time"] < full["draft_time"]
