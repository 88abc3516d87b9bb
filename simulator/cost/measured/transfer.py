"""A shape the RTX per-layer profiles do not cover, priced from a profiled neighbour
(:mod:`simulator.cost.measured.lss`).

A dense decoder layer of shape S' on tp' GPUs is priced from the GPU's profiled dense cell of
shape S on tp GPUs, module by module at the same Q tokens:

- each projection GEMM (qkv, o, gate_up, down; K x N per rank, Megatron split) by the
  measured time times the roofline ratio R(Q; K', N') / R(Q; K, N), with
  R = max(2 Q K N / (peak · e_c), b (K N + Q (K + N)) / (bw · e_m)) at the preset's fitted
  efficiencies (simulator.cost.measured.gemm_fit): the measured kernel behaviour (tile and wave
  effects, floors) carried over, the shape change priced by the roofline;
- each small module by its per-token bytes ratio: norms and embedding h, rotary (q_width +
  d_kv) / tp, activation I / tp; ``qk_norm`` (Qwen3) is dropped (a Llama-family neighbour has
  none; ~4 µs a layer);
- the LM head by the roofline ratio of (K = h, N = V / tp).

The neighbour is the GPU's tp 1 dense cell nearest in (log h, log I).
:func:`simulator.cost.measured.lss.transfer_check` prices every other profiled dense cell of the GPU
this way from its nearest neighbour and reports the error against that cell's own measured modules
(RTX PRO 6000: Qwen3-32B tp 1 and 2 from Llama-3.1-8B; the RTX 4090 has one cell, no check).
"""

from __future__ import annotations

import math

import numpy as np

from specbatch.simulator.cost.measured.gemm_fit import gemm_dims
from specbatch.traces.models.model_shape import ModelShape
from specbatch.traces.models.shapes import get_shape
from specbatch.traces.public.llmservingsim_profiles import bundled_profiles

GEMM_MODULES = ("qkv_proj", "o_proj", "gate_up_proj", "down_proj")
DTYPE_BYTES = 2


def rank_dims(shape: ModelShape, tp: int) -> dict[str, tuple[float, float]]:
    """(K, N) of each projection GEMM on one of ``tp`` GPUs (column-parallel QKV and up,
    row-parallel O and down)."""
    d = gemm_dims(shape)
    return {"qkv_proj": (d["qkv_proj"][0], d["qkv_proj"][1] / tp),
            "o_proj": (d["o_proj"][0] / tp, d["o_proj"][1]),
            "gate_up_proj": (d["gate_up_proj"][0], d["gate_up_proj"][1] / tp),
            "down_proj": (d["down_proj"][0] / tp, d["down_proj"][1])}


def roofline_gemm(hw, q: np.ndarray, k: float, n: float) -> np.ndarray:
    """R(Q; K, N) of the module docstring, q # [G]."""
    flops = 2.0 * q * k * n / (hw.peak_flops * hw.compute_eff)
    nbytes = DTYPE_BYTES * (k * n + q * (k + n)) / (hw.mem_bw * hw.memory_eff)
    return np.maximum(flops, nbytes)


def small_bytes(name: str, shape: ModelShape, tp: int) -> float | None:
    """Per-token bytes a small module moves on one GPU (up to a common factor), or None for a
    module the transfer drops."""
    return {"layernorm": shape.hidden, "final_layernorm": shape.hidden,
            "embedding": shape.hidden,
            "rotary_emb": (shape.q_width + shape.kv_heads * shape.head_dim) / tp,
            "act_fn": shape.intermediate / tp}.get(name)


def transfer_curves(modules: dict, per_seq: dict, src: ModelShape, src_tp: int,
                    dst: ModelShape, dst_tp: int, hw) -> tuple[dict, dict]:
    """The source cell's (grid, seconds) curves priced for ``dst`` on ``dst_tp`` GPUs
    (module docstring), each made non-decreasing again."""
    out = {}
    d_src, d_dst = rank_dims(src, src_tp), rank_dims(dst, dst_tp)
    for name, (grid, secs) in modules.items():
        if name in GEMM_MODULES:
            ratio = roofline_gemm(hw, grid, *d_dst[name]) / roofline_gemm(hw, grid, *d_src[name])
        else:
            a, b = small_bytes(name, src, src_tp), small_bytes(name, dst, dst_tp)
            if a is None or b is None:
                continue
            ratio = b / a
        out[name] = (grid, np.maximum.accumulate(secs * ratio))
    seq = dict(per_seq)
    if "lm_head" in seq:
        grid, secs = seq["lm_head"]
        ratio = (roofline_gemm(hw, grid, dst.hidden, dst.vocab / dst_tp)
                 / roofline_gemm(hw, grid, src.hidden, src.vocab / src_tp))
        seq["lm_head"] = (grid, np.maximum.accumulate(secs * ratio))
    return out, seq


def nearest_profile(gpu: str, shape: ModelShape, exclude: str | None = None):
    """The ``gpu``'s tp 1 dense (non-MoE) ProfileSet nearest ``shape`` in (log h, log I),
    ``exclude`` (a model key) left out; None when there is none."""
    best, best_d = None, math.inf
    for (g, model, tp), ps in bundled_profiles().items():
        if g != gpu or tp != 1 or model == exclude or "moe" in ps.files:
            continue
        src = get_shape(str(ps.config))
        d = (math.log(src.hidden / shape.hidden) ** 2
             + math.log(src.intermediate / shape.intermediate) ** 2)
        if d < best_d:
            best, best_d = ps, d
    return best

