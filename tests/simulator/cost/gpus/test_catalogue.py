"""Specification of simulator/cost/gpus/catalogue.py: one row per GPU, every GPU table derived
from it, and every row's measured data present in the bundled folders it names."""

from __future__ import annotations

import dataclasses

import pytest

from specbatch.analysis.validate.vllm_run import cost_source, hardware_of
from specbatch.errors import SpecbatchError
from specbatch.simulator.cost.gpus.catalogue import (
    ALIASES,
    DEVICE_NAMES,
    GPUS,
    ROWS,
    SOURCES,
    find_gpu,
    gpus_with,
    proxy_of,
)
from specbatch.simulator.cost.gpus.hardware import HARDWARE, get_hardware, preset
from specbatch.simulator.cost.measured.sources import allreduce_curve, fitted_gpu, gpu_peaks
from specbatch.traces.public.llmservingsim_profiles import profile_gpus
from specbatch.traces.public.vidur_profiles import load_public_profiles
from specbatch.traces.public.vllm_runs import load_run


def test_every_row_has_its_own_measured_data_or_a_proxy_that_has():
    for g in ROWS:
        assert (g.profiles is None) != (g.proxy is None), g.name
        if g.profiles is not None:
            assert g.profiles in SOURCES, g.name
        else:
            assert GPUS[g.proxy].profiles is not None, f"{g.name}: proxy {g.proxy} has no data"


def test_the_data_folders_hold_exactly_the_rows_that_name_them():
    profiles = load_public_profiles()
    assert set(profiles.compute["gpu"]) == set(gpus_with("vidur"))
    assert set(profile_gpus()) == set(gpus_with("llmservingsim"))
    clusters = set(profiles.network["cluster"])
    for g in ROWS:
        if g.allreduce_cluster is not None:
            assert g.profiles == "vidur" and g.allreduce_cluster in clusters, g.name
            assert allreduce_curve(g.name, 2) is not None


def test_names_aliases_and_device_names_are_unique():
    spellings = [g.name for g in ROWS] + [a for g in ROWS for a in g.aliases]
    assert len(spellings) == len(set(spellings))
    devices = [d for g in ROWS for d in g.device_names]
    assert len(devices) == len(set(devices)) == len(DEVICE_NAMES)
    assert all(find_gpu(a.upper()).name == n for a, n in ALIASES.items())


def test_datasheet_fields_are_physical_and_fp8_peaks_follow_the_capability():
    for g in ROWS:
        assert g.peak("bf16") > 0 and g.mem_bw > 0 and g.memory_bytes > 0 and g.link_bw > 0
        assert g.sm_count > 0 and g.compute_capability >= 70
        assert (g.peak("fp8") > 0) == (g.compute_capability >= 89), g.name
        assert g.peak("fp8") == 0.0 or g.peak("fp8") >= 2 * g.peak("bf16") - 1e12, g.name
        with pytest.raises(dataclasses.FrozenInstanceError):
            g.sm_count = 1  # type: ignore[misc]


def test_the_roofline_presets_are_the_preset_rows():
    assert list(HARDWARE) == [g.name for g in ROWS if g.preset]
    for name, hw in HARDWARE.items():
        g = GPUS[name]
        assert (hw.peak_flops, hw.fp8_peak_flops, hw.mem_bw, hw.memory_bytes, hw.link_bw,
                hw.compute_capability) == (g.peak("bf16"), g.peak("fp8"), g.mem_bw,
                                           g.memory_bytes, g.link_bw, g.compute_capability)
        assert g.efficiencies_fitted == (g.compute_eff is not None)
    with pytest.raises(SpecbatchError, match="hardware 'a40': expected one of"):
        get_hardware("a40")  # a data-only row: no roofline preset
    a40 = preset(GPUS["a40"])  # what benchmarks/cost_vs_public.py prices its roofline with
    assert (a40.peak_flops, a40.mem_bw, a40.memory_eff, a40.compute_eff) == (
        149.7e12, 696e9, 0.75, 0.7)


def test_a_row_without_data_borrows_its_proxys_laws_scaled_by_the_datasheet():
    assert proxy_of("h200") == "h100" and proxy_of("l40s") == "a40" and proxy_of("h100") is None
    own, borrowed = fitted_gpu("a40"), fitted_gpu("l40s")
    (f0, b0), (f1, b1) = gpu_peaks("a40"), gpu_peaks("l40s")
    law, scaled = own.gemm["mlp_up_proj"], borrowed.gemm["mlp_up_proj"]
    assert scaled.flops == pytest.approx(law.flops * f1 / f0)
    assert scaled.bandwidth == pytest.approx(law.bandwidth * b1 / b0)
    assert scaled.sms == GPUS["l40s"].sm_count and law.sms == GPUS["a40"].sm_count


def test_a_run_is_matched_to_its_preset_by_the_device_name_it_logged():
    run = load_run("rtx4090-llama-3.1-8b")
    assert hardware_of(run, None) == ("rtx4090", "meta.json hardware.device_name "
                                                 "'NVIDIA GeForce RTX 4090'")
    assert DEVICE_NAMES["NVIDIA H100 80GB HBM3"] == "h100"
    assert "fitted to LLMServingSim" in cost_source("roofline", "rtxpro6000")
    assert "assumed efficiencies" in cost_source("roofline", "h100")
    assert "calibrated: LLMServingSim" in cost_source("calibrated", "rtx4090")
