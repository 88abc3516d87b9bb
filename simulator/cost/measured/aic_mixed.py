"""How vLLM's attention call runs a batch that mixes decodes and longer queries, per GPU,
and the measured cells that price it (simulator.cost.tabulated.grid_attention's modes).

**The backend vLLM picks** (:func:`backend`), from the GPU's compute capability and the KV
dtype, as vLLM decides it:

- ``vllm/platforms/cuda.py`` ``_get_backend_priorities``: compute capability 10.x lists
  FLASHINFER first, every other capability FLASH_ATTN first (FLASHINFER next);
- ``vllm/v1/attention/backends/fa_utils.py`` ``get_flash_attn_version``: FlashAttention 3 on
  9.x (Hopper), 2 elsewhere below 10.x;
- ``vllm/v1/attention/backends/flash_attn.py`` ``FlashAttentionImpl.__init__``: an fp8 KV
  cache needs ``flash_attn_supports_fp8()`` (FA3 only), so fp8 KV off Hopper falls to
  FLASHINFER.

The bundled AIConfigurator tables were timed with that same choice (their collector asks
``current_platform.get_attn_backend_cls``; ``collector/vllm/collect_attn.py``): FA3 on
H100 / H200, FlashInfer's TRT-LLM kernels on B200 / GB200, FA2 on A100 / L40S / RTX PRO 6000
bf16, FlashInfer on RTX PRO 6000 fp8 (tests pin the agreement).

**How each backend runs a mixed batch** (:func:`mixed_mode`):

- FA3 (``hopper/flash_api.cpp`` ``get_pack_gqa`` -> ``heuristics.h`` ``should_pack_gqa``:
  a varlen call always packs the query heads of a KV head; ``get_num_splits`` and
  ``flash_prepare_scheduler.cu`` ``prepare_varlen_num_blocks_kernel`` split the KV per request
  from the batch's total blocks): a decode keeps its path next to a chunk, one call, one
  floor: ONE_CALL.
- FlashInfer (``vllm/v1/attention/backends/flashinfer.py`` ``FlashInferImpl.forward``: the
  prefill tokens through the prefill wrapper / ``trtllm_batch_context_with_kv_cache``, the
  decode tokens through the decode wrapper / ``trtllm_batch_decode_with_kv_cache``): two
  launches, so a chunk beside decodes pays its own launch: TWO_LAUNCHES.
- FA2 (``csrc/flash_attn/flash_api.cpp`` ``mha_varlen_fwd`` of vllm-project/flash-attention):
  ``seqlenq_ngroups_swapped`` (the query heads of a KV head packed as one tile's rows) and
  ``set_params_splitkv``'s split-KV ("Only apply split-k for decoding") need
  ``max_seqlen_q == 1``; with any longer query the paged call runs
  ``run_mha_fwd_splitkv_dispatch`` (``flash_fwd_launch_template.h``) with one split over the
  grid (ceil(max q / 64), batch, query heads): one CTA per (request, query head) walking its
  whole cache with a 64-row tile. vLLM's own cascade heuristic states the same condition
  (``flash_attn.py`` ``use_cascade_attention``: FlashDecoding only when every query length is
  1). That call is what an MHA shape's decode times (no packing: ``num_heads > num_heads_k``
  fails; no split: the swap is off), so the AIConfigurator decode cells of the widest MHA
  shape of the head width, on a CTA axis, are the unpacked cells U: FA2_VARLEN
  (grid_attention states the law).

**Cold KV** (:func:`cold_rate`, aic_attention.grid_tables; the GEMM cells' like rule:
aic_cold): the collector times each decode
cell over the same KV cache it warmed on (``run_attention_torch``: 3 warm-up and 6 timed
runs of one ``kv_cache``), so a cell whose KV fits the L2 is read from the L2; in a serving
pass a layer's KV is read once, after the other layers' weights went through the L2. A
decode cell is taken as no faster than its KV bytes at the fastest rate the GPU's decode
cells reach over KV that no L2 holds (>= 1 GiB): on RTX PRO 6000 (128 MB of L2) this raises
the cells of 17 MB - 1 GB of KV (up to x2.2); on H100 / H200 / B200 / GB200 / A100 no cell
reads faster than that rate, so none moves.
"""

from __future__ import annotations

import functools

import numpy as np

from specbatch.simulator.cost.gpus.catalogue import GPUS, Gpu
from specbatch.simulator.cost.measured.aic_cells import attention_rows, shape_cells
from specbatch.simulator.cost.measured.aic_cold import COLD_BYTES, read_rate
from specbatch.simulator.cost.tabulated import ONE_CALL, TWO_LAUNCHES, fa2_mixed

#: Shared memory per SM by compute capability x 10 (CUDA C++ Programming Guide, technical
#: specifications per compute capability: maximum shared memory per SM).
SMEM_PER_SM = {80: 164 * 1024, 86: 100 * 1024, 87: 164 * 1024, 89: 100 * 1024,
               90: 228 * 1024, 100: 228 * 1024, 120: 100 * 1024}
#: FA2's split-KV kernel (flash_fwd_launch_template.h ``run_mha_fwd_splitkv_dispatch``):
#: 64 query rows per CTA, 4 warps; at most 2 CTAs per SM (flash_api.cpp
#: ``set_params_splitkv``: "multiply number of SMs by 2 ... 128 threads per block").
FA2_ROWS, FA2_MAX_CTAS_PER_SM = 64, 2


def fa2_block_n(head_dim: int) -> int:
    """FA2 split-KV kernel's KV rows per tile (``run_mha_fwd_splitkv_dispatch``: kBlockN =
    256 / 128 / 64 for head sizes <= 64 / <= 128 / larger)."""
    return 256 if head_dim <= 64 else (128 if head_dim <= 128 else 64)


