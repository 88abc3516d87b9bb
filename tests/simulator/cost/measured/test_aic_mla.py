"""cost = "aic" on multi-head latent attention (simulator.cost.measured.aic_mla): one priced MLA
pass pinned by hand against the table rows it reads, the parts summing to the pass, the
tabulated form's parity, rotary priced once (the module rows hold it), and what the MLA tables
do not cover refused in one line."""

import copy
import dataclasses

import numpy as np
import pytest

from specbatch.errors import SpecbatchError
from specbatch.simulator.cost.measured.aic_cost import aic_covers
from specbatch.simulator.cost.measured.aic_curves import load_curves
from specbatch.simulator.cost.measured.aic_mla import V3, core_holds, mixed_mode, projections
from specbatch.simulator.cost.measured.aic_mla import coverage as mla_coverage
from specbatch.simulator.cost.measured.aic_op_curves import op_curve
from specbatch.simulator.cost.measured.laws import LayerShape, small_op_bytes
from specbatch.simulator.cost.registry import build_cost_model
from specbatch.simulator.cost.tabulated import DECODE_PATH, TWO_LAUNCHES, table_time
from specbatch.traces.models.shapes import get_shape


@pytest.fixture(scope="module")
def lite():
    return build_cost_model("aic", "h100", "deepseek-v2-lite", "llama-3.2-1b")


def test_projections_are_vllms_mla_gemms():
    assert projections(*V3, 16) == {"q_a": (1536 + 512 + 64, 7168), "q_b": (16 * 192, 1536),
                                    "o": (7168, 16 * 128)}
    lite = get_shape("deepseek-v2-lite")
    assert projections(lite.hidden, lite.q_lora_rank, lite.kv_lora_rank, lite.qk_rope_head_dim,
                       lite.qk_nope_head_dim, lite.v_head_dim, 16) == {
        "q": (16 * 192, 2048), "kv_a": (576, 2048), "o": (2048, 16 * 128)}


def test_one_mla_decode_pass_by_hand(lite):
    # 8 requests of one token over 1023 cached tokens each on H100 at 16 heads (V2-Lite, tp 1):
    # the attention is the measured module row (DeepSeek-V3's module at 16 heads, B = 8,
    # step 1024) less V3's projections at Q = 8 on the bf16 GEMM curves, per layer
    d = load_curves("h100_sxm")["mla_decode"]
    row = d[(d["kv_dtype"] == "bfloat16") & (d["heads"] == 16) & (d["batch"] == 8)
            & (d["context"] == 1023)]
    assert len(row) == 1
    proj = sum(op_curve("h100_sxm", "gemm", "bfloat16", key).at(8.0)
               for key in projections(*V3, 16).values())
    core = float(row["latency_s"].iloc[0]) - proj
    parts = lite.breakdown("target", np.ones(8, dtype=int), np.full(8, 1023))
    assert parts["attention"] == pytest.approx(27 * core, rel=1e-9)
    # and the layer ops hold V2-Lite's own projections, not a dense qkv / o
    pricer = lite.roles["target"]
    assert {"q", "kv_a", "o"} <= set(pricer.curves) and "qkv" not in pricer.curves
    assert sum(parts.values()) == pytest.approx(
        lite.step_time("target", np.ones(8, dtype=int), np.full(8, 1023)), rel=1e-12)


def test_the_mla_pass_table_is_bit_identical_to_time_from_sums(lite):
    rng = np.random.default_rng(3)
    table = lite.pass_table("target", 600)
    fast, slow = lite.roles["target"].pass_table(700), lite.roles["target"].pass_table_slow(700)
    for part in ("layers", "allreduce", "head"):
        assert np.array_equal(getattr(fast, part), getattr(slow, part))
    for _ in range(200):
        n = int(rng.integers(1, 40))
        q = rng.integers(1, 16, n)
        c = rng.integers(0, 3000, n)
        sums = (n, float(q.sum()), float(c.sum()), float((q * c).sum()), float((q * q).sum()))
        assert lite.time_from_sums("target", *sums) == table_time(table, *sums)


