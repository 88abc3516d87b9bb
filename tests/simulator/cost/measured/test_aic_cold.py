"""Cold reads of AIConfigurator's cells (simulator.cost.measured.aic_cold): a GEMM cell timed
over weights the collector kept in the L2 is taken no faster than its weights at the table's
cold read rate; the MLA module rows and their cores likewise (aic_mla.core_rows)."""

import numpy as np
import pytest

from specbatch.simulator.cost.measured.aic_cold import (
    COLD_WEIGHTS,
    cold_gemm,
    floored,
    gemm_rate,
    read_rate,
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


@pytest.mark.parametrize("system", ["h100_sxm", "h200_sxm", "a100_sxm", "b200_sxm", "gb200"])
def test_no_cell_of_the_hbm_gpus_moves(system):
    g = load_curves(system)["gemm"]
    for dtype in sorted(set(g["dtype"])):
        rows = g[g["dtype"] == dtype]
        got = cold_gemm(rows, gemm_rate(system, dtype), dtype)
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
