"""Cold reads of AIConfigurator's cells (simulator.cost.measured.aic_cold): a GEMM cell timed
over weights the collector kept in the L2 is taken no faster than its weights at the table's
cold read rate; a MoE row no faster than the experts its balanced routing touches; the MLA
module rows and their cores likewise (aic_mla.core_rows)."""

import numpy as np
import pytest

from specbatch.simulator.cost.measured.aic_cold import (
    COLD_WEIGHTS,
    GROUPED,
    balanced_ids,
    cold_gemm,
    cold_moe,
    floored,
    gemm_rate,
    moe_bytes,
    moe_rate,
    read_rate,
    touched_experts,
    weight_bytes,
)
from specbatch.simulator.cost.measured.aic_curves import load_curves
from specbatch.simulator.cost.measured.aic_import import COMMON_SYSTEMS
from specbatch.simulator.cost.measured.aic_mla import (
    V3,
    core_bytes,
    core_rows,
    v3_projection_bytes,
)
from specbatch.simulator.cost.measured.aic_op_curves import mla_gemm, shape_curves
from specbatch.simulator.cost.measured.aic_ops import ShapeCurves


def test_the_rate_is_the_fastest_read_of_the_large_cells_and_floors_only_faster_cells():
    nbytes = np.array([1e6, 2e9, 4e9])
    seconds = np.array([1e-6, 2e-3, 5e-3])  # 1 TB/s (small, ignored), 1.0, 0.8 TB/s
    rate = read_rate(nbytes, seconds, 1e9)
    assert rate == pytest.approx(1e12)
    assert read_rate(nbytes, seconds, 1e10) is None  # no cell that large
    got = floored(seconds, nbytes, rate)
    assert got[0] == pytest.approx(1e-6)  # 1 MB at 1 TB/s: 1 us, as timed
    np.testing.assert_array_equal(floored(np.array([5e-7]), np.array([1e6]), rate), [1e-6])
    np.testing.assert_array_equal(floored(seconds, nbytes, None), seconds)


def l40s_cell(n: int, k: int, m: int = 1) -> float:
    g = load_curves("l40s")["gemm"]
    row = g[(g["dtype"] == "bfloat16") & (g["n"] == n) & (g["k"] == k) & (g["m"] == m)]
    return float(row["latency_s"].iloc[0])


def test_l40s_rate_is_its_fastest_large_weight_read_by_hand():
    # the fastest bf16 weight read over >= 256 MB of weights: n 65536, k 8192 (1.07 GB) at m 1
    rate = gemm_rate("l40s", "bfloat16")
    assert rate == 65536 * 8192 * 2.0 / l40s_cell(65536, 8192)
    assert 0.74e12 < rate < 0.76e12  # below the 0.864 TB/s datasheet
    assert COLD_WEIGHTS == 2 * 128e6


def test_a_warm_l40s_cell_is_floored_at_its_weights_read_cold():
    # DeepSeek-V3's o_proj at 8 heads: 7168 x 1024 bf16, 14.7 MB, timed 7.0 us at m = 2 (2.1
    # TB/s: six copies fit the 96 MB L2); priced at 14.7 MB / 0.75 TB/s = 19.6 us
    raw = l40s_cell(7168, 1024, m=2)
    assert raw == pytest.approx(7.0e-6, rel=0.02)
    cold = 7168 * 1024 * 2.0 / gemm_rate("l40s", "bfloat16")
    assert cold == pytest.approx(19.6e-6, rel=0.01)
    curve = shape_curves("l40s", "gemm", "bfloat16").curve((7168, 1024))
    assert curve.at(1.0) == curve.at(2.0) == cold


def test_a_cold_l40s_curve_is_unchanged():
    # o_proj at 16 heads: 7168 x 2048, 29.4 MB, timed 43 us at m = 1 (0.68 TB/s), slower than
    # its 39.2 us cold: the whole curve is the raw rows' (made non-decreasing)
    assert l40s_cell(7168, 2048) > 7168 * 2048 * 2.0 / gemm_rate("l40s", "bfloat16")
    g = load_curves("l40s")["gemm"]
    raw = ShapeCurves("gemm", g[g["dtype"] == "bfloat16"], None, {}).curve((7168, 2048))
    curve = shape_curves("l40s", "gemm", "bfloat16").curve((7168, 2048))
    np.testing.assert_array_equal(curve.seconds, raw.seconds)
    np.testing.assert_array_equal(curve.grid, raw.grid)


@pytest.mark.parametrize("system, family", [
    *[(s, "gemm") for s in ("h100_sxm", "h200_sxm", "a100_sxm", "b200_sxm", "gb200")],
    *[(s, "moe") for s in ("h100_sxm", "h200_sxm", "b200_sxm", "gb200")]])
