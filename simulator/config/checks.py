"""The checks of a simulation config: static ones, one run's settings, and against the trace.

:func:`validate_config` runs on every :class:`~simulator.config.sim_config.SimConfig` built
(:func:`simulator.config.sim_config.make_config`): ranges, the policy's name, cross-field rules.
:func:`check_settings_apply` refuses, for one run, a setting its policy would silently
ignore (a sweep may pair them). :func:`validate_against_trace` needs the trace: draft depth
against the trace's K, KV capacity against the largest request. They live apart from the
field declarations so ``simulator.config.sim_config`` reads as the list of knobs;
``simulator.config.sim_config`` re-exports every name here. Every failure is one line,
``config FILE: field X: expected Y, got Z`` (exit code 2 through the CLI).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from specbatch.errors import SpecbatchError
from specbatch.fields import check_ranges, fail, field_specs
from specbatch.simulator.config.tree_checks import check_tree_config, check_tree_trace
from specbatch.simulator.cost.gpus.hardware import FULL_WEIGHT_BITS, HARDWARE, get_hardware
from specbatch.simulator.defaults import FREE_DRAFTS
from specbatch.simulator.policies import knobs as pk
from specbatch.simulator.policies.catalogue import entry, names
from specbatch.simulator.replay.rules import rule_entry

if TYPE_CHECKING:
    from specbatch.simulator.config.sim_config import SimConfig
    from specbatch.traces.format.trace import Trace


#: Policies that never draft beyond k, so a nonzero ``extra`` would be silently ignored
#: (simulator.policies.catalogue: ``uses_extra``).
NO_EXTRA_POLICIES = names(uses_extra=False)
#: Policies whose window is not ``num_speculative_tokens``: ``ar`` never drafts, ``dsd``
#: plans its window by expected goodput (simulator.policies.papers.DynamicSD; catalogue
#: ``uses_k``).
NO_K_POLICIES = names(uses_k=False)
#: Policies that verify nothing, so the verification rule would be silently ignored.
NO_VERIFY_POLICIES = names(verifies=False)
#: Policies that read the ``predictor`` field (it would be ignored by the others).
PREDICTOR_POLICIES = names(predictor=True)


#: Configs :func:`validate_config` passed while remembering is on (None: off;
#: simulator.config.config_memo.remembered_configs): simulate validates the config
#: make_config already did. Frozen configs, and what the checks look up does not change then.
_VALID: set | None = None


_SPECS: dict[type, dict] = {}  # a config class's field_specs while remembering


def remember_valid(on: bool) -> None:
    """Start (a fresh memo) or stop remembering the configs :func:`validate_config` passed
    (and each config class's field_specs, ~1.5 ms to build: its choices are asked each time
    outside, as a catalogue may grow)."""
    global _VALID
    _VALID = set() if on else None
    _SPECS.clear()


def _field_specs(cls: type) -> dict:
    if _VALID is None:
        return field_specs(cls)
    if cls not in _SPECS:
        _SPECS[cls] = field_specs(cls)
    return _SPECS[cls]


def validate_config(c: SimConfig, where: str = "config") -> None:
    """Static checks (no trace needed); raises a one-line :class:`SpecbatchError`."""
    if _VALID is None:
        _check_config(c, where)
        return
    try:
        if c in _VALID:
            return
    except TypeError:  # an unhashable config: checked every time
        _check_config(c, where)
        return
    _check_config(c, where)
    if len(_VALID) >= 4096:
        _VALID.clear()
    _VALID.add(c)


def _check_config(c: SimConfig, where: str) -> None:
    from specbatch.simulator.policies.registry import resolve_policy  # local: no import cycle

    check_ranges(c, _field_specs(type(c)), where)
    cls = resolve_policy(c.policy, f"{where}: field policy")
    check_tree_config(c, bool(getattr(cls, "tree", False)), where)
    check_policy_knobs(c, where)
    row = entry(c.policy)  # the engine policies' minimum is checked with their knobs
    if row is not None and not row.engine:
        if row.min_draft == "k" and c.num_speculative_tokens < 1:
            fail(where, "num_speculative_tokens", f"k >= 1 for policy {c.policy}",
                 c.num_speculative_tokens)
        if row.min_draft == "depth" and c.depth < 1:
            fail(where, "num_speculative_tokens", f"k + extra >= 1 for policy {c.policy}",
                 c.depth)
    check_scheduler_supports(c, where)
    if c.cost == "profiled" and c.profile is None:
        fail(where, "profile", "a latency profile path when cost = 'profiled'", None)
    if c.draft_weight_bits != FULL_WEIGHT_BITS and (c.cost == "profiled"
                                                    or str(c.draft).lower() in FREE_DRAFTS):
        why = ("the profile measured the draft at the precision it ran" if c.cost == "profiled"
               else f"draft {c.draft} runs no model")
        fail(where, "draft_weight_bits", f"16 ({why}; the bits price the roofline's draft "
             "weights)", c.draft_weight_bits)
    check_head_drafter(c, where)
    if c.cost == "profiled":
        for name, default in (("quantization", "none"), ("kv_cache_dtype", "auto")):
            if getattr(c, name) != default:
                fail(where, name, f"{default} (the profile measured the precision it ran; "
                     f"{name} prices the roofline's and calibrated model's bytes)",
                     getattr(c, name))
    try:
        get_hardware(c.hardware)  # the preset lookup accepts any case and its aliases
    except SpecbatchError:
        fail(where, "hardware", f"one of {', '.join(sorted(HARDWARE))}", c.hardware)
    check_parallel(c, where)


def check_policy_knobs(c: SimConfig, where: str) -> None:
    """The knobs' parses and the settings each engine policy needs (one-line errors)."""
    # local: the engine policies and the graph sizes load numpy; the config modules do not
    from specbatch.simulator.cost.features.graph_padding import capture_sizes
    from specbatch.simulator.policies.engines import EmaAdaptive, check_batch_schedule
    from specbatch.simulator.policies.schedules import parse_trt_schedule, parse_vllm_table

    if c.num_speculative_tokens_per_batch_size is not None:
        parse_vllm_table(c.num_speculative_tokens_per_batch_size, where,
                         "num_speculative_tokens_per_batch_size")
    if c.draft_len_schedule is not None:
        parse_trt_schedule(c.draft_len_schedule, where, "draft_len_schedule",
                           c.num_speculative_tokens)
    if c.cuda_graph_sizes is not None:
        capture_sizes(c.cuda_graph_sizes, where)
    if c.policy == "batch-schedule":
        check_batch_schedule(c, where)
    if c.speculative_adaptive_config is not None or c.policy == "ema-adaptive":
        EmaAdaptive.required_depth(c)  # parses speculative_adaptive_config
    row = entry(c.policy)
    if row is not None and row.engine:
        if row.min_draft == "k" and c.num_speculative_tokens < 1:
            fail(where, "num_speculative_tokens", f"k >= 1 for policy {c.policy} (its largest "
                 "window)", c.num_speculative_tokens)
        if row.min_draft == "depth" and c.depth < 1:
            fail(where, "num_speculative_tokens", f"k + extra >= 1 for policy {c.policy}",
                 c.depth)


