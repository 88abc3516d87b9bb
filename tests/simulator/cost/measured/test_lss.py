"""The calibrated cost on the GPUs of the measured vLLM runs (simulator.cost.measured.lss): cells
read from LLMServingSim's per-layer profiles, priced with the attention law fitted on one model's
table (its own specification: test_lss_attention.py)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specbatch.errors import SpecbatchError
from specbatch.simulator.cost.gpus.hardware import get_hardware
from specbatch.simulator.cost.measured.calibrated import CalibratedCost
from specbatch.simulator.cost.measured.lss import interp
from specbatch.simulator.cost.measured.lss_attention import attention_features, fitted_attention
from specbatch.traces.models.shapes import get_shape
from specbatch.traces.public.llmservingsim_profiles import bundled_profiles

LLAMA = get_shape("llama-3.1-8b")


def cost(gpu: str, shape=LLAMA, tp: int = 1, **kw) -> CalibratedCost:
    return CalibratedCost(get_hardware(gpu), shape, shape, tp=tp, **kw)


def test_interpolation_is_linear_clamped_below_and_extends_the_top_two_points():
    c = (np.array([1.0, 2.0, 4.0]), np.array([1.0, 2.0, 3.0]))
    assert interp(c, 3.0) == 2.5
    assert interp(c, 0.5) == 1.0
    assert interp(c, 6.0) == 4.0  # slope (3 - 2) / (4 - 2) beyond the grid


def test_layers_at_a_measured_token_count_are_the_profile_s_modules_summed():
    rows = pd.read_csv(bundled_profiles()[("rtxpro6000", "llama-3.1-8b", 1)].files["dense"])
    at = {}
    for name, g in rows.groupby("layer"):  # each module made non-decreasing, read at T = 64
        g = g.sort_values("tokens")
        run = np.maximum.accumulate(g["time_us"].to_numpy()) * 1e-6
        at[name] = float(run[g["tokens"].to_numpy() == 64][0])
    block = (2 * at["layernorm"] + at["qkv_proj"] + at["rotary_emb"] + at["o_proj"]
             + at["gate_up_proj"] + at["act_fn"] + at["down_proj"])
    want = at["embedding"] + at["final_layernorm"] + 32 * block
    assert cost("rtxpro6000").roles["target"].layers(64.0) == pytest.approx(want, rel=1e-12)


def test_the_parts_sum_to_the_step_time_and_the_sums_path_is_bit_identical():
    model = cost("rtxpro6000", get_shape(str(bundled_profiles()[
        ("rtxpro6000", "qwen3-32b", 2)].config)), tp=2)
    q, kv = np.array([1, 1, 1, 300]), np.array([900, 40, 2000, 0])
    parts = model.breakdown("target", q, kv)
    assert sum(parts.values()) == pytest.approx(model.step_time("target", q, kv), rel=1e-12)
    assert model.time_from_sums("target", 4, 303.0, 2940.0, 2940.0, 90003.0) == \
        model.step_time("target", q, kv)
    # two ring all-reduces per layer over the anchor's PCIe link: 2 (tp - 1) steps of
    # 20 us + (2 b h Q / tp) / 16 GB/s, h = 5120, Q = 303, 64 layers
    one = 2 * (20e-6 + 2 * 5120 * 303 / 2 / 16e9)
    assert parts["allreduce"] == pytest.approx(2 * 64 * one, rel=1e-12)


def test_a_moe_shape_or_a_quantised_draft_without_a_profile_is_refused_in_one_line():
    moe = get_shape(str(bundled_profiles()[("rtxpro6000", "qwen3-30b-a3b", 1)].config))
    with pytest.raises(SpecbatchError, match="no per-layer profile of .*qwen3-30b-a3b.* at tp "
                                             "1 on rtx4090 \\(a MoE or MLA shape needs its "
                                             "own\\); bundled: llama-3.1-8b tp 1"):
        cost("rtx4090", moe)
    with pytest.raises(SpecbatchError, match="draft_weight_bits 4 on rtxpro6000: its "
                                             "per-layer profiles are bf16"):
        cost("rtxpro6000", draft_weight_bits=4)


def test_a_dense_shape_without_a_cell_is_its_neighbour_s_cell_scaled():
    src = cost("rtx4090").roles["target"]
    moved = cost("rtx4090", get_shape("vicuna-7b")).roles["target"]  # Llama-2-7B: MHA, I 11008
    assert moved.transferred and not src.transferred
    # the down projection: measured on Llama-3.1-8B (K = 14336, N = 4096) times the roofline
    # ratio for K = 11008 at the preset's efficiencies (both weight-streaming at 64 tokens)
    ratio = (11008 * 4096 + 64 * (11008 + 4096)) / (14336 * 4096 + 64 * (14336 + 4096))
    assert interp(moved.modules["down_proj"], 64.0) == pytest.approx(
        interp(src.modules["down_proj"], 64.0) * ratio, rel=1e-12)
    assert interp(moved.modules["layernorm"], 64.0) == interp(src.modules["layernorm"], 64.0)
    assert moved.source()["layers"]["cell"] == ("llmservingsim rtx4090 llama-3.1-8b tp 1 "
                                                "transferred to vicuna-7b tp 1")


def test_the_transfer_reproduces_the_held_out_cells():
    from specbatch.simulator.cost.measured.lss import transfer_check

    checks = transfer_check("rtxpro6000")
    assert checks["qwen3-32b|tp2"]["from"] == "llama-3.1-8b tp 1"
    for key, v in checks.items():  # docs/fidelity.md
        assert v["mape"] < 0.04 and abs(v["mean_signed"]) < 0.02, (key, v)
    assert transfer_check("rtx4090") == {}  # one cell: nothing to check against


def test_sources_name_the_cell_and_the_held_out_attention_error():
    src = cost("rtxpro6000").sources()["target"]
    assert src["summary"] == "llmservingsim rtxpro6000 llama-3.1-8b tp 1"
    assert src["attention"]["source"] == "attention law fitted on rtxpro6000 llama-3.1-8b tp 1"
    assert all(v["held_out"] for v in src["attention"]["validated"].values())
    assert src["allreduce"] == {"source": "none (tp 1)"}
    assert src["layers"]["validated"]["rows"] == 150  # 152 token counts, the ends kept
    assert src["layers"]["validated"]["mape"] < 0.02


@given(st.lists(st.floats(1.0, 4096.0), min_size=2, max_size=6))
@settings(max_examples=30, deadline=None)
def test_more_tokens_never_cost_less(qs):
    pricer = cost("rtxpro6000", get_shape(str(bundled_profiles()[
        ("rtxpro6000", "qwen3-30b-a3b", 1)].config))).roles["target"]  # dense cell + MoE block
    qs = sorted(qs)
    layers = [pricer.layers(q) for q in qs]
    heads = [pricer.head(q, 8.0) for q in qs]
    assert all(a <= b for a, b in zip(layers, layers[1:]))
    assert all(a <= b for a, b in zip(heads, heads[1:]))


def fused_chain(x: np.ndarray, c: tuple) -> float:
    """acc ← RN(x_i c_i + acc), i = 0..6 from 0, in exact rationals."""
    from fractions import Fraction

    acc = 0.0
    for xi, ci in zip(x.tolist(), c):
        acc = float(Fraction(xi) * Fraction(ci) + Fraction(acc))
    return acc


def random_sums(rng) -> tuple:
    n = int(rng.integers(1, 300))
    q = rng.integers(1, int(rng.choice([2, 3, 16, 600, 3000])), n)
    if rng.random() < 0.3:  # a verification: every request k + 1 tokens
        q[:] = int(rng.integers(2, 8))
    kv = rng.integers(0, int(rng.choice([10, 2000, 40000])), n)
    return n, (float(q.sum()), float(kv.sum()), float(q @ kv), float(q @ q))


@pytest.mark.parametrize("gpu", ["rtxpro6000", "rtx4090"])
def test_the_pricers_attention_is_the_features_fused_dot_product(gpu):
    """LssPricer's attention (tabulated.regime_attention on the packed law) is L · the fitted
    law's features (attention_features: numpy's elementwise arithmetic) dotted with the
    regime's coefficients as a chain of fused multiply-adds, on any CPU."""
    law = fitted_attention(gpu)
    rng = np.random.default_rng(2)
    shapes = {"rtxpro6000": (("llama-3.1-8b", 1), ("Qwen/Qwen3-32B", 2), ("qwen3-30b-a3b", 1)),
              "rtx4090": (("llama-3.1-8b", 1), ("Qwen/Qwen3-32B", 4), ("vicuna-68m", 1))}
    for name, tp in shapes[gpu]:
        pricer = cost(gpu, get_shape(name), tp).roles["target"]
        s = pricer.shape
        for _ in range(200):
            n, sums = random_sums(rng)
            x = attention_features(s, tp, float(n), *sums, gpu)  # [7]
            coef = law.chunked if sums[3] > sums[0] else law.decode
            want = s.layers * fused_chain(x, coef)
            assert pricer.attention(float(n), *sums, None) == want


