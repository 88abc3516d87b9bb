"""How vLLM runs a mixed attention call per GPU (simulator.cost.measured.aic_mixed) and the
cold reading of the decode cells (aic_attention.cold_cells)."""

import numpy as np
import pytest

from specbatch.simulator.cost.gpus.catalogue import GPUS
from specbatch.simulator.cost.measured.aic_attention import cold_cells, grid_tables
from specbatch.simulator.cost.measured.aic_cells import attention_rows, shape_cells
from specbatch.simulator.cost.measured.aic_curves import load_curves
from specbatch.simulator.cost.measured.aic_import import COMMON_SYSTEMS
from specbatch.simulator.cost.measured.aic_mixed import (
    backend,
    cold_args,
    cold_rate,
    fa2_slots,
    gpu_of,
    mixed_mode,
    unpacked_cells,
)
from specbatch.simulator.cost.tabulated import ONE_CALL, TWO_LAUNCHES


def test_vllm_picks_the_backend_by_capability_and_kv_dtype():
    assert backend(GPUS["h100"], "bfloat16") == backend(GPUS["h100"], "fp8") == "fa3"
    assert backend(GPUS["b200"], "bfloat16") == "flashinfer"  # 10.x lists FlashInfer first
    assert backend(GPUS["rtxpro6000"], "bfloat16") == backend(GPUS["a100"], "bfloat16") == "fa2"
    assert backend(GPUS["rtxpro6000"], "fp8") == "flashinfer"  # FA2 reads no fp8 cache


@pytest.mark.parametrize("system", COMMON_SYSTEMS)
def test_the_backend_is_the_kernel_the_bundled_tables_timed(system):
    d = load_curves(system)["attention_decode"]
    names = {"fa3": ("vllm_flash_attn_fa3",), "fa2": ("vllm_flash_attn_fa2", "vllm_flash_attn"),
             "flashinfer": ("vllm_flashinfer",)}
    for kv, rows in d.groupby("kv_dtype"):
        kernel = str(rows["kernel"].iloc[0])
        want = backend(gpu_of(system), str(kv))
        assert any(kernel == k or (want == "flashinfer" and kernel.startswith(k))
                   for k in names[want]), (system, kv, kernel, want)


def test_fa2_resident_ctas_from_shared_memory_by_hand():
    # d = 128: (64 + 2 x 128) x 128 x 2 = 80 KiB per CTA; RTX PRO 6000 (12.0) has 100 KiB per
    # SM -> 1 x 188; A100 (8.0) 164 KiB -> 2 (FA2's own cap) x 108; d = 256: kBlockN 64,
    # (64 + 128) x 256 x 2 = 96 KiB -> 1 on both
    assert fa2_slots(GPUS["rtxpro6000"], 128) == 188
    assert fa2_slots(GPUS["a100"], 128) == 216
    assert fa2_slots(GPUS["a100"], 256) == 108
    assert fa2_slots(GPUS["rtxpro6000"], 64) == 188  # (64 + 512) x 64 x 2 = 72 KiB


def test_cold_cells_by_hand():
    b, c = np.array([1.0, 2.0]), np.array([1.0, 3.0])
    v = np.array([[3.0, 3.0], [3.0, np.nan]])
    # KV of B (c + 1) tokens at 10 bytes each, 5 bytes/s: 4 / 8 / 8 / 16 seconds
    got = cold_cells(b, c, v, (10.0, 5.0))
    assert got[0].tolist() == [4.0, 8.0] and got[1, 0] == 8.0 and np.isnan(got[1, 1])
    assert cold_cells(b, c, v, None) is v


def test_the_cold_rate_is_the_fastest_read_of_a_gib_or_more():
    d, _ = attention_rows("rtx_pro_6000_server", "bfloat16")
    b, h, c, w = (d[k].to_numpy(np.float64) for k in ("batch", "kv_heads", "context",
                                                       "head_dim"))
    kv = b * h * (c + 1) * 2 * w * 2.0  # bytes (float: B H_kv (c + 1) overflows int32)
    rate = cold_rate("rtx_pro_6000_server", "bfloat16")
    big = kv >= 2**30
    assert rate == (kv[big] / d["latency_s"].to_numpy()[big]).max()
    assert 1.4e12 < rate < GPUS["rtxpro6000"].mem_bw  # under the datasheet's 1.597 TB/s
    # a warm cell below it: (32, 8, 128) at B = 64, c = 511 reads 128 MiB in ~50 µs
    cells = shape_cells("rtx_pro_6000_server", "bfloat16")[(32, 8, 128)]
    (b, c, dv), _ = grid_tables(cells, cold_args("rtx_pro_6000_server", "bfloat16", 8, 128))
    i, j = list(b).index(64.0), list(c).index(511.0)
    assert dv[i, j] == 64 * 512 * 8 * 2 * 128 * 2 / rate
    assert dv[i, j] > 1.5 * cells[0][2][i, j]


@pytest.mark.parametrize("system", ["h100_sxm", "h200_sxm", "a100_sxm"])
def test_no_measured_decode_cell_reads_faster_than_the_cold_rate_off_the_rtx_pro_6000(system):
    for kv in ("bfloat16", "fp8"):
        if cold_rate(system, kv) is None and kv == "fp8":
            continue
        for key, (dec, _) in shape_cells(system, kv).items():
            if dec is not None:
                got = cold_cells(dec[0], dec[1], dec[2], cold_args(system, kv, *key[1:]))
                assert np.array_equal(got, dec[2], equal_nan=True), (system, kv, key)


def test_the_mixed_mode_of_each_backend():
    assert mixed_mode("h100_sxm", "bfloat16", 32, 8, 128) == ((ONE_CALL,), "FA3: one call, packed")
    assert mixed_mode("b200_sxm", "bfloat16", 32, 8, 128)[0] == (TWO_LAUNCHES,)
    assert mixed_mode("rtx_pro_6000_server", "fp8", 32, 8, 128)[0] == (TWO_LAUNCHES,)
    assert mixed_mode("a100_sxm", "bfloat16", 16, 16, 128)[0] == (ONE_CALL,)  # H = H_kv
    got, how = mixed_mode("rtx_pro_6000_server", "bfloat16", 32, 8, 128, layers=2)
    assert how == "FA2: mixed calls unpacked and unsplit"
    # mode, S, L2, bytes per token and KV head, G, H, rows per CTA, then U
    assert got[:7] == (2.0, 188.0, 128e6, 512.0, 4.0, 32.0, 64.0)
    u = unpacked_cells("rtx_pro_6000_server", "bfloat16", 128)
    assert u[0][0] == 8.0  # (8, 8, 128): its batch of 1 is 8 CTAs
    nx, ny = int(got[7]), int(got[8])
    assert (nx, ny) == (u[0].size, u[1].size)
    assert np.array_equal(np.array(got[9 + nx + ny:]), (u[2] * 2).ravel())
