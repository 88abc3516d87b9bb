"""The AIConfigurator cost model (``cost = "aic"``): every op from measured vLLM kernel tables.

AIConfigurator (github ai-dynamo/aiconfigurator, Apache-2.0, commit 095f58a) times single ops
inside vLLM per GPU and vLLM version; the rows a default deployment needs are bundled
(traces/data/aiconfigurator/curves, simulator.cost.measured.aic_curves). One forward pass of
a role is priced as calibrated composes it (simulator.cost.measured.calibrated)::

    t = ((layers(Q) + attention(sums)) + allreduce(Q)) + lm_head(r) + launch

- ``layers``: the per-layer GEMMs of the role's shard from the measured curve of that exact
  (n, k) where timed, else the transfer from the nearest timed shapes; a mixture of experts'
  routed experts from the measured ``FusedMoE`` table (at the dtype of the rows that time
  vLLM's kernel for the checkpoint: :func:`moe_dtype`); the small ops (norms with their
  fused residual add, rotary, activation, embedding) from the calibrated small-op laws
  (simulator.cost.measured.aic_pricer);
- ``attention``: one :class:`~simulator.cost.tabulated.AttentionLaw` over the batch sums
  fitted to the decode and prefill tables together (simulator.cost.measured.aic_attention);
  a model with L_s of L layers sliding over a W-token window pays the law's (L − L_s)/L share
  at the full sums and its L_s/L share at the sums a sliding layer presents (below);
- ``allreduce`` (tp > 1): 2 L + 1 (two per layer, the embedding's) from the measured
  CUDA-graph all-reduce curve;
- ``lm_head``: the bf16 GEMM n = V / tp, k = h at the r logit rows the engine names;
- ``launch``: the execution preset's floors, as calibrated (CUDA graphs: a host floor the GPU
  work hides; eager: a fixed cost).

Sliding-window layers (Mistral-7B-v0.1, Gemma-3, gpt-oss, Llama-4's chunked local attention)
are priced from the full-attention tables (aic_pricer.AicPricer.attention_at). Exact: which
keys a sliding layer's query reads (vLLM's FlashAttention backend passes a layer's
``sliding_window`` as flash-attn ``window_size = (W − 1, 0)``, FlashAttentionImpl.__init__:
keys (p − W, p]), so its cached keys K^W = Σ min(c, W − 1) and query-key pairs
(simulator.cost.analytic.window; on an FA3 GPU, H100 / H200, the products its tiles compute,
simulator.cost.measured.aic_fa3_window); the law is its per-layer cells times L, so the share
is per layer. A decode is the decode cell at the windowed mean context K^W / n. A
multi-token request (simulator.cost.measured.aic_window_prefill) is its first min(q, W)
tokens as the causal prefill they are (the grid's cell), the pairs past its first query
against the cached keys the window holds at the law's per-pair term, and α_B per token plus
β_B per local product past W: α_B, β_B fitted by non-negative least squares on the GPU's own
causal prefill cells (ΔP(B, s) ≈ α_B B s + β_B B P(s)), nothing on windowed rows (the bundled
tables hold none: aic_curves keeps ``window = 0``). Judged, held out, on AIConfigurator's H100
windowed FA3 rows (benchmarks/aic_window.py, docs/fidelity.md): prefill where the window
binds MAPE 16.5 / 18.5 % (W = 128, bf16 / fp8 KV; mean +12.7 / +12.0 %), 15.0 / 13.3 %
(1024), 3.5 / 4.8 % (8192), against 36-37 % low (and below zero past ~10k tokens) when the
grid was read at the windowed pairs; decodes low where the window binds (−8 to −28 % mean:
the local kernel's own per-call step, not derived, not fitted); +6 to +357 % with the window
ignored.
Chunked local attention (hf_llama4) priced as a window: exact while every c + q <= W, an upper
bound beyond. A sliding role's attention needs the window sums, so such a model has no
tabulated form (:meth:`AicCost.table_gap`: the numpy engine prices it from arrays).

:func:`aic_covers` says whether the bundled tables cover a deployment (None) or what is missing
(a GPU without tables, MLA of other widths than the tables' or a KV dtype or head count they
lack, weight formats other than bf16, fp8 and MXFP4 experts, an fp8 MoE of a scale scheme no
bundled fp8 MoE rows time vLLM's kernel for on that GPU (aic_moe_rows.FP8_MOE_TIMED), MXFP4
experts where the bundled rows are not of the kernel vLLM runs there or not at their shape
(aic_moe_rows.mxfp4_moe_rows), a tp without an
all-reduce curve, a quantised draft; MLA's attention: simulator.cost.measured.aic_mla);
:class:`AicCost` refuses the same with a one-line error. Validated errors (held out,
benchmarks/cost_vs_aic.py ``--validate``) are read from
``simulator/cost/measured/data/aic_validation.json`` and reported by :meth:`sources`.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from specbatch.errors import SpecbatchError
from specbatch.simulator.cost.analytic.memory import memory_kv_tokens
from specbatch.simulator.cost.analytic.precision import (
    KV_CACHE_DTYPES,
    resolve_quantization,
)
from specbatch.simulator.cost.analytic.window import batch_window_sums
from specbatch.simulator.cost.gpus.catalogue import GPUS
from specbatch.simulator.cost.gpus.hardware import (
    DEFAULT_EXECUTION,
    FULL_WEIGHT_BITS,
    Hardware,
    launch_terms,
    settle_execution,
)
from specbatch.simulator.cost.interface import ROLES, batch_sums, for_role
from specbatch.simulator.cost.measured import aic_cache
from specbatch.simulator.cost.measured.aic_curves import HEAD_DIMS, curve_files, load_curves
from specbatch.simulator.cost.measured.aic_import import AIC_PRESETS, bundled_laws
from specbatch.simulator.cost.measured.aic_mla import CORE_DIMS, eager_mla
from specbatch.simulator.cost.measured.aic_mla import coverage as mla_coverage
from specbatch.simulator.cost.measured.aic_moe_rows import (
    GEMM_DTYPE,
    experts_key,
    moe_dtype,
    moe_transfer,
    timed_experts,
)
from specbatch.simulator.cost.measured.aic_pricer import AicPricer
from specbatch.simulator.cost.measured.sources import fitted_gpu
from specbatch.simulator.cost.tabulated import PassTable
from specbatch.traces.models.model_shape import ModelShape

VALIDATION = Path(__file__).parent / "data" / "aic_validation.json"
#: This package's hardware preset -> AIConfigurator's system name.
SYSTEM_OF = {preset: system for system, preset in AIC_PRESETS.items()}
#: Where a GPU has no calibrated small-op laws of its own or a proxy's: H100's, byte term
#: scaled by the bandwidth ratio.
SMALL_OP_PROXY = "h100"


def kv_table_dtype(kv_cache_dtype: str) -> str | None:
    """The attention tables' KV dtype of vLLM's ``--kv-cache-dtype`` (None: unknown)."""
    name = str(kv_cache_dtype).lower()
    if name not in KV_CACHE_DTYPES:
        return None
    return "bfloat16" if name == "auto" else "fp8"


def coverage_of(curves: dict) -> dict:
    """What a system's curves (family -> DataFrame) hold, as plain lists: the families, the
    GEMM and MoE dtypes, per attention family each KV dtype's head widths, the all-reduce GPU
    counts (what :func:`aic_covers` asks)."""
    out = {"families": sorted(curves)}
    for fam in ("gemm", "moe"):
        if fam in curves:
            out[fam] = sorted({str(v) for v in curves[fam]["dtype"].unique()})
    for fam in ("attention_decode", "attention_prefill"):
        if fam in curves:
            frame = curves[fam]
            out[fam] = {str(kv): sorted({int(w) for w in frame["head_dim"][
                frame["kv_dtype"] == kv].unique()}) for kv in frame["kv_dtype"].unique()}
    if "moe" in curves:
        kinds = curves["moe"][["dtype", "kernel"]].astype(str).drop_duplicates()
        out["moe_kernels"] = dict(zip(kinds["dtype"], kinds["kernel"], strict=True))
        cols = ["hidden", "inter", "experts", "topk"]
        out["moe_shapes"] = {str(dtype): sorted([int(v) for v in row] for row in
                                                sub[cols].drop_duplicates().to_numpy())
                             for dtype, sub in curves["moe"].groupby("dtype", observed=True)}
    if "allreduce" in curves:
        out["allreduce"] = sorted({int(v) for v in curves["allreduce"]["num_gpus"].unique()})
    return out


@functools.lru_cache(maxsize=16)
def curve_coverage(system: str) -> dict:
    """:func:`coverage_of` the bundled curves of ``system`` ({} when none), kept in the cache
    folder (simulator.cost.measured.aic_cache): ``auto``'s check reads no curve file."""
    if not curve_files(system):
        return {}
    return aic_cache.entry("coverage", system, (), lambda: coverage_of(load_curves(system)),
                           lambda d: d, dict)


