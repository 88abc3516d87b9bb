"""What fits on the GPUs: the KV-cache tokens left next to the models' weights.

vLLM sizes its KV cache from what its memory profiling leaves: ``tp · M · u`` (each GPU's
memory M at ``gpu_memory_utilization`` u) less the weights, divided by the KV bytes one token
takes in every layer of the target and the draft. Weights are held in their formats (a
quantised draft's projections, a quantised target: simulator.cost.analytic.precision), the KV at
``kv_cache_dtype``'s bytes; a model with sliding-window layers under vLLM V1's hybrid KV cache
manager gets a pool of blocks shared by its KV cache groups (simulator.cost.analytic.kv_groups).
Activation workspace is ignored. The roofline and calibrated cost models answer
``kv_capacity_tokens`` from here; :func:`check_weights_fit` refuses a run whose
weights alone do not fit, in any KV mode.
"""

from __future__ import annotations

from specbatch.errors import SpecbatchError
from specbatch.simulator.cost.analytic.kv_groups import kv_layout
from specbatch.simulator.cost.analytic.precision import (
    held_weight_bytes,
    kv_element_bytes,
    resolve_quantization,
)
from specbatch.simulator.cost.gpus.catalogue import GIGA
from specbatch.simulator.cost.gpus.hardware import (
    FULL_WEIGHT_BITS,
    Hardware,
    check_weight_bits,
    get_hardware,
    model_weight_bytes,
    weight_bytes,
)
from specbatch.traces.models.model_shape import ModelShape
from specbatch.traces.models.shapes import find_shape, get_shape


def kv_capacity_tokens(hardware: str = "h100", target: str = "vicuna-33b",
                       draft: str = "vicuna-68m", tp: int = 1,
                       gpu_memory_utilization: float = 0.9,
                       draft_weight_bits: int = FULL_WEIGHT_BITS) -> int:
    """KV-cache tokens that fit next to the weights: (tp·M·u − W_target − W_draft) / kv bytes.

    ``M`` is one GPU's memory, ``u`` vLLM's ``gpu_memory_utilization``; each cached token needs
    the target's and the draft's KV (bf16). Activation workspace is ignored. Returns 0 when the
    weights alone do not fit (e.g. Vicuna-33B, 65 GB, leaves ~4k tokens on one 80 GB H100).
    ``draft_weight_bits`` < 16 counts a quantised draft's weights (module docstring).
    """
    return memory_kv_tokens(get_hardware(hardware), get_shape(target), get_shape(draft), tp,
                            gpu_memory_utilization, check_weight_bits(draft_weight_bits))


