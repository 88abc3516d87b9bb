"""Which bundled MoE rows time a checkpoint's routed experts: the kernel vLLM runs for its
weight format and scale scheme on the GPU, or why no row does.

AIConfigurator's collector (collector/vllm/collect_moe.py) builds the quantisation method a
checkpoint names and records the experts class vLLM selected, so a row group times one kernel.
vLLM picks that kernel per weight format from an ordered backend list whose first supported
class runs (``select_fp8_moe_backend``, ``select_mxfp4_moe_backend``: below); on Blackwell
the block fp8 class follows the model's routing method (:data:`MONOLITHIC`). A checkpoint is
priced from a row group only where that pick is the group's kernel; elsewhere the reason is
given in one line (:func:`moe_dtype`), and aic_cost.aic_covers refuses the model with it.
"""

from __future__ import annotations

from dataclasses import dataclass

from specbatch.traces.models.model_shape import ModelShape

#: The weight formats priced (the target's ``--quantization``) -> the GEMM / MoE table dtype.
#: mxfp4 (gpt-oss): vLLM's ``Mxfp4Config.get_quant_method`` gives every ``LinearBase``
#: ``UnquantizedLinearMethod`` (the checkpoint's ``modules_to_not_convert`` also names
#: attention, router, embedding and LM head): the dense GEMMs are bf16, the experts
#: ``w4a16_mxfp4`` (:data:`MXFP4_MOE`).
GEMM_DTYPE = {"none": "bfloat16", "fp8": "fp8", "mxfp4": "bfloat16"}
#: The MoE table dtype of MXFP4 experts (OCP MXFP4 weights, bf16 activations).
MXFP4_MOE = "w4a16_mxfp4"


@dataclass(frozen=True)
class TimedFp8Moe:
    """A bundled fp8 MoE row group that times the kernel vLLM runs for one checkpoint scale
    scheme: the rows of MoE table ``dtype`` whose kernel name holds ``kernel`` price a
    :class:`ModelShape` ``quant_scheme`` of ``scheme`` on a GPU of compute ``capability``
    (x 10, as vLLM's ``is_device_capability``; 0: on any GPU whose table holds them), for a
    ``moe_routing`` in ``routings`` (empty: any), with ``timed_only`` at a timed shape only."""

    dtype: str
    kernel: str
    scheme: str
    capability: int = 0
    routings: tuple = ()  # the ModelShape.moe_routing values it prices (): any
    timed_only: bool = False  # admits a MoE only at a timed (hidden, width, experts, top-k)
    transfer: str = ""  # the scheme the rows measure, where ``scheme`` is a kernel-identity
    # transfer from them (:func:`ptpc_kernel`); "": the rows measure ``scheme`` itself


