"""Where vLLM's kernels switch along an op's row coordinate: the bucket edges of a curve.

A measured curve (simulator.cost.measured.aic_ops.Curve) interpolates between its grid
points; where vLLM runs another kernel, or another tile count, on either side of a row count,
the timed seconds jump there, and an interpolation across the jump prices neither side. The
**edges** of a curve are the last row coordinate of each bucket (bucket of x = the number of
edges below x; one kernel and tile count a bucket); aic_ops never interpolates across one
(a row past its bucket's last grid point is priced by that point: :data:`EXTRAP`).
Derived from vLLM's source, never from the rows:

- **fp8 GEMM** (``CutlassFP8ScaledMMLinearKernel``: ``ops.cutlass_scaled_mm``, the kernel
  AIConfigurator's collector/vllm/collect_gemm.py records for ``Fp8Config`` per-tensor W8A8):
  - SM90 (H100, H200): csrc/quantization/w8a8/cutlass/c3x/scaled_mm_sm90_fp8_dispatch.cuh,
    ``cutlass_gemm_sm90_fp8_dispatch``: m <= 16, (16, 64], (64, 128] each one config holding
    its rows in one tile or cluster (A / B swapped below 64: 16-row tiles in a cluster of 4, or
    one 64-row tile; 64-row tiles in a cluster of 2); above, ``sm90_fp8_config_default``
    (TileShape M 128, ClusterShape M 2: the persistent scheduler rounds the tiles up to a
    cluster, one more 256-row cluster past each multiple of 256). Edges 16, 64, 128, 256 j.
    (One stored version adds ``sm90_fp8_config_M8192_K6144`` at m >= 8192, k >= 6144: no grid
    point lies between its edge and the 256-row one next to it; left out.)
  - SM89 (L40S): csrc/quantization/w8a8/cutlass/scaled_mm_c2x_sm89_fp8_dispatch.cuh,
    ``cutlass_gemm_sm89_fp8_dispatch``: mp2 = max(16, next_pow_2(m)) picks
    ``sm89_fp8_config_M16 / M32 / M64 / M128 / M256 / default``: edges 16, 32, 64, 128, 256;
    within a config a new threadblock tile row starts past each multiple of its TileShape M
    (CUTLASS 2.x, no clusters), which depends on np2 = next_pow_2(n): M256 64 rows where
    np2 <= 4096 (edge 192), else 128 (none inside); default 256 rows where 4096 < np2 <= 8192,
    else 128 (edges every tile above 256). M16-M128 keep one tile-row count throughout.
  - not SM100 (B200): neither its dispatch buckets (16, 64, 256) nor those and its tile rows
    improve the held-out error (benchmarks/aic_buckets.py); left unbucketed. SM120 (RTX PRO
    6000, within the target) not examined.
- **all-reduce** (elements of bf16, the collector's dtype): vLLM's custom all-reduce,
  csrc/custom_all_reduce.cuh ``CustomAllreduce::allreduce``, runs ``cross_device_reduce_1stage``
  at 2 GPUs and, over full NVLink, below 512 KiB at <= 4 GPUs and below 256 KiB at <= 8, else
  ``cross_device_reduce_2stage``: one edge at 4, 6 and 8 GPUs on the NVLink (SXM) systems of
  :data:`FULL_NVLINK`; without full NVLink (L40S, RTX PRO 6000) the kernel has no such switch.

Judged against the held-out error of the raw rows (benchmarks/aic_buckets.py, docs/fidelity.md
"Kernel buckets"), with nested cross-validation for what the code leaves open: which edges
per group (5 folds over its shapes), and per family how a row past its bucket's last grid
point is priced (:data:`EXTRAP`, each GPU left out).
"""

from __future__ import annotations

import bisect

