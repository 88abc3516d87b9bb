"""The target's weight and KV-cache precision: vLLM's ``--quantization`` and ``--kv-cache-dtype``.

Every quantised format stores some weights in fewer bytes, which changes three things the
cost models price: the weights held in memory (what fits, and the KV capacity left next to
them), the bytes a pass streams (the decode pass's weight term) and, for W8A8 FP8, the GEMMs'
compute peak. Which weights are quantised follows vLLM's ``QuantizationConfig.get_quant_method``
of each method: every ``LinearBase`` layer (the decoder layers' attention and MLP projections,
shared experts) and ``FusedMoE`` layer (routed experts) is quantised; the embedding, the LM
head (``ParallelLMHead``, a ``VocabParallelEmbedding``), the norms and the MoE router (built
with ``quant_config=None`` in vLLM's qwen*_moe.py / mixtral.py / gpt_oss.py) stay at the
preset's ``dtype_bytes`` b. Per weight (P_lin = projection weights, P_exp = routed-expert
weights, :func:`weight_split`)::

    method  P_lin bytes              P_exp bytes   GEMM compute  vLLM (model_executor/layers/
                                                                 quantization/)
    none    b                        b             bf16 peak     (unquantised)
    fp8     1                        1             FP8 peak if   fp8.py Fp8Config.get_quant_method:
                                                   capability    Fp8LinearMethod / Fp8MoEMethod;
                                                   >= 8.9, else  W8A8 on capability >= 8.9, else
                                                   bf16          weight-only Marlin
                                                                 (Fp8LinearMethod.__init__
                                                                 use_marlin)
    awq     bits/8 + (2 + bits/8)/g  as P_lin      bf16 peak     awq.py
                                                                 AWQLinearMethod.create_weights:
                                                                 qweight (bits), qzeros (bits) and
                                                                 fp16 scales per group of g input
                                                                 weights
    gptq    bits/8 + (2 + bits/8)/g  as P_lin      bf16 peak     gptq.py
                                                                 GPTQLinearMethod.create_weights
                                                                 (the same three; g_idx's 4 bytes
                                                                 per input row, < 0.1 %, not
                                                                 counted)
    mxfp4   b                        1/2 + 1/32    bf16 peak     mxfp4.py
                                     (4.25 bits)                 Mxfp4Config.get_quant_method:
                                                                 LinearBase ->
                                                                 UnquantizedLinearMethod, FusedMoE
                                                                 -> Mxfp4MoEMethod (uint8 pairs of
                                                                 e2m1 + one e8m0 scale per 32
                                                                 weights)

with bits = 4, g = 128 by default (0.51953125 bytes per weight; g = -1, one group per input row:
bits/8; a symmetric checkpoint's zero points, 0.4 % at g = 128, are counted anyway). FP8's
per-tensor / per-channel / 128 x 128 block scales (<= 4 / 16384 bytes per weight for blocks) are not
counted. Weight-only kernels (Marlin, AWQ/GPTQ, MXFP4 on Hopper) dequantise on the fly, so their
FLOPs run at the bf16 peak and their dequantisation time is not priced; W8A8 FP8 runs every
quantised GEMM's FLOPs at the preset's ``fp8_peak_flops`` (datasheet) while attention and the LM
head stay at the bf16 peak::

    t_compute = F_16 / (peak · eff_c) + F_8 / (peak_fp8 · eff_c),
    F_8 = 2 (P_lin + M k 3 h I_e) Q / tp

``quantization = "none"`` (the default, vLLM's ``quantization=None``) takes the checkpoint's own
method (``ModelShape.quantization``, read from config.json by traces.models.hf_moe; "none" for
the registry shapes); any other value must match it: vLLM refuses a mismatch
(vllm/config/model.py, ``ModelConfig._verify_quantization``). On a 16-bit shape ``fp8`` is
vLLM's online FP8 (bf16 checkpoint quantised at load), and ``awq``/``gptq``/``mxfp4`` price the
shape's quantised checkpoint (bits 4, group 128). ``mxfp4`` needs a mixture-of-experts shape.

``kv_cache_dtype`` (vLLM's ``CacheConfig.cache_dtype``, vllm/config/cache.py ``CacheDType``):
"auto" stores K and V at the model dtype (b bytes); "fp8", "fp8_e4m3", "fp8_e5m2" at 1 byte
per element (vLLM's ``STR_DTYPE_TO_TORCH_DTYPE`` maps them to 1-byte dtypes), for the target's
and the draft's layers alike (one cache config per engine). It halves the KV bytes per token
of the capacity (memory_kv_tokens) and of the attention's KV reads and writes.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from specbatch.errors import SpecbatchError, require
from specbatch.simulator.cost.gpus.hardware import Hardware
from specbatch.traces.models.hf_moe import DEFAULT_QUANT_GROUP
from specbatch.traces.models.model_shape import ModelShape

#: ``quantization`` choices (vLLM's ``--quantization`` names; "none" = vLLM's None).
QUANTIZATIONS = ("none", "fp8", "awq", "gptq", "mxfp4")
#: ``kv_cache_dtype`` choices (vLLM's ``--kv-cache-dtype``, its CUDA subset).
KV_CACHE_DTYPES = ("auto", "fp8", "fp8_e4m3", "fp8_e5m2")
#: Bytes per KV element of the fp8 cache dtypes.
FP8_BYTES = 1
#: MXFP4: 4-bit e2m1 weights, one 1-byte e8m0 scale per block of 32 (OCP MX spec).
MXFP4_BLOCK = 32
MXFP4_BYTES = 4 / 8 + 1 / MXFP4_BLOCK
#: awq/gptq defaults when ``quantization`` is set on a 16-bit shape.
DEFAULT_INT_BITS = 4
#: Bytes of one group's scale (fp16).
SCALE_BYTES = 2


@dataclass(frozen=True)
class WeightFormat:
    """How one shape's weights are stored and multiplied (module docstring table)."""

    method: str
    linear_bytes: float  # bytes per decoder projection weight (P_lin)
    expert_bytes: float  # bytes per routed-expert weight (P_exp)
    w8a8: bool  # quantised GEMMs run on FP8 tensor cores

    @property
    def quantized(self) -> bool:
        return self.method != "none"


