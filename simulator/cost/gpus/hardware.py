"""GPU hardware presets for the roofline cost model (simulator/cost/analytic/roofline.py).

Every preset is one frozen :class:`Hardware`: datasheet peaks (dense bf16 tensor-core FLOP/s,
HBM bandwidth, memory size, GPU-to-GPU bandwidth) and the *assumed* factors that turn a peak
into what a serving engine achieves (efficiencies, fixed latencies, per-step CPU overhead).

The datasheet numbers, the SM counts and the data that calibrate each GPU are rows of the
GPU catalogue (simulator.cost.gpus.catalogue; docs/DESIGN.md, "Adding a GPU"): every preset
here is derived from a row (:func:`preset`), with the row's fitted or assumed efficiencies.

Assumed factors (not datasheet numbers; change them with ``dataclasses.replace``):

- ``compute_eff`` = 0.7: large bf16 GEMMs reach 65-80 % of dense peak (cuBLAS/CUTLASS on
  H100/A100); prefill-sized passes therefore run at ~0.7 x peak.
- ``memory_eff`` = 0.8: weight-streaming GEMV-like decode kernels and paged-attention KV reads
  reach ~80 % of HBM peak (STREAM-like copies reach ~90 %). GDDR6 on L40S: 0.75.
- ``pass_latency`` = 60 us per forward pass: embedding, final norm, LM head / sampling kernel
  launches and the CUDA-graph launch itself; ``layer_latency`` = 8 us per decoder layer: the
  ~10 small kernels (norms, rotary, activation) whose launch gaps are not hidden even under
  CUDA graphs. These dominate only tiny models (the 68M draft).
- ``allreduce_latency`` = 8 us (NVLink, vLLM's custom all-reduce for small messages), 25 us
  over PCIe.
- ``overhead`` = 1 ms per engine step: scheduler, input preparation, rejection sampler and
  detokenisation on the CPU (vLLM v0.6-era per-step overhead at batch 64 is ~1-3 ms).

Execution presets (:data:`EXECUTIONS`, :func:`get_execution`): how kernels reach the GPU, which
sets the fixed per-pass and per-layer latencies of each role and how they combine with the
roofline's GPU time (simulator/cost/analytic/roofline.py). ``cuda_graph`` (the default) keeps the
hardware preset's ``pass_latency``/``layer_latency`` and *adds* them to the GPU time (a replayed
graph's launch gaps sit between kernels); ``eager`` is a host-bound engine (Hugging Face eager
forward, one Python-issued launch per op): the CPU issues kernels asynchronously ahead of the GPU,
so a pass takes ``max(GPU time, host floor)``, host floor = pass floor + L · layer floor.

==========  ======  ===========  ===========  ===================================================
preset      role    pass floor   layer floor  source
==========  ======  ===========  ===========  ===================================================
cuda_graph  both    60 us (hw)   8 us (hw)    layer: CUDA.jl "Graphs" docs (cuda.juliagpu.org/
                                              dev/usage/graphs): 80 small broadcast kernels take
                                              260 us launched one by one and 70 us replayed as a
                                              graph, i.e. ~0.9 us per kernel node; times ~9
                                              kernels in a fused (vLLM-style) Llama decoder
                                              layer (norm, QKV GEMM, rotary, attention, O GEMM,
                                              add+norm, gate/up GEMM, SiLU*mul, down GEMM: an
                                              ASSUMED count) gives ~8 us. pass: ASSUMED 60 us
                                              (embedding, final norm, LM head, sampler, the graph
                                              launch itself); no measurement in this repo.
eager       both    0            1.1 ms       fitted here: least squares of the batch-1, q = 1,
                                              KV <= 512 latencies of traces/data/profiles/
                                              h100-{llama-3.1-8b, llama-3.2-1b, smollm2-135m}
                                              .parquet (6 cells; 32, 16, 30 layers; eager HF
                                              bf16, H100 host) on the layer count. With a free
                                              intercept the fit gives -11 ms + 1.47 ms/layer
                                              (negative, unphysical: three shapes cannot
                                              separate the two), so the pass floor is held at
                                              its bound 0 and the slope refitted through the
                                              origin: 1.07 +- 0.05 ms/layer (1.01 with all four
                                              KV sizes), mean |residual| 16 %. Cross-check:
                                              2 x 1.07 = 2.1 ms for a 2-layer model against the
                                              2.66 ms measured for the distilled-2L SmolLM2 draft
                                              (benchmarks/gpu/README.md section 3).
==========  ======  ===========  ===========  ===================================================

The eager floor is a property of the host (Python + launch path) measured on the issue-16 H100
machine, not of the GPU; it is applied unchanged to every hardware preset.

Sampler presets (:data:`SAMPLERS`, :func:`get_sampler`): the fixed seconds of one verify call
of the rejection sampler, which :mod:`simulator.cost.verify_cost` adds to the bytes it reads over
the preset's bandwidth. ``verify_cost = "none"`` prices verification at 0 s.

=======  ===========  =====================  ================================================
preset   TV floor     BV floor               source
=======  ===========  =====================  ================================================
fused    50 us        50 us                  ASSUMED: one fused kernel launch per verify call
                                             (theory/verify/triton_fused.py) plus ~6 small torch ops
                                             of its wrapper (index tensors, uniforms) at ~5 us
                                             of host time each. Triton's Python launch path
                                             measured 8.7 us/call on GB200 (vllm-project/vllm
                                             PR 34838, 2026) and 42-49 us in 2024 (triton-lang/
                                             triton PRs 3638, 3663). No GPU measurement of the
                                             fused kernels in this repo yet.
torch    2.28 ms      max(2.28 ms,           MEASURED: theory.verify.torch_batched (lazy path, host
                      1.96 ms x max s_i)     synchronised) on the issue-16 H100,
                                             benchmarks/gpu/results/verify_gpu.json, float32
                                             cells (B 64/256, gamma 4/8, V 49152/128256):
                                             median of (time - modelled bytes term) = 2.28 ms
                                             for TV; for BV median of (time - bytes term) /
                                             gamma = 1.96 ms per draft position (its backward
                                             scan is one synchronised round per position).
=======  ===========  =====================  ================================================

The floors are host-side (launch and synchronisation) costs measured on or assumed for an
H100 host; they are applied unchanged to every hardware preset.

Weight precision of the draft (``draft_weight_bits``, :func:`model_weight_bytes`): at 16 bits
every parameter takes the preset's ``dtype_bytes`` (bf16). Below 16 the draft's decoder-layer
linear weights (attention and MLP projections: L · (layer params − 2h), the norms excluded)
are stored at ``bits`` per weight in groups of :data:`QUANT_GROUP` = 128 input weights, each
group with an fp16 scale and an fp16 minimum (llama.cpp's ``Q4_1`` block layout, at group
128: the RTN scheme of ``specbatch models derive --quantize``, traces/models/quantize.py)::

    bytes per quantised weight = bits / 8 + 2 · 2 / 128        # 4 bits: 0.53125

while the embeddings, the LM head and the norms stay at ``dtype_bytes`` (the quantised
self-draft keeps them). The kernel dequantises on the fly, so FLOPs, activations and KV bytes
are unchanged; the dequantisation's own cost (small at decode batch sizes for Marlin-class
kernels, which reach near-ideal speedup up to batch ~16-32) is not modelled.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from numbers import Integral  # numpy integers included

from specbatch.errors import SpecbatchError, require
from specbatch.simulator.cost.gpus.catalogue import ALIASES, ROWS, Gpu

ROLE_NAMES = ("draft", "target")


@dataclass(frozen=True)
class Hardware:
    """One GPU type: datasheet peaks plus the efficiency/latency assumptions of the roofline."""

    name: str
    description: str
    peak_flops: float  # dense bf16 tensor-core FLOP/s (datasheet)
    mem_bw: float  # HBM/GDDR bytes/s (datasheet)
    memory_bytes: float  # device memory in bytes (datasheet)
    link_bw: float  # GPU-to-GPU bytes/s per direction (NVLink or PCIe, datasheet)
    compute_eff: float = 0.7  # achieved fraction of peak_flops (assumption)
    memory_eff: float = 0.8  # achieved fraction of mem_bw (assumption)
    pass_latency: float = 60e-6  # seconds of fixed latency per forward pass (assumption)
    layer_latency: float = 8e-6  # seconds of launch latency per decoder layer (assumption)
    allreduce_latency: float = 8e-6  # seconds per all-reduce call (assumption)
    overhead: float = 1e-3  # seconds of CPU-side overhead per engine step (assumption)
    dtype_bytes: int = 2  # bf16 weights, activations and KV cache
    compute_capability: int = 0  # CUDA compute capability x 10 (vLLM's has_device_capability)
    fp8_peak_flops: float = 0.0  # dense FP8 tensor-core FLOP/s (datasheet); 0: no FP8 cores

    @property
    def fp8_tensor_cores(self) -> bool:
        """Whether vLLM runs FP8 GEMMs as W8A8 here: ``current_platform.has_device_capability(
        89)`` (vllm/model_executor/layers/quantization/fp8.py, ``Fp8LinearMethod.__init__``'s
        ``use_marlin``; below 8.9 FP8 weights go through the weight-only Marlin kernel), and
        the preset knows its FP8 peak (a custom preset without one is priced weight-only)."""
        return self.compute_capability >= 89 and self.fp8_peak_flops > 0

    @property
    def ridge(self) -> float:
        """Arithmetic intensity (FLOP/byte) at the roofline's knee, with the efficiencies."""
        return (self.peak_flops * self.compute_eff) / (self.mem_bw * self.memory_eff)