def check_scheduler_supports(c: SimConfig, where: str = "config") -> None:
    """What the scheduler's catalogue row (simulator.config.schedulers) does not support is
    refused, naming the field that asks for it; a chunked scheduler without a token budget has
    nothing to fill. Priority admission runs in reserve KV mode only: under it vLLM also
    preempts the lowest-priority running request (not the newest), which is not modelled."""
    row = c.scheduler_row
    if c.scheduling_policy not in row.admission:
        fail(where, "scheduling_policy", f"one of {', '.join(row.admission)} under scheduler "
             f"{row.name}", c.scheduling_policy)
    if c.scheduling_policy != "fcfs" and c.kv_mode == "paged":
        fail(where, "scheduling_policy", "fcfs with kv_mode paged (preemption by priority is "
             "not modelled)", c.scheduling_policy)
    if c.enable_chunked_prefill and not row.chunked_prefill:
        fail(where, "enable_chunked_prefill", f"false under scheduler {row.name} (it does not "
             "chunk prompts)", c.enable_chunked_prefill)
    if c.kv_mode == "paged" and not row.paged_kv:
        fail(where, "kv_mode", f"reserve under scheduler {row.name} (no paged KV)", c.kv_mode)
    if rule_entry(c.verify).tree and not row.trees:
        fail(where, "verify", f"a chain rule under scheduler {row.name} (no tree runs)",
             c.verify)
    if c.data_parallel_size > 1 and c.enable_expert_parallel and not row.dp_lockstep:
        fail(where, "data_parallel_size", f"1 under scheduler {row.name} (its ranks cannot "
             "step in lockstep)", c.data_parallel_size)
    if c.chunked and c.token_budget is None:
        fail(where, "max_num_batched_tokens", "a token budget when enable_chunked_prefill is set",
             None)