def int_weight_bytes(bits: int, group_size: int) -> float:
    """Bytes per awq/gptq weight: ``bits/8`` packed, plus per group of ``group_size`` input
    weights an fp16 scale and a ``bits``-bit zero point (-1: one group per row, not counted)."""
    if group_size == -1:
        return bits / 8
    return bits / 8 + (SCALE_BYTES + bits / 8) / group_size


def check_quantization(quantization: str, where: str = "quantization") -> str:
    """``quantization`` lower-cased, or a one-line error listing the choices."""
    name = str(quantization).lower()
    require(name in QUANTIZATIONS, f"{where} {quantization!r}: expected one of "
            f"{', '.join(QUANTIZATIONS)}")
    return name


def resolve_quantization(quantization: str, shape: ModelShape) -> ModelShape:
    """``shape`` with the method the target runs: the checkpoint's own for "none", else
    ``quantization``, which must agree with the checkpoint's (module docstring)."""
    knob = check_quantization(quantization)
    own = shape.quantization
    if knob == "none" or knob == own:
        resolved = shape
    elif own != "none":
        raise SpecbatchError(
            f"quantization {knob!r}: expected {own!r} or none (model {shape.name}'s "
            f"config.json quantization_config.quant_method is {own!r}; vLLM refuses the "
            "mismatch in ModelConfig._verify_quantization)")
    elif knob in ("awq", "gptq"):
        resolved = dataclasses.replace(shape, quantization=knob, quant_bits=DEFAULT_INT_BITS,
                                       quant_group_size=DEFAULT_QUANT_GROUP)
    else:
        resolved = dataclasses.replace(shape, quantization=knob)
    if resolved.quantization == "mxfp4":
        require(resolved.is_moe, f"quantization 'mxfp4': expected a mixture-of-experts model "
                f"(vLLM's Mxfp4Config quantises only FusedMoE experts), got {shape.name}")
    return resolved


def weight_format(shape: ModelShape, hw: Hardware) -> WeightFormat:
    """The :class:`WeightFormat` of ``shape``'s (resolved) method on ``hw``."""
    b = float(hw.dtype_bytes)
    method = shape.quantization
    if method == "none":
        return WeightFormat("none", b, b, False)
    if method == "fp8":
        return WeightFormat("fp8", 1.0, 1.0, hw.fp8_tensor_cores)
    if method in ("awq", "gptq"):
        per = int_weight_bytes(shape.quant_bits, shape.quant_group_size)
        return WeightFormat(method, per, per, False)
    if method == "mxfp4":
        return WeightFormat("mxfp4", b, MXFP4_BYTES, False)
    raise SpecbatchError(f"model {shape.name}: quantization {method!r}: expected one of "
                         f"{', '.join(QUANTIZATIONS)}")


