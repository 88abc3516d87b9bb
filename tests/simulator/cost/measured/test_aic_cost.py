"""cost = "aic": AIConfigurator's measured vLLM curves as a cost source. Pins of one GEMM
interpolation and one attention law by hand, the parts summing to the pass, the tabulated
form's parity, monotonicity in tokens, and the one-line refusals of what the tables do not
cover."""

import dataclasses
import json
import math
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import isotonic_regression

from specbatch.errors import SpecbatchError
from specbatch.simulator.cost.measured.aic_attention import AttnFit
from specbatch.simulator.cost.measured.aic_cost import VALIDATION, aic_covers
from specbatch.simulator.cost.measured.aic_curve import Curve, isotonic, monotone
from specbatch.simulator.cost.measured.aic_laws import Law
from specbatch.simulator.cost.measured.aic_ops import ShapeCurves
from specbatch.simulator.cost.measured.laws import SmallOpLaw
from specbatch.simulator.cost.registry import build_cost_model
from specbatch.simulator.cost.tabulated import table_time
from specbatch.traces.models.shapes import get_shape


def test_a_curve_interpolates_log_log_between_measured_points():
    curve = Curve(np.array([1.0, 4.0, 16.0]), np.array([1e-5, 4e-5, 8e-5]), lambda x: x, "t")
    assert curve.at(2.0) == pytest.approx(2e-5, rel=1e-12)  # t ∝ m between 1 and 4
    assert curve.at(8.0) == pytest.approx(4e-5 * math.sqrt(2.0), rel=1e-12)  # t ∝ √m
    assert curve.at(32.0) == pytest.approx(8e-5 * 2.0, rel=1e-12)  # beyond: × law growth
    assert curve.at(0.5) == 1e-5  # below the grid: its floor


def test_an_isolated_slow_outlier_does_not_spread():
    # B200 fp8 GEMM (3072, 65536) has 375 µs at m = 9 between 65 µs neighbours: no point is
    # carried up to it; the slow first point (76 µs, an endpoint the median keeps) is pooled
    # with the 65-66 µs run after it (their geometric mean, 67.8 µs)
    got = monotone(np.array([76.0, 65.5, 66.1, 375.1, 66.3, 66.1, 72.3]))
    assert got.max() == 72.3
    assert got[:-1] == pytest.approx(np.full(6, 67.76), abs=0.01)


def test_an_isolated_fast_point_does_not_lower_the_stretch_before_it():
    # one fast point at the last-but-one grid point is the median of it and its neighbours away
    got = monotone(np.array([1.0, 1.0, 1.0, 1.0, 1.0, 0.5, 2.0]))
    assert got.tolist() == [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 2.0]


def test_the_scout_fp8_moe_stretch_is_not_lowered_to_its_fast_point():
    # H100 fp8 MoE, Llama-4-Scout at tp 2 (hidden 5120, inter 8192, 16 experts, top 1), ms at
    # 16 ... 16384 tokens: 1.44-1.94 ms up to 1024 tokens, falling to 0.92 at 2048. The suffix
    # minimum priced 16-2048 tokens at 0.92 ms (-52 %); a non-decreasing curve can do no better
    # over 16-1024 than one level between 1.44 and 1.94 ms, within sqrt(1.94 / 1.44) - 1 = 16 %
    # of every point: the envelope is held to that
    tokens = [16, 32, 48, 64, 80, 96, 128, 160, 192, 256, 320, 384, 512, 768, 1024, 1536,
              2048, 3072, 4096, 6144]
    ms = np.array([1.869, 1.705, 1.709, 1.898, 1.900, 1.940, 1.686, 1.876, 1.874, 1.654, 1.656,
                   1.608, 1.833, 1.440, 1.559, 1.224, 0.922, 2.787, 1.902, 2.900])
    got = monotone(ms)
    stretch = np.array(tokens) <= 1024
    bound = math.sqrt(ms[stretch].max() / ms[stretch].min()) - 1.0
    assert bound == pytest.approx(0.161, abs=1e-3)
    assert np.abs(got[stretch] / ms[stretch] - 1.0).max() <= bound
    assert np.all(np.diff(got) >= 0)


