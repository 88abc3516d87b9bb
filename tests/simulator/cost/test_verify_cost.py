"""Verification time (simulator.cost.verify_cost): the rejection sampler's bytes and floor per
step."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from specbatch.errors import SpecbatchError
from specbatch.simulator.config.sim_config import load_config
from specbatch.simulator.cost.gpus.hardware import FUSED_FLOOR, SAMPLERS
from specbatch.simulator.cost.verify_cost import (
    VerifyCost,
    build_verify_cost,
    measured_floors,
    one_hot_drafts,
    target_vocab,
    verify_cost_for,
    verify_notes,
)
from specbatch.simulator.run import simulate
from specbatch.traces.format.files import read_trace, resolve_trace
from specbatch.traces.synth import SynthConfig, synth_trace
from tests.simulator.helpers import LinearCost, const_trace

H100_BW = 3.35e12 * 0.8  # datasheet HBM3 bandwidth x the preset's memory efficiency


def cost(rule: str, sampler: str = "fused", one_hot: bool = False) -> VerifyCost:
    return build_verify_cost(sampler, rule, "h100", 32000, one_hot)


def test_token_verification_reads_the_target_and_draft_rows_once_hand_computed():
    """V = 32000, two requests verifying s = (3, 1): Σ(s + 1) = 6 target rows and Σ s = 4
    draft rows, 4 bytes each, over H100's 2.68 TB/s, plus the fused 50 µs."""
    s = np.array([3, 1])
    seconds = cost("token").seconds(2, 4, s)
    assert seconds == pytest.approx(4 * 32000 * (6 + 4) / H100_BW + 50e-6, rel=1e-12)
    assert seconds == pytest.approx(50.4776e-6, rel=1e-5)


def test_block_verification_adds_the_draw_passes_at_tau_hand_computed():
    """BV: the same 10 rows plus two passes over the target and draft rows at τ for each of
    the two verifying requests: 10 + 2·2·2 = 18 rows."""
    s = np.array([3, 1])
    assert cost("block").rows(2, 4, s) == 18
    assert cost("block").seconds(2, 4, s) == pytest.approx(
        4 * 32000 * 18 / H100_BW + 50e-6, rel=1e-12)


@pytest.mark.parametrize("sampler", sorted(SAMPLERS))
@pytest.mark.parametrize("one_hot", [False, True])
def test_block_verification_never_costs_less_than_token(sampler, one_hot):
    rng = np.random.default_rng(0)
    for _ in range(50):
        n = int(rng.integers(1, 65))
        s = rng.integers(0, 9, size=n)
        tv = cost("token", sampler, one_hot).seconds(n, int(s.sum()), s)
        bv = cost("block", sampler, one_hot).seconds(n, int(s.sum()), s)
        assert bv >= tv > 0


@pytest.mark.parametrize("rule", ["token", "block"])
def test_one_hot_drafts_read_no_draft_rows_and_cost_less(rule):
    s = np.array([4, 4, 2])
    full, one_hot = cost(rule).rows(3, 10, s), cost(rule, one_hot=True).rows(3, 10, s)
    assert full - one_hot == 10 + (2 * 3 if rule == "block" else 0)  # draft rows, draw passes
    assert cost(rule, one_hot=True).seconds(3, 10, s) < cost(rule).seconds(3, 10, s)


@pytest.mark.parametrize("sampler", sorted(SAMPLERS))
def test_a_step_verifying_nothing_is_plain_sampling_of_the_target_rows(sampler):
    s = np.zeros(5, dtype=np.int64)
    for rule in ("token", "block"):
        assert cost(rule, sampler).seconds(5, 0, s) == pytest.approx(
            4 * 32000 * 5 / H100_BW + FUSED_FLOOR, rel=1e-12)
    assert cost("token").seconds(0, 0, s[:0]) == 0.0