def aic_covers(hardware_name: str, target_shape: ModelShape, draft_shape: ModelShape | None,
               tp: int, quantization: str = "none", kv_cache_dtype: str = "auto",
               draft_tp: int = 1, draft_weight_bits: int = FULL_WEIGHT_BITS) -> str | None:
    """None when the bundled AIConfigurator tables cover this deployment, else the reason
    (one line naming what is missing): the lead's default resolver falls back on it."""
    system = SYSTEM_OF.get(str(hardware_name).lower())
    if system is None:
        covered = sorted(p for s, p in AIC_PRESETS.items() if curve_files(s))
        return (f"hardware {hardware_name!r} has no AIConfigurator vLLM tables bundled "
                f"(covered: {', '.join(covered)})")
    curves = curve_coverage(system)
    if not curves or system not in bundled_laws():
        return f"hardware {hardware_name!r}: no curves of {system} bundled"
    if int(draft_weight_bits) < FULL_WEIGHT_BITS:
        return f"draft_weight_bits {draft_weight_bits}: no table of int-quantised weights"
    kv = kv_table_dtype(kv_cache_dtype)
    if kv is None:
        return f"kv_cache_dtype {kv_cache_dtype!r}: expected one of {', '.join(KV_CACHE_DTYPES)}"
    roles = [("target", target_shape, tp, str(quantization).lower())]
    if draft_shape is not None:
        roles.append(("draft", draft_shape, draft_tp, "none"))
    for role, shape, role_tp, quant in roles:
        what = f"{role} {shape.name}"
        if shape.is_mla:
            reason = mla_covers(system, shape, kv, role_tp)
            if reason is not None:
                return f"{what}: {reason}"
        quant = shape.quantization if shape.quantization != "none" else quant
        dtype = GEMM_DTYPE.get(quant)
        if dtype is None:
            return (f"{what}: weight format {quant!r} has no bundled table (bf16, fp8 and "
                    "MXFP4 experts only)")
        if dtype not in curves.get("gemm", ()):
            return f"{what}: no {dtype} GEMM table on {system}"
        if shape.is_moe:
            capability = GPUS[str(hardware_name).lower()].compute_capability
            moe, reason = moe_dtype(curves, shape, quant, capability)
            if reason is not None:
                return f"{what}: {reason} on {system}"
            if moe not in curves.get("moe", ()):
                return f"{what}: no {moe} MoE table on {system}"
        if not shape.is_mla and shape.head_dim not in HEAD_DIMS:
            return f"{what}: head width {shape.head_dim} not in the attention tables"
        for fam in () if shape.is_mla else ("attention_decode", "attention_prefill"):
            widths = curves.get(fam, {})
            if kv not in widths:
                return f"{what}: no {kv} KV {fam} table on {system}"
            if shape.head_dim not in widths[kv]:
                return (f"{what}: no {kv} KV {fam} rows at head width {shape.head_dim} on "
                        f"{system}")
        if role_tp > 1:
            if role_tp not in curves.get("allreduce", ()):
                return f"{what}: no all-reduce curve of {role_tp} GPUs on {system}"
        if shape.heads % role_tp or (shape.kv_heads >= role_tp and shape.kv_heads % role_tp):
            return (f"{what}: {shape.heads} heads / {shape.kv_heads} KV heads do not split "
                    f"{role_tp} ways")
    return None