def preset(gpu: Gpu) -> Hardware:
    """The roofline preset of a catalogue row: its datasheet bf16 and FP8 peaks, bandwidths
    and memory, and its fitted efficiencies where the row has them (else the assumed ones)."""
    tuned = {f: getattr(gpu, f) for f in ("compute_eff", "memory_eff", "allreduce_latency")
             if getattr(gpu, f) is not None}
    return Hardware(gpu.name, gpu.description, gpu.peak("bf16"), gpu.mem_bw, gpu.memory_bytes,
                    gpu.link_bw, compute_capability=gpu.compute_capability,
                    fp8_peak_flops=gpu.peak("fp8"), **tuned)


#: The roofline presets: every catalogue row offered as one, in catalogue order.
HARDWARE: dict[str, Hardware] = {g.name: preset(g) for g in ROWS if g.preset}



@dataclass(frozen=True)
class Execution:
    """How kernels reach the GPU: fixed latencies per role and how they meet the GPU time.

    ``pass_latency``/``layer_latency`` map a role ("draft", "target") to seconds, or are None
    to use the hardware preset's fields; ``overlap`` False adds them to the roofline's GPU time,
    True takes ``max(GPU time, pass + L · layer)`` (host issues kernels asynchronously ahead).
    """

    name: str
    description: str
    source: str
    overlap: bool
    pass_latency: dict | None = None
    layer_latency: dict | None = None

    def latencies(self, role: str, hw: Hardware) -> tuple[float, float]:
        """(pass floor, per-layer floor) in seconds of ``role`` on ``hw``."""
        p = hw.pass_latency if self.pass_latency is None else self.pass_latency[role]
        layer = hw.layer_latency if self.layer_latency is None else self.layer_latency[role]
        return float(p), float(layer)


