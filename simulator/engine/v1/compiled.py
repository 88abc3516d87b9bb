"""Which engine runs a simulation (``engine = "auto" | "compiled" | "numpy"``), and loading
the compiled vllm-v1 loop (its driver: simulator.engine.v1.driver).

The numpy engine (simulator.engine.core.Engine) runs everything; the compiled loop
(simulator.engine.v1.kernel, numba) runs the configurations :func:`compiled_gap` accepts, with
request and step tables bit-identical to the numpy engine's (its reference twin; parity:
tests/simulator/engine/v1/test_compiled.py). ``auto`` takes the compiled loop where it applies,
numba is installed and the run has at least :data:`AUTO_MIN_REQUESTS` requests (below, the
kernel's load costs more than it saves); ``compiled`` refuses the rest with a one-line reason
naming what is not covered; ``numpy`` always takes the numpy engine.

Covered today: scheduler vllm-v1; any number of replicas behind the round_robin router
(independent replicas: driver.CompiledEngine.run and driver.event_order; no data parallelism);
FCFS, or priority admission in reserve mode; ``kv_mode = "reserve"`` (any ``kv_capacity``) or
``"paged"`` (preemption by recompute, the prefix cache's counting path; not the hybrid manager's
groups nor shared-prefix groups); any ``long_prefill_token_threshold``; chunked prefill on or
off; policies ``ar``, ``fixed``, ``tetris`` (confidence surrogate, TV and BV), ``dsd`` (its
goodput plans and α) and the engines' (simulator.engine.v1.policy_arrays: ``batch-schedule``
with vLLM's or TensorRT-LLM's batch-size table, ``vllm-dynamic``, ``ema-adaptive`` with SGLang's
slots, ``vllm-adaptive`` with the confidence surrogate, profiled tables, stale or fresh
confidences; the row-wise ``threshold``, ``specdec++``, ``entropy-stop``; the bounds
``hindsight`` and ``oracle`` under TV; the catalogue's ``compiled`` trait,
simulator.policies.catalogue); chain rules TV and BV on replayed acceptance (trace, fitted or
profile); the drafters: a draft model (as vLLM V1's proposer runs it, simulator.cost.features.
draft_model_pass: pass 1 over the target's pass plus one token per request, kernel.first_pass;
the later passes at c_i + τ_i + j), a head on the target's hidden states (EAGLE, EAGLE-3,
MTP; simulator.cost.features.draft_head: pass 1 over the target's pass, kernel.first_pass; the
later passes at c_i + τ_i + j), vLLM's n-gram proposer (its host seconds once per step,
simulator.cost.features.host.ngram_seconds) and a free drafter without host terms (0 s passes);
the roofline cost model (no sliding windows; experts under uniform routing on one rank, W8A8 FP8
GEMMs) and the calibrated model (simulator.cost.measured.calibrated, ``cost = "calibrated"``) as
its PassTables (simulator.cost.tabulated, simulator.engine.v1.pass_tables: dense, MoE, MLA and
quantised roles, table cells, measured all-reduce curves; the LLMServingSim GPUs' pricer with
its two attention regimes and its sampler at n requests, simulator.cost.measured.lss_table;
both roles; not sliding-window layers, simulator.cost.measured.calibrated_table), each with
CUDA-graph padding and analysis.sensitivity's scaled cost too, with or without vLLM's host terms
(the default ``host = "vllm"``: simulator.cost.features.host.HostCost, with or without async
scheduling; ``host = "fixed"`` with async scheduling: simulator.cost.features.async_overhead.
AsyncOverheadCost; also inside the sensitivity runs' scaled cost) and the rejection sampler's
cost; any
arrivals; an early stop (simulator.engine.core's ``stop``, the planner's
analysis.plan.slo.EarlyStop) on one replica: the kernel returns before a step whose events
reach a check (kernel.step_events counts the numpy engine's arrivals, STEP_END and SCHEDULE
events; ``ar``'s runs of identical decode steps, which the numpy engine takes as one event,
simulator.engine.v1.runs, are one event there too: kernel.runs),
driver.CompiledEngine.check_stop calls the rule at the numpy engine's events and ends the run
there or goes on; a stop that gives its rule's limits (simulator.engine.stop_limits, the
planner's does) is checked by the kernel itself at those events, with no return to Python
(kernel.stop; parity: tests/simulator/engine/v1/test_compiled_stop.py). Everything else
(tetris and vllm-adaptive with a fitted predictor, vllm-adaptive's exact tables or true
survival, oracle under BV, trees, sliding-window layers, skewed expert routing or expert
parallelism in the roofline, profiled costs, vllm-v0, the least_outstanding and vllm_dp_lb
routers, user policies, an early stop with several replicas) runs on numpy.

Kernels are cached under ``$SPECBATCH_CACHE/numba`` (``~/.cache/specbatch/numba``): numba's
``cache=True`` writes next to the source by default, so ``NUMBA_CACHE_DIR`` is set before numba
is imported (unless the user set it). A cold compile (no cached kernel yet) prints one line on
stderr. Numba checks a cached function against its own file only, so a change in any of the
kernel package's modules drops every cached kernel of the package (:func:`load_kernel`).
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from specbatch.errors import SpecbatchError
from specbatch.simulator.config.field_values import ENGINES  # noqa: F401 - the field's values
from specbatch.simulator.engine.v1.numba_start import import_arraymath
from specbatch.simulator.engine.v1.pass_tables import (  # noqa: F401 - pass_tables: tests
    MAX_TABLE_TOKENS,
    max_pass_tokens,
    pass_tables,
    priced_roles,
    tabulated,
)

if TYPE_CHECKING:
    from specbatch.simulator.config.sim_config import SimConfig
    from specbatch.simulator.cost.features.async_overhead import AsyncOverheadCost
    from specbatch.simulator.cost.features.host import HostCost
    from specbatch.simulator.cost.interface import CostModel
    from specbatch.simulator.policies.registry import Policy
    from specbatch.simulator.workload.arrivals import Workload

#: ``auto`` takes the compiled loop from this many requests on: loading the cached kernel
#: costs ~0.5 CPU-s a process (numba's import and its cache index; measured with
#: benchmarks/compiled_bench.py), which the loop saves back at ~20-80 µs a step only after
#: some 10^4 steps; smaller runs stay on numpy (``engine = "compiled"`` forces it).
AUTO_MIN_REQUESTS = 2000
_NOTED: set[str] = set()
#: Kernel cache folders :func:`load_kernel` has checked against :func:`kernel_stamp` in this
#: process (the planner loads the kernel once per run: ~0.4 ms of reading and hashing each).
_STAMPED: set[Path] = set()
#: The compiled loop's modules (simulator.engine.v1.kernel), hashed by :func:`kernel_stamp`.
KERNEL_SOURCES = Path(__file__).with_name("kernel")
#: simulator.cost.tabulated: the grid attention law the kernel compiles (kernel.pricing);
#: simulator.engine.stop_limits: the early stop's limits slots (kernel.stop).
TABULATED_SOURCE = Path(__file__).parents[2] / "cost" / "tabulated.py"
STOP_LIMITS_SOURCE = Path(__file__).parents[1] / "stop_limits.py"


def numba_installed() -> bool:
    """Whether numba can be imported (the ``fast`` extra), without importing it."""
    try:
        return importlib.util.find_spec("numba") is not None
    except (ImportError, ValueError):  # a None entry in sys.modules: treated as absent
        return False


def cache_dir() -> Path:
    """Where compiled kernels are cached: ``$SPECBATCH_CACHE/numba`` (default
    ``~/.cache/specbatch/numba``)."""
    root = os.environ.get("SPECBATCH_CACHE") or os.path.join(os.path.expanduser("~"), ".cache",
                                                             "specbatch")
    return Path(root) / "numba"


def kernel_stamp() -> str:
    """sha256 of the kernel package's sources (simulator.engine.v1.kernel, every module,
    simulator.cost.tabulated whose grid_attention it compiles and simulator.engine.stop_limits
    whose slots it reads): numba
    checks only a cached function's own file, so a change in a function it calls (another
    module of the package) must drop the cached kernels itself (:func:`load_kernel`)."""
    digest = hashlib.sha256()
    for path in [*sorted(KERNEL_SOURCES.glob("*.py")), TABULATED_SOURCE, STOP_LIMITS_SOURCE]:
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def kernel_cache(where: Path) -> Path:
    """The folder numba caches the kernel package's functions in under ``where``
    (numba.core.caching's cache subpath: the source folder's name, then the sha1 of its
    absolute path)."""
    folder = os.path.abspath(KERNEL_SOURCES)
    return where / f"{os.path.basename(folder)}_{hashlib.sha1(folder.encode()).hexdigest()}"


def load_kernel():
    """The kernel package, numba's cache pointed at :func:`cache_dir` first (unless
    ``NUMBA_CACHE_DIR`` is set), its cached kernels dropped when :func:`kernel_stamp` differs
    from the one they were compiled from; one stderr line when no cached kernel exists yet."""
    if "numba" not in sys.modules and not os.environ.get("NUMBA_CACHE_DIR"):
        os.environ["NUMBA_CACHE_DIR"] = str(cache_dir())
    from specbatch.simulator.engine.v1 import kernel

    import_arraymath()  # before the first call refreshes numba's target (numba_start)

    where = Path(os.environ.get("NUMBA_CACHE_DIR") or cache_dir())
    here = kernel_cache(where)
    if here in _STAMPED:  # checked in this process: numba reads a cached kernel once per
        return kernel  # process, so a later edit of the sources cannot reach this one
    stamp, mark = kernel_stamp(), here / "sources.sha256"
    try:
        if not mark.is_file() or mark.read_text() != stamp:
            for index in here.glob("*.nbi"):  # numba recompiles what has no index
                index.unlink(missing_ok=True)
            here.mkdir(parents=True, exist_ok=True)
            mark.write_text(stamp)
    except OSError:  # pragma: no cover - an unwritable cache: numba does not cache either
        pass
    _STAMPED.add(here)
    if not any(here.glob("loop.run_steps-*.nbi")) and "cold" not in _NOTED:
        _NOTED.add("cold")
        print(f"specbatch: compiling the vllm-v1 kernel (first run, ~1 CPU-minute; cached under "
              f"{where})",
              file=sys.stderr)
    return kernel


def compiled_gap(config: SimConfig, policy: Policy, cost: CostModel, *,
                 reference: bool = False, stop=None, workload: Workload | None = None
                 ) -> str | None:
    """Why the compiled loop cannot run this simulation (one phrase), or None when it can."""
    from specbatch.simulator.config.schedulers import names, scheduler_entry
    from specbatch.simulator.cost.analytic.roofline import RooflineCost
    from specbatch.simulator.cost.features.async_overhead import AsyncOverheadCost
    from specbatch.simulator.cost.features.host import HostCost
    from specbatch.simulator.policies import catalogue
    from specbatch.simulator.policies.adaptive import VllmAdaptive
    from specbatch.simulator.policies.base import Policy
    from specbatch.simulator.policies.engines import EmaAdaptive
    from specbatch.simulator.policies.papers import DynamicSD, Tetris
    from specbatch.simulator.replay.rules import rule_entry

    if reference:
        return "the reference twin runs on numpy"
    if stop is not None and int(config.replicas) > 1:
        return ("an early stop with several replicas (compiled: one replica, whose events "
                "the kernel counts)")
    if not scheduler_entry(config.scheduler).compiled:
        return f"scheduler {config.scheduler} (compiled: {', '.join(names(compiled=True))})"
    if int(config.data_parallel_size) != 1:
        return "data-parallel ranks (compiled: replicas behind a round_robin router)"
    if int(config.replicas) > 1 and config.router != "round_robin":
        return f"router {config.router} (compiled: round_robin, whose replicas are independent)"
    if config.scheduling_policy != "fcfs" and config.kv_mode != "reserve":
        return (f"scheduling_policy {config.scheduling_policy} under kv_mode "
                f"{config.kv_mode} (compiled: fcfs, or priority in reserve mode)")
    if config.kv_mode == "paged":
        from specbatch.simulator.engine.kv import hybrid_layout

        if hybrid_layout(config) is not None:
            return "the hybrid KV cache manager's sliding-window groups"
        if (config.enable_prefix_caching and workload is not None
                and workload.prefix_group is not None
                and bool((np.asarray(workload.prefix_group) >= 0).any())):
            return "shared-prefix groups in the prefix cache (compiled: its counting path)"
    listed = catalogue.entry(config.policy)
    if listed is None or not listed.compiled or type(policy) is not listed.load():
        return f"policy {config.policy} (compiled: {', '.join(catalogue.names(compiled=True))})"
    if type(policy).observe not in (Policy.observe, DynamicSD.observe, EmaAdaptive.observe,
                                    VllmAdaptive.observe):  # pragma: no cover
        return f"policy {config.policy} observes its steps"
    if isinstance(policy, Tetris) and policy.kind != "confidence":
        return f"{policy.name} with predictor {policy.kind} (compiled: confidence)"
    if policy.name == "oracle" and not policy.rule_row.additive:
        return "oracle under BV (compiled: TV, its top-C; BV's optimum over the gains is not)"
    if type(policy) is VllmAdaptive and (policy.exact or policy.truth):
        return ("vllm-adaptive with adaptive_cost_tables = exact or adaptive_survival = truth "
                "(compiled: profiled tables, estimated survival)")
    row = rule_entry(config.verify)
    if policy.depth and (row.kind != "chain" or row.scan not in ("leading", "last")):
        return f"verify {config.verify} (compiled: chain rules tv, block)"
    _, _, base = cost_layers(cost)
    if type(base) in (HostCost, AsyncOverheadCost):  # PaddedSumsCost(ScaledCost(HostCost)):
        # b·n would count pads
        return ("CUDA-graph padding outside vLLM's host terms (compiled: padding inside "
                "them, as build_cost and pad_to_graphs order them)")
    kind, head, base = drafter_layer(base)
    if kind == "model-v1" and pass_one_unpadded(cost):
        return ("a draft model's pass 1 outside CUDA-graph padding (compiled: padding inside "
                "DraftModelPasses, as pad_to_graphs orders it)")
    layer = head.passes.layer if head is not None else None
    if layer is not None and layer.experts and (layer.expert_load or layer.ep_size != 1):
        return ("an MTP head's skewed routing or expert parallelism (compiled: uniform "
                "routing on one rank's experts)")
    roles = drafted_roles(kind, policy)
    if tabulated(base):
        if config.token_budget is None:  # pragma: no cover - vllm-v1 always has one
            return "an unlimited token budget (compiled cost tables need max_num_batched_tokens)"
        q_max = max_pass_tokens(config, policy, cost_layers(cost)[0])
        if q_max > MAX_TABLE_TOKENS:
            return (f"passes of up to {q_max} tokens (compiled cost tables: up to "
                    f"{MAX_TABLE_TOKENS})")
        for role in roles:
            why = base.table_gap(role)
            if why is not None:
                return (f"{why} (compiled: the calibrated and aic models' full-attention "
                        "passes)")
    elif type(base) is not RooflineCost:
        return (f"cost model {type(cost).__name__} (compiled: the plain roofline, the "
                "calibrated and the aic models)")
    else:
        for role in roles:
            c = base.consts[role]
            if c.sliding_layers:
                return f"the {role}'s sliding windows (compiled: full-attention roofline)"
            if c.experts and (c.expert_load or c.ep_size != 1):
                return (f"the {role}'s skewed routing or expert parallelism (compiled: "
                        "uniform routing on one rank's experts)")
    return None


def drafter_layer(model: CostModel) -> tuple[str, object | None, CostModel]:
    """(kind, head, inner) of the model under the host, padding and scale layers
    (:func:`cost_layers`): an EAGLE / EAGLE-3 / MTP head (simulator.cost.features.draft_head.
    HeadDraftCost: "head", the head's cost, its target model), a host-side drafter
    (simulator.cost.features.free_draft.FreeDraftCost, the n-gram proposer: "free", None, its
    target model), a draft model under vLLM V1's proposer (simulator.cost.features.
    draft_model_pass.DraftModelPasses: "model-v1", None, the model; its pass 1 over the target
    pass, kernel.first_pass), else ("model", None, ``model``): a draft model priced as the
    draft role with a chunk pass (vllm-v0's draft worker). "model" and "model-v1" price both
    roles (:func:`drafted_roles`)."""
    from specbatch.simulator.cost.features.draft_head import HeadDraftCost
    from specbatch.simulator.cost.features.draft_model_pass import DraftModelPasses
    from specbatch.simulator.cost.features.free_draft import FreeDraftCost

    if type(model) is HeadDraftCost:
        return "head", model, model.inner
    if type(model) is FreeDraftCost:
        return "free", None, model.inner
    if type(model) is DraftModelPasses:
        return "model-v1", None, model.inner
    return "model", None, model


def drafted_roles(kind: str, policy: Policy) -> tuple[str, ...]:
    """The roles whose PassTables a run of drafter ``kind`` (:func:`drafter_layer`) prices: a
    draft model's both (pass_tables.priced_roles), a head's or a host-side drafter's the
    target's only."""
    return priced_roles(policy) if kind in ("model", "model-v1") else ("target",)


def host_layer(cost: CostModel) -> tuple[HostCost | AsyncOverheadCost | None, float, CostModel]:
    """(host terms, outer factor, the rest) of ``cost``: simulator.cost.features.host's
    HostCost, or (``host = "fixed"`` under async scheduling) simulator.cost.features.
    async_overhead's AsyncOverheadCost (max(pass, T_o): the kernel's host terms with a = T_o,
    b = 0, overlapped, no proposer floor), when it is the outermost layer (build_cost puts it
    there and pad_to_graphs pads inside it, so the host's n counts scheduled requests, not
    padding slots) or inside only analysis.sensitivity's ScaledCost (the CLI's ±5 % runs:
    factor · the host-adjusted pass, the factor returned), else (None, 1.0, ``cost``)."""
    from specbatch.simulator.cost.features.async_overhead import AsyncOverheadCost
    from specbatch.simulator.cost.features.host import HostCost

    layers = (HostCost, AsyncOverheadCost)
    if type(cost).__name__ == "ScaledCost" and type(getattr(cost, "inner", None)) in layers:
        return cost.inner, float(cost.factor), cost.inner.inner
    if type(cost) in layers:
        return cost, 1.0, cost.inner
    return None, 1.0, cost


def cost_layers(cost: CostModel) -> tuple[tuple[int, ...], float, CostModel]:
    """(CUDA-graph sizes, factor, model) of ``cost``: the host terms (:func:`host_layer`,
    priced by the kernel's host_target / host_draft after each pass, with its outer factor)
    around simulator.cost.features.draft_model_pass's DraftModelPasses (a vLLM V1 draft
    model's pass 1: build_cost puts it inside the host terms, pad_to_graphs pads inside it)
    around simulator.cost.features.graph_padding's PaddedSumsCost (the sizes it pads each pass
    to; () without) around analysis.sensitivity's ScaledCost (every pass and the overhead times
    a factor; matched by name, as the simulator imports nothing of analysis; 1.0 without;
    around build_cost's whole model, DraftModelPasses inside it) around the model. A
    DraftModelPasses met at either place comes back around the model itself (the kernel pads
    and scales its pass 1 as it pads and scales every pass), so :func:`drafter_layer` takes it
    off as it takes off a head."""
    from specbatch.simulator.cost.features.draft_model_pass import DraftModelPasses
    from specbatch.simulator.cost.features.graph_padding import PaddedSumsCost

    host, _, inner = host_layer(cost)
    if host is not None:
        cost = inner
    passes = type(cost) is DraftModelPasses
    if passes:
        cost = cost.inner
    sizes: tuple[int, ...] = ()
    if type(cost) is PaddedSumsCost:
        sizes, cost = tuple(int(v) for v in cost.sizes), cost.inner
    factor = 1.0
    if type(cost).__name__ == "ScaledCost" and hasattr(cost, "inner"):
        factor, cost = float(cost.factor), cost.inner
    if passes and type(cost) is not DraftModelPasses:
        cost = DraftModelPasses(cost)
    return sizes, factor, cost


def pass_one_unpadded(cost: CostModel) -> bool:
    """Whether a DraftModelPasses sits inside CUDA-graph padding (PaddedSumsCost(ScaledCost(
    DraftModelPasses)): analysis.sensitivity's scaled cost, padded by simulate), where its
    pass 1 reaches the model unpadded through the padding's forwarding while the kernel pads
    every draft-model pass."""
    from specbatch.simulator.cost.features.draft_model_pass import DraftModelPasses
    from specbatch.simulator.cost.features.graph_padding import PaddedSumsCost

    _, _, cost = host_layer(cost)
    if type(cost) is not PaddedSumsCost:
        return False
    cost = cost.inner
    if type(cost).__name__ == "ScaledCost" and hasattr(cost, "inner"):
        cost = cost.inner
    return type(cost) is DraftModelPasses


class NotCovered(SpecbatchError):
    """``engine = "compiled"`` asked of a run :func:`compiled_gap` does not cover (a caller
    that asks for the compiled loop where it applies, such as analysis.plan's runner, takes
    auto's engine instead)."""


def choose_engine(config: SimConfig, policy: Policy, cost: CostModel, *,
                  reference: bool = False, stop=None, workload: Workload | None = None) -> str:
    """"compiled" or "numpy" for this run under ``config.engine``; ``compiled`` that cannot
    run raises a one-line SpecbatchError naming the field; ``auto`` without numba notes
    once on stderr that everything runs on numpy."""
    want = getattr(config, "engine", "auto")
    if want == "numpy":
        return "numpy"
    gap = compiled_gap(config, policy, cost, reference=reference, stop=stop, workload=workload)
    if want == "compiled":
        if gap is not None:
            raise NotCovered(f"config: engine: \"compiled\" does not cover {gap}; "
                             "use auto or numpy")
        if not numba_installed():
            raise SpecbatchError("config: engine: expected numba installed for \"compiled\" "
                                 "(pip install 'specbatch[fast]'), got none")
        return "compiled"
    if gap is not None or (workload is not None and workload.n < AUTO_MIN_REQUESTS):
        return "numpy"
    if not numba_installed():
        if "numba" not in _NOTED:
            _NOTED.add("numba")
            print("specbatch: numba not installed: the numpy engine runs (pip install "
                  "'specbatch[fast]' for the compiled loop)", file=sys.stderr)
        return "numpy"
    return "compiled"