def mla_covers(system: str, shape: ModelShape, kv: str, tp: int) -> str | None:
    """None when ``system``'s MLA tables price ``shape``'s latent attention at ``tp`` (its
    core widths are the tables' DeepSeek-V3 ones, aic_mla.CORE_DIMS; the KV dtype's cells span
    a grid at some head count, between 1 and twice the widest timed one per GPU), else why."""
    dims = (shape.kv_lora_rank, shape.qk_rope_head_dim, shape.qk_nope_head_dim,
            shape.v_head_dim)
    if dims != CORE_DIMS:
        return (f"MLA widths (kv_lora_rank, rope, nope, v) {dims}: the tables time "
                f"{CORE_DIMS} only")
    heads = mla_coverage(system).get(kv)
    if not heads:
        if eager_mla(system, kv):
            return (f"{system}'s {kv} KV MLA rows are eager kernel timings (AIConfigurator's "
                    f"legacy collect_mla.py, no CUDA graph: a ~0.3 ms host floor), not a "
                    f"CUDA-graph forward")
        return f"no {kv} KV MLA table on {system}"
    per_gpu = shape.heads // tp
    if shape.heads % tp or not 1 <= per_gpu <= 2 * max(heads):
        return f"{shape.heads} MLA heads over tp {tp}: the {kv} tables time {heads} per GPU"
    return None