def check_parallel(c: SimConfig, where: str = "config") -> None:
    """vLLM's data and expert parallelism (simulator.cost.features.expert_parallel): DP ranks are
    the replicas of one server; expert parallelism needs an MoE target, uniform routing and a cost
    model that prices it; DP over an MoE target without EP (experts tensor-parallel across the
    DP ranks, as vLLM would run it) is not priced."""
    dp, ep = int(c.data_parallel_size), bool(c.enable_expert_parallel)
    if dp == 1 and not ep:
        return
    if dp > 1 and c.replicas != 1:
        fail(where, "replicas", "1 when data_parallel_size > 1 (the DP ranks are the replicas)",
             c.replicas)
    from specbatch.traces.models.shapes import get_shape  # local: shapes load lazily

    try:
        moe = get_shape(c.target).is_moe
    except SpecbatchError:
        moe = False
    if ep and not moe:
        fail(where, "enable_expert_parallel", f"false (target {c.target} is not a "
             "mixture-of-experts model)", ep)
    if dp > 1 and moe and not ep:
        fail(where, "enable_expert_parallel", f"true for MoE target {c.target} with "
             "data_parallel_size > 1 (experts tensor-parallel across DP ranks are not priced)",
             ep)
    if ep and c.cost == "profiled":
        fail(where, "enable_expert_parallel", "false with cost profiled (the profile measured "
             "its own layout)", ep)
    if ep and c.routing_skew != 0:
        fail(where, "routing_skew", "0 with enable_expert_parallel (skewed routing over EP "
             "ranks is not priced)", c.routing_skew)


def check_head_drafter(c: SimConfig, where: str = "config") -> None:
    """An EAGLE / EAGLE-3 / MTP ``draft`` (simulator.cost.features.draft_head): priced by the
    roofline or calibrated model at the target's dtype, on a chain (vLLM's tree drafting is not
    priced), its head derivable from the target (MTP layers for mtp, a dense target for
    eagle / eagle3)."""
    from specbatch.simulator.defaults import HEAD_DRAFTS

    draft = str(c.draft).lower()
    if draft not in HEAD_DRAFTS:
        if c.draft_head is not None:
            fail(where, "draft_head", f"none for draft {c.draft} (a head's config.json needs "
                 "draft = eagle or eagle3)", c.draft_head)
        return
    if c.cost == "profiled":
        fail(where, "cost", f"roofline or calibrated for draft {draft} (no latency profile "
             "measures a head on the target's hidden states)", c.cost)
    if c.draft_weight_bits != FULL_WEIGHT_BITS:
        fail(where, "draft_weight_bits", f"16 for draft {draft} (the head is priced at the "
             "target's dtype)", c.draft_weight_bits)
    if rule_entry(c.verify).tree:
        fail(where, "verify", f"a chain rule for draft {draft} (EAGLE tree drafting is not "
             "priced)", c.verify)
    from specbatch.simulator.cost.features.draft_head import head_shape, read_head_config
    from specbatch.traces.models.shapes import get_shape

    try:
        target = get_shape(c.target)
        if c.draft_head is None:
            head_shape(draft, target)
    except SpecbatchError as exc:
        fail(where, "draft", f"a head the target has ({exc})", c.draft)
    if c.draft_head is not None:
        read_head_config(c.draft_head, draft, target)  # its own one-line errors