def test_what_the_mla_tables_do_not_cover_is_refused_in_one_line():
    v3, lite = get_shape("deepseek-v3"), get_shape("deepseek-v2-lite")
    assert aic_covers("h100", lite, None, 1) is None
    assert aic_covers("h200", v3, None, 8, kv_cache_dtype="fp8") is None
    for reason in (aic_covers("a100", v3, None, 8, kv_cache_dtype="fp8"),
                   aic_covers("rtxpro6000", v3, None, 8, kv_cache_dtype="fp8")):
        assert "MLA" in reason and "\n" not in reason
    other = type(lite)(**{**lite.__dict__, "kv_lora_rank": 256})
    assert "MLA widths" in aic_covers("h100", other, None, 1)


def test_an_mla_roles_attention_names_its_tables_and_held_out_error(lite):
    src = lite.sources()["target"]["attention"]
    assert "MLA module tables" in src["source"] and "shape" in src["source"]
    assert src["validated"]["mape"] <= 0.08



def _rope(pricer, q):
    """The small-op law of rotary of ``pricer`` at Q = ``q``, per layer, written out by hand."""
    s = pricer.shape
    law = pricer.small.small["attn_rope"]
    shape = LayerShape(s.hidden, s.heads, s.kv_heads, s.intermediate, s.vocab, True)
    nbytes = float(small_op_bytes("attn_rope", shape, pricer.tp, np.array([q]))[0])
    return law.intercept + law.per_width * nbytes / q + law.slope * pricer.small_scale * nbytes


def test_a_module_rows_core_is_not_charged_rotary_again(lite):
    # the module rows time DeepseekV2MLAAttention, rotary inside: the H100 role's small ops
    # lose exactly the rotary law's 27 layers at each Q (the latent norms are no small op)
    pricer = lite.roles["target"]
    assert pricer.held == ("attn_rope",)
    charged = copy.copy(pricer)
    charged.held = ()
    for q in (1.0, 8.0, 300.0):
        assert charged.small_ops(q) - pricer.small_ops(q) == pytest.approx(
            27 * _rope(pricer, q), rel=1e-9)
        assert pricer.small_ops_many(np.array([q]))[0] == pricer.small_ops(q)
    parts = lite.breakdown("target", np.ones(8, dtype=int), np.full(8, 1023))
    assert parts["layers"] == pytest.approx(
        pricer.small_ops(8.0) + sum(n * c.at(8.0) for name, (n, c) in pricer.curves.items()
                                    if name != "experts"), rel=1e-12)


def test_a100s_eager_kernel_rows_price_nothing():
    # vLLM 0.14's A100 rows were timed as eager impl.forward calls (AIConfigurator's legacy
    # collect_mla.py): every row at 1-16 heads, batch <= 32 and <= 510 cached tokens sits on
    # the host's ~0.3 ms, which a CUDA-graph decode does not pay; they are refused by name
    d = load_curves("a100_sxm")["mla_decode"]
    small = d[(d["heads"] <= 16) & (d["batch"] <= 32) & (d["context"] <= 510)]["latency_s"]
    assert set(d["scope"]) == {"kernel"} and small.min() > 2.5e-4
    assert mla_coverage("a100_sxm") == {}
    reason = aic_covers("a100", get_shape("deepseek-v2-lite"), None, 1)
    assert "eager" in reason and "collect_mla.py" in reason and "\n" not in reason
    with pytest.raises(SpecbatchError, match="eager"):
        build_cost_model("aic", "a100", "deepseek-v2-lite", "llama-3.2-1b")
    # every other GPU's MLA rows time the CUDA-graph module, and its core holds rotary
    for system in ("h100_sxm", "h200_sxm", "b200_sxm", "gb200", "l40s", "rtx_pro_6000_server"):
        assert set(load_curves(system)["mla_decode"]["scope"]) == {"module"}
        assert mla_coverage(system)["bfloat16"]
        assert core_holds(system, "bfloat16") == ("attn_rope",)
    assert core_holds("a100_sxm", "bfloat16") == ()


def _core_law(system, kv):
    return build_cost_model("aic", system, "deepseek-v2-lite", "llama-3.2-1b",
                            kv_cache_dtype=kv).roles["target"].attention