def validation() -> dict:
    """The held-out errors benchmarks/cost_vs_aic.py --validate wrote ({} when absent)."""
    from specbatch.simulator.cost.measured.validated import read_errors

    return read_errors(VALIDATION)


@dataclass(frozen=True)
class AicCost:
    """Step times from AIConfigurator's measured vLLM op tables (module docstring); a
    :class:`~simulator.cost.interface.SumsCostModel` with a tabulated form."""

    hardware: Hardware
    target: ModelShape
    draft: ModelShape
    tp: int = 1
    draft_tp: int = 1
    overhead: float = field(default=math.nan)
    execution: str = DEFAULT_EXECUTION
    quantization: str = "none"
    kv_cache_dtype: str = "auto"
    draft_weight_bits: int = FULL_WEIGHT_BITS
    roles: dict = field(default=None, repr=False, compare=False)  # role -> AicPricer

    #: The engine may pass a pass's logit rows (simulator.cost.analytic.roofline).
    logit_rows = True

    def __post_init__(self) -> None:
        ex = settle_execution(self)
        reason = aic_covers(self.hardware.name, self.target, self.draft, self.tp,
                            self.quantization, self.kv_cache_dtype, self.draft_tp,
                            self.draft_weight_bits)
        if reason is not None:
            raise SpecbatchError(f"cost 'aic': {reason}")
        object.__setattr__(self, "target", resolve_quantization(self.quantization, self.target))
        system = SYSTEM_OF[self.hardware.name]
        small, scale = small_op_laws(self.hardware)
        kv = kv_table_dtype(self.kv_cache_dtype)
        roles = {}
        for role, shape, tp in (("target", self.target, self.tp),
                                ("draft", self.draft, self.draft_tp)):
            quant = shape.quantization if role == "target" else "none"
            if shape.quantization == "mxfp4":  # the draft's own MXFP4 experts, as aic_covers
                quant = "mxfp4"
            moe = (moe_dtype(curve_coverage(system), shape, quant,
                             self.hardware.compute_capability)[0] if shape.is_moe else "")
            roles[role] = AicPricer(shape=shape, tp=int(tp), hw=self.hardware, system=system,
                                    gemm_dtype=GEMM_DTYPE[quant], kv_dtype=kv, small=small,
                                    small_scale=scale, moe_dtype=moe,
                                    launch=launch_terms(ex, role, self.hardware, shape.layers))
        object.__setattr__(self, "roles", roles)

    @property
    def system(self) -> str:
        return SYSTEM_OF[self.hardware.name]

    @property
    def windowed(self) -> bool:
        """Whether a role has sliding-window layers (priced from arrays: the engine calls
        :meth:`step_time`, simulator.cost.interface.sums_path; RooflineCost.windowed)."""
        return any(r.shape.sliding_layers for r in self.roles.values())

    def step_time(self, role: str, query: np.ndarray, kv: np.ndarray,
                  rows: float | None = None) -> float:
        """Seconds of one pass; ``query`` [n] new tokens, ``kv`` [n] cached tokens, ``rows``
        the logit rows (None: Σq)."""
        r = self.roles.get(role)
        if r is not None and r.shape.sliding_layers:
            *sums, window = batch_window_sums(query, kv, r.shape.sliding_window)
            return self.time_from_sums(role, *sums, window=r.window_sums(query, kv, window),
                                       rows=rows)
        return self.time_from_sums(role, *batch_sums(query, kv), rows=rows)

    def time_from_sums(self, role: str, n: int, sq: float, skv: float, sqkv: float,
                       sqq: float, window: tuple[float, float] | None = None,
                       rows: float | None = None) -> float:
        """:meth:`step_time` from the batch sums: simulator.cost.tabulated.table_time's
        expressions on the role's memoised parts (bit-identical to its :meth:`pass_table`); a
        role with sliding-window layers also needs ``window`` = (K^W, P^W)
        (simulator.cost.analytic.window)."""
        r = self.roles.get(role)
        if r is None:
            r = for_role(self.roles, role)
        return r.total(n, sq, skv, sqkv, sqq, rows, window)

    def table_gap(self, role: str) -> str | None:
        """Why the role's pass has no tabulated form (the compiled loop asks): a role with
        sliding-window layers (its attention needs the window sums K^W, P^W, which the batch
        sums do not determine); else None."""
        r = for_role(self.roles, role)
        if r.shape.sliding_layers:
            return f"{r.shape.name}'s sliding-window layers"
        return None

    def pass_table(self, role: str, max_tokens: int) -> PassTable | None:
        """The role's pass in tabulated form for Q = 0..``max_tokens``, or None where it has
        none (:meth:`table_gap`)."""
        if self.table_gap(role) is not None:
            return None
        return for_role(self.roles, role).pass_table(int(max_tokens))

    def breakdown(self, role: str, query: np.ndarray, kv: np.ndarray,
                  rows: float | None = None) -> dict:
        """Seconds per part (``layers``, ``attention``, ``experts``, ``allreduce``,
        ``lm_head``, ``launch``), summing to :meth:`step_time`."""
        r = for_role(self.roles, role)
        if r.shape.sliding_layers:
            *sums, window = batch_window_sums(query, kv, r.shape.sliding_window)
            return r.split(*sums, rows, r.window_sums(query, kv, window))
        n, sq, skv, sqkv, sqq = batch_sums(np.asarray(query), np.asarray(kv))
        return r.split(n, sq, skv, sqkv, sqq, rows)

    def kv_capacity_tokens(self, gpu_memory_utilization: float = 0.9, block_size: int = 16,
                           disable_hybrid_kv_cache_manager: bool = False) -> int:
        """KV-cache tokens next to both models' weights (the roofline's accounting)."""
        return memory_kv_tokens(self.hardware, self.target, self.draft, self.tp,
                                gpu_memory_utilization, self.draft_weight_bits,
                                self.kv_cache_dtype, block_size, disable_hybrid_kv_cache_manager)

    def sources(self) -> dict:
        """Per role: which source priced each part and its validated (held-out) error."""
        return {role: role_sources(self.roles[role], self.hardware.name, bundled_laws()[
            self.system][0]) for role in ROLES}


