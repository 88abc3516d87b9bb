"""GPU hardware presets for the roofline cost model (simulator/cost/roofline.py).

Every preset is one frozen :class:`Hardware`: datasheet peaks (dense bf16 tensor-core FLOP/s,
HBM bandwidth, memory size, GPU-to-GPU bandwidth) and the *assumed* factors that turn a peak
into what a serving engine achieves (efficiencies, fixed latencies, per-step CPU overhead).

Datasheet numbers (NVIDIA product pages / datasheets; bf16 figures are the *dense* ones,
i.e. half of the "with sparsity" number the datasheets print first):

=========  ==================  ============  =========  =================================
preset     dense bf16 FLOP/s   HBM bytes/s   memory     GPU-GPU link (per direction)
=========  ==================  ============  =========  =================================
h100       989.4 T (SXM5)      3.35 T HBM3   80 GB      NVLink4 900 GB/s bidir -> 450 GB/s
h200       989.4 T (SXM)       4.8 T HBM3e   141 GB     NVLink4 900 GB/s bidir -> 450 GB/s
a100       312 T (SXM4 80GB)   2.039 T HBM2e 80 GB      NVLink3 600 GB/s bidir -> 300 GB/s
l40s       362.05 T            864 G GDDR6   48 GB      PCIe Gen4 x16 64 GB/s bidir -> 32 GB/s
rtx4090    165.2 T             1.008 T       24 GB      PCIe Gen4 x16 64 GB/s bidir -> 32 GB/s
                                GDDR6X                  (no NVLink)
rtxpro6000 503.8 T             1.597 T       96 GB      PCIe Gen5 x16 128 GB/s bidir -> 64 GB/s
                                GDDR7                   (no NVLink)
=========  ==================  ============  =========  =================================

FP8 tensor cores (``compute_capability`` >= 89: Ada, Hopper, Blackwell) and their dense FP8
peak ``fp8_peak_flops`` (FP32 accumulate, what vLLM's CUTLASS/cuBLASLt scaled-mm kernels use;
half the "with sparsity" figure), used by ``quantization = "fp8"`` (simulator.cost.precision)::

    preset      capability  dense FP8 FLOP/s  source
    h100        9.0         1978.9 T          H100 SXM5 datasheet: FP8 3,958 T with sparsity
    h200        9.0         1978.9 T          H200 SXM datasheet: FP8 3,958 T with sparsity
    a100        8.0         none              no FP8 tensor cores: vLLM runs FP8 weight-only
                                              through Marlin (bf16 compute)
    l40s        8.9         733 T             L40S datasheet: FP8 733 / 1,466 T (sparsity)
    rtx4090     8.9         330.3 T           Ada whitepaper App. A: FP8 with FP32 accumulate
                                              330.3 dense (660.6 with FP16 accumulate)
    rtxpro6000  12.0        1007.6 T          ASSUMED 2 x its bf16 peak (the FP8 tensor rate of
                                              Blackwell RTX parts is twice FP16/BF16 at FP32
                                              accumulate; the Server Edition's datasheet prints
                                              only the FP4 peak, as for bf16 above)

The two workstation-class presets price the measured vLLM runs of docs/fidelity.md:

- ``rtx4090``: NVIDIA GeForce RTX 4090 (AD102). Bandwidth, memory and bus from NVIDIA's
  GeForce RTX 4090 specifications page (21 Gbps GDDR6X on a 384-bit bus = 1008 GB/s, 24 GB,
  PCIe Gen 4); tensor peak from the "NVIDIA Ada GPU Architecture" whitepaper (Appendix A,
  GeForce RTX 4090 column): peak BF16 tensor TFLOPS *with FP32 accumulate* 165.2 dense
  (330.4 with sparsity). GeForce parts run FP32-accumulate MMA at half the FP16-accumulate
  rate (330.3 dense); bf16 GEMMs in vLLM accumulate in FP32, so 165.2 is the peak they see.
- ``rtxpro6000``: NVIDIA RTX PRO 6000 Blackwell Server Edition (GB202, 188 SMs). Memory and
  bandwidth from its datasheet (96 GB GDDR7 with ECC, 1597 GB/s; the Workstation Edition's
  1792 GB/s runs the memory faster), PCIe Gen 5 x16. Tensor peak from the "NVIDIA RTX
  Blackwell GPU Architecture" whitepaper's RTX PRO 6000 Blackwell column: peak FP16/BF16
  tensor TFLOPS with FP32 accumulate 503.8 dense (1007.6 with sparsity; professional parts
  accumulate in FP32 at full rate). That column is the Workstation Edition's boost clock; the
  Server Edition's datasheet prints only the FP4 peak, so its dense bf16 peak is taken to be
  the same die at the same clock (an ASSUMPTION; a lower sustained server clock would make
  compute-bound prefill slower than priced).

Their ``compute_eff`` and ``memory_eff`` are FITTED, not assumed (simulator.cost.gemm_fit): to the
per-GEMM profiles LLMServingSim measured with vLLM 0.19 on each GPU (Llama-3.1-8B, tp 1,
``profiler/perf/<GPU>/meta-llama/Llama-3.1-8B/bf16/tp1/dense.csv``, bundled in
traces/data/vllm_runs/profiles/), the pair minimising the roofline's MAPE over the four
projection GEMMs at T = 1 ... 2048 tokens. rtx4090: 0.94 / 0.85 (GEMM MAPE 5.4 %; 27.5 % with
the 0.7 / 0.75 assumption); rtxpro6000: 0.70 / 0.84 (10.8 % against 11.8 %; on Qwen3-32B's
profile, held out, 8.6 % against 10.0 %). The measured serving runs of docs/fidelity.md are
not used, so they stay the out-of-sample test. All-reduce over PCIe at 25 us like ``l40s``
(assumed: the profiles time no collective).

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
roofline's GPU time (simulator/cost/roofline.py). ``cuda_graph`` (the default) keeps the hardware
preset's ``pass_latency``/``layer_latency`` and *adds* them to the GPU time (a replayed graph's
launch gaps sit between kernels); ``eager`` is a host-bound engine (Hugging Face eager forward,
one Python-issued launch per op): the CPU issues kernels asynchronously ahead of the GPU, so a
pass takes ``max(GPU time, host floor)``, host floor = pass floor + L · layer floor.

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

from dataclasses import dataclass
from numbers import Integral  # numpy integers included

from specbatch.errors import SpecbatchError, require

TERA = 1e12
ROLE_NAMES = ("draft", "target")
GIGA = 1e9


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


HARDWARE: dict[str, Hardware] = {
    h.name: h
    for h in (
        Hardware("h100", "NVIDIA H100 SXM5 80GB", 989.4 * TERA, 3.35 * TERA, 80 * GIGA, 450 * GIGA,
                 compute_capability=90, fp8_peak_flops=1978.9 * TERA),
        Hardware("h200", "NVIDIA H200 SXM 141GB", 989.4 * TERA, 4.8 * TERA, 141 * GIGA, 450 * GIGA,
                 compute_capability=90, fp8_peak_flops=1978.9 * TERA),
        Hardware("a100", "NVIDIA A100 SXM4 80GB", 312 * TERA, 2.039 * TERA, 80 * GIGA, 300 * GIGA,
                 compute_capability=80),
        Hardware(
            "l40s", "NVIDIA L40S 48GB (PCIe)", 362.05 * TERA, 864 * GIGA, 48 * GIGA, 32 * GIGA,
            memory_eff=0.75, allreduce_latency=25e-6, compute_capability=89,
            fp8_peak_flops=733 * TERA,
        ),
        Hardware(
            "rtx4090", "NVIDIA GeForce RTX 4090 24GB (PCIe)", 165.2 * TERA, 1.008 * TERA,
            24 * GIGA, 32 * GIGA, compute_eff=0.94, memory_eff=0.85,
            allreduce_latency=25e-6, compute_capability=89, fp8_peak_flops=330.3 * TERA,
        ),
        Hardware(
            "rtxpro6000", "NVIDIA RTX PRO 6000 Blackwell Server Edition 96GB (PCIe)",
            503.8 * TERA, 1.597 * TERA, 96 * GIGA, 64 * GIGA, compute_eff=0.70,
            memory_eff=0.84, allreduce_latency=25e-6, compute_capability=120,
            fp8_peak_flops=1007.6 * TERA,
        ),
    )
}

# --- begin: issue 42 (branch aic) presets for AIConfigurator's systems with vLLM tables that
# had none here; one block, to be ported to the GPU catalogue. Peaks, bandwidth, memory and
# NVLink from NVIDIA's HGX B200 / GB200 NVL72 datasheets (dense, without sparsity; NVLink 5:
# 1.8 TB/s both directions, 900 GB/s each way; GB200 per GPU: 13.4 TB / 72). The efficiencies
# are fitted (simulator.cost.gemm_fit.fit_efficiencies) to AIConfigurator's bf16 GEMM rows at
# vLLM 0.24.0 (commit 095f58a; m <= 2048, 1024 <= n, k <= 32768, every ~12th row): B200
# 0.63 / 0.57 (in-sample MAPE 23.8 % against 33.9 % at the default 0.7 / 0.8), GB200
# 0.62 / 0.58 (24.7 %); latencies and overhead stay the defaults (assumptions).
HARDWARE.update({h.name: h for h in (
    Hardware("b200", "NVIDIA B200 SXM 180GB (HGX)", 2250 * TERA, 8.0 * TERA, 180 * GIGA,
             900 * GIGA, compute_eff=0.63, memory_eff=0.57, compute_capability=100,
             fp8_peak_flops=4500 * TERA),
    Hardware("gb200", "NVIDIA GB200 (one Blackwell GPU of an NVL72) 186GB", 2500 * TERA,
             8.0 * TERA, 186 * GIGA, 900 * GIGA, compute_eff=0.62, memory_eff=0.58,
             compute_capability=100, fp8_peak_flops=5000 * TERA),
)})
# --- end: issue 42 presets

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
class Sampler:
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

SAMPLERS: dict[str, Sampler] = {
    s.name: s
    for s in (
        Sampler("fused", "one fused kernel per verify call (vLLM-style Triton sampler)",
                "assumed: one Triton launch (8.7 us on GB200, vLLM PR 34838; 42-49 us on "
                "2024 Triton) plus ~6 small torch ops of ~5 us: 50 us", FUSED_FLOOR),
        Sampler("torch", "theory.verify.torch_batched's host-synchronised torch path",
                "measured: benchmarks/gpu/results/verify_gpu.json (issue-16 H100, float32): "
                "TV 2.28 ms per call, BV 1.96 ms per draft position, bytes term removed",
                2.28e-3, 1.96e-3),
    )
}
#: The ``verify_cost`` choices: a sampler preset, or "none" (verification takes 0 s).
VERIFY_COSTS = (*SAMPLERS, "none")
DEFAULT_SAMPLER = "fused"


def get_sampler(name: str) -> Sampler:
    """Look up a sampler preset (case-insensitive); a one-line error lists them."""
    s = SAMPLERS.get(str(name).lower())
    if s is None:
        raise SpecbatchError(f"verify_cost {name!r}: expected one of {', '.join(VERIFY_COSTS)}")
    return s


#: Accepted spellings that map onto a preset name.
ALIASES = {"h100-sxm": "h100", "h100-sxm5": "h100", "a100-80gb": "a100", "a100-sxm": "a100",
           "h200-sxm": "h200", "rtx-4090": "rtx4090", "rtx-pro-6000": "rtxpro6000",
           "b200-sxm": "b200"}  # b200-sxm: issue 42 (branch aic)


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


def weights_shortfall(hardware: str, target: str, draft: str, tp: int,
                      gpu_memory_utilization: float,
                      draft_weight_bits: int = FULL_WEIGHT_BITS,
                      quantization: str = "none") -> str | None:
    """Why the target's and draft's weights alone exceed what ``tp`` devices of ``hardware``
    give the engine (``tp · M · gpu_memory_utilization``), or None when they fit. Both
    models' weights are counted against the memory of all ``tp`` devices, as the KV capacity
    counts them; the draft's at ``draft_weight_bits`` (:func:`model_weight_bytes`), the
    target's in its ``quantization`` (simulator.cost.precision)."""
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
    ``quantization`` or a quantised checkpoint; simulator.cost.precision), else None."""
    from specbatch.simulator.cost.precision import held_weight_bytes, resolve_quantization
    from specbatch.traces.models.shapes import find_shape

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
