"""Where the calibrated cost model's numbers come from: the stored laws fitted on Vidur's
public profiles (:mod:`simulator.cost.measured.laws`), the measured NCCL all-reduce curves, the
validated errors, the bundled per-layer table cells, and how an MoE / MLA layer's GEMMs are laid
out for the laws. :mod:`simulator.cost.measured.calibrated_role` prices a pass from these (its
docstring states the model and its assumptions)."""

from __future__ import annotations

import functools
import json
from dataclasses import replace
from pathlib import Path

import numpy as np

from specbatch.errors import SpecbatchError
from specbatch.simulator.cost.gpus.catalogue import GPUS, allreduce_cluster, gpus_with, proxy_of
from specbatch.simulator.cost.measured.laws import (
    SMALL_OPS,
    GpuFit,
    LayerShape,
    embedding_seconds,
    fit_allreduce,
    fit_from_dict,
    fit_gpu,
    gemm_seconds,
    small_op_bytes,
)
from specbatch.simulator.cost.measured.validated import VALIDATION, validation  # noqa: F401
from specbatch.traces.models.model_shape import ModelShape
from specbatch.traces.public.vidur_profiles import (
    BUNDLED,
    OPS,
    load_profile_columns,
    load_public_profiles,
)

#: The laws fitted on every bundled model per GPU (benchmarks/cost_vs_public.py --write).
LAWS = Path(__file__).parent / "data" / "calibrated_laws.json"
#: vLLM's custom all-reduce (vllm/distributed/device_communicators/custom_all_reduce.py,
#: ``CustomAllreduce.should_custom_ar``): used instead of NCCL for messages up to its
#: ``max_size`` (8 MiB by default) on 2, 4, 6 or 8 NVLink-connected GPUs.
CUSTOM_AR_MAX_BYTES = 8 * 1024 * 1024
CUSTOM_AR_WORLDS = (2, 4, 6, 8)
LAYER_OPS = tuple(op for op in OPS if op != "emb")


def gpu_peaks(gpu: str) -> tuple[float, float]:
    """(datasheet dense bf16 FLOP/s, memory bytes/s) of ``gpu``'s catalogue row."""
    row = GPUS[gpu]
    return row.peak("bf16"), row.mem_bw


def proxied() -> tuple[str, ...]:
    """Catalogue rows priced from a Vidur-covered proxy's laws."""
    return tuple(g.name for g in GPUS.values() if g.proxy in gpus_with("vidur"))


@functools.lru_cache(maxsize=1)
def stored_laws() -> dict:
    """gpu -> :class:`GpuFit` from :data:`LAWS` ({} when absent: fit at first use)."""
    try:
        records = json.loads(LAWS.read_text())
    except (OSError, ValueError):
        return {}
    return {r["gpu"]: fit_from_dict(r) for r in records.get("gpus", [])}


@functools.lru_cache(maxsize=8)
def fitted_gpu(gpu: str) -> GpuFit:
    """The calibrated laws of ``gpu`` fitted on every bundled model measured on it (stored
    in :data:`LAWS`, refitted when absent); a GPU without data gets its catalogue proxy's law
    with β and π scaled by the datasheet ratios."""
    source = proxy_of(gpu) or gpu
    fit = stored_laws().get(source)
    if fit is None:
        profiles = load_public_profiles()
        if source not in set(profiles.compute["gpu"]):
            raise SpecbatchError(f"cost 'calibrated': no public profile or proxy for hardware "
                                 f"{gpu!r}; expected one of "
                                 f"{', '.join(gpus_with('vidur') + proxied())}")
        fit = fit_gpu(profiles.compute, source, gpu_peaks(source))
    if source == gpu:
        return fit
    (f0, b0), (f1, b1) = gpu_peaks(source), gpu_peaks(gpu)
    gemm = {op: replace(law, bandwidth=law.bandwidth * b1 / b0, flops=law.flops * f1 / f0,
                        sms=GPUS[gpu].sm_count) for op, law in fit.gemm.items()}  # same corrections
    return replace(fit, gpu=gpu, gemm=gemm)