#: The fp8 MoE rows that time vLLM's kernel for a scale scheme (vLLM 0.24's
#: ``select_fp8_moe_backend``, vllm/model_executor/layers/fused_moe/oracle/fp8.py, walks
#: ``_get_priority_backends`` and takes the first experts class whose ``is_supported_config``
#: passes). "modelopt": AIConfigurator times ``ModelOptFp8MoEMethod``, which asks for
#: per-tensor weights and static per-tensor activations (``kFp8StaticTensorSym`` both); on
#: Hopper only that pair (and 128-block) passes ``FlashInferExperts._supports_quant_scheme``
#: (fused_moe/experts/flashinfer_cutlass_moe.py), so dynamic activations (``Fp8Config``'s
#: default and the online ``--quantization fp8``: ``kFp8DynamicTensorSym``) and ptpc
#: (``kFp8StaticChannelSym``, ``kFp8DynamicTokenSym``) fall to Triton / vLLM CUTLASS: kernels
#: these rows never time. "fp8moe_triton": block fp8 (``Fp8Config`` with ``weight_block_size``:
#: ``kFp8Static128BlockSym`` weights, ``kFp8Dynamic128Sym`` activations) runs
#: ``TritonExperts`` on compute capability 9.0 without expert parallelism
#: (``_get_priority_backends`` moves TRITON to the front there, FLASHINFER_CUTLASS with EP;
#: vllm issue 34249), the fp8_block rows aic_curves keeps on H100 / H200; Blackwell runs
#: Block fp8 on Blackwell (compute capability family 100): ``_get_priority_backends`` puts
#: FLASHINFER_TRTLLM first (AITER is ROCm's), whose ``backend_to_kernel_cls`` is
#: [``TrtLlmFp8ExpertsMonolithic``, ``TrtLlmFp8ExpertsModular``] (experts/trtllm_fp8_moe.py):
#: the monolithic class, which routes inside the kernel, passes ``is_supported_config`` only for
#: the routing methods its ``_supports_routing_method`` lists for (``kFp8Static128BlockSym``,
#: ``kFp8Dynamic128Sym``), these (ModelShape.moe_routing names); any other (Llama-4's custom
#: router, DeepSeek-V4's sqrtsoftplus, softmax without renormalisation: "default") falls to the
#: modular class, which takes vLLM's routed top-k. No environment knob changes this by default
#: (``VLLM_USE_FLASHINFER_MOE_FP8`` / ``VLLM_FLASHINFER_MOE_BACKEND`` unset, ``moe_backend``
#: auto). AIConfigurator's 0.24.0 B200 (and GB200) rows agree model by model: monolithic at
#: Qwen3 / Qwen3.5 / Mixtral / DeepSeek-V3 / Kimi-K2 / GLM-5 / MiMo-V2 / MiniMax-M2 shapes,
#: modular at Llama-4 Scout / Maverick and DeepSeek-V4 Flash / Pro (collector/vllm/collect_moe.py
#: ``_resolve_moe_runtime_config`` builds each model's FusedMoE routing from its config).
MONOLITHIC = ("renormalize", "deepseek_v3", "minimax2", "sigmoid_renorm", "sigmoid")
#: FlashInfer TRT-LLM's block kernels, by routing method (:data:`MONOLITHIC`). A GPU whose fp8
#: rows are of a kernel no measured entry names (L40S's generic ``vllm_fused_moe``) is not told
#: apart. ptpc: :func:`ptpc_kernel` (L40S only, a kernel-identity transfer).
FP8_MOE_TIMED = (TimedFp8Moe("fp8", "modelopt", "static"),
                 TimedFp8Moe("fp8", "vllm_fused_moe", "channel", 89, transfer="static"),
                 TimedFp8Moe("fp8_block", "fp8moe_triton_tritonexperts", "block", 90),
                 TimedFp8Moe("fp8_block", "trtllmfp8expertsmonolithic", "block", 100,
                             MONOLITHIC, True),
                 TimedFp8Moe("fp8_block_modular", "trtllmfp8expertsmodular", "block", 100,
                             ("default", "llama4", "deepseek_v4", "unspecified"), True))
#: What vLLM runs for ptpc experts (:func:`ptpc_kernel`).
PTPC_KERNELS = {"cutlass": "its CUTLASS grouped GEMM (CutlassExpertsFp8)",
                "triton": "Triton fused_moe_kernel with per-channel scales (TritonExperts)",
                "marlin": "Marlin's weight-only fp8 kernel (MarlinExperts)"}
