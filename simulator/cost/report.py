"""Where a pass's time goes and which source priced it, for every cost model.

:func:`pass_breakdown` splits one pass into the parts of simulator.cost.measured.calibrated
(``layers``:
the decoder layers' non-attention ops and the input embedding, as Vidur's mlp.csv measures
them; ``attention``; ``experts``: a mixture of experts' routed experts, 0 for a dense model;
``allreduce``; ``lm_head``; ``launch``) plus ``host`` (vLLM's host share,
simulator.cost.features.host), summing to ``step_time``:

- calibrated and aic (simulator.cost.measured.aic_cost): their own additive parts
  (:meth:`CalibratedCost.breakdown`, :meth:`AicCost.breakdown`), a mixture of
  experts' routed experts moved from ``layers`` to ``experts``: the measured MoE block on the
  LLMServingSim GPUs, the expert GEMMs' share of the law's layers(Q) elsewhere.
- roofline: the roofline is one max(compute, memory, host) plus fixed terms, so the bound
  term is apportioned by the winning resource's shares: compute seconds (layers 2 P_layers Q
  / tp, the routed experts 2 M k 3 h I_e Q / tp, LM head 2 h V Q / tp, attention; W8A8 FP8
  GEMMs at FP8's peak) when compute-bound, bytes (layer weights and activations, the experts
  the pass touches b M 3 h I_e E_touched(Q) / tp, LM head and final-norm weights, KV) when
  memory-bound. ``allreduce`` = the ring term plus
  the all-reduce latencies, ``launch`` = the launch floors (eager: what the host floor adds
  over the GPU time). The roofline's numbers are unchanged; this only reads them.
- a drafter without a model: its draft passes are 0 s in every part.
- the profiled model: None (a fitted law of the whole pass has no parts).

:func:`cost_sources` names, per role, the source of each part and its validated error
(benchmarks/cost_vs_public.py).
"""

from __future__ import annotations

import sys

import numpy as np

from specbatch.simulator.cost.analytic.window import attention_work, window_sums
from specbatch.simulator.cost.interface import ROLES, batch_sums

PARTS = ("layers", "attention", "experts", "allreduce", "lm_head", "launch")
#: The parts ``cost show`` prints: the device's, then vLLM's host share.
SHOWN_PARTS = PARTS + ("host",)
#: What each pass of ``cost show``'s rows is: (role, query tokens per request, label).
PASSES = (("target_decode", "target", 1), ("target_verify", "target", None),
          ("draft", "draft", 1))


def roofline_split(model, role: str, query, kv) -> dict:
    """The roofline's pass split into :data:`PARTS` (module docstring)."""
    c = model._consts(role)
    _, sq, skv, sqkv, sqq = batch_sums(np.asarray(query), np.asarray(kv))
    if sq <= 0.0:
        return dict.fromkeys(PARTS, 0.0)
    shape = model.target if role == "target" else model.draft
    hw = model.hardware
    flops_head = 2.0 * shape.hidden * shape.vocab / c.tp * sq
    window = (window_sums(query, kv, c.window) if c.sliding_layers else None)
    attn_flops, attn_bytes = attention_work(c, sq, skv, sqkv, sqq, window)
    # the routed experts: k of E per token on each of the M MoE layers (FLOPs), the experts
    # the pass's tokens touch (bytes; theory.moe); W8A8 FP8 prices their GEMMs at FP8's peak
    moe_layers = shape.moe_layers if c.experts else 0
    expert_flops = 2.0 * moe_layers * c.top_k * shape.expert_params / c.tp * sq
    expert_bytes = c.expert_bytes * c.experts_touched(sq) if c.experts else 0.0
    fp8 = bool(c.fp8_flops_per_token)
    compute = {  # seconds of each part's FLOPs at its peak
        "layers": (c.flops_per_token * sq - flops_head - (0.0 if fp8 else expert_flops))
        * c.inv_compute + (c.fp8_flops_per_token * sq - expert_flops) * c.inv_compute_fp8
        * fp8,
        "experts": expert_flops * (c.inv_compute_fp8 if fp8 else c.inv_compute),
        "lm_head": flops_head * c.inv_compute, "attention": attn_flops * c.inv_compute}
    bytes_head = hw.dtype_bytes * (shape.hidden * shape.vocab + shape.hidden) / c.tp
    memory = {part: b * c.inv_memory for part, b in (
        ("layers", c.weight_bytes - bytes_head + c.act_bytes_per_token * sq),
        ("experts", expert_bytes), ("lm_head", bytes_head), ("attention", attn_bytes))}
    compute_s, memory_s = sum(compute.values()), sum(memory.values())
    gpu = max(compute_s, memory_s)
    shares = compute if compute_s > memory_s else memory
    total = sum(shares.values())
    ar_latency = 2 * c.layers * hw.allreduce_latency if c.tp > 1 else 0.0
    out = {part: gpu * shares[part] / total for part in ("layers", "attention", "experts",
                                                          "lm_head")}
    out["allreduce"] = c.comm_per_token * sq + ar_latency
    out["launch"] = (c.fixed - ar_latency) + max(0.0, c.floor - gpu)
    return {part: out[part] for part in PARTS}