#: Eager per-layer floor fitted from the H100 profiles (module docstring table).
EAGER_LAYER_LATENCY = 1.07e-3
EAGER_PASS_LATENCY = 0.0

EXECUTIONS: dict[str, Execution] = {
    e.name: e
    for e in (
        Execution(
            "cuda_graph", "CUDA-graph serving engine (vLLM-style): launch gaps add to GPU time",
            "per-layer: CUDA.jl Graphs docs (cuda.juliagpu.org/dev/usage/graphs), 80 kernels "
            "260 us -> 70 us as a graph (~0.9 us/kernel) x ~9 kernels/layer (assumed) ~ 8 us; "
            "per-pass 60 us: assumption",
            overlap=False,
        ),
        Execution(
            "eager", "eager Hugging Face forward, host-bound: max(GPU time, host floor)",
            "fitted to traces/data/profiles/h100-*.parquet (batch 1, q=1, KV<=512, 3 shapes): "
            "1.07 ms per decoder layer through the origin; pass floor 0 (free intercept "
            "negative)",
            overlap=True,
            pass_latency={r: EAGER_PASS_LATENCY for r in ROLE_NAMES},
            layer_latency={r: EAGER_LAYER_LATENCY for r in ROLE_NAMES},
        ),
    )
}
DEFAULT_EXECUTION = "cuda_graph"