def kv_element_bytes(kv_cache_dtype: str, hw: Hardware) -> int:
    """Bytes per KV element: the preset's dtype for "auto", 1 for the fp8 dtypes."""
    name = str(kv_cache_dtype).lower()
    require(name in KV_CACHE_DTYPES, f"kv_cache_dtype {kv_cache_dtype!r}: expected one of "
            f"{', '.join(KV_CACHE_DTYPES)}")
    return int(hw.dtype_bytes) if name == "auto" else FP8_BYTES


def norm_params(shape: ModelShape) -> int:
    """Norm weights of the decoder layers: 2 h per layer, plus MLA's q_a and kv_a norms."""
    per_layer = 2 * shape.hidden
    if shape.is_mla:
        per_layer += shape.q_lora_rank + shape.kv_lora_rank
    return shape.layers * per_layer


def weight_split(shape: ModelShape) -> tuple[int, int, int]:
    """(16-bit, P_lin, P_exp) parameters of ``shape``: embeddings + head + norms + routers;
    the decoder projections (attention, dense and shared MLPs); the routed experts. They sum
    to ``shape.params``."""
    M = shape.moe_layers if shape.is_moe else 0
    router = M * shape.experts * shape.hidden
    experts = M * shape.experts * shape.expert_params
    sixteen = shape.embedding_params + norm_params(shape) + router
    return sixteen, shape.params - sixteen - experts, experts


def held_weight_bytes(shape: ModelShape, hw: Hardware) -> float:
    """Bytes ``shape``'s weights take in memory in its (resolved) format."""
    fmt = weight_format(shape, hw)
    if not fmt.quantized:
        return float(hw.dtype_bytes * shape.params)
    sixteen, linear, experts = weight_split(shape)
    return float(hw.dtype_bytes * sixteen + fmt.linear_bytes * linear
                 + fmt.expert_bytes * experts)


def quantize_constants(consts, shape: ModelShape, hw: Hardware, tp: int):
    """The roofline's :class:`~simulator.cost.analytic.roofline.PassConstants` of a 16-bit ``shape``
    re-priced in its format (module docstring): the streamed weights (16-bit part b (norms +
    routers + h V + h), P_lin at its bytes), the experts' bytes, and under W8A8 the quantised
    GEMMs' FLOPs moved to the FP8 peak."""
    fmt = weight_format(shape, hw)
    if not fmt.quantized:
        return consts
    b = hw.dtype_bytes
    M = shape.moe_layers if shape.is_moe else 0
    _, linear, _ = weight_split(shape)
    streamed16 = (norm_params(shape) + M * shape.experts * shape.hidden
                  + shape.hidden * shape.vocab + shape.hidden)
    changes = {"weight_bytes": (b * streamed16 + fmt.linear_bytes * linear) / tp}
    if M:
        changes["expert_bytes"] = fmt.expert_bytes * M * shape.expert_params / tp
    if fmt.w8a8:
        active8 = linear + M * shape.top_k * shape.expert_params
        changes["flops_per_token"] = 2.0 * (shape.active_decoder_params - active8
                                            + shape.hidden * shape.vocab) / tp
        changes["fp8_flops_per_token"] = 2.0 * active8 / tp
        changes["inv_compute_fp8"] = 1.0 / (hw.fp8_peak_flops * hw.compute_eff)
    return dataclasses.replace(consts, **changes)


def describe(shape: ModelShape, kv_cache_dtype: str, hw: Hardware) -> str:
    """One phrase naming the target's precision, e.g. "fp8 W8A8, fp8 KV cache"."""
    fmt = weight_format(shape, hw)
    parts = []
    if fmt.method == "fp8":
        parts.append("fp8 W8A8" if fmt.w8a8 else "fp8 weight-only (Marlin)")
    elif fmt.method in ("awq", "gptq"):
        parts.append(f"{fmt.method} {shape.quant_bits}-bit g{shape.quant_group_size}")
    elif fmt.method == "mxfp4":
        parts.append("mxfp4 experts")
    if str(kv_cache_dtype).lower() != "auto":
        parts.append(f"{kv_cache_dtype} KV cache")
    return ", ".join(parts)