def pass_breakdown(model, role: str, query, kv) -> dict | None:
    """Seconds per part of one pass of ``role`` (:data:`SHOWN_PARTS`), or None. ``host``: what
    vLLM's host share (simulator.cost.features.host) adds to the pass (its b·n or async floor
    on a target pass, the proposer loop's floor on a draft pass), or async scheduling's floor
    T_o under ``host = "fixed"`` (simulator.cost.features.async_overhead), 0 for any other
    model."""
    if host_wrapper(model):
        parts = pass_breakdown(model.inner, role, query, kv)
        if parts is not None:
            parts["host"] = (float(model.step_time(role, query, kv))
                             - float(model.inner.step_time(role, query, kv)))
        return parts
    parts = device_breakdown(model, role, query, kv)
    return None if parts is None else {**parts, "host": 0.0}


def host_wrapper(model) -> bool:
    """Whether ``model`` is a host layer around the passes: vLLM's host share
    (simulator.cost.features.host.HostCost) or async scheduling's floor under the preset's flat
    overhead (simulator.cost.features.async_overhead.AsyncOverheadCost)."""
    host = sys.modules.get("specbatch.simulator.cost.features.host")
    overlap = sys.modules.get("specbatch.simulator.cost.features.async_overhead")
    return ((host is not None and isinstance(model, host.HostCost))
            or (overlap is not None and isinstance(model, overlap.AsyncOverheadCost)))


def device_breakdown(model, role: str, query, kv) -> dict | None:
    """:func:`pass_breakdown` of a model without the host share (its parts but ``host``)."""
    from specbatch.simulator.cost.analytic.roofline import RooflineCost
    from specbatch.simulator.cost.features.free_draft import FreeDraftCost
    from specbatch.simulator.cost.measured.calibrated import CalibratedCost

    if isinstance(model, FreeDraftCost):
        if role == "draft":
            return dict.fromkeys(PARTS, 0.0)
        model = model.inner
    model = without_draft_model_passes(model)
    if getattr(model, "first_pass_time", None) is not None:  # a head: its target's parts only
        if role == "draft":
            return None
        model = model.inner
    if isinstance(model, CalibratedCost):
        return model.breakdown(role, query, kv)
    aic = sys.modules.get("specbatch.simulator.cost.measured.aic_cost")
    if aic is not None and isinstance(model, aic.AicCost):
        return model.breakdown(role, query, kv)
    if isinstance(model, RooflineCost):
        return roofline_split(model, role, query, kv)
    return None


def row_breakdowns(model, batch: int, kv: int, k: int) -> dict:
    """``cost show``'s ``breakdown`` of one row: per pass of :data:`PASSES` (verify: k + 1
    tokens per request), seconds per part, or None for a model without parts."""
    kv_b = np.full(batch, kv, dtype=np.int64)  # [batch]
    out = {}
    for name, role, q in PASSES:
        query = np.full(batch, k + 1 if q is None else q, dtype=np.int64)  # [batch]
        out[name] = pass_breakdown(model, role, query, kv_b)
    return out


def roofline_source(model, role: str) -> dict:
    from specbatch.simulator.cost.measured.validated import validation

    c = model._consts(role)
    checked = validation().get("roofline", {}).get(f"{model.hardware.name}|tp{c.tp}")
    return {"model": c.model, "tp": c.tp,
            "summary": f"roofline ({model.hardware.name} datasheet peaks x assumed "
                       "efficiencies; not fitted)",
            "validated": checked}