def get_execution(name: str) -> Execution:
    """Look up an execution preset (case-insensitive, '-' or '_'); a one-line error lists them."""
    key = str(name).lower().replace("-", "_")
    e = EXECUTIONS.get(key)
    if e is None:
        raise SpecbatchError(f"execution {name!r}: expected one of {', '.join(EXECUTIONS)}")
    return e


@dataclass(frozen=True)
class SamplerPreset:
    """A rejection sampler's fixed seconds per verify call (module docstring table).

    ``floor``: seconds per verify call (TV, and BV's least); ``floor_per_position``: BV's
    seconds per draft position of its backward scan, charged for the step's longest verified
    draft (0: BV's floor is ``floor``)."""

    name: str
    description: str
    source: str
    floor: float
    floor_per_position: float = 0.0


#: The fused sampler's floor per verify call (module docstring table).
FUSED_FLOOR = 50e-6

SAMPLERS: dict[str, SamplerPreset] = {
    s.name: s
    for s in (
        SamplerPreset(
            name="fused",
            description="one fused kernel per verify call (vLLM-style Triton sampler)",
            source="assumed: one Triton launch (8.7 us on GB200, vLLM PR 34838; 42-49 us on "
                   "2024 Triton) plus ~6 small torch ops of ~5 us: 50 us",
            floor=FUSED_FLOOR),
        SamplerPreset(
            name="torch", description="theory.verify.torch_batched's host-synchronised torch path",
            source="measured: benchmarks/gpu/results/verify_gpu.json (issue-16 H100, float32): "
                   "TV 2.28 ms per call, BV 1.96 ms per draft position, bytes term removed",
            floor=2.28e-3, floor_per_position=1.96e-3),
    )
}
#: The ``verify_cost`` choices: a sampler preset, or "none" (verification takes 0 s).
VERIFY_COSTS = (*SAMPLERS, "none")
DEFAULT_SAMPLER = "fused"


def get_sampler(name: str) -> SamplerPreset:
    """Look up a sampler preset (case-insensitive); a one-line error lists them."""
    s = SAMPLERS.get(str(name).lower())
    if s is None:
        raise SpecbatchError(f"verify_cost {name!r}: expected one of {', '.join(VERIFY_COSTS)}")
    return s


def get_hardware(name: str) -> Hardware:
    """Look up a preset by name (case-insensitive); a one-line error lists the known names."""
    key = str(name).lower()
    hw = HARDWARE.get(ALIASES.get(key, key))
    if hw is None:
        raise SpecbatchError(f"hardware {name!r}: expected one of {', '.join(sorted(HARDWARE))}")
    return hw