#: vLLM 0.24's MXFP4 experts kernel per GPU, as fragments of AIConfigurator's kernel names.
#: ``select_mxfp4_moe_backend`` (vllm/model_executor/layers/fused_moe/oracle/mxfp4.py, the
#: gpt-oss copy oracle/gpt_oss_mxfp4.py; before, quantization/mxfp4.py ``get_mxfp4_backend``
#: chose the same) walks ``_get_priority_backends`` (FLASHINFER_TRTLLM_MXFP4_BF16, CK, TRITON,
#: FLASHINFER_CUTLASS_MXFP4_BF16, TRITON_UNFUSED, MARLIN, ...) and takes the first experts
#: class whose ``is_supported_config`` passes, unless VLLM_USE_FLASHINFER_MOE_MXFP4_BF16 /
#: _MXFP8 / _MXFP8_CUTLASS or VLLM_MXFP4_USE_MARLIN is set (all unset by default, envs.py):
#: ``TrtLlmMxfp4ExpertsMonolithic`` needs compute capability family 100 (B200,
#: GB200); the OAI Triton
#: classes ``(9, 0) <= capability < (11, 0)`` (``_triton_kernel_moe_supports_current_device``,
#: gpt_oss_triton_kernels_moe.py): Hopper; ``FlashInferExperts`` 9.0 or family 100; CK is ROCm;
#: anything else (Ampere, Ada, SM120 RTX PRO 6000) falls to ``MarlinExperts``.
#: AIConfigurator's collector (collector/vllm/collect_moe.py) builds ``Mxfp4Config()`` with no
#: backend forced and records the class vLLM selected; its rows agree on every GPU that has them.
MXFP4_KERNELS = {"trtllm": "flashinfer_trtllm_mxfp4_bf16_trtllmmxfp4expertsmonolithic",
                 "triton": "triton_oaitritonmxfp4expertsmonolithic",
                 "marlin": "marlin_marlinexperts"}
#: ``quant_scheme`` -> the words a refusal names it by.
FP8_SCHEMES = {"": "per-tensor weights with dynamic activation scales (vLLM's Fp8Config "
                   "default, the --quantization fp8 knob)",
               "static": "per-tensor weights and static per-tensor activation scales",
               "channel": "per-channel weights (ptpc)", "block": "block-quantised weights",
               "mixed": "compressed-tensors groups of different schemes"}


def ptpc_kernel(capability: int) -> str:
    """The experts kernel vLLM runs for a ptpc MoE (compressed-tensors FP8-dynamic) at tp on a
    GPU of compute ``capability`` (x 10; :data:`PTPC_KERNELS`), and why only L40S prices it.

    ``CompressedTensorsW8A8Fp8MoEMethod`` keys ``kFp8StaticChannelSym`` weights and
    ``kFp8DynamicTokenSym`` activations and calls ``select_fp8_moe_backend`` with
    ``allow_vllm_cutlass=True`` (vLLM 0.15.1 and 0.34.0 alike). No Hopper block move applies;
    FLASHINFER_TRTLLM (family 100, block / per-tensor only), FLASHINFER_CUTLASS
    (``_supports_quant_scheme``: per-tensor static, 128-block on 9.0, nvfp4) and DEEPGEMM
    (``TritonOrDeepGemmExperts``: block only) refuse it, so VLLM_CUTLASS's
    ``TritonOrCutlassExperts`` runs wherever ``cutlass_group_gemm_supported`` (9.0 to 10.x):
    ``CutlassExpertsFp8`` at every batch on H100 / H200, above 8 tokens on B200 (Triton at
    <= 8). No bundled table times it: Hopper's ``fp8_block`` rows are Triton, and
    AIConfigurator's Triton block rows run a median 13 % (p90 41 %) above its Triton
    per-tensor rows on H100 (0.19.0) and H200 (0.22.0): block scales are no few-% proxy for
    per-channel there either. L40S (8.9) and RTX PRO 6000 (12.0) run ``TritonExperts``:
    ``fused_moe_kernel`` with ``use_fp8_w8a8`` and ``per_channel_quant``, whose K loop is
    per-tensor's (``tl.dot`` into an fp32 accumulator, no scale inside, unlike block's
    per-K-step scale loads), whose scales enter once per output tile after it (a BLOCK_N
    column and a BLOCK_M token vector, not two scalars), and whose tile configuration is
    per-tensor's (``config_name`` "fp8_w8a8", ``block_shape`` None). The one other difference
    is outside the kernel: the activations' per-token dynamic scale (one more read of each
    row) against a static one, a few % at most at a 2048-token prefill, nothing at a decode.
    So L40S's fp8 rows (AIConfigurator 0.22.0's Triton ``fused_experts`` with per-expert
    weight and one static activation scale) price ptpc there: a kernel-identity transfer, not
    a measurement of ptpc. RTX PRO 6000's fp8 rows are FlashInfer CUTLASS: refused. Below 8.9
    (no fp8 tensor cores: ``TritonExperts`` takes no fp8 scheme there) MARLIN runs it."""
    if 90 <= int(capability) < 110:
        return PTPC_KERNELS["cutlass"]
    return PTPC_KERNELS["triton" if int(capability) >= 89 else "marlin"]