def blas_fuses() -> bool:
    """Whether numpy's dot product here is the fused chain (OpenBLAS's ddot on FMA CPUs)."""
    rng = np.random.default_rng(0)
    for _ in range(200):
        x, c = rng.random(7), rng.random(7)
        if float(x @ c) != fused_chain(x, tuple(c.tolist())):
            return False
    return True


@pytest.mark.skipif(not blas_fuses(), reason="numpy's BLAS does not fuse its dot product here")
def test_the_packed_law_is_the_fitted_laws_array_path_bit_for_bit():
    """Where numpy's BLAS fuses (the machines the bundled runs' numbers were made on), the
    packed law equals AttentionLaw.seconds (x @ c) times L at n ≥ 1, bit for bit."""
    from specbatch.simulator.cost.tabulated import regime_attention

    rng = np.random.default_rng(4)
    for gpu in ("rtxpro6000", "rtx4090"):
        law = fitted_attention(gpu)
        for name, tp in (("llama-3.1-8b", 1), ("Qwen/Qwen3-32B", 4), ("vicuna-68m", 1)):
            s = get_shape(name)
            g = law.packed(s, tp, s.layers)
            for _ in range(300):
                n, sums = random_sums(rng)
                want = s.layers * float(law.seconds(s, tp, float(n), *sums))
                assert regime_attention(g, float(n), *sums) == want
