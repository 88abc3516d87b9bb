"""Step-time cost models by name, and the step-time table ``specbatch cost show`` prints.

The interface (:class:`CostModel`, :class:`SumsCostModel`, :func:`batch_sums`) is
:mod:`simulator.cost_interface`; the models are :mod:`simulator.roofline` (analytic, from a
hardware preset and model shapes) and :mod:`simulator.profiled` (fitted to a measured latency
profile). This module builds one by name (:func:`build_cost_model`) and prices the steps
``specbatch cost show`` prints; import each model's names from its own module.
"""

from __future__ import annotations

import numpy as np

from specbatch.errors import SpecbatchError, require
from specbatch.simulator.config import FREE_DRAFTS
from specbatch.simulator.cost_interface import ROLES, CostModel
from specbatch.simulator.free_draft import FreeDraftCost
from specbatch.simulator.hardware import (
    DEFAULT_EXECUTION,
    get_execution,
    get_hardware,
)
from specbatch.simulator.profiled import (
    fit_profile,
)
from specbatch.simulator.roofline import (
    RooflineCost,
    memory_kv_tokens,
)
from specbatch.simulator.verify_cost import VerifyCost
from specbatch.traces.shapes import get_shape

__all__ = [
    "COST_MODELS", "build_cost_model", "execution_info", "pass_times", "prefill_time",
    "step_split",
]


def build_roofline(hardware: str, target: str, draft: str, tp: int, profile: str | None,
                   execution: str = DEFAULT_EXECUTION):
    """The roofline model of ``target`` (tensor parallel ``tp``) and ``draft`` on ``hardware``
    under the ``execution`` preset (hardware.EXECUTIONS: "cuda_graph" or "eager")."""
    return RooflineCost(get_hardware(hardware), get_shape(target), get_shape(draft), tp=tp,
                        execution=execution)


def build_profiled(hardware: str, target: str, draft: str, tp: int, profile: str | None,
                   execution: str = DEFAULT_EXECUTION):
    """The model fitted to ``profile``, rows selected by model and device names (the profile
    measured its own execution mode, so ``execution`` is not used)."""
    require(profile is not None, "cost 'profiled': expected a latency profile (profile = PATH)")
    return fit_profile(profile, overhead=get_hardware(hardware).overhead, target=target,
                       draft=draft, device=hardware)


COST_MODELS = {"roofline": build_roofline, "profiled": build_profiled}


def build_cost_model(cost: str = "roofline", hardware: str = "h100", target: str = "vicuna-33b",
                     draft: str = "vicuna-68m", tp: int = 1,
                     profile: str | None = None,
                     execution: str = DEFAULT_EXECUTION) -> CostModel:
    """Build a cost model by name (``COST_MODELS``): "roofline" or "profiled" (needs ``profile``).

    ``execution`` picks the roofline's launch-latency preset (``hardware.EXECUTIONS``: the
    default "cuda_graph", or "eager"); it is validated for both models, used by the roofline.

    The profiled model's per-step ``overhead`` is the hardware preset's (the profile measures
    forward passes only, not the engine's CPU work).
    """
    builder = COST_MODELS.get(str(cost).lower())
    if builder is None:
        raise SpecbatchError(f"cost {cost!r}: expected one of {', '.join(COST_MODELS)}")
    get_execution(execution)  # one-line error for an unknown preset, whatever the model
    if str(draft).lower() in FREE_DRAFTS:
        return free_draft_model(builder, hardware, target, tp, profile, execution)
    return builder(hardware, target, draft, tp, profile, execution=execution)


def free_draft_model(builder, hardware: str, target: str, tp: int, profile: str | None,
                     execution: str) -> FreeDraftCost:
    """A host-side drafter (``FREE_DRAFTS``, e.g. "ngram"): draft passes cost 0 s, the target's
    come from ``builder``; a roofline's KV capacity counts the target's weights and KV alone.
    (The roofline is built with the target's shape in the draft's place; no draft pass is
    ever priced from it. A profile's draft rows, if any, are not used.)"""
    if builder is build_profiled:
        require(profile is not None, "cost 'profiled': expected a latency profile (profile = PATH)")
        inner = fit_profile(profile, overhead=get_hardware(hardware).overhead, target=target,
                            device=hardware, roles=("target",))
        return FreeDraftCost(inner)
    hw, shape = get_hardware(hardware), get_shape(target)
    inner = RooflineCost(hw, shape, shape, tp=tp, execution=execution)
    return FreeDraftCost(inner, lambda u=0.9: memory_kv_tokens(hw, shape, None, tp, u))


def step_split(model: CostModel, batch: int, kv: int, k: int,
               sampler: VerifyCost | None = None) -> dict:
    """The draft/target split of one speculative engine step at window ``k``: ``batch``
    requests with ``kv`` cached tokens each; k draft passes (query 1, pass d over kv + d cached
    tokens, as the engine prices them), one target verify pass (query k + 1 over kv), the
    rejection sampler over the batch's k drafts each (``sampler``, simulator.verify_cost;
    None: 0 s) and the per-step ``overhead``. Returns seconds per part, their sum ``step_s``
    and the draft's and the sampler's shares of it (fractions)."""
    one = np.ones(batch, dtype=np.int64)  # [batch]
    passes = [model.step_time("draft", one, np.full(batch, kv + d, dtype=np.int64))
              for d in range(k)]
    verify = model.step_time("target", one * (k + 1), np.full(batch, kv, dtype=np.int64))
    sample = 0.0 if sampler is None else sampler.seconds(batch, batch * k, one * k)
    draft = float(sum(passes))
    step = draft + verify + sample + float(model.overhead)
    return {"batch": batch, "k": k, "draft_passes": k,
            "draft_pass_s": passes[0] if passes else 0.0, "draft_s": draft,
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
    memory-bound."""
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
        if isinstance(model, RooflineCost):
            row["verify_bound"] = model.breakdown("target", one * (k + 1), kv_b)["bound"]
        rows.append(row)
    return rows


def prefill_time(model: CostModel, prompt: int) -> float:
    """Seconds of the target's prefill pass over one ``prompt``-token prompt (empty cache)."""
    return model.step_time("target", np.array([prompt]), np.array([0]))