def moe_transfer(shape: ModelShape, capability: int) -> str:
    """"" where an admitted MoE's rows measure its own scale scheme, else the note its source
    carries: the :data:`FP8_MOE_TIMED` entry that prices it is a kernel-identity transfer
    (ptpc on L40S: :func:`ptpc_kernel`)."""
    t = next((t for t in FP8_MOE_TIMED if t.transfer and shape.quantization == "fp8"
              and t.scheme == shape.quant_scheme and t.capability in (0, int(capability))),
             None)
    return "" if t is None else (f"{FP8_SCHEMES[t.scheme]} priced from the {t.dtype} rows of "
                                 f"{FP8_SCHEMES[t.transfer]} by kernel identity (one Triton "
                                 "kernel, the scales applied after the K loop), not measured")


def experts_key(shape: ModelShape) -> list[int]:
    """(hidden, expert width, experts, top-k): the coordinates a MoE row times ``shape``'s
    routed experts at, as the curves' ``moe_shapes`` lists them."""
    return [shape.hidden, shape.expert_intermediate, shape.experts, shape.top_k]


def timed_experts(curves: dict, dtype: str) -> tuple[list, str]:
    """(the experts shapes the GPU's ``dtype`` MoE rows time, the same as text)."""
    timed = curves.get("moe_shapes", {}).get(dtype, [])
    return timed, ", ".join(map(str, map(tuple, timed)))


def moe_dtype(curves: dict, shape: ModelShape, quant: str,
              capability: int) -> tuple[str, str | None]:
    """(the MoE table dtype ``shape``'s routed experts are priced from under weight format
    ``quant`` (a key of :data:`GEMM_DTYPE`) on a GPU of compute ``capability`` whose
    :func:`coverage_of` is ``curves``, None), or ("", why no bundled row times vLLM's kernel
    for them): an fp8 MoE by its scale scheme (:func:`fp8_moe_rows`), MXFP4 experts by
    :func:`mxfp4_moe_rows`, any other at its GEMM dtype."""
    if quant == "mxfp4":
        return mxfp4_moe_rows(curves, shape, capability)
    dtype = GEMM_DTYPE[quant]
    if dtype != "fp8":
        return dtype, None
    scheme = shape.quant_scheme if shape.quantization == "fp8" else ""
    return fp8_moe_rows(curves, shape, scheme, capability)


def mxfp4_kernel(capability: int) -> str:
    """The fragment of the name of the MXFP4 experts kernel vLLM runs by default on a GPU of
    compute ``capability`` (x 10; :data:`MXFP4_KERNELS`)."""
    if capability // 10 == 10:
        return MXFP4_KERNELS["trtllm"]
    if 90 <= capability < 110:
        return MXFP4_KERNELS["triton"]
    return MXFP4_KERNELS["marlin"]


def mxfp4_moe_rows(curves: dict, shape: ModelShape,
                   capability: int) -> tuple[str, str | None]:
    """(:data:`MXFP4_MOE`, None) when the GPU's curves (:func:`coverage_of`) hold MXFP4 MoE
    rows of the kernel vLLM runs there (:func:`mxfp4_kernel`) at ``shape``'s experts (hidden,
    expert width, experts, top-k), else ("", why not)."""
    want = mxfp4_kernel(int(capability))
    kernel = curves.get("moe_kernels", {}).get(MXFP4_MOE, "")
    if not kernel:
        return "", f"MXFP4 experts: no {MXFP4_MOE} MoE rows (vLLM runs {want} here)"
    if want not in kernel:
        return "", (f"MXFP4 experts: the {MXFP4_MOE} rows time {kernel}, not {want}, the "
                    f"kernel vLLM's select_mxfp4_moe_backend picks on compute capability "
                    f"{capability / 10:.1f}")
    key = experts_key(shape)
    timed, text = timed_experts(curves, MXFP4_MOE)
    if key not in timed:
        return "", (f"MXFP4 experts (hidden, width, experts, top-k) {tuple(key)}: the "
                    f"{MXFP4_MOE} rows time gpt-oss's {text} only")
    return MXFP4_MOE, None


