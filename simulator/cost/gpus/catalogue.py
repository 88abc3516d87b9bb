"""The GPU catalogue: one :class:`Gpu` row per GPU; the roofline presets
(simulator.cost.gpus.hardware.HARDWARE), the calibrated laws' SM counts, peaks, proxies and NCCL
clusters, and the device names a measured run is matched by are all derived from it.

Datasheet numbers (NVIDIA product pages / datasheets; FLOP/s are the *dense* tensor-core
figures, i.e. half of the "with sparsity" number the datasheets print first):

==========  ==================  ============  =========  ====  ===============================
row         dense bf16 FLOP/s   memory B/s    memory     SMs   GPU-GPU link (per direction)
==========  ==================  ============  =========  ====  ===============================
h100        989.4 T (SXM5)      3.35 T HBM3   80 GB      132   NVLink4 900 GB/s bidir -> 450
h200        989.4 T (SXM)       4.8 T HBM3e   141 GB     132   NVLink4 900 GB/s bidir -> 450
a100        312 T (SXM4 80GB)   2.039 T HBM2e 80 GB      108   NVLink3 600 GB/s bidir -> 300
l40s        362.05 T            864 G GDDR6   48 GB      142   PCIe Gen4 x16 64 GB/s -> 32
rtx4090     165.2 T             1.008 T       24 GB      128   PCIe Gen4 x16 64 GB/s -> 32
                                GDDR6X                         (no NVLink)
rtxpro6000  503.8 T             1.597 T       96 GB      188   PCIe Gen5 x16 128 GB/s -> 64
                                GDDR7                          (no NVLink)
a40         149.7 T             696 G GDDR6   48 GB      84    NVLink bridge 112.5 GB/s -> 56.25
==========  ==================  ============  =========  ====  ===============================

FP8 tensor cores (``compute_capability`` >= 89: Ada, Hopper, Blackwell) and their dense FP8
peak ``peaks["fp8"]`` (FP32 accumulate, what vLLM's CUTLASS/cuBLASLt scaled-mm kernels use;
half the "with sparsity" figure), used by ``quantization = "fp8"``
(simulator.cost.analytic.precision)::

    row         capability  dense FP8 FLOP/s  source
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
    a40         8.6         none              Ampere: no FP8 tensor cores

The two workstation-class rows price the measured vLLM runs of docs/fidelity.md:

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

Their roofline ``compute_eff`` and ``memory_eff`` are FITTED, not assumed
(simulator.cost.measured.gemm_fit; ``efficiencies_fitted``): to the per-GEMM profiles LLMServingSim
measured with vLLM 0.19 on each GPU (Llama-3.1-8B, tp 1,
``profiler/perf/<GPU>/meta-llama/Llama-3.1-8B/bf16/tp1/dense.csv``, bundled in
traces/data/vllm_runs/profiles/), the pair minimising the roofline's MAPE over the four
projection GEMMs at T = 1 ... 2048 tokens. rtx4090: 0.94 / 0.85 (GEMM MAPE 5.4 %; 27.5 % with
the 0.7 / 0.75 assumption); rtxpro6000: 0.70 / 0.84 (10.8 % against 11.8 %; on Qwen3-32B's
profile, held out, 8.6 % against 10.0 %). The measured serving runs of docs/fidelity.md are
not used, so they stay the out-of-sample test. All-reduce over PCIe at 25 us like ``l40s``
(assumed: the profiles time no collective). The other rows' efficiencies are the assumed
defaults of :class:`simulator.cost.gpus.hardware.Hardware` (0.75 memory efficiency on GDDR6).

``a40`` is no roofline preset (``preset`` False: ``hardware = "a40"`` is refused): Vidur's
profiles of it calibrate the laws that ``l40s`` borrows, and benchmarks/cost_vs_public.py
prices its roofline from this row.

L2 cache (``l2_bytes``, where an architecture whitepaper states it for the part): H100 SXM5
50 MB (NVIDIA H100 Tensor Core GPU Architecture), A100 40 MB (NVIDIA A100 Tensor Core GPU
Architecture), RTX 4090 72 MB (Ada whitepaper, AD102 as shipped), RTX PRO 6000 128 MB (RTX
Blackwell whitepaper, GB202), A40 6 MB (Ampere GA102 whitepaper); None elsewhere (not
sourced). Used where a kernel's reuse of KV blocks depends on whether they stay in L2
(simulator.cost.measured.lss's L2-missing re-reads, aic_mixed's FlashAttention 2 law).

Device names (``device_names``: what ``torch.cuda.get_device_name`` and nvidia-smi report,
and vLLM logs in a run's ``hardware.device_name``): "NVIDIA H100 80GB HBM3", "NVIDIA GeForce
RTX 4090" and "NVIDIA RTX PRO 6000 Blackwell Server Edition" are seen in this repository's
bundled data (traces/data/profiles/provenance.json, traces/data/vllm_runs/*/meta.json);
"NVIDIA B200" and "NVIDIA GB200" are the ``device`` column of AIConfigurator's vLLM tables of
those GPUs (095f58a; the bundled curves keep no device column); the others are the driver's
product names of these SKUs, not seen in bundled data.

Measured data (``profiles``, :data:`SOURCES`): ``"vidur"`` rows have per-op compute tables
(and ``allreduce_cluster`` names their NCCL curves) in traces/data/profiles/vidur, keyed by
the row's name; ``"llmservingsim"`` rows have per-layer profiles
traces/data/vllm_runs/profiles/<name>-<model>-tp<N>-<kind>.csv. A row without data names the
``proxy`` row whose laws it borrows, scaled by the datasheet peak ratios.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

TERA = 1e12
GIGA = 1e9

#: The measured sources a row's ``profiles`` may name: where the data lie.
SOURCES = {
    "vidur": "traces/data/profiles/vidur (Vidur 7d47513: per-op compute tables by GPU name, "
             "NCCL all-reduce curves by cluster; specbatch cost import-vidur)",
    "llmservingsim": "traces/data/vllm_runs/profiles/<gpu>-<model>-tp<N>-<kind>.csv "
                     "(LLMServingSim's per-layer vLLM 0.19 profiles)",
}


@dataclass(frozen=True)
class Gpu:
    """One GPU: datasheet numbers, the names it goes by, and the data that calibrate it.

    ``peaks`` maps a dtype ("bf16", "fp8", ...) to the dense tensor-core FLOP/s; a dtype
    absent has no tensor-core rate. ``compute_eff`` / ``memory_eff`` / ``allreduce_latency``
    None keep :class:`simulator.cost.gpus.hardware.Hardware`'s assumed defaults."""

    name: str  # preset name (``hardware = "..."``), the data folders' GPU key
    description: str
    peaks: Mapping[str, float]  # dtype -> dense FLOP/s (datasheet)
    mem_bw: float  # HBM/GDDR bytes/s (datasheet)
    memory_bytes: float  # device memory in bytes (datasheet)
    link: str  # the GPU-to-GPU interconnect
    link_bw: float  # GPU-to-GPU bytes/s per direction (datasheet)
    sm_count: int  # streaming multiprocessors (datasheet)
    compute_capability: int  # CUDA compute capability x 10
    l2_bytes: float | None = None  # L2 cache bytes (whitepapers; None: not sourced)
    device_names: tuple[str, ...] = ()  # what engines log (torch.cuda.get_device_name)
    aliases: tuple[str, ...] = ()  # other spellings ``hardware =`` accepts
    profiles: str | None = None  # a key of SOURCES: the measured data that calibrate it
    allreduce_cluster: str | None = None  # Vidur network cluster of its NCCL curves
    proxy: str | None = None  # the row whose laws it borrows where it has no data
    efficiencies_fitted: bool = False  # efficiencies from simulator.cost.measured.gemm_fit
    compute_eff: float | None = None
    memory_eff: float | None = None
    allreduce_latency: float | None = None
    preset: bool = True  # offered as a roofline hardware preset

    def peak(self, dtype: str) -> float:
        """Dense FLOP/s at ``dtype``; 0.0 where the GPU has no tensor cores for it."""
        return float(self.peaks.get(dtype, 0.0))