#: Bits per weight of an unquantised model: every parameter at the preset's ``dtype_bytes``.
FULL_WEIGHT_BITS = 16
#: Input weights per quantisation group, and the bytes each group adds (an fp16 scale and an
#: fp16 minimum, llama.cpp's ``Q4_1`` layout) (module docstring).
QUANT_GROUP = 128
QUANT_GROUP_BYTES = 4


def quantized_weight_bytes(bits: int) -> float:
    """Bytes one quantised weight takes: ``bits / 8 + QUANT_GROUP_BYTES / QUANT_GROUP``."""
    return bits / 8 + QUANT_GROUP_BYTES / QUANT_GROUP


def settle_execution(model) -> Execution:
    """A cost model's launch settings, as each model's ``__post_init__`` settles them: the
    preset's per-step ``overhead`` where none was given (NaN), the ``execution`` preset's
    canonical name; returns the preset (a frozen dataclass's fields are set in place)."""
    if math.isnan(model.overhead):
        object.__setattr__(model, "overhead", float(model.hardware.overhead))
    ex = get_execution(model.execution)
    object.__setattr__(model, "execution", ex.name)
    return ex


def launch_terms(ex, role: str, hw: Hardware, layers: int) -> tuple[float, float]:
    """(fixed s, host floor s) of one pass under execution preset ``ex``: its launch time
    p + L x per-layer latency, a floor the GPU work hides when the preset overlaps the host
    (CUDA graphs), else a fixed cost added to it."""
    p, layer = ex.latencies(role, hw)
    launch = p + layers * layer
    return (0.0, launch) if ex.overlap else (launch, 0.0)


def check_routing_skew(skew: float, target, draft) -> None:
    """A Zipf ``routing_skew`` only where a role is a mixture-of-experts model (theory.moe)."""
    require(skew == 0 or target.is_moe or draft.is_moe,
            f"routing_skew {skew!r}: expected 0 (neither {target.name} nor {draft.name} is a "
            "mixture-of-experts model)")


def check_weight_bits(bits: int) -> int:
    """``bits`` as an int in [2, 16] (one-line error otherwise)."""
    require(isinstance(bits, Integral) and not isinstance(bits, bool)
            and 2 <= bits <= FULL_WEIGHT_BITS,
            f"draft_weight_bits {bits!r}: expected an integer in [2, {FULL_WEIGHT_BITS}]")
    return int(bits)


def linear_params(shape) -> int:
    """Weights of the decoder layers' linear projections (q, k, v, o, gate, up, down): what
    a weight-only quantisation stores at low precision; norms, embeddings and head excluded."""
    require(not shape.is_moe, f"model {shape.name}: a quantised mixture-of-experts model is not "
            "priced; expected 16-bit weights")
    return shape.layers * (shape.layer_params - 2 * shape.hidden)


def model_weight_bytes(shape, dtype_bytes: int, bits: int = FULL_WEIGHT_BITS) -> float:
    """Bytes of all of ``shape``'s weights held in memory: ``dtype_bytes`` per parameter at
    16 bits; below, the linear projections at :func:`quantized_weight_bytes` (module
    docstring) and every other parameter at ``dtype_bytes``."""
    if bits >= FULL_WEIGHT_BITS:
        return float(dtype_bytes * shape.params)
    linear = linear_params(shape)
    return float(dtype_bytes * (shape.params - linear) + quantized_weight_bytes(bits) * linear)


def weight_bytes(hw: Hardware, models: tuple[str, ...],
                 bits: tuple[int, ...] | None = None) -> float:
    """Bytes the weights of the named shapes take at the preset's dtype; a name that is not a
    shape (a host-side drafter such as ``ngram``) holds no weights."""
    from specbatch.traces.models.shapes import find_shape

    shapes = [find_shape(m) for m in models]
    if bits is None:
        return float(hw.dtype_bytes * sum(s.params for s in shapes if s is not None))
    return float(sum(model_weight_bytes(s, hw.dtype_bytes, b)
                     for s, b in zip(shapes, bits, strict=True) if s is not None))