def test_no_cell_or_moe_row_of_the_hbm_gpus_moves(system, family):
    # their L2 (<= 50 MB) holds no cell the collector kept warm: every row is already slower
    # than its bytes at the table's cold rate
    floor, rate = {"gemm": (cold_gemm, gemm_rate), "moe": (cold_moe, moe_rate)}[family]
    table = load_curves(system)[family]
    for dtype in sorted(set(table["dtype"])):
        rows = table[table["dtype"] == dtype]
        got = floor(rows, rate(system, dtype), dtype)
        np.testing.assert_array_equal(got["latency_s"].to_numpy(np.float64),
                                      rows["latency_s"].to_numpy(np.float64))


@pytest.mark.parametrize("system", COMMON_SYSTEMS)
def test_every_cell_reads_no_faster_than_its_weights_cold(system):
    g = load_curves(system)["gemm"]
    for dtype in sorted(set(g["dtype"])):
        rows = g[g["dtype"] == dtype]
        rate = gemm_rate(system, dtype)
        got = cold_gemm(rows, rate, dtype)["latency_s"].to_numpy(np.float64)
        w = weight_bytes(rows["n"], rows["k"], dtype)
        assert (w / got <= rate * (1 + 1e-12)).all()
        assert (got >= rows["latency_s"].to_numpy(np.float64)).all()


def test_mla_rows_and_cores_read_cold():
    # every L40S module row is priced no faster than its weights and latent KV at the cold
    # rate, every core no faster than its own kv_b weights and KV
    rate = gemm_rate("l40s", "bfloat16")
    d, p = core_rows("l40s", "bfloat16", mla_gemm("l40s"))
    for rows, tokens in ((d, d["batch"] * (d["context"] + 1)), (p, p["batch"] * p["prompt"])):
        own = core_bytes(rows["heads"].to_numpy(), tokens.to_numpy(), 2.0)
        weights = np.array([v3_projection_bytes(int(h)) for h in rows["heads"]])
        assert (rows["latency_s"].to_numpy() >= own / rate * (1 - 1e-12)).all()
        assert (rows["cold_s"].to_numpy() >= (weights + own) / rate * (1 - 1e-12)).all()
        assert (rows["cold_s"].to_numpy() >= rows["module_s"].to_numpy() * (1 - 1e-12)).all()
    # by hand: 16 heads, batch 1, one cached token: 73.3 MB of weights, timed 95.7 us (0.77
    # TB/s, above the cold 0.75: floored to 97.8 us), below its projections read cold (~100
    # us): the core is its own bytes at the cold rate, 16 x 256 x 512 x 2 + 2 x 576 x 2 bytes
    row = d[(d["heads"] == 16) & (d["batch"] == 1)].sort_values("context").iloc[0]
    assert int(row["context"]) == 1
    weights = (2112 * 7168 + 16 * 192 * 1536 + 16 * 256 * 512 + 7168 * 16 * 128) * 2.0
    assert weights == v3_projection_bytes(16) + 16 * (V3[4] + V3[5]) * V3[2] * 2.0
    assert row["module_s"] == pytest.approx(95.7e-6, rel=0.01)
    assert row["projections_s"] > (weights + 2 * 576 * 2.0) / rate > row["module_s"]
    own = (16 * 256 * 512 * 2.0 + 2 * 576 * 2.0) / rate
    assert own == pytest.approx(5.6e-6, rel=0.01)
    assert row["latency_s"] == own
    assert row["cold_s"] == row["projections_s"] + own


def moe_rows(system: str, dtype: str, **key):
    m = load_curves(system)["moe"]
    m = m[m["dtype"] == dtype]
    for col, v in key.items():
        m = m[m[col] == v]
    return m.sort_values("tokens")