positive_curves = st.lists(st.floats(1e-7, 1.0, allow_nan=False), min_size=1, max_size=40)


@settings(max_examples=300, deadline=None)
@given(positive_curves)
def test_the_envelope_is_non_decreasing_and_within_its_input(values):
    secs = np.array(values)
    got = monotone(secs)
    assert got.shape == secs.shape
    assert np.all(np.diff(got) >= 0)
    assert got.min() >= secs.min() and got.max() <= secs.max()


@settings(max_examples=300, deadline=None)
@given(positive_curves)
def test_the_envelope_is_the_identity_on_a_non_decreasing_curve(values):
    secs = np.sort(np.array(values))
    assert np.array_equal(monotone(secs), secs)
    once = monotone(np.array(values))
    assert np.array_equal(monotone(once), once)  # idempotent


@settings(max_examples=300, deadline=None)
@given(st.lists(st.floats(-1e3, 1e3, allow_nan=False), min_size=1, max_size=40))
def test_isotonic_is_the_least_squares_non_decreasing_fit(values):
    y = np.array(values)
    got = isotonic(y)
    assert np.all(np.diff(got) >= -1e-9 * (1.0 + np.abs(got[1:])))
    assert got == pytest.approx(isotonic_regression(y).x, rel=1e-9, abs=1e-9)


def synthetic_gemms() -> tuple[pd.DataFrame, Law]:
    """Rows made from the law a + 2mnk/π + (2(mk + nk) + 2mn)/β, π = 1e14, β = 1e12."""
    coef = (1e-6, 1e-14, 1e-12)
    law = Law("gemm", {"dtype": "bfloat16", "kernel": "t"}, ("floor", "flops", "bytes"), coef,
              0, 0, 0.0, 0.0, 0.0)
    rows = [(m, n, k) for n in (256, 512, 1024) for k in (256, 512, 1024) for m in (1, 16, 64)]
    m, n, k = (np.array(c, dtype=np.float64) for c in zip(*rows))
    t = coef[0] + 2 * m * n * k * coef[1] + (2 * (m * k + n * k) + 2 * m * n) * coef[2]
    frame = pd.DataFrame({"m": m.astype(int), "n": n.astype(int), "k": k.astype(int),
                          "dtype": "bfloat16", "kernel": "t", "latency_s": t})
    return frame, law


def test_a_timed_shape_is_its_measured_curve_and_an_untimed_one_the_transfer():
    frame, law = synthetic_gemms()
    curves = ShapeCurves("gemm", frame, law, {"dtype": "bfloat16"})
    timed = curves.curve((512, 1024))
    assert timed.source.startswith("measured")
    assert timed.at(16.0) == frame[(frame.n == 512) & (frame.k == 1024)
                                   & (frame.m == 16)]["latency_s"].iloc[0]
    moved = curves.curve((768, 512))  # not timed: law x neighbours' ratio (1 here)
    assert moved.source.startswith("transfer")
    by_hand = (1e-6 + 2 * 16 * 768 * 512 * 1e-14
               + (2 * (16 * 512 + 768 * 512) + 2 * 16 * 768) * 1e-12)
    assert moved.at(16.0) == pytest.approx(by_hand, rel=1e-12)


def test_one_attention_law_evaluated_by_hand():
    fit = AttnFit(floor=1e-5, per_request=1e-7, per_request_head=0.0, flops_rate=1e14,
                  kv_rate=1e12)
    law = fit.law(heads=32, kv_heads=8, head_dim=128, kv_bytes=2.0, layers=2)
    # 4 decodes over 1000 cached tokens each: P = 4000 + 4, K = 4000 + 8 tokens
    compute = 4 * 32 * 128 * 2 * 4004 / 1e14
    memory = 2 * 8 * 128 * 2 * 2 * 4008 / 1e12
    want = (2 * 1e-5 + 4 * 2 * 1e-7) + (compute + memory)  # the terms add (aic_attention)
    assert law.seconds(4, 4, 4000, 4000, 4) == pytest.approx(want, rel=1e-12)
    assert want == pytest.approx(5.494556672e-05, rel=1e-9)


