"""Step-time cost models by name, and the step-time table ``specbatch cost show`` prints.

The interface (:class:`CostModel`, :class:`SumsCostModel`, :func:`batch_sums`) is
:mod:`simulator.cost.interface`; the models are :mod:`simulator.cost.analytic.roofline` (analytic,
from a hardware preset and model shapes) and :mod:`simulator.cost.measured.profiled` (fitted to a
measured latency profile). This module builds one by name (:func:`build_cost_model`) and prices the
steps ``specbatch cost show`` prints; import each model's names from its own module.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from specbatch.errors import SpecbatchError, require
from specbatch.simulator.cost.analytic.memory import memory_kv_tokens
from specbatch.simulator.cost.analytic.precision import resolve_quantization
from specbatch.simulator.cost.analytic.roofline import RooflineCost
from specbatch.simulator.cost.features.free_draft import FreeDraftCost
from specbatch.simulator.cost.gpus.hardware import (
    DEFAULT_EXECUTION,
    FULL_WEIGHT_BITS,
    QUANT_GROUP,
    get_execution,
    get_hardware,
)
from specbatch.simulator.cost.interface import ROLES, CostModel, takes_logit_rows
from specbatch.simulator.cost.measured.profiled import (
    fit_profile,
)
from specbatch.simulator.cost.resolve import AUTO, CostAsk, CostChoice, resolve_cost
from specbatch.simulator.cost.verify_cost import VerifyCost
from specbatch.simulator.defaults import FREE_DRAFTS, HEAD_DRAFTS
from specbatch.traces.models.shapes import get_shape

if TYPE_CHECKING:
    from specbatch.simulator.config.sim_config import SimConfig
    from specbatch.traces.format.trace import Trace

__all__ = [
    "COST_MODELS", "COST_NAMES", "build_cost_model", "execution_info", "pass_times", "prefill_time",
    "recorded_quantization", "run_cost", "step_split", "weight_bits_notes",
]


def build_roofline(hardware: str, target: str, draft: str, tp: int, profile: str | None,
                   execution: str = DEFAULT_EXECUTION,
                   draft_weight_bits: int = FULL_WEIGHT_BITS, routing_skew: float = 0.0,
                   quantization: str = "none", kv_cache_dtype: str = "auto"):
    """The roofline model of ``target`` (tensor parallel ``tp``, its weights in
    ``quantization``, simulator.cost.analytic.precision) and ``draft`` (its linear projections at
    ``draft_weight_bits``, simulator.cost.analytic.roofline) on ``hardware`` under the ``execution``
    preset (hardware.EXECUTIONS: "cuda_graph" or "eager"), the KV cache at ``kv_cache_dtype``;
    a mixture-of-experts model's expert loads follow the Zipf law of ``routing_skew`` (0:
    uniform; theory.moe)."""
    return RooflineCost(get_hardware(hardware), get_shape(target), get_shape(draft), tp=tp,
                        execution=execution, draft_weight_bits=draft_weight_bits,
                        routing_skew=routing_skew, quantization=quantization,
                        kv_cache_dtype=kv_cache_dtype)


def build_profiled(hardware: str, target: str, draft: str, tp: int, profile: str | None,
                   execution: str = DEFAULT_EXECUTION,
                   draft_weight_bits: int = FULL_WEIGHT_BITS, routing_skew: float = 0.0,
                   quantization: str = "none", kv_cache_dtype: str = "auto"):
    """The model fitted to ``profile``, rows selected by model and device names (the profile
    measured its own execution mode and the draft at the precision it ran, so neither
    ``execution`` nor a ``draft_weight_bits`` other than 16 applies: the latter is refused)."""
    require(profile is not None, "cost 'profiled': expected a latency profile (profile = PATH)")
    require(draft_weight_bits >= FULL_WEIGHT_BITS,
            f"cost 'profiled': draft_weight_bits {draft_weight_bits} prices the roofline's "
            "weight bytes only (a profile measured the draft at the precision it ran); "
            "expected 16")
    require(routing_skew == 0, f"cost 'profiled': routing_skew {routing_skew!r} prices the "
            "roofline's expert weight traffic only; expected 0")
    check_profiled_precision(quantization, kv_cache_dtype)
    return fit_profile(profile, overhead=get_hardware(hardware).overhead, target=target,
                       draft=draft, device=hardware)


def build_calibrated(hardware: str, target: str, draft: str, tp: int, profile: str | None,
                     execution: str = DEFAULT_EXECUTION,
                     draft_weight_bits: int = FULL_WEIGHT_BITS, routing_skew: float = 0.0,
                     quantization: str = "none", kv_cache_dtype: str = "auto"):
    """The calibrated model (simulator.cost.measured.calibrated): a profile cell where one covers a
    role's (GPU, tp, layer shape): ``profile``'s (a folder from ``specbatch cost import-vidur``)
    first, then the bundled Vidur table's; the calibrated roofline elsewhere (a quantised target
    always: the profiles are bf16)."""
    from specbatch.simulator.cost.measured.calibrated import CalibratedCost

    return CalibratedCost(get_hardware(hardware), get_shape(target), get_shape(draft), tp=tp,
                          execution=execution, draft_weight_bits=draft_weight_bits,
                          profile=profile, routing_skew=routing_skew,
                          quantization=quantization, kv_cache_dtype=kv_cache_dtype)


def build_aic(hardware: str, target: str, draft: str, tp: int, profile: str | None,
              execution: str = DEFAULT_EXECUTION, draft_weight_bits: int = FULL_WEIGHT_BITS,
              routing_skew: float = 0.0, quantization: str = "none",
              kv_cache_dtype: str = "auto"):
    """The AIConfigurator model (simulator.cost.measured.aic_cost): every op from the bundled
    measured vLLM op tables of the GPU; a one-line error naming what they do not cover (a GPU
    without tables, MLA of other widths, other weight formats, ``routing_skew``, a
    ``profile``)."""
    from specbatch.simulator.cost.measured.aic_cost import AicCost

    require(profile is None, f"cost 'aic': profile {profile!r} is read by the calibrated "
            "model only; expected none")
    require(routing_skew == 0, f"cost 'aic': routing_skew {routing_skew!r}: the MoE curves "
            "bundled are balanced routing; expected 0")
    return AicCost(get_hardware(hardware), get_shape(target), get_shape(draft), tp=tp,
                   execution=execution, draft_weight_bits=draft_weight_bits,
                   quantization=quantization, kv_cache_dtype=kv_cache_dtype)


def check_profiled_precision(quantization: str, kv_cache_dtype: str) -> None:
    """The profiled model measured the precision it ran: refuse another one, naming it."""
    require(str(quantization).lower() == "none",
            f"cost 'profiled': quantization {quantization!r} prices the roofline's weight "
            "bytes (a profile measured the precision it ran); expected none")
    require(str(kv_cache_dtype).lower() == "auto",
            f"cost 'profiled': kv_cache_dtype {kv_cache_dtype!r} prices the roofline's KV "
            "bytes (a profile measured the precision it ran); expected auto")


COST_MODELS = {"roofline": build_roofline, "profiled": build_profiled,
               "calibrated": build_calibrated, "aic": build_aic}
#: Every name ``cost`` takes: ``auto`` (simulator.cost.resolve) and the models.
COST_NAMES = (AUTO, *COST_MODELS)


def build_cost_model(cost: str = "roofline", hardware: str = "h100", target: str = "vicuna-33b",
                     draft: str = "vicuna-68m", tp: int = 1,
                     profile: str | None = None,
                     execution: str = DEFAULT_EXECUTION,
                     draft_weight_bits: int = FULL_WEIGHT_BITS,
                     routing_skew: float = 0.0, quantization: str = "none",
                     kv_cache_dtype: str = "auto", draft_head: str | None = None) -> CostModel:
    """Build a cost model by name (``COST_MODELS``): "roofline", "profiled" (needs ``profile``),
    "calibrated" (simulator.cost.measured.calibrated: bundled public profiles + calibrated
    roofline) or "aic" (simulator.cost.measured.aic_cost: AIConfigurator's measured vLLM op
    tables of the GPU); "auto" builds the one simulator.cost.resolve picks (the best validated
    source covering the GPU and models, the roofline as the fallback).

    ``execution`` picks the roofline's launch-latency preset (``hardware.EXECUTIONS``: the
    default "cuda_graph", or "eager"); it is validated for both models, used by the roofline.
    ``draft_weight_bits`` < 16 prices a weight-quantised draft (simulator.cost.analytic.roofline;
    refused by the profiled model and for a drafter without a model). ``routing_skew`` > 0 skews a
    mixture-of-experts model's expert loads (theory.moe; roofline only). ``quantization``
    (the target's vLLM ``--quantization``) and ``kv_cache_dtype`` (``--kv-cache-dtype``) price
    the target's weight format and the KV cache's bytes (simulator.cost.analytic.precision; refused
    by the profiled model).

    The profiled model's per-step ``overhead`` is the hardware preset's (the profile measures
    forward passes only, not the engine's CPU work).
    """
    if str(cost).lower() == AUTO:  # the best validated source covering the request
        cost = resolve_cost(cost, CostAsk(hardware, target, draft, tp, quantization,
                                          kv_cache_dtype, draft_weight_bits, routing_skew)).name
    builder = COST_MODELS.get(str(cost).lower())
    if builder is None:
        raise SpecbatchError(f"cost {cost!r}: expected one of {', '.join(COST_NAMES)}")
    get_execution(execution)  # one-line error for an unknown preset, whatever the model
    if str(draft).lower() in FREE_DRAFTS:
        require(draft_weight_bits >= FULL_WEIGHT_BITS,
                f"draft {draft!r}: a drafter without weights has no draft_weight_bits; "
                f"expected 16, got {draft_weight_bits!r}")
        return free_draft_model(builder, hardware, target, tp, profile, execution,
                                routing_skew, quantization, kv_cache_dtype)
    if str(draft).lower() in HEAD_DRAFTS:
        require(draft_weight_bits >= FULL_WEIGHT_BITS,
                f"draft {draft!r}: the head is priced at the target's dtype; expected "
                f"draft_weight_bits 16, got {draft_weight_bits!r}")
        return head_draft_model(builder, hardware, str(draft).lower(), target, tp, profile,
                                execution, routing_skew, quantization, kv_cache_dtype,
                                draft_head)
    require(draft_head is None, f"draft_head {draft_head!r}: a head's config.json needs draft "
            f"= eagle or eagle3; got draft {draft!r}")
    return builder(hardware, target, draft, tp, profile, execution=execution,
                   draft_weight_bits=draft_weight_bits, routing_skew=routing_skew,
                   quantization=quantization, kv_cache_dtype=kv_cache_dtype)


def free_draft_model(builder, hardware: str, target: str, tp: int, profile: str | None,
                     execution: str, routing_skew: float = 0.0, quantization: str = "none",
                     kv_cache_dtype: str = "auto") -> FreeDraftCost:
    """A host-side drafter (``FREE_DRAFTS``, e.g. "ngram"): draft passes cost 0 s, the target's
    come from ``builder``; a roofline's KV capacity counts the target's weights and KV alone.
    (The roofline is built with the target's shape in the draft's place; no draft pass is
    ever priced from it. A profile's draft rows, if any, are not used.)"""
    if builder is build_profiled:
        require(profile is not None, "cost 'profiled': expected a latency profile (profile = PATH)")
        require(routing_skew == 0, f"cost 'profiled': routing_skew {routing_skew!r}: expected 0")
        check_profiled_precision(quantization, kv_cache_dtype)
        inner = fit_profile(profile, overhead=get_hardware(hardware).overhead, target=target,
                            device=hardware, roles=("target",))
        return FreeDraftCost(inner)
    hw = get_hardware(hardware)
    shape = resolve_quantization(quantization, get_shape(target))
    inner = target_passes(builder, hardware, target, shape, tp, profile, execution,
                          routing_skew, quantization, kv_cache_dtype)
    def kv_tokens(u: float = 0.9, block_size: int = 16,
                  disable_hybrid_kv_cache_manager: bool = False) -> int:
        return memory_kv_tokens(hw, shape, None, tp, u, kv_cache_dtype=kv_cache_dtype,
                                block_size=block_size,
                                disable_hybrid_kv_cache_manager=disable_hybrid_kv_cache_manager)

    return FreeDraftCost(inner, kv_tokens)


def target_passes(builder, hardware: str, target: str, shape, tp: int, profile: str | None,
                  execution: str, routing_skew: float, quantization: str, kv_cache_dtype: str):
    """The target's passes for a drafter that is not a model of its own (n-gram, a head):
    ``builder``'s model (calibrated or roofline) built with the target's shape in the draft's
    place, whose draft role is never priced (``shape``: the target in its resolved format)."""
    if builder in (build_calibrated, build_aic):
        return builder(hardware, target, target, tp, profile, execution,
                       routing_skew=routing_skew, quantization=quantization,
                       kv_cache_dtype=kv_cache_dtype)
    return RooflineCost(get_hardware(hardware), shape, get_shape(target), tp=tp,
                        execution=execution, routing_skew=routing_skew,
                        quantization=quantization, kv_cache_dtype=kv_cache_dtype)


def head_draft_model(builder, hardware: str, method: str, target: str, tp: int,
                     profile: str | None, execution: str, routing_skew: float = 0.0,
                     quantization: str = "none", kv_cache_dtype: str = "auto",
                     draft_head: str | None = None):
    """An EAGLE / EAGLE-3 / MTP head (``HEAD_DRAFTS``, simulator.cost.features.draft_head) on the
    target's hidden states: the target's passes from ``builder`` (roofline or calibrated,
    built with the target's shape in the draft's place; no draft pass is priced from it), the
    head's passes by the head's roofline at the target's tp, the KV capacity counting both
    weights and both caches; ``draft_head``: the head's config.json (else derived from the
    target's shape). The profiled model is refused (no profile measures a head)."""
    from specbatch.simulator.cost.features.draft_head import (
        HeadDraftCost,
        head_kv_tokens,
        head_pass,
        head_shape,
        read_head_config,
        refuse_profiled,
    )

    if builder is build_profiled:
        raise refuse_profiled(method)
    hw = get_hardware(hardware)
    shape = resolve_quantization(quantization, get_shape(target))
    head = (head_shape(method, shape) if draft_head is None
            else read_head_config(draft_head, method, shape))
    inner = target_passes(builder, hardware, target, shape, tp, profile, execution,
                          routing_skew, quantization, kv_cache_dtype)
    passes = head_pass(head, hw, tp, get_execution(execution), routing_skew, kv_cache_dtype)

    def kv_tokens(u: float = 0.9, block_size: int = 16,
                  disable_hybrid_kv_cache_manager: bool = False) -> int:
        return head_kv_tokens(hw, shape, head, tp, u, kv_cache_dtype, block_size,
                              disable_hybrid_kv_cache_manager)

    return HeadDraftCost(inner, head, passes, kv_tokens)


def recorded_quantization(trace) -> dict | None:
    """The trace's record of a weight-quantised draft (``meta.json`` models.draft.derived.
    quantized: bits, group_size, scheme), or None when the draft is not recorded as one."""
    meta = getattr(trace, "meta", None) or {}
    draft = (meta.get("models") or {}).get("draft")
    derived = draft.get("derived") if isinstance(draft, dict) else None
    quantized = derived.get("quantized") if isinstance(derived, dict) else None
    return quantized if isinstance(quantized, dict) else None


def weight_bits_notes(config: SimConfig, trace: Trace) -> tuple[str, ...]:
    """Notes when the draft's priced precision and the trace's recorded one disagree.

    The trace's acceptance and the cost model's step times are separate inputs (a trace says
    what the models think, ``draft`` and ``draft_weight_bits`` what a pass costs), so a
    quantised draft recorded in the trace is not priced as such unless the config says so:
    the note names the knob. A quantised price on a trace whose draft is recorded at full
    precision (a model identity in meta.json without ``quantized``) is noted too: its
    acceptance is that draft's, not a quantised one's."""
    if (run_cost(config).name not in ("roofline", "calibrated", "aic")
            or str(config.draft).lower() in FREE_DRAFTS + HEAD_DRAFTS):
        return ()
    bits = int(config.draft_weight_bits)
    recorded = recorded_quantization(trace)
    if recorded is None:
        draft = ((getattr(trace, "meta", None) or {}).get("models") or {}).get("draft")
        if bits < FULL_WEIGHT_BITS and isinstance(draft, dict) and draft.get("name"):
            return (f"draft_weight_bits = {bits} prices a quantised draft, but the trace's "
                    f"draft ({draft['name']}) is not recorded as quantised: its acceptance is "
                    "that draft's",)
        return ()
    q_bits, group = recorded.get("bits"), recorded.get("group_size")
    if bits == q_bits and group in (None, QUANT_GROUP):
        return ()
    if bits == q_bits:
        return (f"the trace's draft is quantised at group {group}; draft_weight_bits prices "
                f"its scales and minima at group {QUANT_GROUP}",)
    return (f"the trace's draft has {q_bits}-bit weights (group {group}), but draft passes "
            f"are priced at {bits}-bit weights; set draft_weight_bits = {q_bits} to price "
            f"its weight bytes as stored ({q_bits}/8 + 4/{QUANT_GROUP} bytes per projection "
            "weight)",)


def step_split(model: CostModel, batch: int, kv: int, k: int,
               sampler: VerifyCost | None = None) -> dict:
    """The draft/target split of one speculative engine step at window ``k``: ``batch``
    requests with ``kv`` cached tokens each; k draft passes (query 1, pass d over kv + d cached
    tokens, as the engine prices them; an EAGLE / MTP head's first pass over the verify pass's
    k + 1 tokens per request instead, ``draft_first_pass_s``, simulator.cost.features.draft_head),
    one target verify pass (query k + 1 over kv), the rejection sampler over the batch's k drafts
    each (``sampler``, simulator.cost.verify_cost; None: 0 s) and the per-step ``overhead``. Returns
    seconds per part, their sum ``step_s`` and the draft's and the sampler's shares of it
    (fractions)."""
    one = np.ones(batch, dtype=np.int64)  # [batch]
    passes = [model.step_time("draft", one, np.full(batch, kv + d, dtype=np.int64))
              for d in range(k)]
    first = getattr(model, "first_pass_step", None)
    head = first is not None and k > 0
    if head:  # an EAGLE / MTP head: pass 1 over the verify pass's tokens, fc and all
        passes[0] = float(first(one * (k + 1), np.full(batch, kv, dtype=np.int64)))
    verify = model.step_time("target", one * (k + 1), np.full(batch, kv, dtype=np.int64))
    sample = 0.0 if sampler is None else sampler.seconds(batch, batch * k, one * k)
    draft = float(sum(passes))
    step = draft + verify + sample + float(model.overhead)
    extra = {"draft_first_pass_s": passes[0]} if head else {}
    return {"batch": batch, "k": k, "draft_passes": k, **extra,
            "draft_pass_s": passes[-1] if head else passes[0] if passes else 0.0,
            "draft_s": draft,
            "target_verify_s": verify, "sampler_s": sample,
            "overhead_s": float(model.overhead), "step_s": step,
            "draft_share": draft / step if step > 0 else 0.0,
            "sampler_share": sample / step if step > 0 else 0.0}


def execution_info(model: CostModel) -> dict | None:
    """The roofline's execution preset: name, source and the per-role floors (None for a model
    without one, e.g. the profiled model, whose numbers come from its profile)."""
    if not isinstance(model, RooflineCost):
        return None
    ex = get_execution(model.execution)
    roles = {}
    for role in ROLES:
        p, layer = ex.latencies(role, model.hardware)
        roles[role] = {"pass_latency_s": p, "layer_latency_s": layer,
                       "layers": model.consts[role].layers,
                       "floor_s": p + model.consts[role].layers * layer}
    return {"name": ex.name, "description": ex.description, "source": ex.source,
            "combine": "max(gpu, floor)" if ex.overlap else "gpu + floor", "roles": roles}


def pass_times(model: CostModel, batches, kv: int, k: int) -> list[dict]:
    """Per batch size b in ``batches``: the seconds of one draft pass (query 1), one target
    decode pass (query 1) and one target verify pass (query k + 1), each over b requests with
    ``kv`` cached tokens; a roofline model adds whether the verify pass is compute- or
    memory-bound, and for a mixture-of-experts target the experts each pass touches per MoE
    layer (E_touched of its b and b (k + 1) tokens)."""
    base = getattr(model, "inner", model) if type(model).__name__ == "HostCost" else model
    rows = []
    for b in batches:
        kv_b = np.full(b, kv, dtype=np.int64)  # [b]
        one = np.ones(b, dtype=np.int64)  # [b]
        row = {
            "batch": b,
            "draft_s": model.step_time("draft", one, kv_b),
            "target_decode_s": model.step_time("target", one, kv_b),
            "target_verify_s": model.step_time("target", one * (k + 1), kv_b),
        }
        if isinstance(base, RooflineCost):
            row["verify_bound"] = base.breakdown("target", one * (k + 1), kv_b)["bound"]
            if base.target.is_moe:  # THEORY.md §8: distinct experts read per MoE layer
                touched = base.consts["target"].experts_touched
                row["experts_touched_decode"] = touched(float(b))
                row["experts_touched_verify"] = touched(float(b * (k + 1)))
        rows.append(row)
    return rows


def prefill_time(model: CostModel, prompt: int) -> float:
    """Seconds of the target's prefill pass over one ``prompt``-token prompt (empty cache),
    its LM head at the one row vLLM samples when the model takes logit rows
    (simulator.cost.analytic.roofline)."""
    if takes_logit_rows(model):
        return model.step_time("target", np.array([prompt]), np.array([0]), rows=1.0)
    return model.step_time("target", np.array([prompt]), np.array([0]))


def run_cost(config: SimConfig) -> CostChoice:
    """Which registry model prices ``config``'s run (simulator.cost.resolve: ``auto`` resolved
    to its source, with the reasons it passed the better ones over)."""
    return resolve_cost(config.cost, CostAsk(config.hardware, config.target, config.draft,
                                             config.tp, config.quantization,
                                             config.kv_cache_dtype, config.draft_weight_bits,
                                             config.routing_skew,
                                             bool(config.enable_expert_parallel),
                                             int(config.data_parallel_size)))