def test_balanced_routing_touches_the_experts_by_hand():
    # AIConfigurator's balanced_logits, 16 experts top-2 (stride 8) at 3 tokens: token t picks
    # floor(8 t / 3) + 8 j: {0, 8}, {2, 10}, {5, 13}; from 8 tokens on every expert
    np.testing.assert_array_equal(np.unique(balanced_ids(3, 16, 2, False)), [0, 2, 5, 8, 10, 13])
    np.testing.assert_array_equal(np.unique(balanced_ids(3, 16, 2, True)), [0, 2, 5, 8, 10, 13])
    assert touched_experts(3, 16, 2, 1) == 6
    assert touched_experts(8, 16, 2, 1) == 16
    assert touched_experts(8, 16, 2, 4) == 4  # rank 0 holds experts 0-3
    # Llama-4-Scout (16 experts, top-1): one expert per token up to 16
    assert [touched_experts(t, 16, 1, 1) for t in (1, 2, 8, 64)] == [1, 2, 8, 16]
    # Kimi-K2 (384, top-8) at 32 tokens: 256 in exact arithmetic, 235 in the bfloat16 the 0.24
    # collector computes the selection in (values 256-512 round to even integers): the fewer
    assert len(np.unique(balanced_ids(32, 384, 8, False))) == 256
    assert touched_experts(32, 384, 8, 1) == len(np.unique(balanced_ids(32, 384, 8, True)))
    assert touched_experts(32, 384, 8, 1) < 256
    # DeepSeek-V3's grouped routing (8 groups, 4 chosen): half the balanced selection, >= k
    v3 = GROUPED[(7168, 2048, 256, 8)]
    assert [touched_experts(t, 256, 8, 1, v3) for t in (1, 2, 4, 64)] == [8, 8, 16, 128]
    assert touched_experts(4, 256, 8, 2, v3) == 0  # rank 0's 4 groups may all be passed over


def test_an_l2_warm_moe_row_is_raised_to_its_experts_read_cold():
    # L40S fp8, Llama-4-Scout at tp 2, 1 token: one expert, 3 x 5120 x 4096 fp8 bytes (62.9 MB,
    # fits the 96 MB L2), timed 29 us (2.2 TB/s); the rate: the fastest row of >= 256 MB,
    # Kimi-K2 at tp 4, 48 tokens (all 384 experts, 384 x 3 x 7168 x 512 B, 4.2 GB) in 6.1 ms
    big = moe_rows("l40s", "fp8", tokens=48, hidden=7168, inter=2048, experts=384, topk=8,
                   tp=4, ep=1)
    rate = moe_rate("l40s", "fp8")
    assert rate == 384 * 3 * 7168 * 512 / float(big["latency_s"].iloc[0])
    assert 0.68e12 < rate < 0.70e12
    scout = moe_rows("l40s", "fp8", hidden=5120, inter=8192, experts=16, topk=1, tp=2, ep=1)
    assert float(scout["latency_s"].iloc[0]) == pytest.approx(29e-6, rel=0.05)
    cold = 3 * 5120 * 4096 * 1.0 / rate
    assert cold == pytest.approx(90.9e-6, rel=0.01)
    got = cold_moe(scout, rate, "fp8")["latency_s"].to_numpy()
    assert got[0] == cold
    # 2 tokens: two experts (126 MB, past the L2), timed 219 us, slower than their 182 us cold
    assert int(scout["tokens"].iloc[1]) == 2 and got[1] == float(scout["latency_s"].iloc[1])
    assert got[1] > 2 * cold
    curve = shape_curves("l40s", "moe", "fp8").curve((5120, 8192, 16, 1, 2, 1))
    assert curve.at(1.0) == cold


def test_an_hbm_gpu_row_inside_its_l2_but_slower_than_cold_stays():
    # H100 bf16, Qwen3-30B-A3B at tp 2, 1 token: 8 experts of 3 x 2048 x 384 x 2 B (37.7 MB,
    # inside the 50 MB L2) read at 1.2 TB/s, below the table's 3.18 TB/s: as timed
    q = moe_rows("h100_sxm", "bfloat16", hidden=2048, inter=768, experts=128, topk=8, tp=2, ep=1)
    w = moe_bytes(q, "bfloat16")
    assert w[0] == 8 * 3 * 2048 * 384 * 2.0
    rate = moe_rate("h100_sxm", "bfloat16")
    assert 3.1e12 < rate < 3.3e12 and w[0] / float(q["latency_s"].iloc[0]) < 0.5 * rate
    np.testing.assert_array_equal(cold_moe(q, rate, "bfloat16")["latency_s"].to_numpy(),
                                  q["latency_s"].to_numpy(np.float64))


@pytest.mark.parametrize("system", ["l40s", "rtx_pro_6000_server"])
def test_every_moe_row_reads_no_faster_than_its_experts_cold(system):
    m = load_curves(system)["moe"]
    moved = 0
    for dtype in sorted(set(m["dtype"])):
        rows = m[m["dtype"] == dtype]
        rate = moe_rate(system, dtype)
        got = cold_moe(rows, rate, dtype)["latency_s"].to_numpy(np.float64)
        raw = rows["latency_s"].to_numpy(np.float64)
        assert (moe_bytes(rows, dtype) / got <= rate * (1 + 1e-12)).all()
        assert (got >= raw).all()
        moved += int((got > raw).sum())
    assert moved > 0
