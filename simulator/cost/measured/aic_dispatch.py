"""Where vLLM's kernels switch along an op's row coordinate: the bucket edges of a curve.

A measured curve (simulator.cost.measured.aic_curve.Curve) interpolates between its grid
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
- **fp8 MoE, FlashInfer CUTLASS** (``FlashInferExperts``, the kernel AIConfigurator's
  collector/vllm/collect_moe.py records for ``ModelOptFp8Config`` on SM90: :data:`MOE_KERNEL`):
  vLLM's ``FlashInferExperts.apply`` (fused_moe/experts/flashinfer_cutlass_moe.py) calls
  FlashInfer's ``cutlass_fused_moe`` with no tactic; FlashInfer's ``AutoTuner.choose_one``
  (flashinfer/autotuner) outside an ``autotune()`` context returns the fallback tactic -1 on a
  cache miss, and nothing tunes in the collector (it never enters ``autotune``; vLLM tunes in
  its engine warm-up, kernel_warmup, which the collector does not run; FlashInfer bundles
  tuned tactics only for TRT-LLM-gen's MoE on B200 / GB200; FlashInfer read as stored at
  fb28d72, not the release vLLM 0.24 pins). Tactic -1 is the first profile
  (csrc/fused_moe/cutlass_backend/flashinfer_cutlass_fused_moe_binding.cu
  ``setRunnerProfiles``: ``mAllProfiles.front()`` for each GEMM), the first of
  ``MoeGemmRunner::getTmaWarpSpecializedConfigs`` (moe_gemm_template_dispatch.h: the un-swapped
  configs before the swap-AB copies) over cutlass_heuristic.cpp ``get_candidate_tiles_sm90``'s
  grouped-GEMM list, ``CtaShape128x16x128B`` in a 1x1x1 cluster: one tile config at every
  token count, its 128-row tiles along each expert's routed rows. A tile row starts past each
  multiple of 128 rows per expert; under the collector's balanced routing (helper.py
  ``balanced_logits``) an expert gets tokens * top_k / experts rows (global experts: under EP
  the local ones get the same), so the edges are floor(128 j E / k) tokens (:func:`moe_edges`).
  Triton ``fused_experts`` (bf16, fp8 block, L40S's tables) picks its config per token count
  too (``try_get_optimal_moe_config``: the tuned JSON's key nearest M, else
  ``get_default_config``), but its rows show no step there, the nearest-key switches lose on
  every group and its block rows gain on one group only (H200 block fp8) against losses on
  the others (benchmarks/aic_buckets.py): left unbucketed, as are SM100's TRT-LLM-gen and
  SM120's FlashInfer CUTLASS MoE rows (no step either).
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
#: The fp8 MoE kernel the MoE edges are of (the bundled fp8 MoE rows' kernel on H100 / H200).
MOE_KERNEL = "vllm_modeloptfp8moe_flashinfer_cutlass_flashinferexperts"
#: GPUs whose fp8 MoE rows run FlashInfer CUTLASS's SM90 default tactic (:func:`moe_edges`).
MOE_SM90 = ("h100_sxm", "h200_sxm")
#: Rows per expert of that tactic's tile (``CtaShape128x16x128B``: M along the routed rows).
MOE_TILE_ROWS = 128
#: GPUs whose custom all-reduce runs over full NVLink (SXM boards; GB200's tp 2 / 4 within one
#: NVLink compute tray, the GPU counts its table times: its rows step 7.0 -> 11.1 µs from 256
#: to 512 KiB at 4 GPUs, as B200's 8.6 -> 18.0).
FULL_NVLINK = ("a100_sxm", "h100_sxm", "h200_sxm", "b200_sxm", "gb200")
#: family -> how a row in a bucket past (or before) the bucket's last (first) grid point is
#: priced: "flat", that point's seconds (a GEMM bucket is a tile count: its time a step);
#: "slope", the log-log line through that point and the bucket's next one (an all-reduce's
#: time grows with the bytes within one kernel; a MoE bucket's with its routing). Chosen by
#: leaving each GPU out (benchmarks/aic_buckets.py).
EXTRAP = {"gemm": "flat", "allreduce": "slope", "moe": "slope"}
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


def moe_edges(key: tuple, top: float, tile: int = MOE_TILE_ROWS) -> tuple[int, ...]:
    """The FlashInfer CUTLASS MoE's bucket edges in tokens of the shape ``key`` = (hidden,
    inter, experts E, top_k k, tp, ep), up to ``top`` (the grid's last token count): the last
    token count of each tile-row count, floor(tile j E / k) for j = 1, 2, ... (an expert's
    tokens * k / E rows, at most tile j: module docstring)."""
    experts, topk = int(key[2]), int(key[3])
    out, j = [], 1
    while True:
        edge = tile * j * experts // topk
        out.append(edge)
        if edge >= top:
            return tuple(out)
        j += 1


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
    if family == "moe" and dtype == "fp8" and kernel == MOE_KERNEL and system in MOE_SM90:
        return lambda key, top: moe_edges(key, top)
    if family == "allreduce" and system in FULL_NVLINK:
        return lambda key, top: allreduce_edges(system, key)
    return None


def bucket(edges, x: float) -> int:
    """The bucket of row coordinate ``x``: the number of ``edges`` below it."""
    return bisect.bisect_left(edges, x)
