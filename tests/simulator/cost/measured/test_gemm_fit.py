"""The rtx4090 / rtxpro6000 presets' efficiencies are the fit of the bundled per-GEMM profiles
(simulator.cost.measured.gemm_fit), never of the measured serving runs."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from specbatch.simulator.cost.gpus.hardware import get_hardware
from specbatch.simulator.cost.measured.gemm_fit import (
    fit_efficiencies,
    gemm_dims,
    gemm_rows,
    profile_mape,
)
from specbatch.traces.models.hf_config import read_hf_config
from specbatch.traces.public.vllm_runs import BUNDLED_DIR


def _llama():
    return read_hf_config(str(BUNDLED_DIR / "rtxpro6000-llama-3.1-8b" / "config.json"))


def test_gemm_shapes_of_llama_3_1_8b_by_hand():
    assert gemm_dims(_llama()) == {"qkv_proj": (4096, 4096 + 2 * 1024),
                                   "o_proj": (4096, 4096), "gate_up_proj": (4096, 2 * 14336),
                                   "down_proj": (14336, 4096)}


def test_a_synthetic_roofline_profile_gives_back_its_efficiencies(tmp_path):
    shape, peak, bw = _llama(), 100e12, 1e12
    rows = []
    for layer, (k, n) in gemm_dims(shape).items():
        for t in (1, 8, 64, 256, 1024, 2048):
            f, b = 2 * t * k * n, 2 * (k * n + t * (k + n))
            rows.append((layer, t, 1e6 * max(f / (peak * 0.62), b / (bw * 0.91))))
    path = tmp_path / "dense.csv"
    pd.DataFrame(rows, columns=["layer", "tokens", "time_us"]).to_csv(path, index=False)
    got = gemm_rows(path, shape)
    assert fit_efficiencies(got, peak, bw) == (0.62, 0.91)
    assert profile_mape(got, peak, bw, 0.62, 0.91) == pytest.approx(0.0, abs=1e-12)


@pytest.mark.parametrize("gpu", ["rtx4090", "rtxpro6000"])
def test_the_presets_carry_the_fit_of_their_bundled_profile(gpu):
    hw = get_hardware(gpu)
    rows = gemm_rows(BUNDLED_DIR / "profiles" / f"{gpu}-llama-3.1-8b-tp1-dense.csv", _llama())
    fitted = fit_efficiencies(rows, hw.peak_flops, hw.mem_bw)
    assert fitted == (hw.compute_eff, hw.memory_eff)
    assumed = profile_mape(rows, hw.peak_flops, hw.mem_bw, 0.7, 0.75)
    assert profile_mape(rows, hw.peak_flops, hw.mem_bw, *fitted) < assumed


def test_the_rtxpro6000_fit_holds_on_the_held_out_qwen3_32b_profile():
    hw = get_hardware("rtxpro6000")
    qwen = read_hf_config(str(BUNDLED_DIR / "rtxpro6000-qwen3-32b" / "config.json"))
    rows = gemm_rows(BUNDLED_DIR / "profiles" / "rtxpro6000-qwen3-32b-tp1-dense.csv", qwen)
    held_out = profile_mape(rows, hw.peak_flops, hw.mem_bw, hw.compute_eff, hw.memory_eff)
    assert held_out == pytest.approx(0.086, abs=0.001)
    assert np.isfinite(held_out)