def memory_kv_tokens(hw: Hardware, target: ModelShape, draft: ModelShape | None, tp: int,
                     gpu_memory_utilization: float,
                     draft_weight_bits: int = FULL_WEIGHT_BITS,
                     kv_cache_dtype: str = "auto", block_size: int = 16,
                     disable_hybrid_kv_cache_manager: bool = False) -> int:
    """:func:`kv_capacity_tokens` of a preset and two shapes (what :class:`RooflineCost` uses);
    ``draft`` None: a drafter without weights or KV (simulator.cost.features.free_draft); the
    draft's weights at ``draft_weight_bits`` (:func:`hardware.model_weight_bytes`); a shape with a
    ``quantization`` at its format's bytes and the KV at ``kv_cache_dtype``'s bytes
    (simulator.cost.analytic.precision).

    A model with sliding-window layers under vLLM V1's hybrid KV cache manager (unless
    ``disable_hybrid_kv_cache_manager``; simulator.cost.analytic.kv_groups): the pool's
    num_blocks = free // (bytes of one pool block) blocks of ``block_size`` tokens, returned
    as num_blocks · block_size tokens, which each request draws on once per KV cache group
    (simulator.engine.kv); models without windows keep the per-token count below."""
    b = hw.dtype_bytes
    models = (target,) if draft is None else (target, draft)
    if any(m.quantization != "none" for m in models):
        weights = held_weight_bytes(target, hw) + (
            0.0 if draft is None else model_weight_bytes(draft, b, draft_weight_bits)
            if draft.quantization == "none" else held_weight_bytes(draft, hw))
    elif draft is None or draft_weight_bits >= FULL_WEIGHT_BITS:
        weights = b * sum(m.params for m in models)
    else:
        weights = b * target.params + model_weight_bytes(draft, b, draft_weight_bits)
    free = tp * hw.memory_bytes * gpu_memory_utilization - weights
    kv_b = kv_element_bytes(kv_cache_dtype, hw)
    if target.is_windowed or (draft is not None and draft.is_windowed):
        layout = kv_layout(target, draft, kv_b, block_size, disable_hybrid_kv_cache_manager)
        if layout.hybrid:
            return layout.num_blocks(free) * int(block_size)
    # an MLA target's latent cache is replicated on each of its tp GPUs
    per_token = sum(m.kv_bytes_per_token(kv_b) * (tp if m.is_mla and m is target else 1)
                    for m in models)
    return max(0, int(free // per_token))


def weights_shortfall(hardware: str, target: str, draft: str, tp: int,
                      gpu_memory_utilization: float,
                      draft_weight_bits: int = FULL_WEIGHT_BITS,
                      quantization: str = "none") -> str | None:
    """Why the target's and draft's weights alone exceed what ``tp`` devices of ``hardware``
    give the engine (``tp · M · gpu_memory_utilization``), or None when they fit. Both
    models' weights are counted against the memory of all ``tp`` devices, as the KV capacity
    counts them; the draft's at ``draft_weight_bits`` (:func:`hardware.model_weight_bytes`), the
    target's in its ``quantization`` (simulator.cost.analytic.precision)."""
    hw = get_hardware(hardware)
    bits = None if draft_weight_bits >= FULL_WEIGHT_BITS else (FULL_WEIGHT_BITS,
                                                               draft_weight_bits)
    quantized = quantized_weights(hw, target, draft, draft_weight_bits, quantization)
    need = weight_bytes(hw, (target, draft), bits) if quantized is None else quantized[0]
    have = tp * hw.memory_bytes * float(gpu_memory_utilization)
    if need <= have:
        return None
    least = int(-(-need // (hw.memory_bytes * float(gpu_memory_utilization))))
    precision = (quantized[1] if quantized is not None else
                 f"{hw.dtype_bytes} bytes per parameter" if bits is None else
                 f"the draft's projections at {draft_weight_bits} bits")
    return (f"expected room for the weights of {target} + {draft} ({need / GIGA:.1f} GB at "
            f"{precision}), got {gpu_memory_utilization:g} of {tp} x "
            f"{hardware} = {have / GIGA:.1f} GB: the weights do not fit (set tp >= {least}, a "
            "larger device or smaller models)")


def quantized_weights(hw: Hardware, target: str, draft: str, draft_weight_bits: int,
                      quantization: str) -> tuple[float, str] | None:
    """(bytes, phrase) of both models' weights when either is held quantised (the target's
    ``quantization`` or a quantised checkpoint; simulator.cost.analytic.precision), else None."""
    t, d = find_shape(target), find_shape(draft)
    if t is None or (str(quantization).lower() == "none" and t.quantization == "none"
                     and (d is None or d.quantization == "none")):
        return None
    t = resolve_quantization(quantization, t)
    need = held_weight_bytes(t, hw)
    if d is not None:
        need += (held_weight_bytes(d, hw) if d.quantization != "none"
                 else model_weight_bytes(d, hw.dtype_bytes, draft_weight_bits))
    return need, f"the target's weights as {t.quantization}"


def check_weights_fit(hardware: str, target: str, draft: str, tp: int,
                      gpu_memory_utilization: float,
                      draft_weight_bits: int = FULL_WEIGHT_BITS,
                      quantization: str = "none") -> None:
    """One-line error (:func:`weights_shortfall`) when the models' weights do not fit, in any
    KV mode: a run that cannot load its models has no step time to report."""
    short = weights_shortfall(hardware, target, draft, tp, gpu_memory_utilization,
                              draft_weight_bits, quantization)
    if short is not None:
        raise SpecbatchError(f"config: field gpu_memory_utilization: {short}")
