"""``simulate(config, trace=None) -> SimResult``: one run, end to end.

Loads the trace (``config.trace``: "default", a directory, or "synth"), builds the workload
(simulator.workload.arrivals), the cost model (simulator.cost.registry.build_cost_model) and the
policy (simulator.policies.registry), runs the engine and computes the tables and summary
(simulator.metrics). ``max_model_len`` caps the workload's outputs (simulator.engine.kv); the
summary says which KV mode ran and the capacity it used (``kv_mode``, ``kv_capacity`` in
tokens per replica, None = unlimited). With ``config.speedup`` it also runs ``ar`` on the same
workload and cost model and adds ``speedup_vs_ar``. ``acceptance`` replaces the trace's
acceptance by a model fitted from it (simulator.replay.fitted_acceptance). ``calibration_split``
holds a seeded share of the trace's requests out of replay for the policies that calibrate on
them (simulator.policies.calibration); ``cuda_graph_sizes`` pads the cost model's passes to
captured sizes
(simulator.cost.features.graph_padding). Same config ⇒ byte-identical :meth:`SimResult.write` files.
The result and its folder are :mod:`simulator.sim_result`'s; the engine's side of a run, once
its inputs are prepared here, is :mod:`simulator.engine_run`'s.
:func:`simulate_to` runs one into a result folder, streaming the step table to its steps.parquet
while the engine runs (simulator.step_stream: the same bytes, without holding the table; ``simulate
--out``).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from specbatch.errors import SpecbatchError, require
from specbatch.io import result_dir
from specbatch.limits import check_memory, check_simulation, simulation_bytes
from specbatch.simulator.config.sim_config import (
    SimConfig,
    validate_against_trace,
    validate_config,
)
from specbatch.simulator.cost.features.graph_padding import pad_to_graphs
from specbatch.simulator.cost.registry import weight_bits_notes
from specbatch.simulator.cost.verify_cost import verify_cost_for, verify_notes
from specbatch.simulator.defaults import FREE_DRAFTS, one_hot_drafter
from specbatch.simulator.engine.kv import (
    cap_to_model_len,
    check_fits,
    check_hybrid_fits,
    hybrid_layout,
    hybrid_notes,
    kv_capacity,
)
from specbatch.simulator.engine.v1.compose import check_v1_workload, v1_lookahead
from specbatch.simulator.engine_run import run_engine_columns
from specbatch.simulator.metrics import (
    Columns,
    StepTotals,
    column,
    makespan,
    rows,
    summarize,
)
from specbatch.simulator.policies import knobs as pk
from specbatch.simulator.policies.base import defines
from specbatch.simulator.policies.calibration import calibrate_policy, split_trace
from specbatch.simulator.policies.catalogue import entry
from specbatch.simulator.policies.registry import make_policy
from specbatch.simulator.replay.fitted_acceptance import acceptance_trace
from specbatch.simulator.replay.profile_replay import profile_notes, profile_trace
from specbatch.simulator.sim_result import RESULT_FILES, SimResult, config_identity
from specbatch.simulator.step_stream import DropSteps, StepWriter
from specbatch.simulator.workload.arrivals import Workload, build_workload

if TYPE_CHECKING:
    from specbatch.simulator.cost.interface import CostModel
    from specbatch.traces.format.trace import Trace


def load_trace(config: SimConfig, allow_partial: bool = False) -> Trace:
    """The trace named by ``config.trace`` ("synth" builds traces.synth's default trace).

    A partial capture (stopped before every request was done) is refused unless
    ``allow_partial``: its requests are a biased subset (the ones captured first).
    """
    if config.trace == "synth":
        from specbatch.traces.synth import SynthConfig, synth_trace

        kwargs: dict[str, int | float] = {"seed": config.seed}
        if config.synth_alpha is not None:
            kwargs["constant_alpha"] = config.synth_alpha
        return synth_trace(SynthConfig(**kwargs))
    from specbatch.traces.format.files import read_trace, resolve_trace

    trace = read_trace(resolve_trace(config.trace))
    require(allow_partial or trace.status == "complete",
            f"trace {trace.path}: a partial capture ({trace.n_requests} requests done; resume it "
            "with capture --resume, or pass --allow-partial to simulate it as it is)")
    return trace



def async_overlaps(config: SimConfig) -> bool:
    """Whether ``config``'s steps overlap the host: its ``async_scheduling`` resolved as vLLM
    resolves the flag for this deployment (SimConfig.async_setting, simulator.cost.features.
    async_overhead.resolve_async: "auto" is vLLM's default, off for the CPU n-gram proposer's
    speculative steps and under vllm-v0; an explicit true is dropped for the n-gram
    proposer)."""
    return config.async_setting.on


def build_cost(config: SimConfig) -> CostModel:
    """The active cost model for ``config`` (async scheduling as :func:`async_overlaps`)."""
    from specbatch.simulator.cost.registry import build_cost_model, run_cost

    model = build_cost_model(cost=run_cost(config).name, hardware=config.hardware,
                             target=config.target, draft=config.draft, tp=config.tp,
                             profile=config.profile,
                             execution=config.execution,
                             draft_weight_bits=config.draft_weight_bits,
                             routing_skew=config.routing_skew,
                             quantization=config.quantization,
                             kv_cache_dtype=config.kv_cache_dtype,
                             draft_head=config.draft_head)
    if config.enable_expert_parallel:  # vLLM's DP + EP (simulator.cost.features.expert_parallel)
        from specbatch.simulator.cost.features.expert_parallel import with_expert_parallel

        model = with_expert_parallel(model, int(config.data_parallel_size), int(config.tp))
    # vLLM V1's draft-model proposer: pass 1 over the target's pass + one token per request
    # (simulator.cost.features.draft_model_pass)
    from specbatch.simulator.cost.features.draft_model_pass import with_draft_model_passes

    model = with_draft_model_passes(model, config)
    if config.host == "vllm":  # vLLM's host terms (simulator.cost.features.host)
        from specbatch.simulator.cost.features.host import with_host

        return with_host(model, config.draft, overlap=async_overlaps(config))
    if async_overlaps(config):
        from specbatch.simulator.cost.features.async_overhead import AsyncOverheadCost

        return AsyncOverheadCost(model)
    return model


def run_kv_capacity(config: SimConfig, cost: CostModel, speculates: bool) -> int | None:
    """KV-cache tokens per replica of a run (simulator.engine.kv.kv_capacity). A run that does
    not speculate (``ar``, the AR arm of ``speedup_vs_ar``) is a vLLM deployment without a
    speculative config: no draft weights and no draft KV share its memory, so its pool is the
    target's alone (the capacity of the same config with the host-side n-gram drafter)."""
    from specbatch.simulator.defaults import FREE_DRAFTS

    if (speculates or str(config.draft).lower() in FREE_DRAFTS or config.kv_mode == "reserve"
            or config.kv_capacity is not None):
        return kv_capacity(config, cost)
    bare = dataclasses.replace(config, draft=FREE_DRAFTS[0], draft_head=None,
                               draft_weight_bits=SimConfig.draft_weight_bits)
    return kv_capacity(bare, build_cost(bare))


def cap_workload(config: SimConfig, workload: Workload) -> Workload:
    """The workload with outputs capped at ``max_model_len`` − prompt (simulator.engine.kv), its
    notes saying how many were."""
    output_len, notes = cap_to_model_len(config, workload.prompt_len, workload.output_len)
    if not notes:
        return workload
    return dataclasses.replace(workload, output_len=output_len, notes=workload.notes + notes)


def simulate(config: SimConfig, trace: Trace | None = None, cost_model: CostModel | None = None,
             reference: bool = False, allow_partial: bool = False,
             progress: bool = False, stop=None, steps_file: str | os.PathLike | None = None
             ) -> SimResult:
    """Simulate ``config`` (on ``trace`` when given, else the one it names).

    cost_model: use this instead of building ``config``'s (tests, benchmarks).
    reference:  use the engine's per-request reference twin (parity tests, benchmarks).
    progress:   show a bar of finished requests on stderr for large runs (the results are
    the same either way).
    stop:       an early stop (simulator.engine.core; the planner's analysis.plan.slo.EarlyStop).
    When it ends the run, the tables hold what happened until then and the summary only
    :func:`stopped_summary`'s counts (no speedup run).
    steps_file: write the step table to this Parquet file while the run goes instead of
    holding it (simulator.step_stream; the result's ``steps_file``); a failed run leaves the
    file unfinished, so give a path in a folder that is discarded then (:func:`simulate_to`).
    """
    check_arguments(config, trace)
    validate_config(config)  # a SimConfig built directly (not by load_config) is checked too
    if trace is None:
        trace = load_trace(config, allow_partial)
    trace = acceptance_trace(trace, config.acceptance)  # trace replay, or a model fitted to it
    profile = applied_profile(config)
    if profile is not None:  # the trace's requests, the profile's acceptance
        from specbatch.simulator.config.checks import policy_depth

        depth = policy_depth(config)
        require(depth <= profile.K, f"acceptance_profile: expected k + extra <= the profile's "
                f"K = {profile.K} (it says nothing past position {profile.K}), got {depth}")
        trace = profile_trace(trace, profile, config.seed)
    streamed = steps_file is not None
    check_simulation("config", config.requests or trace.n_requests,
                     trace.n_rows / max(1, trace.n_requests), config.max_num_seqs,
                     config.replicas * config.data_parallel_size, streamed)
    calibration, held_out = None, ()
    split = pk.applied_split(config)
    if split:  # held-out requests calibrate; the others are replayed
        calibration, trace, replayed = split_trace(trace, split, config.seed)
        if not config.calibration_split:  # the default: said in the summary and a note
            held_out = (split, calibration.n_requests, calibration.n_requests + trace.n_requests)
    workload = build_workload(config, trace)
    check_memory("config", simulation_bytes(
        workload.n, float(workload.output_len.mean()) if workload.n else 0.0,
        config.max_num_seqs, config.replicas * config.data_parallel_size, streamed),
        "simulate fewer or shorter requests")
    if calibration is not None:  # trace_index names the request in the whole trace
        workload = dataclasses.replace(workload, trace_index=replayed[workload.trace_index])
    workload = cap_workload(config, workload)
    policy = make_policy(config, trace.K)
    calibrate_policy(policy, calibration, config)
    attach_verify_cost(policy, config, trace)
    footprint = int((workload.prompt_len + workload.output_len).max(initial=0))
    footprint += policy.depth + 1
    validate_against_trace(config, trace, footprint)
    priced = cost_model if cost_model is not None else build_cost(config)
    cost = pad_to_graphs(priced, config.cuda_graph_sizes)
    capacity = run_kv_capacity(config, cost, policy.speculates)
    if config.scheduler_row.mixed_steps:  # vLLM V1's checks: the budget and the block pool
        longest = int((workload.prompt_len + workload.output_len).max(initial=0))
        lookahead = v1_lookahead(config, policy.speculates, policy.depth)
        check_v1_workload(config, capacity, longest, policy.depth, lookahead)
        layout = hybrid_layout(config)
        if layout is not None:  # the hybrid KV cache manager's groups (simulator.engine.kv)
            check_hybrid_fits(config, capacity, layout, longest - 1 + policy.depth + lookahead,
                              max(config.token_budget, policy.depth + 1) + lookahead)
    else:
        check_fits(config, capacity, footprint)
    writer = StepWriter(steps_file) if steps_file is not None else None
    ran: list[str] = []
    try:
        requests, steps = run_engine_columns(
            config, trace, workload, cost, policy, capacity, reference,
            progress="simulate" if progress else None, stop=stop, steps_to=writer,
            engines_ran=ran)
    except BaseException:
        if writer is not None:
            writer.abort()
        raise
    if stop is not None and stop.stopped_at is not None:
        return SimResult(config=config, requests=requests,
                         step_table=None if streamed else steps,
                         summary=stopped_summary(requests, steps, stop.stopped_at, capacity),
                         steps_file=Path(steps_file) if streamed else None, cost_model=priced)
    summary = summarize(requests, steps, config.slo)
    summary["scheduler"] = config.scheduler
    summary["policy"] = config.policy
    summary["verify"] = config.verify
    summary["kv_mode"] = config.kv_mode
    summary["kv_capacity"] = capacity
    summary["engine_ran"] = ran[0]  # compiled or numpy (config.engine; bit-identical tables)
    summary["async_scheduling"] = str(config.async_setting)  # as resolved, and why
    if held_out:
        summary["calibration_split"], summary["held_out_requests"] = held_out[0], held_out[1]
    if config.speedup:
        ar_config = config.replace(policy="ar", speedup=False)
        ar_cost = cost
        if cost_model is None and async_overlaps(ar_config) != async_overlaps(config):
            ar_cost = pad_to_graphs(build_cost(ar_config), config.cuda_graph_sizes)
        ar_capacity = run_kv_capacity(ar_config, ar_cost, False)
        ar_requests, _ = run_engine_columns(ar_config, trace, workload, ar_cost,
                                            make_policy(ar_config, trace.K), ar_capacity,
                                            progress="simulate ar (speedup)" if progress
                                            else None,
                                            steps_to=DropSteps())  # only its makespan
        ar_makespan = makespan(ar_requests)
        summary["async_scheduling_ar"] = str(ar_config.async_setting)  # its own resolution
        summary["speedup_vs_ar"] = (ar_makespan / summary["makespan"]
                                    if summary["makespan"] else float("nan"))
    run_notes = policy.run_notes if defines(policy, "run_notes") else None
    notes = (workload.notes + (() if profile is None else profile_notes(
        profile, config, getattr(entry(config.policy), "confidence", False)))
             + drafter_notes(config, trace) + weight_bits_notes(config, trace)
             + verify_notes(config) + split_notes(config, held_out) + hybrid_notes(config))
    return SimResult(config=config, requests=requests, step_table=None if streamed else steps,
                     summary=summary, notes=notes + (run_notes(config, cost) if run_notes else ()),
                     steps_file=Path(steps_file) if streamed else None, cost_model=priced)


def simulate_to(out_dir: str | os.PathLike, config: SimConfig, trace: Trace | None = None, *,
                force: bool = False, flag: str = "out_dir", allow_partial: bool = False,
                progress: bool = False,
                on_result: Callable[[SimResult], object] | None = None) -> SimResult:
    """Simulate ``config`` into the result folder ``out_dir`` (the checks and the one-step
    replacement of :meth:`SimResult.write`; ``flag`` names the folder in errors), streaming
    the step table to its steps.parquet as the engine runs (simulator.step_stream), so the
    table is never held whole. The files are byte-identical to ``simulate(config).write(
    out_dir)``'s; a run that fails or is killed leaves ``out_dir`` as it was.

    on_result: called with the result before its folder is put in place (the CLI prints its
    notes there). Returns the result, its ``steps_file`` in ``out_dir``.
    """
    check_arguments(config, trace)
    identity = config_identity(config)
    with result_dir(out_dir, "simulate", identity, flag, force=force,
                    legacy=RESULT_FILES) as tmp:
        result = simulate(config, trace, allow_partial=allow_partial, progress=progress,
                          steps_file=tmp / "steps.parquet")
        if on_result is not None:
            on_result(result)
        result.write_files(tmp)
    return dataclasses.replace(result, steps_file=Path(out_dir) / "steps.parquet")


def check_arguments(config: object, trace: object) -> None:
    """A :class:`SpecbatchError` naming the argument unless ``config`` is a SimConfig and
    ``trace`` a loaded Trace or None (a Python caller's slip, such as a trace's name where
    the Trace belongs, gets the fix instead of an AttributeError deep in the run)."""
    from specbatch.traces.format.trace import Trace

    if not isinstance(config, SimConfig):  # the message only on failure: a repr is not free
        raise SpecbatchError(f"simulate: argument config: expected a SimConfig "
                             f"(specbatch.load_config(...)), got {type(config).__name__} "
                             f"{config!r:.60}")
    if not (trace is None or isinstance(trace, Trace)):  # (a Trace's repr prints its arrays)
        hint = (f" (specbatch.read_trace({trace!r}), or config field trace)"
                if isinstance(trace, (str, os.PathLike)) else "")
        raise SpecbatchError(f"simulate: argument trace: expected a Trace or None{hint}, "
                             f"got {type(trace).__name__} {trace!r:.60}")


def stopped_summary(requests: Columns, steps: Columns | StepTotals, time: float,
                    capacity: int | None) -> dict:
    """What a run an early stop ended at ``time`` can say: counts so far, no latencies
    (each table a DataFrame or its columns)."""
    n_steps = steps.steps if isinstance(steps, StepTotals) else rows(steps)
    return {"stopped_at": float(time), "requests": rows(requests),
            "finished": int((~np.isnan(column(requests, "finish"))).sum()),
            "steps": int(n_steps),
            "preemptions": int(column(requests, "preemptions").sum()),
            "recomputed_tokens": int(column(requests, "recomputed_tokens").sum()),
            "kv_capacity": capacity}


def split_notes(config: SimConfig, held_out: tuple) -> tuple[str, ...]:
    """A note when the default calibration split was applied (simulator.policies.knobs.
    applied_split): which share and how many trace requests the replay left out."""
    if not held_out:
        return ()
    split, held, total = held_out
    who = f"policy {config.policy}" if config.policy in pk.CALIBRATING \
        else f"predictor {config.predictor}"
    return (f"{held} of the trace's {total} requests (calibration_split {split:g}, the default "
            f"for {who}) are held out of the replay to calibrate on; set calibration_split to "
            "choose the share",)


def applied_profile(config: SimConfig):
    """The acceptance profile ``config.acceptance_profile`` names (a file or a bundled name,
    traces.acceptance.library), or None; one-line errors for a profile that cannot replace
    the run's acceptance."""
    if config.acceptance_profile is None:
        return None
    from specbatch.traces.acceptance.library import resolve_profile

    require(config.acceptance == "trace", "acceptance_profile: expected acceptance = trace (a "
            f"profile replaces the trace's acceptance), got acceptance = {config.acceptance}")
    require(config.trace != "synth" or config.synth_alpha is None, "acceptance_profile: "
            "expected no synth_alpha (a profile replaces the constant acceptance)")
    return resolve_profile(config.acceptance_profile)


def drafter_notes(config: SimConfig, trace: Trace) -> tuple[str, ...]:
    """A note when the trace was drafted without a model (its meta.json names a ``drafter``,
    e.g. ngram) but the cost model prices draft passes of a model (``config.draft``), and one
    when async scheduling was asked for (``true``) but vLLM would not run it
    (SimConfig.async_setting)."""
    notes: tuple[str, ...] = ()
    if config.async_scheduling is True and not async_overlaps(config):
        notes = (f"async_scheduling: {config.async_setting.why} (vLLM's default turns it off "
                 "there); the speedup's AR arm keeps it",)
    draft = ((getattr(trace, "meta", None) or {}).get("models") or {}).get("draft") or {}
    drafter = draft.get("drafter") if isinstance(draft, dict) else None
    if drafter is None or str(config.draft).lower() in FREE_DRAFTS:
        return notes
    return notes + (f"trace drafted by {drafter} (no draft model), but draft passes are priced "
                    f"as {config.draft}'s; set draft = \"ngram\" to price them as free",)


def attach_verify_cost(policy, config: SimConfig, trace: Trace) -> None:
    """Hand a policy that prices steps itself (a ``price_verification`` method, e.g. ``dsd``)
    the verification cost the engine charges this run: :func:`verify_cost_for` of the same
    config and replayed trace (None under ``verify_cost = "none"``), so its plan prices the
    step the engine runs."""
    if not defines(policy, "price_verification"):
        return
    price = policy.price_verification
    price(verify_cost_for(config, trace, one_hot_drafter(config.draft)))
