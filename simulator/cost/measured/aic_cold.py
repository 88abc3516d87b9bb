"""Cold reads: measured cells the collector timed over data it kept in the L2, taken as no
faster than reading their bytes from memory at the rate the same table reaches where no L2
holds the data.

AIConfigurator's collectors replay one op over the same buffers (``collector/helper.py``
``benchmark_with_power``: warm-up runs, then CUDA-graph replays of the same ``kernel_func``;
no L2 flush, no buffer rotation beyond what the op builds itself). So a cell whose data fit the
L2 reads them from the L2 after the first replay. In a serving pass every layer's weights and
KV are read once per pass, after the other layers' went through the L2, so they are cold.

**GEMM cells** (:func:`cold_gemm`). ``collector/vllm/collect_gemm.py`` ``run_gemm`` builds
``outside_loop_count`` = 6 ``RowParallelLinear`` layers of one (n, k) for bf16 and per-tensor
fp8 (1 for fp8-block and nvfp4) and times ``kernel_func`` running the 6 in turn, so a cell's
weights stay in the L2 when 6 copies fit (L40S, 96 MB: n k 2 <= 16 MB). The tables show it:
bf16 weight reads at m = 1 above the GPU's memory bandwidth below ~20 MB of weights (L40S up to
2.3 TB/s against its 0.864 datasheet, RTX PRO 6000 2.7 against 1.79) and never above the large
weights' rate past it; H100 / H200 / A100 / B200 / GB200 (L2 40-50 MB or unsourced) never
exceed it.
A GEMM cell is taken as no faster than its weight bytes (n k, 2 bytes bf16, 1 fp8) at the
fastest weight read among the same table's cells of >= :data:`COLD_WEIGHTS` bytes of weights
(:func:`gemm_rate`): twice the largest L2 the catalogue states (RTX PRO 6000's 128 MB), so no
copy of such a weight is L2-resident. Not 1 GiB as for the KV below: H200 bf16 reads its
256 MB - 1 GiB weights at up to 4.34 TB/s against 4.25 past 1 GiB, and no L2 holds those.

**Decode attention cells** (aic_mixed.cold_rate, aic_attention.cold_cells): the KV of one
``kv_cache`` warmed and timed, taken no faster than the KV bytes at the fastest read over
>= :data:`COLD_BYTES` of KV.

The rate of both is :func:`read_rate`, read from the table itself: no constant is fitted.
What it assumes: a pass's weights exceed the L2 (every model the bundled runs price does).
"""

from __future__ import annotations

import functools

import numpy as np

from specbatch.simulator.cost.measured.aic_curves import load_curves

#: KV bytes past which no bundled GPU's L2 (<= 128 MB) holds a decode cell's KV.
COLD_BYTES = 2.0 ** 30
#: Weight bytes past which no bundled GPU's L2 holds a GEMM cell's weight: 2 x 128 MB, the
#: largest L2 the catalogue states (RTX PRO 6000; simulator.cost.gpus.catalogue).
COLD_WEIGHTS = 256e6


def read_rate(nbytes: np.ndarray, seconds: np.ndarray, above: float) -> float | None:
    """Bytes/s: the fastest read ``nbytes / seconds`` # [cells] among the cells of >=
    ``above`` bytes, or None where no cell is that large."""
    nbytes = np.asarray(nbytes, dtype=np.float64)
    big = nbytes >= above
    if not big.any():
        return None
    return float(np.max(nbytes[big] / np.asarray(seconds, dtype=np.float64)[big]))


def floored(seconds: np.ndarray, nbytes: np.ndarray, rate: float | None) -> np.ndarray:
    """``seconds`` # [cells] no faster than ``nbytes`` # [cells] at ``rate`` bytes/s (as they
    are where ``rate`` is None)."""
    seconds = np.asarray(seconds, dtype=np.float64)
    if rate is None:
        return seconds
    return np.maximum(seconds, np.asarray(nbytes, dtype=np.float64) / rate)


def weight_bytes(n, k, dtype: str) -> np.ndarray:
    """Weight bytes of GEMMs [n, k] at ``dtype`` (1 byte fp8, 2 bf16): n k e."""
    e = 1.0 if dtype == "fp8" else 2.0
    return np.asarray(n, dtype=np.float64) * np.asarray(k, dtype=np.float64) * e


@functools.lru_cache(maxsize=16)
def gemm_rate(system: str, dtype: str) -> float | None:
    """Bytes/s: :func:`read_rate` of ``system``'s ``dtype`` GEMM cells' weights over >=
    :data:`COLD_WEIGHTS` (all m), or None where the table has no such cell."""
    g = load_curves(system).get("gemm")
    if g is None:
        return None
    g = g[g["dtype"] == dtype]
    return read_rate(weight_bytes(g["n"], g["k"], dtype), g["latency_s"], COLD_WEIGHTS)


def cold_gemm(rows, rate: float | None, dtype: str):
    """GEMM rows (a frame with n, k, latency_s) at ``dtype`` with ``latency_s`` no faster
    than the weights at ``rate`` (:func:`floored`; the frame itself where ``rate`` is None)."""
    if rate is None:
        return rows
    return rows.assign(latency_s=floored(rows["latency_s"].to_numpy(np.float64),
                                         weight_bytes(rows["n"], rows["k"], dtype), rate))