@functools.lru_cache(maxsize=8)
def allreduce_curve(gpu: str, world: int) -> tuple[np.ndarray, np.ndarray] | None:
    """(half-octave size bins' median bytes [bins], median seconds [bins]) of the measured NCCL
    all-reduce of ``world`` GPUs in ``gpu``'s DGX cluster, or None where not measured."""
    net = load_profile_columns()["network"]
    cluster = allreduce_cluster(gpu)
    keep = ((net["cluster"] == cluster) & (net["collective"] == "all_reduce")
            & (net["world"] == world))  # [rows]
    if cluster is None or not keep.any():
        return None
    size = net["size_bytes"][keep].astype(np.float64)
    secs = 1e-3 * net["median_ms"][keep].astype(np.float64)
    bins = np.floor(2 * np.log2(size)).astype(int)  # half-octave bins
    keys = np.unique(bins)
    sizes = np.array([np.median(size[bins == b]) for b in keys])  # [bins]
    times = np.array([np.median(secs[bins == b]) for b in keys])  # [bins]
    return sizes, np.maximum.accumulate(times)  # a larger message never costs less


def curve_seconds(curve: tuple[np.ndarray, np.ndarray], nbytes: float) -> float:
    """The curve at ``nbytes``: log-log interpolation, linear in bytes beyond its edges'
    fitted law (t = α + s/γ)."""
    sizes, times = curve
    if nbytes <= sizes[0]:
        return float(times[0])
    if nbytes >= sizes[-1]:
        law = fit_allreduce(sizes[-4:], times[-4:])
        return float(times[-1] + (nbytes - sizes[-1]) / law.bandwidth)
    return float(np.exp(np.interp(np.log(nbytes), np.log(sizes), np.log(times))))


def sparse(shape: ModelShape) -> bool:
    """A shape outside the public table's dense family (MoE, MLA, explicit head_dim)."""
    return bool(shape.is_moe or shape.is_mla or shape.attention_head_dim)


def sparse_gemms(shape: ModelShape, tp: int, q: float, touched: float) -> list:
    """(law, Q rows, K, N, layers, kind) of every GEMM of a MoE / MLA / explicit-head_dim
    shape's decoder layers (module docstring): attention as QKV + O (MLA: one GEMM of its
    attention weights, K = h); dense layers' MLP; on each of the M MoE layers the router,
    the shared MLP and the E_touched routed experts as one grouped GEMM of Q k / E_touched
    rows each (same weight bytes and FLOPs as the experts the pass touches). ``kind`` is
    "projection", "router" or "expert" (which weights a quantised format stores smaller:
    simulator.cost.analytic.precision)."""
    h, L, M = shape.hidden, shape.layers, shape.moe_layers if shape.is_moe else 0
    out = []
    if shape.is_mla:
        out.append(("attn_pre_proj", q, h, shape.attention_params / h / tp, L, "projection"))
    else:
        d_kv = shape.kv_heads * shape.head_dim
        out.append(("attn_pre_proj", q, h, (shape.q_width + 2 * d_kv) / tp, L, "projection"))
        out.append(("attn_post_proj", q, shape.q_width / tp, h, L, "projection"))
    if L - M:
        out.append(("mlp_up_proj", q, h, 2 * shape.intermediate / tp, L - M, "projection"))
        out.append(("mlp_down_proj", q, shape.intermediate / tp, h, L - M, "projection"))
    if M:
        out.append(("mlp_up_proj", q, h, shape.experts, M, "router"))  # replicated
        if shape.shared_intermediate:
            out.append(("mlp_up_proj", q, h, 2 * shape.shared_intermediate / tp, M,
                        "projection"))
            out.append(("mlp_down_proj", q, shape.shared_intermediate / tp, h, M, "projection"))
        if touched > 0:
            rows = q * shape.top_k / touched
            width = touched * shape.expert_intermediate / tp
            out.append(("mlp_up_proj", rows, h, 2 * width, M, "expert"))
            out.append(("mlp_down_proj", rows, width, h, M, "expert"))
    return out