def small_op_laws(hw: Hardware):
    """(calibrated fit whose small-op laws price the ops the tables do not time, byte-term
    scale): the GPU's own or its proxy's; else H100's scaled by the bandwidth ratio."""
    try:
        return fitted_gpu(hw.name), 1.0
    except SpecbatchError:
        return fitted_gpu(SMALL_OP_PROXY), GPUS[SMALL_OP_PROXY].mem_bw / GPUS[hw.name].mem_bw


def checked(key: str) -> dict | None:
    return validation().get(key)


def experts_checked(r: AicPricer, source: str) -> dict | None:
    """The held-out record of the estimator that built the experts curve (``source``): the
    measured curve's (each grid point left out); a transfer's, each timed shape left out where
    the model's (h, I, E, k) is timed at another split, else each timed model left out whole
    (what a model the tables do not time gets: its MAPE and p90 in place of the shape ones)."""
    key = f"{r.system}|moe|{r.experts_dtype}"
    if source.startswith("measured"):
        return checked(f"{key}|measured")
    rec = checked(f"{key}|transfer")
    timed, _ = timed_experts(curve_coverage(r.system), r.experts_dtype)
    if rec is None or "model_mape" not in rec or experts_key(r.shape) in [list(t) for t in timed]:
        return rec
    return {**rec, "mape": rec["model_mape"], "p90": rec["model_p90"],
            "check": "each timed model left out whole, every split priced from the other "
                     "models (this model is timed at no split)"}