def fa2_slots(gpu: Gpu, head_dim: int) -> int:
    """Resident CTAs of FA2's split-KV kernel: SMs x CTAs per SM, these the shared memory
    per SM over the kernel's (kernel_traits.h ``kSmemSize`` = the Q tile plus the K and V
    tiles, 2-byte elements: (64 + 2 kBlockN) d 2), at most :data:`FA2_MAX_CTAS_PER_SM`
    (RTX PRO 6000, d = 128: 100 KiB / 80 KiB -> 1 per SM, 188; A100: 2, 216)."""
    smem = SMEM_PER_SM.get(int(gpu.compute_capability))
    if smem is None:
        raise ValueError(f"{gpu.name}: no shared-memory size for capability "
                         f"{gpu.compute_capability}")
    per_cta = (FA2_ROWS + 2 * fa2_block_n(head_dim)) * head_dim * 2
    return gpu.sm_count * max(1, min(FA2_MAX_CTAS_PER_SM, smem // per_cta))


def backend(gpu: Gpu, kv_dtype: str) -> str:
    """"fa3", "fa2" or "flashinfer": vLLM's attention backend on ``gpu`` with a ``kv_dtype``
    ("bfloat16" or "fp8") cache (module docstring)."""
    major = int(gpu.compute_capability) // 10
    if major == 10:
        return "flashinfer"
    if major == 9:
        return "fa3"
    return "flashinfer" if kv_dtype == "fp8" else "fa2"


def gpu_of(system: str) -> Gpu:
    """The catalogue row of an AIConfigurator system (aic_import.AIC_PRESETS)."""
    from specbatch.simulator.cost.measured.aic_import import AIC_PRESETS

    return GPUS[AIC_PRESETS[system]]


@functools.lru_cache(maxsize=16)
def cold_rate(system: str, kv_dtype: str) -> float | None:
    """Bytes/s: the fastest KV read of ``system``'s decode cells over >= :data:`COLD_BYTES`
    of KV (B H_kv (c + 1) 2 d e bytes per cell; all head shapes), or None where no cell
    reaches that size (L40S)."""
    d, _ = attention_rows(system, kv_dtype)
    e = 1.0 if kv_dtype == "fp8" else 2.0
    kv = (d["batch"].to_numpy(np.float64) * d["kv_heads"].to_numpy(np.float64)
          * (d["context"].to_numpy(np.float64) + 1.0) * 2.0
          * d["head_dim"].to_numpy(np.float64) * e)
    return read_rate(kv, d["latency_s"].to_numpy(np.float64), COLD_BYTES)


def unpacked_cells(system: str, kv_dtype: str, head_dim: int) -> tuple | None:
    """U: (CTAs [nb], c [nc], seconds [nb, nc]) per layer, the decode cells of the timed MHA
    shape (H = H_kv) of width ``head_dim`` with the most heads (B x H CTAs, one per request
    and head), filled, cold and non-decreasing as aic_attention.grid_tables makes a decode
    grid; None where no MHA shape of the width spans a decode grid."""
    from specbatch.simulator.cost.measured.aic_attention import grid_tables

    mha = [k for k, v in shape_cells(system, kv_dtype).items()
           if k[0] == k[1] and k[2] == head_dim and v[0] is not None]
    if not mha:
        return None
    key = max(mha)
    (b, c, v), _ = grid_tables(shape_cells(system, kv_dtype)[key],
                               cold=cold_args(system, kv_dtype, key[1], head_dim))
    return b * key[0], c, v


def cold_args(system: str, kv_dtype: str, kv_heads: int, head_dim: int) -> tuple | None:
    """(KV bytes per token of all KV heads, :func:`cold_rate`) of aic_attention.grid_tables'
    ``cold``, or None where the GPU has no cold rate."""
    rate = cold_rate(system, kv_dtype)
    if rate is None:
        return None
    return 2.0 * kv_heads * head_dim * (1.0 if kv_dtype == "fp8" else 2.0), rate


def mixed_mode(system: str, kv_dtype: str, heads: int, kv_heads: int, head_dim: int,
               layers: int = 1) -> tuple[tuple, str]:
    """(pack_grid's ``mixed``, how): the mode of ``system``'s backend for this per-GPU head
    shape (module docstring), U's seconds over ``layers`` layers; FA2 with one query head per
    KV head has nothing to unpack (ONE_CALL), and where U or the L2 size is missing it is
    ONE_CALL, said in ``how``."""
    gpu = gpu_of(system)
    name = backend(gpu, kv_dtype)
    if name == "fa3":
        return (ONE_CALL,), "FA3: one call, packed"
    if name == "flashinfer":
        return (TWO_LAUNCHES,), "FlashInfer: a prefill and a decode launch"
    if heads <= kv_heads:
        return (ONE_CALL,), "FA2 with H = H_kv: nothing packed to lose"
    u = unpacked_cells(system, kv_dtype, head_dim)
    if u is None or gpu.l2_bytes is None:
        why = "no MHA decode grid" if u is None else "no L2 size in the catalogue"
        return (ONE_CALL,), f"FA2: mixed calls priced as one packed call ({why})"
    e = 1.0 if kv_dtype == "fp8" else 2.0
    return (fa2_mixed(fa2_slots(gpu, head_dim), gpu.l2_bytes, 2.0 * head_dim * e,
                      heads / kv_heads, heads, FA2_ROWS, (u[0], u[1], u[2] * layers)),
            "FA2: mixed calls unpacked and unsplit")