def sparse_layers(fit: GpuFit, shape: ModelShape, tp: int, q: float, touched: float,
                  scales: dict | None = None) -> float:
    """layers(Q) of a :func:`sparse` shape: its GEMMs (:func:`sparse_gemms`) by the fitted
    laws, the small ops by theirs (the activation over k I_e + I_s on MoE layers).
    ``scales`` maps a GEMM kind to (byte ratio, compute speed-up) of a quantised format
    (:func:`scaled_gemm_seconds`); None or a kind absent: the bf16 law."""
    total = 0.0
    for op, rows, k, n, count, kind in sparse_gemms(shape, tp, q, touched):
        scale = None if scales is None else scales.get(kind)
        ra = np.array([rows])
        secs = (gemm_seconds(fit, op, ra, k, n) if scale is None
                else scaled_gemm_seconds(fit, op, ra, k, n, *scale))
        total += count * float(secs[0])
    qa = np.array([q])
    M = shape.moe_layers if shape.is_moe else 0
    widths = ((shape.layers - M, shape.intermediate),
              (M, shape.top_k * shape.expert_intermediate + shape.shared_intermediate))
    for count, width in widths:
        if not count:
            continue
        ls = LayerShape(shape.hidden, shape.heads, shape.kv_heads, width, shape.vocab)
        for op in SMALL_OPS:
            if op != "emb":
                total += count * float(fit.small[op].seconds(
                    small_op_bytes(op, ls, tp, qa), qa)[0])
    ls = layer_shape(shape)
    return float(embedding_seconds(fit, ls, tp, qa)[0]) + total


def sparse_expert_seconds(fit: GpuFit, shape: ModelShape, tp: int, q: float, touched: float,
                          scales: dict | None = None) -> float:
    """The routed experts' share of :func:`sparse_layers`: its ``expert`` GEMMs alone (what
    ``cost show`` names ``experts``)."""
    total = 0.0
    for op, rows, k, n, count, kind in sparse_gemms(shape, tp, q, touched):
        if kind == "expert":
            scale = None if scales is None else scales.get(kind)
            ra = np.array([rows])
            secs = (gemm_seconds(fit, op, ra, k, n) if scale is None
                    else scaled_gemm_seconds(fit, op, ra, k, n, *scale))
            total += count * float(secs[0])
    return total


def scaled_gemm_seconds(fit: GpuFit, op: str, qa: np.ndarray, k, n, ratio: float,
                        speed: float) -> np.ndarray:
    """The law's GEMM seconds re-priced for weights of ``ratio`` x the bf16 bytes (stream
    term: bandwidth β / ratio) and ``speed`` x the bf16 FLOP rate (compute term: π · speed),
    never above the bf16 law's: ``full · law'(q) / law(q)`` capped at ``full``. A roofline
    projection of a law fitted on bf16 data.  qa # [rows]"""
    law = fit.gemm[op]
    full = gemm_seconds(fit, op, qa, k, n)
    light = full * (replace(law, bandwidth=law.bandwidth / ratio, flops=law.flops * speed)
                    .seconds(qa, k, n) / law.seconds(qa, k, n))
    return np.minimum(full, light)


def uses_custom_allreduce(tp: int, nbytes: float) -> bool:
    """vLLM's choice of its custom all-reduce over NCCL (:data:`CUSTOM_AR_MAX_BYTES`)."""
    return tp in CUSTOM_AR_WORLDS and nbytes <= CUSTOM_AR_MAX_BYTES


def layer_shape(shape: ModelShape) -> LayerShape:
    return LayerShape(shape.hidden, shape.heads, shape.kv_heads, shape.intermediate,
                      shape.vocab, True)


@functools.lru_cache(maxsize=4)
def profile_table(folder: str | None) -> dict[str, np.ndarray]:
    """The compute table of a folder written by ``specbatch cost import-vidur`` (None: the
    bundled Vidur table), column -> values [rows]."""
    return load_profile_columns(BUNDLED if folder is None else folder)["compute"]


def find_cell(gpu: str, shape: ModelShape, tp: int, folder: str | None = None
              ) -> tuple[str, dict[str, np.ndarray]] | None:
    """(model name, its rows as columns [rows] sorted by num_tokens) of the cell pricing
    ``shape`` on ``tp`` ``gpu`` GPUs in ``folder``'s table (None: the bundled one), or None
    (the cell must match hidden, heads, KV heads and MLP width, and the GPU folder name the
    hardware preset's)."""
    c = profile_table(folder)
    keep = ((c["gpu"] == gpu) & (c["tp"] == tp) & (c["n_embd"] == shape.hidden)
            & (c["n_head"] == shape.heads) & (c["n_kv_head"] == shape.kv_heads)
            & (c["n_expanded_embd"] == shape.intermediate) & c["gated"])  # [rows]
    if not keep.any():
        return None
    model = sorted(set(c["model"][keep]))[0]
    rows = np.flatnonzero(keep & (c["model"] == model))
    rows = rows[np.argsort(c["num_tokens"][rows], kind="stable")]
    return model, {col: values[rows] for col, values in c.items()}