#: The fp8 GEMM kernel the edges are of (the bundled fp8 rows' kernel on every GPU).
FP8_KERNEL = "CutlassFP8ScaledMMLinearKernel"
#: GPU -> the architecture of its fp8 dispatch the edges follow (others: none).
FP8_ARCH = {"h100_sxm": "sm90", "h200_sxm": "sm90", "l40s": "sm89"}
#: GPUs whose custom all-reduce runs over full NVLink (SXM boards; GB200's tp 2 / 4 within one
#: NVLink compute tray, the GPU counts its table times: its rows step 7.0 -> 11.1 µs from 256
#: to 512 KiB at 4 GPUs, as B200's 8.6 -> 18.0).
FULL_NVLINK = ("a100_sxm", "h100_sxm", "h200_sxm", "b200_sxm", "gb200")
#: family -> how a row in a bucket past (or before) the bucket's last (first) grid point is
#: priced: "flat", that point's seconds (a GEMM bucket is a tile count: its time a step);
#: "slope", the log-log line through that point and the bucket's next one (an all-reduce's
#: time grows with the bytes within one kernel). Chosen by leaving each GPU out
#: (benchmarks/aic_buckets.py).
EXTRAP = {"gemm": "flat", "allreduce": "slope"}
KIB = 1024


def next_pow_2(n: int) -> int:
    """vLLM's ``next_pow_2`` (its cutlass_extensions common.hpp): the least power of two >= n
    (n itself where it is one; 0 at 0)."""
    return 0 if n <= 0 else 1 << (int(n) - 1).bit_length()


def steps(start: int, tile: int, top: float) -> list[int]:
    """The multiples of ``tile`` above ``start`` up to ``top`` (a new tile row past each)."""
    first = (start // tile + 1) * tile
    return list(range(first, int(top) + tile, tile))


def fp8_edges(arch: str, n: int, top: float) -> tuple[int, ...]:
    """The fp8 GEMM's bucket edges in rows m (module docstring) at output width ``n``, up to
    ``top`` (the grid's last row)."""
    if arch == "sm90":
        return tuple([16, 64, 128, *steps(128, 256, top)])
    if arch == "sm89":
        np2 = next_pow_2(n)
        inner = [192] if np2 <= 4096 else []  # sm89_fp8_config_M256: 64-row tiles
        tile = 256 if 4096 < np2 <= 8192 else 128  # sm89_fp8_config_default
        return tuple([16, 32, 64, 128, *inner, 256, *steps(256, tile, top)])
    raise ValueError(f"no fp8 dispatch rule for {arch}")


def gemm_edges(system: str, dtype: str, kernel: str, key: tuple, top: float) -> tuple:
    """The bucket edges of the GEMM curve of shape ``key`` = (n, k) (() where none: bf16's
    cuBLAS heuristics, GPUs without a rule)."""
    arch = FP8_ARCH.get(system)
    if dtype != "fp8" or kernel != FP8_KERNEL or arch is None:
        return ()
    return fp8_edges(arch, int(key[0]), top)


def allreduce_edges(system: str, key: tuple) -> tuple:
    """The bucket edges in bf16 elements of the all-reduce over ``key`` = (GPUs,): the custom
    all-reduce's one-stage -> two-stage switch (bytes < threshold: one stage; the edge is the
    last element count below it)."""
    world = int(key[0])
    if system not in FULL_NVLINK or world <= 2:
        return ()
    threshold = 512 * KIB if world <= 4 else 256 * KIB
    return (threshold // 2 - 1,)


def edges_of(system: str, family: str, dtype: str, kernel: str):
    """(shape key, top) -> bucket edges of ``family``'s curves on ``system``, or None where no
    rule applies (every curve unbucketed)."""
    if family == "gemm" and dtype == "fp8" and kernel == FP8_KERNEL and system in FP8_ARCH:
        return lambda key, top: gemm_edges(system, dtype, kernel, key, top)
    if family == "allreduce" and system in FULL_NVLINK:
        return lambda key, top: allreduce_edges(system, key)
    return None


def bucket(edges, x: float) -> int:
    """The bucket of row coordinate ``x``: the number of ``edges`` below it."""
    return bisect.bisect_left(edges, x)