def role_sources(r: AicPricer, gpu: str, version: str) -> dict:
    """The source record of one role (:meth:`AicCost.sources`)."""
    sysv = f"AIConfigurator {r.system} vLLM {version}"
    gemms = {}
    for name, (count, curve) in r.curves.items():
        gemms[name] = {"per_pass": count, "source": curve.source}
    measured = sum(1 for c in r.curves.values() if c[1].source.startswith("measured"))
    fam = f"{r.system}|gemm|{r.gemm_dtype}"
    estimator = "measured" if measured == len(r.curves) else "transfer"
    fitted_on = ("this head shape's measured cells" if r.attention_how == "shape"
                 else r.attention_how)
    small_src = ("calibrated small-op laws (Vidur profiles, "
                 f"{'own or proxy' if r.small_scale == 1.0 else 'H100 scaled by bandwidth'})")
    out = {"model": r.shape.name, "tp": r.tp,
           "summary": f"{sysv} measured op tables ({measured} of {len(r.curves)} layer ops "
                      "timed at their exact shape, the rest transferred)",
           "layers": {"source": f"{sysv} GEMM curves ({r.gemm_dtype}) + {small_src}",
                      "ops": gemms,
                      # the worse estimator the layer ops use: transfer where any op is moved
                      "validated": checked(f"{fam}|{estimator}") or checked(fam),
                      "small_ops": {"source": small_src, "not_validated": "against AIC"}},
           "attention": {"source": f"{sysv} decode + prefill tables, a grid law over the "
                                   f"batch sums ({r.kv_dtype} KV; {fitted_on})",
                         "validated": checked(f"{r.system}|attention|{r.kv_dtype}")},
           "lm_head": {"source": f"{sysv} bf16 GEMM, {r.head_curve.source}",
                       "validated": checked(f"{r.system}|gemm|bfloat16|transfer")},
           "launch": {"source": "execution preset (hardware.EXECUTIONS; as calibrated)"}}
    if r.shape.is_windowed:
        out["attention"]["window"] = (
            f"{r.shape.sliding_layers} of {r.shape.layers} layers within a "
            f"{r.shape.sliding_window}-token window: that share of the law as a sliding layer "
            "runs (decodes at the windowed keys; a prompt's first W tokens at the grid's cell, "
            "the rest at α_B per token + β_B per local product, split from the GPU's causal "
            "prefill cells: aic_window_prefill; nothing fitted on windowed rows); judged on "
            "AIConfigurator's H100 windowed FA3 rows (benchmarks/aic_window.py): prefill "
            "MAPE 3.5-18.5 % (mean -3.6 to +12.7 %), decode -8 to -28 % where the window binds")
    if r.shape.is_mla:
        out["attention"] = {"source": f"{sysv} MLA module tables less DeepSeek-V3's "
                                      f"projections, a grid law over the batch sums "
                                      f"({r.kv_dtype} KV; {r.attention_how})",
                            "validated": checked(f"{r.system}|mla|{r.kv_dtype}")}
    if r.shape.is_moe:
        curve = r.curves["experts"][1]
        out["experts"] = {"source": f"{sysv} {r.experts_dtype} {curve.source}",
                          "validated": experts_checked(r, curve.source)}
        note = moe_transfer(r.shape, r.hw.compute_capability)
        if note:
            out["experts"]["transfer"] = note
    if r.allreduce_curve is not None:
        out["allreduce"] = {"source": f"{sysv} CUDA-graph all-reduce curve, {r.tp} GPUs "
                                      "(log-log in bytes)",
                            "validated": checked(f"{r.system}|allreduce")}
    else:
        out["allreduce"] = {"source": "none (tp 1)"}
    return out