@pytest.fixture(scope="module")
def dense():
    return build_cost_model("aic", "h100", "llama-3.1-8b", "llama-3.2-1b")


@pytest.fixture(scope="module")
def moe():
    return build_cost_model("aic", "h100", "mixtral-8x7b", "vicuna-68m", tp=2)


def test_the_parts_sum_to_the_pass(dense, moe):
    for model in (dense, moe):
        for q, kv in (([1] * 8, [300] * 8), ([4] * 3 + [512], [900, 20, 0, 0])):
            parts = model.breakdown("target", np.array(q), np.array(kv))
            assert sum(parts.values()) == pytest.approx(
                model.step_time("target", np.array(q), np.array(kv)), rel=1e-12)
    parts = moe.breakdown("target", np.ones(16, dtype=int), np.full(16, 100))
    assert parts["experts"] > 0 and parts["allreduce"] > 0


def with_law(pricer, op, law):
    """``pricer`` with its small-op law of ``op`` replaced by ``law``."""
    small = dataclasses.replace(pricer.small, small={**pricer.small.small, op: law})
    return dataclasses.replace(pricer, small=small, memo={}, head_memo={}, tables={})


def calls(model, op, q):
    """The calls of small op ``op`` in a pass of Q = ``q`` of ``model``'s target: two laws a
    second per call apart, no byte terms."""
    pricer = model.roles["target"]
    one, two = (with_law(pricer, op, SmallOpLaw(intercept=x, per_width=0.0, slope=0.0))
                for x in (1.0, 2.0))
    got = two.small_ops_many(np.array([q])) - one.small_ops_many(np.array([q]))
    assert two.small_ops(q) - one.small_ops(q) == pytest.approx(got[0])
    return got


def test_a_moe_layer_pays_the_activation_only_of_a_shared_expert(dense, moe):
    # AIConfigurator's MoE rows time the FusedMoE module, whose experts apply the gated
    # activation between their two grouped GEMMs: a routed expert's is not priced again.
    for q in (1.0, 64.0, 512.0):
        assert calls(dense, "mlp_act", q) == pytest.approx([32.0])  # Llama-3.1-8B: 32 MLPs
        assert calls(moe, "mlp_act", q) == pytest.approx([0.0])  # Mixtral: 32 MoE, no shared
    scout = build_cost_model("aic", "h100", "meta-llama/Llama-4-Scout-17B-16E-Instruct",
                             "vicuna-68m", tp=4)
    shape = scout.roles["target"].shape  # every layer MoE with one shared expert
    assert shape.moe_layers == shape.layers == 48 and shape.shared_intermediate > 0
    assert calls(scout, "mlp_act", 64.0) == pytest.approx([48.0])


def test_a_pass_pays_2l_plus_1_norms_and_no_residual_add(dense, moe):
    # vLLM's decoder layers hand the residual to the RMSNorm (fused_add_rms_norm: the add in
    # the norm's kernel), and the model's final norm follows the last layer: 2 L + 1 norms
    # and no add kernel (Vidur's profiles time a separate add, which vLLM does not run)
    for model, layers in ((dense, 32), (moe, 32)):
        for q in (1.0, 64.0, 512.0):
            norms = calls(model, "input_layernorm", q) + calls(model, "post_attention_layernorm", q)
            assert norms == pytest.approx([2.0 * layers + 1.0])
            assert calls(model, "add", q) == pytest.approx([0.0])
            assert calls(model, "emb", q) == pytest.approx([1.0])
            assert calls(model, "attn_rope", q) == pytest.approx([float(layers)])