NVLINK4 = "NVLink4 (900 GB/s bidirectional)"
PCIE4 = "PCIe Gen4 x16 (64 GB/s bidirectional)"

ROWS: tuple[Gpu, ...] = (
    Gpu(name="h100", description="NVIDIA H100 SXM5 80GB",
        peaks={"bf16": 989.4 * TERA, "fp8": 1978.9 * TERA}, mem_bw=3.35 * TERA,
        memory_bytes=80 * GIGA, link=NVLINK4, link_bw=450 * GIGA, sm_count=132,
        compute_capability=90, l2_bytes=50e6, device_names=("NVIDIA H100 80GB HBM3",),
        aliases=("h100-sxm", "h100-sxm5"), profiles="vidur", allreduce_cluster="h100_dgx"),
    Gpu(name="h200", description="NVIDIA H200 SXM 141GB",
        peaks={"bf16": 989.4 * TERA, "fp8": 1978.9 * TERA}, mem_bw=4.8 * TERA,
        memory_bytes=141 * GIGA, link=NVLINK4, link_bw=450 * GIGA, sm_count=132,
        compute_capability=90, device_names=("NVIDIA H200",), aliases=("h200-sxm",),
        proxy="h100"),
    Gpu(name="a100", description="NVIDIA A100 SXM4 80GB", peaks={"bf16": 312 * TERA},
        mem_bw=2.039 * TERA, memory_bytes=80 * GIGA,
        link="NVLink3 (600 GB/s bidirectional)", link_bw=300 * GIGA, sm_count=108,
        compute_capability=80, l2_bytes=40e6, device_names=("NVIDIA A100-SXM4-80GB",),
        aliases=("a100-80gb", "a100-sxm"), profiles="vidur", allreduce_cluster="a100_dgx"),
    Gpu(name="l40s", description="NVIDIA L40S 48GB (PCIe)",
        peaks={"bf16": 362.05 * TERA, "fp8": 733 * TERA}, mem_bw=864 * GIGA,
        memory_bytes=48 * GIGA, link=PCIE4, link_bw=32 * GIGA, sm_count=142,
        compute_capability=89, device_names=("NVIDIA L40S",), proxy="a40",
        memory_eff=0.75, allreduce_latency=25e-6),
    Gpu(name="rtx4090", description="NVIDIA GeForce RTX 4090 24GB (PCIe)",
        peaks={"bf16": 165.2 * TERA, "fp8": 330.3 * TERA}, mem_bw=1.008 * TERA,
        memory_bytes=24 * GIGA, link=PCIE4 + ", no NVLink", link_bw=32 * GIGA, sm_count=128,
        compute_capability=89, l2_bytes=72e6, device_names=("NVIDIA GeForce RTX 4090",),
        aliases=("rtx-4090",), profiles="llmservingsim", efficiencies_fitted=True,
        compute_eff=0.94, memory_eff=0.85, allreduce_latency=25e-6),
    Gpu(name="rtxpro6000", description="NVIDIA RTX PRO 6000 Blackwell Server Edition 96GB (PCIe)",
        peaks={"bf16": 503.8 * TERA, "fp8": 1007.6 * TERA}, mem_bw=1.597 * TERA,
        memory_bytes=96 * GIGA, link="PCIe Gen5 x16 (128 GB/s bidirectional), no NVLink",
        link_bw=64 * GIGA, sm_count=188, compute_capability=120, l2_bytes=128e6,
        device_names=("NVIDIA RTX PRO 6000 Blackwell Server Edition",),
        aliases=("rtx-pro-6000",), profiles="llmservingsim", efficiencies_fitted=True,
        compute_eff=0.70, memory_eff=0.84, allreduce_latency=25e-6),
    # B200 / GB200: peaks, bandwidth, memory and NVLink 5 (900 GB/s each way) from NVIDIA's
    # HGX B200 / GB200 NVL72 datasheets (dense, without sparsity; GB200 per GPU: 13.4 TB / 72);
    # SM count 148 (not confirmed on a device). Efficiencies fitted
    # (simulator.cost.measured.gemm_fit.fit_efficiencies) to AIConfigurator's bf16 GEMM rows
    # at vLLM 0.24.0 (ai-dynamo/aiconfigurator 095f58a; m <= 2048, 1024 <= n, k <= 32768):
    # in-sample MAPE 23.8 % (B200) and 24.7 % (GB200); latencies and overhead are the
    # defaults (assumptions). The calibrated laws are the H100's, scaled (proxy).
    # GB200 checked against AIConfigurator's systems/gb200.yaml (095f58a: mem_bw 8 TB/s, bf16
    # 2500 / fp8 5000 TFLOP/s, 189471 MiB per nvidia-smi, 4 GPUs per compute tray, 72 per
    # NVLink rack at 900 GB/s each way) and MLCommons inference v6.1 (Crusoe GB200-NVL72
    # system: "NVIDIA GB200", 186 GB HBM3e, 4 per node); its tables' rates: 7.69 TB/s over
    # decode KV, 7.44 TB/s over GEMM weights (aic_mixed.cold_rate, aic_cold.gemm_rate), bf16
    # GEMMs up to 2.02 PFLOP/s. tp 2 / 4 all-reduce is timed (one tray); tp 8 spans two trays,
    # where vLLM's custom all-reduce turns itself off (custom_all_reduce.py: "spans across
    # nodes"; NCCL over the rack's NVLink): AIConfigurator times no 8-GPU row, so cost = "aic"
    # refuses tp 8 and auto falls to the roofline at this link_bw.
    Gpu(name="b200", description="NVIDIA B200 SXM 180GB (HGX)",
        peaks={"bf16": 2250 * TERA, "fp8": 4500 * TERA}, mem_bw=8.0 * TERA,
        memory_bytes=180 * GIGA, link="NVLink5 (1.8 TB/s bidirectional)", link_bw=900 * GIGA,
        sm_count=148, compute_capability=100, device_names=("NVIDIA B200",),
        aliases=("b200-sxm",), proxy="h100", efficiencies_fitted=True, compute_eff=0.63,
        memory_eff=0.57),
    Gpu(name="gb200", description="NVIDIA GB200 (one Blackwell GPU of an NVL72) 186GB",
        peaks={"bf16": 2500 * TERA, "fp8": 5000 * TERA}, mem_bw=8.0 * TERA,
        memory_bytes=186 * GIGA, link="NVLink5 (1.8 TB/s bidirectional)", link_bw=900 * GIGA,
        sm_count=148, compute_capability=100, device_names=("NVIDIA GB200",),
        proxy="h100", efficiencies_fitted=True, compute_eff=0.62, memory_eff=0.58),
    Gpu(name="a40", description="NVIDIA A40 48GB", peaks={"bf16": 149.7e12}, mem_bw=696e9,
        memory_bytes=48e9, link="NVLink bridge (112.5 GB/s bidirectional)", link_bw=56.25e9,
        sm_count=84, compute_capability=86, l2_bytes=6e6, device_names=("NVIDIA A40",),
        profiles="vidur", memory_eff=0.75, preset=False),
)