def check_extra_applies(c: SimConfig, where: str = "config") -> None:
    """Refuse ``extra`` > 0 with a policy that never drafts beyond k (one run's settings).

    Not part of :func:`validate_config`: a sweep grid over policy x extra legitimately
    pairs those policies with an e they ignore.
    """
    if c.extra and c.policy in NO_EXTRA_POLICIES:
        fail(where, "extra", f"0 for policy {c.policy} (e widens the drafts of budgeted "
             "policies only; it would be ignored)", c.extra)


def check_settings_apply(c: SimConfig, given: set[str] | frozenset[str],
                         where: str = "config") -> None:
    """Refuse, for one run, a setting its policy would silently ignore: ``extra`` (see
    :func:`check_extra_applies`), a ``num_speculative_tokens`` the user gave to ``ar`` or
    ``dsd``, block verification for ``ar``, and an engine policy's knob given to another
    policy (simulator.policies.knobs.check_knobs_apply).

    given: the fields the user set (file or flags); a default k is not the user's choice.
    """
    check_extra_applies(c, where)
    if c.policy == "ar" and "num_speculative_tokens" in given:
        fail(where, "num_speculative_tokens", "no k for policy ar (ar never drafts)",
             c.num_speculative_tokens)
    if c.predictor != "confidence" and c.policy not in PREDICTOR_POLICIES:
        *most, last = PREDICTOR_POLICIES
        fail(where, "predictor", f"confidence for policy {c.policy} (only {', '.join(most)} "
             f"and {last} read a predictor; it would be ignored)", c.predictor)
    if c.policy in NO_VERIFY_POLICIES and c.verify != "token":
        fail(where, "verify", f"token for policy {c.policy} (it verifies no drafts)", c.verify)
    pk.check_knobs_apply(c, given, where)


def applied_k(c: SimConfig) -> int | None:
    """The window k a run used, as a summary reports it: None where the policy has none of
    its own (``ar``; ``dsd``, whose window varies)."""
    return None if c.policy in NO_K_POLICIES else c.num_speculative_tokens


def validate_against_trace(c: SimConfig, trace: Trace, max_footprint: int | None = None) -> None:
    """Checks that need the trace: draft depth ≤ trace K, KV capacity ≥ one request, offsets.

    max_footprint: the largest KV reservation of one simulated request (tokens), when known
    (reserve mode; paged mode checks its block pool in simulator.engine.kv.check_fits).
    """
    depth = policy_depth(c)
    if rule_entry(c.verify).tree:
        check_tree_trace(c, trace, depth)
    elif depth > trace.K:
        fail("config", "num_speculative_tokens",
             f"k + extra <= the trace's draft depth K = {trace.K}", depth)
    if (c.kv_mode == "reserve" and c.kv_capacity is not None and max_footprint is not None
            and c.kv_capacity < max_footprint):
        fail("config", "kv_capacity",
             f"at least one request's footprint (prompt + output + K + 1 = {max_footprint} tokens)",
             c.kv_capacity)


def policy_depth(c: SimConfig) -> int:
    """Deepest draft the configured policy may ask of the trace: its class's
    :meth:`simulator.policies.registry.Policy.required_depth`."""
    from specbatch.simulator.policies.registry import policy_depth_of, resolve_policy

    return policy_depth_of(resolve_policy(c.policy), c)