def test_the_torch_sampler_floor_is_the_measured_one():
    """2.28 ms per TV call; BV max(2.28 ms, 1.96 ms per position of the longest draft)."""
    s = np.array([1, 1])
    assert cost("token", "torch").seconds(2, 2, s) == pytest.approx(
        4 * 32000 * 6 / H100_BW + 2.28e-3, rel=1e-12)
    assert cost("block", "torch").seconds(2, 2, s) == pytest.approx(
        4 * 32000 * 14 / H100_BW + 2.28e-3, rel=1e-12)
    s = np.array([4, 1])
    assert cost("block", "torch").seconds(2, 5, s) == pytest.approx(
        4 * 32000 * 20 / H100_BW + 4 * 1.96e-3, rel=1e-12)


def test_the_torch_preset_is_what_the_h100_measurement_gives():
    """benchmarks/gpu/results/verify_gpu.json (issue 16, H100, theory.verify.torch_batched): the
    float32 cells, less the modelled bytes term, give the preset's floors."""
    path = Path(__file__).resolve().parents[3] / "benchmarks/gpu/results/verify_gpu.json"
    rows = [r for r in json.loads(path.read_text())["rows"] if r["dtype"] == "float32"]
    assert len(rows) == 8
    tv, bv = measured_floors(rows, H100_BW)
    torch = SAMPLERS["torch"]
    assert (round(tv, 5), round(bv, 5)) == (torch.floor, torch.floor_per_position)
    with pytest.raises(SpecbatchError, match="expected float32 rows"):
        measured_floors([], H100_BW)


def test_none_prices_nothing_and_an_unknown_sampler_is_a_one_line_error():
    assert build_verify_cost("none", "token", "h100", 32000) is None
    with pytest.raises(SpecbatchError, match="verify_cost 'cuda': expected one of fused"):
        build_verify_cost("cuda", "token", "h100", 32000)


def test_one_hot_drafts_are_read_from_the_trace():
    assert not one_hot_drafts(synth_trace(SynthConfig(requests=4, seed=1)))
    assert one_hot_drafts(synth_trace(SynthConfig(requests=4, temperature=0.0, seed=1)))
    assert one_hot_drafts(const_trace())  # q = 1 rows: greedy drafting's shape
    for name, one_hot in (("smollm2-drop2-greedy", True), ("smollm2-ngram", True),
                          ("smollm2-drop2", False)):  # bundled greedy, n-gram, sampled drafts
        assert one_hot_drafts(read_trace(resolve_trace(name))) is one_hot, name


def test_the_vocabulary_is_the_target_shapes_else_the_traces():
    trace = synth_trace(SynthConfig(requests=4, seed=1))
    assert target_vocab("vicuna-33b", trace) == 32000
    assert target_vocab("Llama-3.1-8B", trace) == 128256
    assert target_vocab("my-profiled-model", trace) == 32  # the synthetic target's recorded V
    with pytest.raises(SpecbatchError, match="field verify_cost: the target 'mine'"):
        target_vocab("mine", const_trace())


def test_the_run_settings_pick_rule_drafts_and_vocabulary():
    natural = synth_trace(SynthConfig(requests=4, seed=1))
    greedy = synth_trace(SynthConfig(requests=4, temperature=0.0, seed=1))
    config = load_config(None, trace="synth", verify="block", verify_cost="torch")
    vc = verify_cost_for(config, natural, free_draft=False)
    assert (vc.rule, vc.vocab, vc.draft_rows, vc.sampler) == ("block", 32000, True, "torch")
    assert not verify_cost_for(config, natural, free_draft=True).draft_rows  # n-gram drafter
    assert verify_cost_for(config, greedy, free_draft=False).rule == "token"  # T = 0: BV = TV
    assert verify_cost_for(config.replace(verify_cost="none"), natural, False) is None


def test_a_profiled_run_says_its_verification_time_is_modelled():
    config = load_config(None, trace="synth")
    assert verify_notes(config) == ()  # the roofline models every term
    profiled = SimpleNamespace(cost="profiled", hardware="h100", verify_cost="torch")
    (note,) = verify_notes(profiled)
    assert "modelled, not measured" in note and "h100" in note and "torch" in note
    assert verify_notes(SimpleNamespace(cost="profiled", hardware="h100",
                                        verify_cost="none")) == ()


def run(trace, **kw):
    return simulate(load_config(None, trace="synth", requests=24, **kw), trace,
                    cost_model=LinearCost())