def test_short_queries_beside_decodes_run_in_h100_bf16s_one_decode_launch():
    # vLLM's FlashAttnMLAMetadataBuilder (VARLEN, reorder_batch_threshold 512): 4 decodes and
    # 4 verifications of 4 tokens, all at 1023 cached tokens, are one decode launch:
    # D(4, Σc / 4) + ΔP(4, 4²) + x·(Σq·c − Σc), no second launch; the same grid under
    # TWO_LAUNCHES (a SINGLE_ONLY / UNIFORM backend: the verifications a launch of their own)
    # adds D(4, c_min)
    law = _core_law("h100", "auto")
    g = np.asarray(law.grid)
    assert "FLASH_ATTN_MLA: queries of <= 512 tokens" in \
        build_cost_model("aic", "h100", "deepseek-v2-lite", "llama-3.2-1b").roles[
            "target"].attention_how
    q = np.array([1] * 4 + [4] * 4)
    c = np.full(8, 1023)
    sums = (8.0, float(q.sum()), float(c.sum()), float((q * c).sum()), float((q * q).sum()))
    nd, nc = int(g[0]), int(g[1])
    bd, cd = g[2:2 + nd], g[2 + nd:2 + nd + nc]
    dv = g[2 + nd + nc:2 + nd + nc + nd * nc].reshape(nd, nc)
    o = 2 + nd + nc + nd * nc
    npb, nps = int(g[o]), int(g[o + 1])
    bp, sp = g[o + 2:o + 2 + npb], g[o + 2 + npb:o + 2 + npb + nps]
    pv = g[o + 2 + npb + nps:o + 2 + npb + nps + npb * nps].reshape(npb, nps)
    x = g[o + 2 + npb + nps + npb * nps]
    i4 = list(bd).index(4.0)
    # the 4 one-token requests carry the batch's cached tokens, c̄ = Σc / 4 = 2046 (the
    # verifications' prefixes folded into their KV): linear between c = 1023 and 2047
    j = list(cd).index(1023.0)
    decode = dv[i4, j] + (dv[i4, j + 1] - dv[i4, j]) * (2046.0 - cd[j]) / (cd[j + 1] - cd[j])
    k = list(bp).index(4.0)  # ΔP(4, 16): linear in s² between s = 1 (0) and s = 16
    extra = pv[k, 0] + (pv[k, 1] - pv[k, 0]) * (16.0 - sp[0]) / (sp[1] - sp[0])
    one = decode + extra + x * (sums[3] - sums[2])
    assert law.seconds(*sums) == pytest.approx(one, rel=1e-12)
    two = dataclasses.replace(law, grid=(*law.grid[:-2], TWO_LAUNCHES))
    assert two.seconds(*sums) == pytest.approx(one + dv[i4, 0], rel=1e-12)
    # a chunk past the threshold (600 tokens) beside the decodes takes its own launch again
    q = np.array([1] * 4 + [600])
    c = np.array([1023] * 4 + [0])
    long = (5.0, float(q.sum()), float(c.sum()), float((q * c).sum()), float((q * q).sum()))
    assert law.seconds(*long) == two.seconds(*long)


def test_the_other_mla_backends_keep_two_launches():
    # FlashMLA (fp8 on Hopper) and FlashInfer-MLA are UNIFORM, Triton-MLA SINGLE_ONLY
    assert _core_law("h100", "fp8").grid[-1] == TWO_LAUNCHES
    for system in ("b200_sxm", "gb200", "l40s", "rtx_pro_6000_server", "a100_sxm"):
        assert mixed_mode(system, "bfloat16")[0] == (TWO_LAUNCHES,)
    assert mixed_mode("h200_sxm", "bfloat16")[0] == (DECODE_PATH, 512.0)