#: name -> row, in catalogue order.
GPUS: dict[str, Gpu] = {g.name: g for g in ROWS}
#: Every accepted spelling (aliases) -> the row's name.
ALIASES: dict[str, str] = {a: g.name for g in ROWS for a in g.aliases}
#: An engine's device name (a run's ``hardware.device_name``) -> the row's name.
DEVICE_NAMES: dict[str, str] = {d: g.name for g in ROWS for d in g.device_names}


def find_gpu(name: str) -> Gpu | None:
    """The row of ``name`` or one of its aliases (case-insensitive), or None."""
    key = str(name).lower()
    return GPUS.get(ALIASES.get(key, key))


def gpus_with(profiles: str) -> tuple[str, ...]:
    """Names of the rows calibrated by the measured source ``profiles`` (a key of SOURCES)."""
    return tuple(g.name for g in ROWS if g.profiles == profiles)


def proxy_of(name: str) -> str | None:
    """The row whose laws ``name`` borrows (None: its own data, or not in the catalogue)."""
    row = GPUS.get(name)
    return None if row is None else row.proxy


def allreduce_cluster(name: str) -> str | None:
    """The Vidur cluster whose NCCL curves price ``name``'s all-reduce, or None."""
    row = GPUS.get(name)
    return None if row is None else row.allreduce_cluster