def test_every_decode_step_pays_its_verification_and_prefill_steps_none(synth_trace_natural):
    result = run(synth_trace_natural, policy="tetris", extra=1, verify="block")
    steps = result.steps
    vc = verify_cost_for(result.config, synth_trace_natural, free_draft=False)
    decode = steps["batch"] > 0
    assert (steps.loc[~decode, "verify_time"] == 0.0).all()
    assert (steps.loc[decode, "verify_time"] >= FUSED_FLOOR).all()
    parts = steps[["draft_time", "target_time", "verify_time", "overhead_time"]].sum(axis=1)
    np.testing.assert_allclose(steps["end"] - steps["time"], parts, rtol=1e-12)
    # a step's verification is bounded by all its verified tokens at the longest draft's cost
    batch, verified = steps.loc[decode, "batch"], steps.loc[decode, "verified"]
    low = [vc.seconds(int(n), int(v), np.array([int(v)] + [0] * (int(n) - 1)))
           for n, v in zip(batch, verified)]
    assert (steps.loc[decode, "verify_time"].to_numpy() >= np.array(low) - 1e-15).all()
    s = result.summary
    assert s["verify_time"] == pytest.approx(steps["verify_time"].sum(), rel=1e-12)
    total = s["draft_time"] + s["target_time"] + s["verify_time"] + s["overhead_time"]
    assert s["verify_share"] == pytest.approx(s["verify_time"] / total, rel=1e-12)


def test_fixed_steps_price_exactly_k_per_request(synth_trace_natural):
    """``fixed`` verifies k = 3 per request (fewer only near a request's end): a step whose
    Σ s = 3·batch costs the hand formula."""
    result = run(synth_trace_natural, policy="fixed", k=3, verify_cost="torch")
    steps = result.steps
    full = steps[(steps["batch"] > 0) & (steps["verified"] == 3 * steps["batch"])]
    assert len(full) > 0
    expected = 4 * 32000 * (4 * full["batch"] + 3 * full["batch"]) / H100_BW + 2.28e-3
    np.testing.assert_allclose(full["verify_time"], expected, rtol=1e-12)


def test_verify_cost_none_is_the_engine_without_the_term(synth_trace_natural):
    """The zero knob: identical tables to a run whose verification is free, and the fused
    sampler only adds time (same plans, same τ: the schedule is burst, so the same steps)."""
    none = run(synth_trace_natural, policy="fixed", k=3, verify_cost="none")
    fused = run(synth_trace_natural, policy="fixed", k=3)
    assert (none.steps["verify_time"] == 0.0).all() and none.summary["verify_share"] == 0.0
    for col in ("batch", "verified", "accepted", "emitted"):
        np.testing.assert_array_equal(none.steps[col], fused.steps[col])
    assert fused.summary["makespan"] > none.summary["makespan"]
    assert fused.summary["makespan"] == pytest.approx(
        none.summary["makespan"] + fused.summary["verify_time"], rel=1e-12)


LLAMA_8B_CONFIG = {"architectures": ["LlamaForCausalLM"], "hidden_size": 4096,
                   "intermediate_size": 14336, "num_attention_heads": 32,
                   "num_hidden_layers": 32, "num_key_value_heads": 8, "vocab_size": 128256,
                   "torch_dtype": "bfloat16"}


def test_a_config_json_target_prices_the_sampler_with_the_models_vocabulary(tmp_path):
    """A config.json target was priced with the trace's vocabulary (a synth trace's 2048, a
    verify time 3.6x too small) instead of its vocab_size, 128,256 for Llama 3.1 8B."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps(LLAMA_8B_CONFIG))
    trace = synth_trace(SynthConfig(requests=6, output_mean=12.0))
    assert target_vocab(str(path), trace) == target_vocab("llama-3.1-8b", trace) == 128256
    assert target_vocab(str(tmp_path), trace) == 128256  # the folder holding it
    by_name, by_file = (simulate(load_config(None, trace="synth", requests=6, target=target),
                                 trace).summary for target in ("llama-3.1-8b", str(path)))
    assert by_file["verify_time"] == by_name["verify_time"] > 0
    assert by_file == by_name
