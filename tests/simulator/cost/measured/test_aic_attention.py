"""The aic grid attention law (simulator.cost.measured.aic_attention): its tables and held-out
error on the bundled H100 rows (issue 42's 8 % per op)."""

import numpy as np
import pytest

from specbatch.simulator.cost.measured.aic_attention import (
    SHAPE,
    AttnFit,
    carried,
    cell_check,
    grid_seconds,
    grid_tables,
)
from specbatch.simulator.cost.measured.aic_cells import attention_rows, shape_cells
from specbatch.simulator.cost.measured.aic_mixed import cold_args
from specbatch.simulator.cost.measured.aic_role_attention import attention_cells


def test_the_prefill_grid_is_taken_against_the_decode_floor():
    dec = (np.array([1.0, 2.0, 4.0]), np.array([1.0, 3.0, 7.0]),
           np.array([[1.0, 2.0, np.nan], [2.0, 2.5, 3.0], [3.0, 3.5, 4.0]]))
    pre = (np.array([1.0, 2.0, 4.0]), np.array([16.0, 32.0, 64.0]),
           np.array([[5.0, 6.0, 9.0], [6.0, 7.0, 10.0], [7.0, 9.0, 20.0]]))
    (bd, cd, dv), (bp, s2, dp) = grid_tables((dec, pre))
    # filled along c from (1, 2) at c = 1, 3 -> 4 at c = 7, then lowered to B = 2's 3.0 (the
    # time never falls with more requests: suffix minimum along B)
    assert dv[0, 2] == 3.0
    assert list(s2) == [1.0, 256.0, 1024.0, 4096.0]  # the prompt axis is held as s²
    assert list(dp[1]) == [0.0, 4.0, 5.0, 8.0]  # P(2, s) - D(2, 1) = P - 2


def test_an_untimed_shape_is_carried_by_the_law_ratio():
    # a law of KV bytes alone (no floor, FLOPs free): twice the KV heads, twice every cell
    fit = AttnFit(floor=0.0, per_request=0.0, per_request_head=0.0, flops_rate=1e300,
                  kv_rate=1.0)
    dec = (np.array([1.0, 2.0, 4.0]), np.array([1.0, 3.0, 7.0]),
           np.arange(1.0, 10.0).reshape(3, 3))  # measured cells are > 0
    pre = (np.array([1.0, 2.0, 4.0]), np.array([16.0, 32.0, 64.0]), np.ones((3, 3)))
    got = carried([((16, 4, 128), (dec, pre))], fit, (32, 8, 128), 2.0)
    assert np.allclose(got[0][2], 2 * dec[2], rtol=1e-12)
    assert np.allclose(got[1][2], 2.0, rtol=1e-12)
    both = carried([((16, 4, 128), (dec, pre)), ((32, 2, 128), (dec, pre))], fit,
                   (32, 8, 128), 2.0)  # geometric mean of x2 and x4
    assert np.allclose(both[1][2], np.sqrt(8.0), rtol=1e-12)


def test_llama_8b_on_h100_is_its_own_grid_and_its_tp2_shape_is_timed_too():
    assert attention_cells("h100_sxm", "bfloat16", 32, 8, 128)[1] == "shape"
    got, how = attention_cells("h100_sxm", "bfloat16", 32, 8, 128, exclude=True)
    assert how == ("transfer from (40, 8, 128), (24, 8, 128) (decode); (40, 8, 128), "
                   "(24, 8, 128) (prefill)") and got is not None


@pytest.mark.parametrize("system", ["h100_sxm", "rtx_pro_6000_server"])
@pytest.mark.parametrize("kv", ["bfloat16", "fp8"])
def test_grid_cells_left_out_are_within_8_percent(system, kv):
    # the decode cells read cold, as the law reads them (aic_mixed.cold_rate); RTX PRO 6000
    # bf16 decode was 8.3 % read warm: the L2 step its 128 MB cache puts in the cells
    dec, pre = [], []
    for key, cells in shape_cells(system, kv).items():
        got = cell_check(cells, cold_args(system, kv, key[1], key[2]))
        dec.append(got["decode"])
        pre.append(got["prefill"])
    assert np.abs(np.concatenate(dec)).mean() <= 0.08
    assert np.abs(np.concatenate(pre)).mean() <= 0.08


@pytest.mark.slow
@pytest.mark.parametrize("system", ["h100_sxm", "h200_sxm", "a100_sxm", "b200_sxm", "gb200",
                                    "rtx_pro_6000_server"])
def test_every_head_shape_left_out_is_within_8_percent(system):
    # issue 42's per-op target, leave-one-model-out: each timed head shape carried from its
    # neighbours (benchmarks/aic_validate.py's "shape left out"), decode and prefill apart
    for kv in ("bfloat16", "fp8"):
        grids = shape_cells(system, kv)
        if not grids:
            continue
        d, p = attention_rows(system, kv)
        gd, gp = d.groupby(list(SHAPE)), p.groupby(list(SHAPE))
        dec, pre = [], []
        for key in grids:
            carried_cells, _ = attention_cells(system, kv, *key, exclude=True)
            rd, rp = gd.get_group(key), gp.get_group(key)
            rp = rp[rp["prompt"] > 1]
            cold = cold_args(system, kv, key[1], key[2])
            b, c = rd["batch"].to_numpy(float), rd["context"].to_numpy(float)
            truth = rd["latency_s"].to_numpy()
            if cold is not None:  # each row read cold, as the law reads its cells
                truth = np.maximum(truth, b * (c + 1.0) * (cold[0] / cold[1]))
            dec.append(grid_seconds(carried_cells, b, c, True, cold) / truth - 1)
            pre.append(grid_seconds(carried_cells, rp["batch"].to_numpy(float),
                                    rp["prompt"].to_numpy(float), False)
                       / rp["latency_s"].to_numpy() - 1)
        assert np.abs(np.concatenate(dec)).mean() <= 0.08, (system, kv)
        assert np.abs(np.concatenate(pre)).mean() <= 0.08, (system, kv)
