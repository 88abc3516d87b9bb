"""vLLM's kernel buckets along a curve's row coordinate (simulator.cost.measured.aic_dispatch)
and the curve priced within them (aic_curve.Curve, monotone, interp_check): the edges of each
rule by hand, a staircase priced step by step, the running median kept within a bucket, the
curve non-decreasing and its many-point form bit for bit its point-by-point one."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specbatch.simulator.cost.measured.aic_curve import Curve, buckets_of, interp_check, monotone
from specbatch.simulator.cost.measured.aic_dispatch import (
    EXTRAP,
    FP8_KERNEL,
    MOE_KERNEL,
    allreduce_edges,
    bucket,
    edges_of,
    fp8_edges,
    gemm_edges,
    moe_edges,
    next_pow_2,
)
from specbatch.simulator.cost.measured.aic_op_curves import (
    curve_from_json,
    curve_json,
    op_curve,
    shape_curves,
)


def test_the_sm90_edges_are_its_dispatch_and_its_256_row_clusters():
    # cutlass_gemm_sm90_fp8_dispatch: m <= 16, <= 64, <= 128; then 128-row tiles in clusters
    # of 2: a new 256-row cluster past each multiple of 256
    assert fp8_edges("sm90", 4096, 1024) == (16, 64, 128, 256, 512, 768, 1024)
    assert fp8_edges("sm90", 512, 300) == (16, 64, 128, 256, 512)  # up to the grid's end


def test_the_sm89_edges_follow_its_power_of_two_dispatch_and_tile_rows():
    # mp2 buckets 16 / 32 / 64 / 128 / 256; M256 64-row tiles at np2(n) <= 4096 (edge 192);
    # default 128-row tiles, 256-row ones at 4096 < np2(n) <= 8192
    assert fp8_edges("sm89", 4096, 640) == (16, 32, 64, 128, 192, 256, 384, 512, 640)
    assert fp8_edges("sm89", 5120, 1024) == (16, 32, 64, 128, 256, 512, 768, 1024)
    assert fp8_edges("sm89", 16384, 512) == (16, 32, 64, 128, 256, 384, 512)
    assert [next_pow_2(n) for n in (0, 1, 2, 3, 4096, 4097, 5120)] == [0, 1, 2, 4, 4096, 8192,
                                                                         8192]


def test_only_the_cutlass_fp8_gemm_and_nvlink_all_reduce_are_bucketed():
    assert gemm_edges("h100_sxm", "fp8", FP8_KERNEL, (4096, 4096), 300)[:4] == (16, 64, 128, 256)
    assert gemm_edges("h100_sxm", "bfloat16", "torch.nn.functional.linear", (4096, 4096),
                      300) == ()
    assert gemm_edges("b200_sxm", "fp8", FP8_KERNEL, (4096, 4096), 300) == ()
    assert edges_of("b200_sxm", "gemm", "fp8", FP8_KERNEL) is None
    assert edges_of("h100_sxm", "moe", "fp8", FP8_KERNEL) is None
    # one stage below 512 KiB at 4 GPUs, 256 KiB at 8 (bf16: the last element count below)
    assert allreduce_edges("h100_sxm", (2,)) == ()
    assert allreduce_edges("h100_sxm", (4,)) == (512 * 1024 // 2 - 1,)
    assert allreduce_edges("b200_sxm", (8,)) == (256 * 1024 // 2 - 1,)
    assert allreduce_edges("gb200", (4,)) == (512 * 1024 // 2 - 1,)  # one NVLink tray
    assert allreduce_edges("l40s", (8,)) == () and edges_of("l40s", "allreduce", "", "") is None
    assert [bucket((16, 64), x) for x in (1, 16, 16.5, 17, 64, 65)] == [0, 0, 1, 1, 1, 2]


def test_the_flashinfer_cutlass_moe_edges_are_its_128_row_tiles_per_expert():
    # tactic -1: CtaShape128x16x128B, 128 routed rows of an expert a tile row; an expert gets
    # tokens * k / E rows: Qwen3-30B (E 128, k 8) 16 tokens a row, Mixtral (8, 2) 4
    assert moe_edges((2048, 768, 128, 8, 1, 1), 16384) == (2048, 4096, 6144, 8192, 10240,
                                                           12288, 14336, 16384)
    assert moe_edges((4096, 14336, 8, 2, 4, 1), 1500) == (512, 1024, 1536)
    # E 512, k 22: 128 * 512 / 22 = 2978.9 tokens a tile row (the last count within it)
    assert moe_edges((1024, 2688, 512, 22, 1, 8), 6000) == (2978, 5957, 8936)
    assert moe_edges((2048, 768, 128, 8, 1, 1), 16384, 64)[:2] == (1024, 2048)
    edges = edges_of("h100_sxm", "moe", "fp8", MOE_KERNEL)
    assert edges((4096, 14336, 8, 2, 1, 1), 1024) == (512, 1024) and EXTRAP["moe"] == "slope"
    assert edges_of("h200_sxm", "moe", "fp8", MOE_KERNEL) is not None
    for system, dtype in (("b200_sxm", "fp8"), ("h100_sxm", "bfloat16"), ("l40s", "fp8"),
                          ("rtx_pro_6000_server", "fp8")):
        assert edges_of(system, "moe", dtype, MOE_KERNEL if dtype == "fp8" else "x") is None


def test_the_h100_fp8_moe_curve_carries_its_tile_rows_and_stays_non_decreasing():
    key = (2048, 768, 128, 8, 1, 1)  # Qwen3-30B-A3B at tp 1: one tile row to 2048 tokens
    curve = op_curve("h100_sxm", "moe", "fp8", key)
    assert curve.edges[:3] == (2048.0, 4096.0, 6144.0) and curve.extrap == "slope"
    x = np.arange(1.0, 20000.0)
    got = curve.at_many(x)
    assert np.all(np.diff(got) >= 0.0)
    assert np.array_equal(got, np.array([curve.at(float(v)) for v in x]))
    back = curve_from_json(curve_json(curve))
    assert np.array_equal(back.at_many(x), got)
    # 2048 -> 3072 tokens: 128 -> 192 rows an expert, a second tile row; the rows jump there
    # and the curve prices 2049 from 3072's bucket, not by a line from 2048
    assert curve.at(2049.0) > 1.3 * curve.at(2048.0)
    assert op_curve("h100_sxm", "moe", "bfloat16", key).edges == ()


def test_a_step_is_priced_from_its_own_bucket():
    # points at 8 (bucket 0), 32 (bucket 1) and 256 (bucket 3) under edges 16, 64, 128
    curve = Curve(np.array([8.0, 32.0, 256.0]), np.array([1.0, 2.0, 8.0]), None, "t",
                  edges=(16.0, 64.0, 128.0))
    assert curve.at(12.0) == 1.0  # past 8 in its bucket: 8's seconds (log-log: 1.22)
    assert curve.at(20.0) == 2.0 and curve.at(50.0) == 2.0  # 32's bucket, either side of it
    # 100 is in bucket 2, which holds no point: log-log between 32 and 256
    assert curve.at(100.0) == pytest.approx(2.0 * (100.0 / 32.0) ** (2.0 / 3.0), rel=1e-12)
    assert curve.at(200.0) == 8.0  # 256's bucket


def test_the_slope_carries_the_buckets_own_trend_and_stays_non_decreasing():
    # edge 5: 1, 2, 4 in bucket 0, 8 and 16 in bucket 1; t = x in each (log-log slope 1)
    g = np.array([1.0, 2.0, 4.0, 8.0, 16.0])
    curve = Curve(g, np.array([1.0, 2.0, 4.0, 16.0, 32.0]), None, "t", edges=(5.0,),
                  extrap="slope")
    assert curve.at(5.0) == pytest.approx(5.0, rel=1e-12)  # 4 * 5 / 4
    assert curve.at(6.0) == pytest.approx(12.0, rel=1e-12)  # 16 * 6 / 8
    flat = Curve(g, curve.seconds, None, "t", edges=(5.0,))
    assert (flat.at(5.0), flat.at(6.0)) == (4.0, 16.0)
    # a steep left bucket (t = x^2 up to 4) and a flat right one: never lower past the edge
    steep = Curve(g, np.array([1.0, 2.0, 8.0, 9.0, 10.0]), None, "t", edges=(5.0,),
                  extrap="slope")
    assert steep.at(5.0) == 9.0 and steep.at(6.0) == 9.0  # 12.5 and 12.5, capped at 8's 9


def test_the_running_median_stays_within_a_bucket():
    secs = np.array([1.0, 2.0, 1.0, 4.0, 4.0])
    assert monotone(secs).tolist() == [1.0, 1.0, 2.0, 4.0, 4.0]  # 2 and 1 taken to medians
    got = monotone(secs, np.array([0, 0, 1, 1, 1]))  # 2 and 1 each end a bucket: kept, pooled
    assert got == pytest.approx([1.0, math.sqrt(2.0), math.sqrt(2.0), 4.0, 4.0], rel=1e-12)
    assert buckets_of(np.array([16.0, 17.0, 64.0, 65.0]), (16.0, 64.0)).tolist() == [0, 1, 1, 2]
    assert buckets_of(np.array([1.0]), ()) is None


def test_a_staircase_left_out_is_priced_from_its_step():
    grid = np.array([16.0, 17.0, 32.0, 48.0, 64.0, 65.0, 80.0])
    secs = np.array([1.0, 2.0, 2.0, 2.0, 2.0, 4.0, 4.0])
    # within the dispatch buckets (16, 64) every left-out point is its step's: no error
    assert np.abs(interp_check(grid, secs, "loglog", None, (16.0, 64.0))).max() == 0.0
    plain = interp_check(grid, secs, "loglog")
    assert plain[0] == pytest.approx(2.0 ** (math.log(17 / 16) / math.log(2)) / 2.0 - 1.0)


def test_the_h100_fp8_curve_carries_its_edges_through_the_cache_form():
    curve = op_curve("h100_sxm", "gemm", "fp8", (4096, 4096))
    assert curve.edges[:5] == (16.0, 64.0, 128.0, 256.0, 512.0) and curve.extrap == "flat"
    back = curve_from_json(curve_json(curve))
    assert (back.edges, back.extrap) == (curve.edges, curve.extrap)
    x = np.arange(1.0, 5000.0)
    assert np.array_equal(back.at_many(x), curve.at_many(x))
    assert op_curve("h100_sxm", "gemm", "bfloat16", (4096, 4096)).edges == ()


curves = st.integers(3, 9).flatmap(lambda n: st.tuples(
    st.lists(st.floats(1e-6, 1e-3), min_size=n, max_size=n),
    st.lists(st.integers(1, 400), min_size=1, max_size=6, unique=True),
    st.sampled_from(["flat", "slope"]), st.sampled_from(["loglog", "linear"])))


@settings(max_examples=60, deadline=None)
@given(curves)
def test_a_bucketed_curve_is_non_decreasing_and_at_many_is_at(case):
    secs, edges, extrap, how = case
    grid = np.cumsum(np.linspace(1.0, 40.0, len(secs)))  # [G] increasing from 1
    curve = Curve(grid, monotone(np.array(secs)), lambda v: v, "t", how,
                  tuple(float(e) for e in sorted(edges)), extrap)
    x = np.concatenate([np.arange(0.5, grid[-1] + 5.0, 0.25), grid, np.array(sorted(edges))])
    x.sort()
    want = np.array([curve.at(float(v)) for v in x])
    assert np.all(np.diff(want) >= 0.0)
    assert np.array_equal(curve.at_many(x), want)


def test_a_transferred_moe_curve_keeps_its_own_tile_edges():
    # Qwen3-30B-A3B's experts at tp 3 (untimed: the tables split it 1, 2, 4, ...) priced by the
    # MoE transfer carry the 128-row edges of its own (E, k), as its timed splits do
    sc = shape_curves("h100_sxm", "moe", "fp8")
    key = (2048, 768, 128, 8, 3, 1)
    assert key not in sc.points
    curve = sc.curve(key)
    assert curve.source.startswith("transfer") and curve.edges[:2] == (2048.0, 4096.0)
    x = np.arange(1.0, 9000.0, 7.0)
    got = curve.at_many(x)
    assert np.array_equal(got, np.array([curve.at(float(v)) for v in x]))
    assert (np.diff(got) >= 0).all()
