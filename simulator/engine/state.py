"""The engine's shared state, declared in one place: what every part of the engine may read.

The engine is the event loop (:class:`~simulator.engine.core.Engine`) plus parts, one
concept per module (decode, admission, the step composers v0 and v1/*), each an
:class:`EnginePart`: an object built with the engine that is a view of its state (it shares the
engine's instance dictionary, so ``self.depth`` in a part costs what it costs in the engine, and
a part's write is the engine's). The engine holds one composer, the scheduler catalogue row's
(``composer``), and the composer holds its own helpers; a part reaches another part only
through the declared name that holds it (``self.composer.run_composed(...)``). The attributes
below are the whole contract between them: ``Engine.__init__`` and the composer's
``__init__`` set each one that has no class default (and nothing undeclared), and a part reads
``self.<name>`` only for a name declared here or a method of its own class
(tests/simulator/engine/test_state.py walks the parts' syntax trees to keep it so).

Three groups: the run's settings (read from the config, the policy and the cost model, fixed
for the run), the run's tables (built once, read-only afterwards), and the mutable state of
the event loop and its output. Arrays carry their shapes: N requests in the workload, K the
policy's depth.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

    from specbatch.simulator.config.sim_config import SimConfig
    from specbatch.simulator.cost.interface import CostModel
    from specbatch.simulator.cost.verify_cost import VerifyCost
    from specbatch.simulator.engine.composers import StepComposer
    from specbatch.simulator.engine.kv import BlockManager
    from specbatch.simulator.engine.lockstep import Lockstep
    from specbatch.simulator.engine.request_state import FreshColumns, Records, Replica
    from specbatch.simulator.engine.v1.fast import V1Fast
    from specbatch.simulator.engine.v1.reference import V1Reference
    from specbatch.simulator.engine.v1.runs import V1Run
    from specbatch.simulator.policies.registry import Policy
    from specbatch.simulator.policies.view import TraceTables
    from specbatch.simulator.replay.chain import VerifyTables
    from specbatch.simulator.replay.tree import TreeTables
    from specbatch.simulator.workload.arrivals import Workload
    from specbatch.traces.format.trace import Trace


class EngineState:
    """The attributes the engine's parts share (module docstring); one line each."""

    # ------------------------------------------------ settings (fixed for the run)
    config: SimConfig  # the run's config (the router's name is read per arrival)
    trace: Trace  # the replayed trace: the policies' views and the tree rules' recorded trees
    w: Workload  # the requests: prompt_len, output_len, arrival, row_base # [N] each
    cost: CostModel  # prices every pass: step_time(role, query, kv), overhead
    policy: Policy  # replica 0's policy (whether it speculates: the draft prefills too)
    policies: list[Policy]  # one policy per replica (stateful policies plan per replica)
    reference: bool  # the per-request reference twins (verify, tree verify, vllm-v1 composer)
    check_plans: bool  # check every plan against the policy contract (reference or a user's policy)
    observes: bool  # the policy overrides observe(): feed it (s_i, τ_i) after each verify
    progress: Callable[[int], object] | None  # called with the requests each step finished
    stop: Callable[..., bool] | None  # early stop: stop(time, records, workload); analysis.plan.slo
    rule: str  # the verification rule (config.verify)
    depth: int  # K: the policy's draft depth (0 = no speculation)
    chunked: bool  # prompts are chunked (enable_chunked_prefill, or the scheduler's default)
    max_seqs: int  # max_num_seqs: running requests per replica
    max_batched: int | None  # the token budget max_num_batched_tokens (None = unlimited, v0)
    kv_capacity: int | None  # KV-cache tokens per replica (None = unlimited, reserve mode)
    threshold: int  # long_prefill_token_threshold (0 = off; vllm-v1)
    lookahead: int  # vllm-v1's KV lookahead slots: K for a draft model, 0 for n-gram or none
    blocks: BlockManager | None  # paged KV's block accounting (None = reserve at admission)
    footprint: np.ndarray  # [N] prompt + output + K + 1: a request's reservation (reserve mode)
    wrap: np.ndarray | None  # [N] trace rows L per request (row base + t mod L), or None
    keys: np.ndarray  # [N] uint64 the verifier's common-random-number stream key per request
    from_sums: Callable[..., float] | None  # the cost model's time_from_sums, or None
    logit_rows: bool  # price logit rows n + S (vllm-v1; simulator.cost.analytic.roofline)
    overhead: float  # T_overhead: the cost model's fixed seconds per step
    verify_cost: VerifyCost | None  # the rejection sampler's seconds per step, or None
    pass_index: np.ndarray  # [max(K, 1)] 0..K−1: the draft passes' indices
    head: bool  # an EAGLE / MTP head drafts (simulator.cost.features), pass 1 over the target pass
    drafts_chunks: bool  # draft prefills chunks in a pass of its own (a speculating draft model)
    composer: StepComposer  # the scheduler catalogue row's composer: step(rep, time) (composers)
    runs: V1Run | None = None  # vllm-v1's runs of identical decode steps (None: another composer)
    fast: V1Fast | None = None  # vllm-v1's steps without the general composer (None: another)
    twin: V1Reference | None = None  # vllm-v1's per-request reference composer (None: another)
    fast_paths: bool = True  # vllm-v1's runs and composer-free steps (False: always compose)
    compositions: list | None  # when a list, every vllm-v1 composition is appended (parity tests)

    # ------------------------------------------------ the run's tables (read-only)
    view_tables: TraceTables  # the policies' whole-trace tables, built once per run
    tree: TreeTables | None  # a tree rule's recorded trees (None for chain rules)
    tables: VerifyTables | None  # the chain verifier's acceptance tables (None: reference, tree)
    eta_width: int  # uniforms η per request and step: K, or what the tree rule reads
    initial: FreshColumns  # [len(Row), N] every request's state column at admission, built on read

    # ------------------------------------------------ mutable state and output
    replicas: list[Replica]  # the data-parallel copies: queues and running batches
    parked: dict[int, np.ndarray]  # preempted uid -> its state column # [len(Row)]
    counts: np.ndarray  # [5, N] RECORD_ROWS of each finished request (views in rec)
    rec: Records  # the run's raw output: per-request arrays # [N] and the step log
    outstanding: list[int]  # per replica: requests routed and not yet finished
    routed: int  # arrivals routed so far (round_robin)
    lb_counts: list | None  # vllm_dp_lb: the [waiting, running] per rank it last published
    lb_published: float  # vllm_dp_lb: when it last published them
    lockstep: Lockstep | None  # an MoE model's DP ranks stepping together (None: independent)
    lag: bool  # vLLM's async scheduling: steps scheduled one ahead (simulator.engine.async_lag)
    heap: list  # the event heap of (time, kind, seq, payload)
    seq: int  # the last event's insertion number (tie-break within a kind)


class EnginePart(EngineState):
    """A part of the engine: a view of its declared state (module docstring)."""

    def __init__(self, engine: EngineState) -> None:
        self.__dict__ = engine.__dict__  # one state: the engine's attributes are the part's


def declared() -> frozenset[str]:
    """The names :class:`EngineState` declares."""
    return frozenset(EngineState.__annotations__)