def fp8_moe_rows(curves: dict, shape: ModelShape, scheme: str,
                 capability: int) -> tuple[str, str | None]:
    """(the MoE table dtype ``shape``'s fp8 experts of ``scheme`` are priced from, None) on a
    GPU of compute ``capability`` whose curves are ``curves`` (:func:`coverage_of`): the first
    :data:`FP8_MOE_TIMED` entry of that scheme and the shape's routing the GPU holds (one that
    is ``timed_only``: at a timed shape, else ("", why)); else its fp8 rows where their kernel
    is not told apart (:func:`fp8_moe_gap`); else ("", :func:`fp8_moe_gap`'s reason)."""
    kernels = curves.get("moe_kernels", {})
    for t in FP8_MOE_TIMED:
        if (t.scheme == scheme and t.kernel in kernels.get(t.dtype, "")
                and t.capability in (0, int(capability))
                and (not t.routings or shape.moe_routing in t.routings)):
            key = experts_key(shape)
            timed, text = timed_experts(curves, t.dtype)
            if t.timed_only and key not in timed:
                return "", (f"fp8 MoE experts of {FP8_SCHEMES[scheme]}, routing "
                            f"{shape.moe_routing or 'unknown'}: vLLM runs "
                            f"{kernels[t.dtype]} on compute capability {capability / 10:.1f}, "
                            f"whose {t.dtype} rows time (hidden, width, experts, top-k) "
                            f"{text}, not {tuple(key)}")
            return t.dtype, None
    routed = [t for t in FP8_MOE_TIMED if t.routings and t.scheme == scheme
              and t.kernel in kernels.get(t.dtype, "") and t.capability == int(capability)]
    if routed:
        return "", (f"fp8 MoE experts of {FP8_SCHEMES[scheme]}: routing "
                    f"{shape.moe_routing or 'not read'}, none of the routings whose vLLM class "
                    f"the {', '.join(t.dtype for t in routed)} rows time "
                    f"({', '.join(r for t in routed for r in t.routings)})")
    reason = fp8_moe_gap(kernels.get("fp8", ""), scheme)
    if reason is not None and scheme == "channel":
        reason += (f"; vLLM runs {ptpc_kernel(capability)} for it on compute capability "
                   f"{capability / 10:.1f}, a kernel no bundled row of this GPU times")
    return ("fp8", None) if reason is None else ("", reason)


def fp8_moe_gap(kernel: str, scheme: str) -> str | None:
    """None when the fp8 MoE rows of ``kernel`` time an fp8 checkpoint of ``scheme``
    (:data:`FP8_MOE_TIMED`'s measured entries; a kernel none names is not told apart), else why
    not, with the rows that price ``scheme`` where some do (a transfer's marked so)."""
    timed = next((t for t in FP8_MOE_TIMED
                  if t.dtype == "fp8" and not t.transfer and t.kernel in kernel), None)
    if timed is None or timed.scheme == scheme:
        return None
    where = [f"{t.dtype} rows of {t.kernel}" + (f" on compute capability "
                                                   f"{t.capability / 10:.1f} only"
                                                   if t.capability else "")
             + (f", transferred from {t.transfer}" if t.transfer else "")
             for t in FP8_MOE_TIMED if t.scheme == scheme and (t.dtype != "fp8" or t.transfer)]
    return (f"fp8 MoE experts of {FP8_SCHEMES.get(scheme, f'scheme {scheme!r}')}: the fp8 "
            f"MoE rows time {kernel} ({FP8_SCHEMES[timed.scheme]}), a backend vLLM's "
            "select_fp8_moe_backend picks only for that scheme"
            + (f" (priced from {', '.join(where)})" if where else ""))