def cost_sources(model) -> dict:
    """Per role ("target", "draft"): ``summary`` (one line naming the source) and, where
    known, the parts' sources and validated errors."""
    from specbatch.simulator.cost.analytic.roofline import RooflineCost
    from specbatch.simulator.cost.features.free_draft import FreeDraftCost
    from specbatch.simulator.cost.measured.profiled import ProfiledCost

    overlap = sys.modules.get("specbatch.simulator.cost.features.async_overhead")
    if overlap is not None and isinstance(model, overlap.AsyncOverheadCost):  # host = fixed
        out = cost_sources(model.inner)
        out["host"] = {"step_s": {"value": model.host_overhead, "per": "engine step",
                                  "fitted": False, "source": "the hardware preset's flat "
                                  "overhead (assumed)"},
                       "combine": "max(target pass, overhead) (async scheduling)"}
        return out
    host = sys.modules.get("specbatch.simulator.cost.features.host")
    if host is not None and isinstance(model, host.HostCost):  # vLLM's host share
        out = cost_sources(model.inner)
        out["host"] = model.sources()
        if model.ngram:
            out["draft"] = {"summary": "n-gram proposer on the host (numba KMP over each "
                                       "context, once per step; assumed, not fitted)"}
        return out
    # a calibrated model's module is loaded already; importing it for the check alone cost
    # every roofline `simulate` its fitting stack at start-up (issue 35)
    calibrated = sys.modules.get("specbatch.simulator.cost.measured.calibrated")
    model = without_draft_model_passes(model)
    draft_free = isinstance(model, FreeDraftCost)
    head = getattr(model, "first_pass_time", None) is not None  # simulator.cost.features.draft_head
    inner = model.inner if draft_free or head else model
    aic = sys.modules.get("specbatch.simulator.cost.measured.aic_cost")
    if calibrated is not None and isinstance(inner, calibrated.CalibratedCost):
        out = inner.sources()
    elif aic is not None and isinstance(inner, aic.AicCost):
        out = inner.sources()
    elif isinstance(inner, RooflineCost):
        out = {role: roofline_source(inner, role) for role in ROLES}
    elif isinstance(inner, ProfiledCost):
        cv = getattr(inner, "cv_mape", {}) or {}
        out = {role: {"summary": "user latency profile (fitted law)",
                      "validated": {"cv_mape": cv.get(role)}} for role in ROLES}
    else:
        out = {role: {"summary": type(inner).__name__} for role in ROLES}
    if draft_free:
        out["draft"] = {"summary": "none: a host-side drafter (0 s per draft pass)"}
    if head:
        out["draft"] = {"summary": f"{model.head.method} head on the target's hidden states "
                                   "(roofline of its layer, fc and LM head; not fitted)"}
    return out


def without_draft_model_passes(model):
    """``model`` without simulator.cost.features.draft_model_pass's wrapper (its passes are the
    inner model's; it is no head)."""
    from specbatch.simulator.cost.features.draft_model_pass import DraftModelPasses

    return model.inner if isinstance(model, DraftModelPasses) else model


def source_line(sources: dict) -> str:
    """``target: ...; draft: ...`` with each role's validated MAPE where known, after the
    model ``auto`` resolved to (simulator.cost.resolve) when the run asked for it."""
    parts = []
    choice = sources.get("cost")
    if isinstance(choice, dict) and choice.get("asked") == "auto":
        from specbatch.simulator.cost.resolve import CostChoice

        parts.append(CostChoice(choice["asked"], choice["ran"],
                                tuple(choice.get("passed_over", ()))).line())
    for role in ("target", "draft"):
        s = sources.get(role, {})
        checked = (s.get("layers") or {}).get("validated") or s.get("validated") or {}
        signed = checked.get("mean_signed") if isinstance(checked, dict) else None
        err = (f" (validated MAPE {100 * checked['mape']:.1f} %"
               + (f", mean {100 * signed:+.1f} %" if signed is not None else "") + ")"
               if isinstance(checked, dict) and checked.get("mape") is not None else "")
        unchecked = (s.get("layers") or {}).get("not_validated")  # outside that error
        rest = f", {unchecked} (not validated)" if unchecked else ""
        parts.append(f"{role}: {s.get('summary', '?')}{err}{rest}")
    return "; ".join(parts)
