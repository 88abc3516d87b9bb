"""Roofline efficiencies fitted to measured per-GEMM profiles (the rtx4090 / rtxpro6000 presets).

LLMServingSim ships per-layer profiles taken with vLLM 0.19 on the GPUs of its measured runs
(``profiler/perf/<GPU>/<model>/bf16/tp1/dense.csv``: one row per layer and token count T,
``time_us``; bundled in ``traces/data/vllm_runs/profiles/`` with PROVENANCE.json). The four
projection GEMMs of a decoder layer are read with their shapes (K inputs, N outputs) from the
model's :class:`traces.models.model_shape.ModelShape`::

    qkv_proj      K = h,   N = heads · head_dim + 2 · kv_heads · head_dim
    o_proj        K = heads · head_dim,  N = h
    gate_up_proj  K = h,   N = 2 I
    down_proj     K = I,   N = h

and priced as the roofline does (simulator.cost.analytic.roofline): F = 2 T K N FLOPs, B = b (K N +
T (K + N)) bytes, t̂ = max(F / (peak · e_c), B / (bw · e_m)). The two efficiencies (e_c, e_m) of
:class:`simulator.cost.gpus.hardware.Hardware` are the pair on the grid {0.30, 0.31, ..., 1.00}²
that minimises the MAPE of t̂ over every GEMM row of the profile (T = 1 ... 2048): one criterion
for the memory-bound rows, the compute-bound rows and the knee between them, where a serving
step's passes (a few hundred tokens) sit. :func:`profile_mape` is that MAPE, so a fit on one
model's profile is checked on another's (Qwen3-32B on the RTX PRO 6000). Nothing here reads
the measured serving runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from specbatch.errors import require

if TYPE_CHECKING:  # read where a profile is read, not at import
    import pandas as pd

#: The profiles' GEMM layer names.
GEMMS = ("qkv_proj", "o_proj", "gate_up_proj", "down_proj")


def gemm_dims(shape) -> dict[str, tuple[int, int]]:
    """(K, N) of each projection GEMM of one decoder layer (module docstring)."""
    h, kv = shape.hidden, shape.kv_heads * shape.head_dim
    return {"qkv_proj": (h, shape.q_width + 2 * kv), "o_proj": (shape.q_width, h),
            "gate_up_proj": (h, 2 * shape.intermediate), "down_proj": (shape.intermediate, h)}


def gemm_rows(path: str | Path, shape, dtype_bytes: int = 2) -> pd.DataFrame:
    """The GEMM rows of a dense.csv profile with their FLOPs F, bytes B and seconds t."""
    import pandas as pd

    df = pd.read_csv(path)
    for col in ("layer", "tokens", "time_us"):
        require(col in df.columns, f"profile {path}: column {col}: expected it")
    df = df[df["layer"].isin(GEMMS)].copy()
    require(len(df) > 0, f"profile {path}: column layer: expected rows of {', '.join(GEMMS)}")
    dims = gemm_dims(shape)
    k = df["layer"].map(lambda x: dims[x][0]).to_numpy(dtype=np.float64)  # [R]
    n = df["layer"].map(lambda x: dims[x][1]).to_numpy(dtype=np.float64)  # [R]
    t = df["tokens"].to_numpy(dtype=np.float64)  # [R]
    df["flops"] = 2.0 * t * k * n
    df["bytes"] = dtype_bytes * (k * n + t * (k + n))
    df["seconds"] = df["time_us"].to_numpy(dtype=np.float64) * 1e-6
    return df


#: The efficiency grid of :func:`fit_efficiencies`.
GRID = np.round(np.arange(0.30, 1.0001, 0.01), 2)


def fit_efficiencies(rows: pd.DataFrame, peak_flops: float, mem_bw: float) -> tuple[float, float]:
    """(compute_eff, memory_eff) on :data:`GRID` minimising :func:`profile_mape` (module
    docstring); ties go to the smaller pair (first in grid order)."""
    flops = rows["flops"].to_numpy()[None, None, :] / peak_flops  # [1, 1, R]
    byts = rows["bytes"].to_numpy()[None, None, :] / mem_bw  # [1, 1, R]
    secs = rows["seconds"].to_numpy()[None, None, :]
    pred = np.maximum(flops / GRID[:, None, None], byts / GRID[None, :, None])  # [G, G, R]
    mape = np.mean(np.abs(pred - secs) / secs, axis=2)  # [G, G]
    i, j = np.unravel_index(int(np.argmin(mape)), mape.shape)
    return float(GRID[i]), float(GRID[j])


def profile_mape(rows: pd.DataFrame, peak_flops: float, mem_bw: float, compute_eff: float,
                 memory_eff: float) -> float:
    """Mean |predicted − measured| / measured over the GEMM rows, predicted = the roofline's
    max(F / (peak · e_c), B / (bw · e_m))."""
    pred = np.maximum(rows["flops"] / (peak_flops * compute_eff),
                      rows["bytes"] / (mem_bw * memory_eff))
    return float(np.mean(np.abs(pred - rows["seconds"]) / rows["seconds"]))