def test_a_qk_norm_model_pays_two_more_norms_a_layer_at_its_head_widths():
    # Qwen3's attention RMS-normalises each query and key head before rotary (q_norm, k_norm)
    model = build_cost_model("aic", "h100", "qwen3-30b-a3b", "vicuna-68m", tp=2)
    assert model.roles["target"].shape.qk_norm
    for q in (1.0, 64.0):
        assert calls(model, "input_layernorm", q) == pytest.approx([3.0 * 48 + 1.0])
    # the two extra norms read this GPU's 16 query and 2 KV heads of 128: 2048 and 256
    # channels (2 bytes each, read and written: the norm's 2 x width x 2 bytes per token)
    law = SmallOpLaw(intercept=0.0, per_width=0.0, slope=1.0)  # one second per byte
    pricer = model.roles["target"]
    got = with_law(pricer, "input_layernorm", law).small_ops(10.0)
    base = with_law(pricer, "input_layernorm", SmallOpLaw(0.0, 0.0, 0.0)).small_ops(10.0)
    hidden = 2048  # the residual stream's norms: 49 of them, 2 x 2048 x 2 bytes per token
    want = 10.0 * 2 * 2 * (49 * hidden + 48 * (16 * 128) + 48 * (2 * 128))
    assert got - base == pytest.approx(want * pricer.small_scale, rel=1e-12)


def test_a_tensor_parallel_pass_pays_2l_plus_1_all_reduces(dense, moe):
    # two per layer (after o_proj, after the MLP / MoE block) and VocabParallelEmbedding's
    # all-reduce of its masked Q x h lookup
    pricer = moe.roles["target"]  # Mixtral at tp 2
    for q in (1.0, 64.0, 512.0):
        one = pricer.allreduce_curve.at(q * pricer.shape.hidden)
        assert pricer.parts(q)[2] == pytest.approx(65 * one, rel=1e-12)
        assert pricer.parts_many(np.array([q]))[1][0] == pricer.parts(q)[2]
    assert dense.roles["target"].allreduce_curve is None  # tp 1: none
    assert dense.roles["target"].parts(8.0)[2] == 0.0


def test_the_pass_table_is_bit_identical_to_time_from_sums(dense, moe):
    rng = np.random.default_rng(7)
    for model in (dense, moe):
        for role in ("target", "draft"):
            table = model.pass_table(role, 600)
            for _ in range(200):
                n = int(rng.integers(1, 40))
                q = rng.integers(1, 16, n)
                c = rng.integers(0, 3000, n)
                sums = (n, float(q.sum()), float(c.sum()), float((q * c).sum()),
                        float((q * q).sum()))
                rows = None if rng.random() < 0.5 else float(rng.integers(0, q.sum() + 2))
                got = model.time_from_sums(role, *sums, rows=rows)
                assert got == table_time(table, *sums, rows=rows)


def test_more_tokens_never_cost_less(dense, moe):
    for model in (dense, moe):
        table = model.pass_table("target", 4096)
        assert np.all(np.diff(table.layers) >= 0) and np.all(np.diff(table.head) >= 0)
        assert np.all(np.diff(table.allreduce) >= 0)
        decode = [model.step_time("target", np.ones(b, dtype=int), np.full(b, 512))
                  for b in (1, 2, 8, 32, 128, 256)]
        assert decode == sorted(decode)
        prefill = [model.step_time("target", np.array([s]), np.array([0]), rows=1.0)
                   for s in (16, 128, 512, 2048, 8192)]
        assert prefill == sorted(prefill)


def test_what_the_tables_do_not_cover_is_refused_in_one_line():
    llama = get_shape("llama-3.1-8b")
    assert aic_covers("h100", llama, get_shape("llama-3.2-1b"), 1) is None
    assert "rtx4090" in aic_covers("rtx4090", llama, None, 1)
    assert aic_covers("h100", get_shape("deepseek-v2-lite"), None, 1) is None  # MLA: aic_mla
    assert aic_covers("h100", get_shape("gemma-3-270m"), None, 1) is None  # windows: shares
    assert "awq" in aic_covers("h100", llama, None, 1, quantization="awq")
    assert "3 GPUs" in aic_covers("h100", llama, None, 3) or "split" in aic_covers(
        "h100", llama, None, 3)
    assert "fp8" in aic_covers("a100", llama, None, 1, kv_cache_dtype="fp8")
    with pytest.raises(SpecbatchError, match="cost 'aic': hardware 'rtx4090'") as err:
        build_cost_model("aic", "rtx4090", "llama-3.1-8b", "llama-3.2-1b")
    assert "\n" not in str(err.value)