@pytest.mark.parametrize("hardware", ["h100", "h200"])
def test_deepseek_v3_at_tp_8_prices_a_decode_and_a_prefill_pass(hardware):
    # the serving deployment (16 heads per GPU, its own timed cells) against tp 1 (128 heads
    # per GPU): finite, positive, a prefill of 2048 tokens above a decode of 32 requests, and
    # tp 8 below tp 1 in the attention and the whole pass, decode and prefill alike
    tp8, tp1 = (build_cost_model("aic", hardware, "deepseek-v3", "llama-3.2-1b", tp=tp)
                for tp in (8, 1))
    assert tp8.roles["target"].attention_how.startswith("MLA core, shape")  # timed cells
    assert tp8.roles["target"].shape.heads // tp8.roles["target"].tp == 16
    decode = (np.ones(32, dtype=int), np.full(32, 2047))
    prefill = (np.array([2048]), np.array([0]))
    for batch in (decode, prefill):
        t8, t1 = (c.step_time("target", *batch) for c in (tp8, tp1))
        assert np.isfinite(t8) and 0.0 < t8 < t1
        a8, a1 = (c.breakdown("target", *batch)["attention"] for c in (tp8, tp1))
        assert 0.0 < a8 < a1
        assert tp8.breakdown("target", *batch)["allreduce"] > 0.0
    assert tp8.step_time("target", *prefill) > tp8.step_time("target", *decode)


def test_triton_mla_carries_decode_by_the_kernels_head_blocks():
    # vLLM's Triton MLA decode (triton_decode_attention._decode_grouped_att_m_fwd, BLOCK_H =
    # 16) reads the latent KV once per 16-head block: under a law of the KV read alone, 128
    # heads' decode cells are 32 heads' x 8 / 2 and 64 heads' x 8 / 4 (geometric mean); under
    # a law of the FLOPs alone they are 32 heads' x 4 and 64 heads' x 2, as before the rule
    from specbatch.simulator.cost.measured.aic_attention import AttnFit
    from specbatch.simulator.cost.measured.aic_mla import (
        carried_cells,
        core_rows,
        head_blocks,
        head_cells,
        triton_decode,
    )
    from specbatch.simulator.cost.measured.aic_op_curves import mla_gemm

    assert [head_blocks(h, True) for h in (1, 2, 16, 17, 32, 128)] == [1, 1, 1, 2, 2, 8]
    assert head_blocks(128, False) == 1
    assert [triton_decode(s, "bfloat16") for s in
            ("a100_sxm", "l40s", "rtx_pro_6000_server", "h100_sxm", "b200_sxm", "gb200")] == [
        True, True, True, False, False, False]
    grids = head_cells(*core_rows("rtx_pro_6000_server", "bfloat16",
                                  mla_gemm("rtx_pro_6000_server")))
    kv_only = AttnFit(floor=0.0, per_request=0.0, per_request_head=0.0, flops_rate=np.inf,
                      kv_rate=1e12)
    flops_only = dataclasses.replace(kv_only, flops_rate=1e14, kv_rate=np.inf)
    d32, d64 = grids[32][0][2], grids[64][0][2]
    got, how = carried_cells(grids, kv_only, 128, 2.0, exclude=True, triton=True)
    np.testing.assert_allclose(got[0][2], np.sqrt(d64 * 2.0 * d32 * 4.0))
    assert how.startswith("decode transferred from 64, 32 heads (Triton MLA")
    untriton, _ = carried_cells(grids, kv_only, 128, 2.0, exclude=True, triton=False)
    np.testing.assert_allclose(untriton[0][2], np.sqrt(d64 * d32))
    got, _ = carried_cells(grids, flops_only, 128, 2.0, exclude=True, triton=True)
    np.testing.assert_allclose(got[0][2], np.sqrt(d64 * 2.0 * d32 * 4.0))
    # one head runs decode_attention_fwd_normal, another kernel: no decode source for two
    # heads (4 and 8 instead), still a prefill source (the prefill kernel is not Triton's)
    got, how = carried_cells(grids, kv_only, 2, 2.0, exclude=True, triton=True)
    np.testing.assert_allclose(got[0][2], np.sqrt(grids[4][0][2] * grids[8][0][2]))
    np.testing.assert_allclose(got[1][2], np.sqrt(grids[1][1][2] * grids[4][1][2]))
    assert how.startswith("decode transferred from 4, 8 heads") and how.endswith("from 1, 4")