def test_cost_show_json_names_each_parts_source():
    out = subprocess.run([sys.executable, "-m", "specbatch", "cost", "show", "--cost", "aic",
                          "--hardware", "h100", "--target", "llama-3.1-70b", "--draft",
                          "llama-3.2-1b", "--tp", "4", "--json"],
                         capture_output=True, text=True, check=True)
    obj = json.loads(out.stdout)
    assert isinstance(obj, dict) and obj["cost"] == "aic"
    target = obj["sources"]["target"]
    for part in ("layers", "attention", "allreduce", "lm_head", "launch"):
        assert target[part]["source"], part
    assert target["attention"]["validated"]["mape"] > 0



def test_the_experts_validated_error_is_the_one_of_the_estimator_that_priced_them():
    # Qwen3-30B-A3B's experts are timed on H100 (each grid point left out); DeepSeek-V2-Lite's
    # (2048, 1408, 64, 6) at no split: a model the tables lack is judged by leaving whole
    # timed models out, not by the shape-left-out figure (a split of a timed model)
    timed = build_cost_model("aic", "h100", "qwen3-30b-a3b", "vicuna-68m").sources()["target"]
    assert timed["experts"]["source"].split("bfloat16 ")[1].startswith("measured")
    assert timed["experts"]["validated"]["check"].startswith("each interior grid point")
    lite = build_cost_model("aic", "h100", "deepseek-v2-lite", "vicuna-68m").sources()["target"]
    rec = json.loads(VALIDATION.read_text())["h100_sxm|moe|bfloat16|transfer"]
    assert lite["experts"]["validated"]["mape"] == rec["model_mape"] > rec["mape"]
    assert lite["experts"]["validated"]["check"].startswith("each timed model left out whole")


def test_a_curve_over_many_points_is_its_point_by_point_value_bit_for_bit():
    grid = np.array([1.0, 4.0, 16.0, 64.0])
    secs = np.array([1e-5, 4e-5, 8e-5, 3e-4])
    rng = np.random.default_rng(3)
    x = np.concatenate([grid, [0.25, 1.0, 64.0, 65.0, 1e4], rng.uniform(0.5, 200.0, 500),
                        np.arange(1.0, 80.0)])
    for how in ("loglog", "linear"):
        for law in (None, lambda v: 2.0 * v + 1.0):
            curve = Curve(grid, secs, law, "t", how)
            want = np.array([curve.at(float(v)) for v in x])
            assert np.array_equal(curve.at_many(x), want)
            assert np.array_equal(curve.at_many(x), want)  # the points' logs kept: the same


def test_point_logs_are_maths_logs_kept_per_array():
    import math

    from specbatch.simulator.cost.measured.aic_curve import _LOGS, point_logs

    x = np.arange(1.0, 3000.0) * 1.37
    first = point_logs(x)
    assert first.tolist() == [math.log(v) for v in x.tolist()]
    assert point_logs(x.copy()) is first  # the same points: kept
    assert point_logs(x + 1.0) is not first and len(_LOGS) <= 8


def test_the_fast_pass_table_is_the_point_by_point_one_bit_for_bit(dense, moe):
    for model, q_max in ((dense, 700), (moe, 9000)):  # 9000: past the GEMM grids' end
        for role in ("target", "draft"):
            pricer = model.roles[role]
            fast, slow = pricer.pass_table(q_max), pricer.pass_table_slow(q_max)
            for part in ("layers", "allreduce", "head"):
                assert np.array_equal(getattr(fast, part), getattr(slow, part)), (role, part)
            assert (fast.attention, fast.fixed, fast.floor) == (
                slow.attention, slow.fixed, slow.floor)
            again = pricer.pass_table(q_max)  # kept per cost model, not priced again
            assert np.shares_memory(again.layers, fast.layers)
            short = pricer.pass_table(100)  # a prefix of a kept table
            assert short.max_tokens == 100 and short.layers.base is not None
            assert np.array_equal(short.layers, slow.layers[:101])
