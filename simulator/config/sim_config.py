"""Simulation configuration: one frozen dataclass, loaded from TOML with overrides.

Each field declares its type, default, allowed values and help on itself
(:func:`specbatch.fields.knob`); the ``simulate`` flags, the TOML checks and the table of
``docs/config.md`` are generated from those declarations. Knob names follow vLLM where one
exists (``max_num_seqs``, ``num_speculative_tokens``, ``max_num_batched_tokens``,
``enable_chunked_prefill``); the rest follow THEORY.md §5 (``extra`` = e, ``budget`` = C).
A TOML file is a flat table of these fields (an optional ``[simulate]`` table is read the
same way), each value of its field's TOML type; ``k``, ``e`` and ``n`` are accepted as
aliases of ``num_speculative_tokens``, ``extra`` and ``requests`` (one spelling per field).

The checks live in :mod:`simulator.config.checks` (re-exported here): the static ones in
:func:`validate_config` (run on every config built), one run's in :func:`check_settings_apply`,
those that need the trace (draft depth against the trace's K, KV capacity against the
largest request) in :func:`validate_against_trace`. Every failure is one line,
``config FILE: field X: expected Y, got Z`` (exit code 2 through the CLI).

The values the fields choose from are named in :mod:`simulator.config.field_values`, a config
file's TOML table is read by :mod:`simulator.config.toml_reader`, and a config is written back
as TOML by :mod:`simulator.config.toml_writer`.
"""

from __future__ import annotations

import dataclasses
import functools
import types
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from specbatch.errors import SpecbatchError
from specbatch.fields import (
    FieldSpec,
    Range,
    above,
    at_least,
    check_ranges,
    check_toml_value,
    coerce,
    exact_value,
    field_specs,
    knob,
    markdown_table,
    resolve_aliases,
)
from specbatch.simulator.config import config_memo, schedulers
from specbatch.simulator.config.checks import (  # noqa: F401 - importable from here too
    NO_EXTRA_POLICIES,
    NO_K_POLICIES,
    NO_VERIFY_POLICIES,
    PREDICTOR_POLICIES,
    applied_k,
    check_extra_applies,
    check_head_drafter,
    check_parallel,
    check_policy_knobs,
    check_scheduler_supports,
    check_settings_apply,
    policy_depth,
    remember_valid,
    validate_against_trace,
    validate_config,
)
from specbatch.simulator.config.config_memo import remembered_configs  # noqa: F401 - importable here
from specbatch.simulator.config.field_values import (
    ACCEPTANCE_MODELS,
    ALIASES,
    ARRIVALS,
    COSTS,
    ENGINES,
    KV_MODES,
    POLICY_NAMES,
    PREDICTORS,
    ROUTERS,
    SAMPLINGS,
    SCHEDULERS,
    THRESHOLD_MODES,
    Value,
    draft_names,
    model_names,
)
from specbatch.simulator.config.toml_reader import parse_toml
from specbatch.simulator.cost.analytic.precision import KV_CACHE_DTYPES, QUANTIZATIONS
from specbatch.simulator.cost.gpus.hardware import (
    DEFAULT_EXECUTION,
    DEFAULT_SAMPLER,
    EXECUTIONS,
    FULL_WEIGHT_BITS,
    HARDWARE,
    VERIFY_COSTS,
)
from specbatch.simulator.defaults import CLIENT_TTFT_S, V1_DEFAULT_BATCHED_TOKENS
from specbatch.simulator.policies import catalogue
from specbatch.simulator.policies import knobs as pk
from specbatch.simulator.replay.rules import names as rule_names


@dataclass(frozen=True)
class SimConfig:
    """Everything one simulation run depends on (same config + seed ⇒ identical results).

    The fields group into the workload (trace, workload, requests, sampling, arrival,
    rate, cv, acceptance, synth_alpha), the engine of each replica (scheduler, max_num_seqs,
    max_num_batched_tokens, enable_chunked_prefill, long_prefill_token_threshold, replicas,
    router, data_parallel_size, enable_expert_parallel), its KV cache
    (simulator.engine.kv, vLLM's names: kv_mode, kv_capacity, block_size, gpu_memory_utilization,
    max_model_len), speculation (policy, num_speculative_tokens = k, extra = e with
    K = k + e drafted by budgeted policies, budget = C, verify, threshold, threshold_mode,
    predictor, dsd_interval), the cost model (simulator.cost.registry.build_cost_model: cost,
    hardware, target, draft, draft_weight_bits, tp, routing_skew, quantization, kv_cache_dtype,
    profile, execution; simulator.cost.verify_cost: verify_cost) and the metrics (seed, slo,
    speedup). Each field's meaning, type, default and allowed values are declared on it
    (docs/config.md).
    """

    trace: str = knob("default", "'default' (the bundled trace), 'synth' (traces.synth with "
                      "synth_alpha and seed), or a trace directory")
    workload: str | None = knob(
        None, "request lengths/arrivals file (.csv/.parquet/.jsonl; columns prompt_len, "
        "output_len, optional arrival or timestamp, category; or .json: a ShareGPT "
        "conversation list or a vLLM bench serve result, simulator.workload.imports) or "
        "'example' (bundled); each "
        "request replays a seeded same-category trace request, wrapping positions past its "
        "end", none="the trace's own requests")
    requests: int = knob(512, "simulated requests N (at most the workload file's rows)",
                         range=at_least(1))
    sampling: str = knob("auto", "how requests are drawn from the trace: auto takes them in "
                         "order when N <= the trace's requests and resamples with seed "
                         "beyond; in_order cycles; resample always resamples",
                         choices=SAMPLINGS)
    arrival: str = knob("burst", "arrival process: burst (all at t = 0), poisson (rate), "
                        "gamma (rate, cv), trace (the recorded times, the workload file's "
                        "when given)", choices=ARRIVALS)
    rate: float = knob(10.0, "arrival rate, requests/s (poisson, gamma)",
                       range=above(0, "requests per second"))
    cv: float = knob(1.0, "inter-arrival coefficient of variation (gamma)",
                     range=above(0, "a coefficient of variation"))
    acceptance: str = knob(
        "trace", "acceptance replayed: trace (each row's recorded probabilities), constant "
        "(one rate alpha fitted from the trace) or per-position (one conditional rate per draft "
        "index, fitted from the trace); simulator.replay.fitted_acceptance",
        choices=ACCEPTANCE_MODELS)
    synth_alpha: float | None = knob(
        None, "constant acceptance α of the synth trace",
        range=Range(0, 1, low_open=True, what="an acceptance probability"), none="off")
    acceptance_profile: str | None = knob(
        None, "an acceptance profile (a profile JSON file or a bundled name, specbatch "
        "acceptance list) replayed position by position in place of the trace's acceptance; "
        "the trace still gives the requests; simulator.replay.profile_replay",
        none="the trace's acceptance")
    scheduler: str = knob("vllm-v1", "step composer: vllm-v1 (one token budget per step, "
                          "running requests first then waiting prompt chunks; vLLM V1's KV "
                          "slots in paged mode; simulator.engine.v1.compose) or vllm-v0 "
                          "(prefill-only steps without chunked prefill, the papers' setting)",
                          choices=SCHEDULERS)
    scheduling_policy: str = knob(
        "fcfs", "admission order of the waiting queue, as vLLM's --scheduling-policy: fcfs "
        "(arrival order) or priority (the workload's priority column, smaller first, then "
        "arrival; reserve KV mode: vLLM's choice of whom to preempt by priority is not "
        "modelled; simulator.engine.admission)", choices=schedulers.SCHEDULING_POLICIES)
    max_num_seqs: int = knob(64, "running requests per replica", range=at_least(1))
    max_num_batched_tokens: int | None = knob(
        None, "tokens scheduled per step: under vllm-v1 the one token budget of every step "
        "(decode tokens 1 + drafts, then prompt chunks); under vllm-v0 the prompt tokens of a "
        "prefill step, with enable_chunked_prefill the budget of a mixed step",
        range=at_least(1), none=f"{V1_DEFAULT_BATCHED_TOKENS} under vllm-v1 (vllm serve's "
        "default on an H100-class GPU), unlimited under vllm-v0")
    enable_chunked_prefill: bool | None = knob(
        None, "split prompts into chunks that fill the step's token budget (false under "
        "vllm-v1: a prompt that does not fit the budget left waits, as vLLM does)",
        none="the scheduler's: true under vllm-v1 (V1 always chunks), false under vllm-v0")
    enable_prefix_caching: bool = knob(
        True, "vllm-v1 paged mode: freed KV blocks stay cached until evicted (LRU), so a "
        "readmitted request and the workload's shared-prefix groups (prefix_group, "
        "prefix_len columns) find their full blocks computed (vLLM V1's default; "
        "simulator.engine.prefix)")
    long_prefill_token_threshold: int = knob(
        0, "vllm-v1: most prompt tokens one request is scheduled per step (0 = no cap, "
        "vLLM's default)", range=at_least(0))
    kv_capacity: int | None = knob(
        None, "KV-cache tokens per replica", range=at_least(1),
        none="unlimited in reserve mode; in paged mode what the cost model's memory leaves "
             "next to the weights at gpu_memory_utilization")
    engine: str = knob(
        "auto", "which engine runs the simulation: compiled (the vllm-v1 loop compiled with "
        "numba, the fast extra; refused with a one-line reason where it does not apply), numpy "
        "(the reference engine, every configuration) or auto (compiled where it applies and "
        "numba is installed, else numpy); the tables are bit-identical either way "
        "(simulator.engine.v1.compiled)", choices=ENGINES)
    kv_mode: str = knob("reserve", "KV-cache management: reserve (prompt + output + K + 1 "
                        "tokens reserved at admission, never preempted) or paged (vLLM-style "
                        "blocks grown per step, the newest request preempted by "
                        "recomputation when they run out)", choices=KV_MODES)
    block_size: int = knob(16, "tokens per KV block in paged mode", range=at_least(1))
    disable_hybrid_kv_cache_manager: bool = knob(
        False, "paged mode, a model with sliding-window layers: charge every layer's KV for "
        "every token as one group (vLLM's --disable-hybrid-kv-cache-manager) instead of vLLM "
        "V1's hybrid KV cache manager (layers grouped by window, a sliding group's blocks "
        "behind its window freed; simulator.engine.kv); no effect without windows")
    gpu_memory_utilization: float = knob(
        0.9, "fraction u of each GPU's memory for weights and KV (paged mode without "
        "kv_capacity)", range=Range(0, 1, low_open=True, what="a fraction"))
    max_model_len: int | None = knob(
        None, "longest prompt + output in tokens: longer prompts are refused, outputs capped "
        "at max_model_len - prompt", range=at_least(2), none="no limit")
    replicas: int = knob(1, "independent engine replicas behind the router, each its own "
                         "server (vLLM's data parallelism inside one server: "
                         "data_parallel_size)", range=at_least(1))
    router: str = knob("round_robin", "request router across replicas (vllm_dp_lb: vLLM's DP "
                       "load balancer, least 4 x waiting + running on counts refreshed every "
                       "100 ms; simulator.engine.core.Engine.route)", choices=ROUTERS)
    data_parallel_size: int = knob(
        1, "vLLM's --data-parallel-size: data-parallel ranks of one server, each a replica "
        "with its own scheduler and KV cache (replicas must then be 1); an MoE target's "
        "ranks need enable_expert_parallel and step in lockstep (simulator.engine.lockstep)",
        range=at_least(1))
    enable_expert_parallel: bool = knob(
        False, "vLLM's --enable-expert-parallel: the MoE target's routed experts split over "
        "data_parallel_size x tp GPUs, tokens dispatched by all-gather / reduce-scatter "
        "(simulator.cost.features.expert_parallel; cost roofline, aic where its MoE rows "
        "time the rank's layout, or calibrated on rtx4090/rtxpro6000)")
    policy: str = knob("fixed", f"speculation policy: one of {', '.join(POLICY_NAMES)}, or a "
                       "user's package.module:Class (docs/policies.md)")
    num_speculative_tokens: int = knob(
        3, "k, verified draft tokens per request (not used by ar and dsd: DSD plans its own "
        "window)", range=at_least(0), flags=("--k",))
    extra: int = knob(0, "e, extra drafted tokens of budgeted policies (K = k + e; 0 for ar, "
                      "fixed, dsd)", range=at_least(0))
    budget: int | None = knob(None, "C, draft tokens verified per step", range=at_least(0),
                              none="k x running requests")
    verify: str = knob("token", "verification rule: token (TV) or block (BV) on chains; "
                       "specinfer, traversal or gbv (path tries) on a tree trace (docs/trees.md)",
                       choices=rule_names())
    threshold: float = knob(0.3, "confidence threshold of the threshold policy",
                            range=Range(0, 1, low_open=True, what="a probability"))
    threshold_mode: str = knob("cumulative", "how the threshold policy combines "
                               "confidences", choices=THRESHOLD_MODES)
    predictor: str = knob(
        "confidence", "tetris's estimate of P(tau >= j) (tetris-tree's of each node's "
        "acceptance): confidence (the draft's cumulative confidence, the official code's), "
        "learned (gradient-boosted trees) or logistic, fitted on the calibration_split "
        "requests (simulator.replay.accept_predictor, simulator.replay.tree_accept_predictor)",
        choices=PREDICTORS)
    dsd_interval: int = knob(20, "steps between DSD re-plans", range=at_least(1))
    dsd_max_k: int | None = knob(
        None, "DSD's largest window: its goodput scan covers k = 0..min(dsd_max_k, 6, K); "
        "num_speculative_tokens (--k) given with policy dsd sets it (as an engine's "
        "num_speculative_tokens caps a dynamic window)", range=at_least(1),
        none="6 (SmartSpec's scan)")
    calibration_split: float = pk.CALIBRATION_SPLIT
    num_speculative_tokens_per_batch_size: str | None = pk.VLLM_TABLE
    draft_len_schedule: str | None = pk.TRT_SCHEDULE
    speculative_adaptive_config: str | None = pk.SGLANG_CONFIG
    specdec_threshold: float = pk.SPECDEC_THRESHOLD
    entropy_threshold: float = pk.ENTROPY_THRESHOLD
    cuda_graph_sizes: str | None = pk.CUDA_GRAPH_SIZES
    adaptive_confidences: str = pk.ADAPTIVE_CONFIDENCES
    adaptive_cost_tables: str = pk.ADAPTIVE_COST_TABLES
    adaptive_survival: str = pk.ADAPTIVE_SURVIVAL
    adaptive_profile_context_len: int = pk.ADAPTIVE_PROFILE_CONTEXT_LEN
    cost: str = knob("auto", "step-time cost model; auto = the best source validated out "
                     "of sample that covers the GPU and models, the roofline as the named "
                     "fallback (simulator.cost.resolve)", choices=COSTS)
    hardware: str = knob("h100", "roofline hardware preset (any case)",
                         names=lambda: tuple(sorted(HARDWARE)), every_name=True)
    target: str = knob("vicuna-33b", "target model: a shape name (roofline) or the profile's "
                       "model name", names=model_names)
    draft: str = knob("vicuna-68m", "draft model: a shape name (roofline) or the profile's "
                      "model name; ngram: a host-side prompt-lookup drafter with no GPU pass "
                      "(simulator.cost.features.free_draft), its CPU time once per step under "
                      "host = vllm (simulator.cost.features.host); eagle, eagle3, mtp (vLLM's "
                      "speculative method names): a head on the target's hidden states, its "
                      "shape derived from the target's, pass 1 over the target's whole pass "
                      "then k - 1 one-token passes (simulator.cost.features.draft_head)",
                      names=draft_names)
    draft_head: str | None = knob(
        None, "the head's config.json (vLLM's speculative_config model) for draft eagle / "
        "eagle3: LlamaForCausalLMEagle3 or EagleLlamaForCausalLM, its num_hidden_layers, "
        "draft_vocab_size, target_hidden_size (simulator.cost.features.draft_head)",
        none="derived from the target's shape (one layer; EAGLE-3: draft vocabulary 32000)")
    draft_weight_bits: int = knob(
        FULL_WEIGHT_BITS, "bits per weight of the draft's decoder-layer projections (roofline): "
        "16 = the hardware's bf16; below 16 a weight-only quantised draft (RTN, an fp16 scale "
        "and min per group of 128: bits/8 + 4/128 bytes per weight; embeddings, head and norms "
        "at bf16), which the pass time and the weights-fit and KV-capacity accounting price",
        range=Range(2, FULL_WEIGHT_BITS, what="bits per weight"))
    tp: int = knob(1, "tensor-parallel degree of the target", range=at_least(1))
    routing_skew: float = knob(
        0.0, "Zipf exponent s of a mixture-of-experts model's expert popularity (roofline; "
        "theory.moe): loads min(1, c e^-s) over the experts ranked by popularity; 0 = "
        "uniform routing", range=at_least(0, "an exponent"))
    quantization: str = knob(
        "none", "the target's weight format, vLLM's --quantization (roofline, calibrated; "
        "simulator.cost.analytic.precision): none = the checkpoint's own (a config.json's "
        "quantization_config; bf16 for the registry shapes); fp8 (1-byte projections and "
        "experts, W8A8 at the FP8 peak on compute capability >= 8.9, weight-only below); "
        "awq/gptq (4-bit weight-only, group 128); mxfp4 (MoE experts at 4.25 bits); embeddings, "
        "LM head, norms and routers stay bf16", choices=QUANTIZATIONS)
    kv_cache_dtype: str = knob(
        "auto", "KV-cache element type, vLLM's --kv-cache-dtype: auto (the model's bf16) or "
        "fp8 / fp8_e4m3 / fp8_e5m2 (1 byte: twice the KV tokens next to the weights, half the "
        "attention's KV bytes)", choices=KV_CACHE_DTYPES)
    profile: str | None = knob(None, "latency profile (.parquet/.csv) for cost profiled, or a "
                               "`cost import-vidur` folder for cost calibrated")
    execution: str = knob(DEFAULT_EXECUTION, "roofline launch-latency preset (cuda_graph: a "
                          "serving engine; eager: ~1.07 ms per decoder layer, fitted to H100 "
                          "profiles)", choices=tuple(sorted(EXECUTIONS)))
    async_scheduling: bool | Literal["auto"] = knob(
        "auto", "vLLM's --async-scheduling: the per-step CPU overhead overlaps the target "
        "pass (a step takes max(pass, overhead), not their sum; "
        "simulator.cost.features.async_overhead), and under vllm-v1 a step is composed one "
        "step ahead: with the arrivals up to the last step's start, the last step's finished "
        "requests still holding their slots and blocks (simulator.engine.async_lag). auto = "
        "vLLM's rule for the flag unset, per run: on without speculation and for a draft "
        "model or an EAGLE/MTP head, off for draft = ngram's speculative steps and under "
        "vllm-v0; true = the flag given (dropped for ngram's speculative steps, which vLLM runs "
        "synchronously); false = --no-async-scheduling. Each arm of --speedup resolves on its "
        "own; the summary records the result")
    host: str = knob("vllm", "the engine's host time (simulator.cost.features.host): vllm = "
                     "scheduler + input preparation a + b n per step (fitted on Vidur's A100 "
                     "CPU profile), the proposer loop's per-pass floor and the n-gram "
                     "proposer's CPU time; fixed = the hardware preset's flat per-step "
                     "overhead (1 ms) and free n-gram drafts", choices=("vllm", "fixed"))
    client_ttft_s: float = knob(
        CLIENT_TTFT_S, "seconds a client sees outside the engine (vLLM's API server, "
        "tokenisation, the trip into the engine core, the streamed chunk back; no vLLM knob): "
        "added to each request's first token and finish (simulator.metrics.client_view), so "
        "TTFT and e2e grow by it and TPOT does not; assumed, not fitted "
        "(simulator.cost.features.host); validate (a live run, --vllm) replays with 0, "
        "their measured stamps being the engine's", range=at_least(0, "seconds"))
    verify_cost: str = knob(DEFAULT_SAMPLER, "verification time per decode step "
                            "(simulator.cost.verify_cost): fused (probability bytes over "
                            "bandwidth + 50 us per call), torch (+ this repo's torch path as "
                            "measured on an H100), none (0 s)", choices=VERIFY_COSTS)
    seed: int = knob(0, "random seed", range=at_least(0))
    slo: float | None = knob(None, "e2e latency SLO in seconds for goodput",
                             range=above(0, "seconds"), none="not computed")
    speedup: bool = knob(False, "also simulate ar on the same workload and cost model for "
                         "speedup_vs_ar")

    def __post_init__(self) -> None:
        """Every field of its declared type and range, whoever built the config (the Python
        API's ``SimConfig(requests=2.5)`` is refused, not run as 2 requests): see
        :func:`check_fields`."""
        for name, value in check_fields(vars(self), "SimConfig").items():
            object.__setattr__(self, name, value)

    @property
    def k(self) -> int:
        """THEORY.md §5's window k (= ``num_speculative_tokens``)."""
        return self.num_speculative_tokens

    @property
    def scheduler_row(self) -> schedulers.SchedulerEntry:
        """The ``scheduler``'s catalogue row (simulator.config.schedulers): what it supports
        and its defaults."""
        return schedulers.scheduler_entry(self.scheduler)

    @property
    def async_setting(self):
        """How ``async_scheduling`` resolves for this run (simulator.cost.features.
        async_overhead.resolve_async, vLLM's rule; an AsyncSetting): speculative unless the
        policy verifies nothing (``ar``: no speculative config; a user's ``module:Class``
        policy counts as speculative), on an engine with vLLM V1's async scheduler or not
        (the scheduler catalogue's ``async_engine``)."""
        from specbatch.simulator.cost.features.async_overhead import resolve_async

        row = catalogue.entry(self.policy)
        return resolve_async(self.async_scheduling, self.draft, row is None or row.verifies,
                             self.scheduler_row.async_engine)

    @property
    def chunked(self) -> bool:
        """Whether prompts are chunked: ``enable_chunked_prefill``, or the scheduler's
        default when unset (vllm-v1 chunks, vllm-v0 does not)."""
        if self.enable_chunked_prefill is None:
            return self.scheduler_row.chunks_prompts
        return self.enable_chunked_prefill

    @property
    def token_budget(self) -> int | None:
        """``max_num_batched_tokens``, or the scheduler's default when unset (None =
        unlimited, vllm-v0 only)."""
        if self.max_num_batched_tokens is None:
            return self.scheduler_row.default_budget
        return self.max_num_batched_tokens

    @property
    def depth(self) -> int:
        """Tokens drafted per request by the budgeted policies: K = k + e."""
        return self.num_speculative_tokens + self.extra

    def replace(self, **changes: Value) -> SimConfig:
        """A copy with ``changes`` applied (aliases allowed) and validated."""
        return make_config(dataclasses.asdict(self) | _canonical(changes, "overrides"))

    def to_dict(self) -> dict[str, Value]:
        return dataclasses.asdict(self)


@functools.cache
def specs() -> dict[str, FieldSpec]:
    """Every SimConfig field's declaration (type, default, choices, range, help)."""
    return field_specs(SimConfig)


#: Field -> its base type, and the fields whose value may be None (TOML omits them; the
#: command line spells it "none"); both read off the annotations.
FIELD_TYPES: dict[str, type] = {name: s.kind for name, s in specs().items()}
OPTIONAL = frozenset(name for name, s in specs().items() if s.optional)


def check_fields(values: Mapping[str, Value], where: str) -> dict[str, Value]:
    """The one place a SimConfig's field values are checked one by one: each of its field's
    type exactly (:func:`specbatch.fields.exact_value`: bool is not an integer, floats are
    finite, numpy numbers become Python ones) and in its declared range and choices
    (:func:`specbatch.fields.check_ranges`); returns the values as stored. Raises
    ``WHERE: field NAME: expected ..., got ...``."""
    exact = {name: exact_value(specs()[name], value, where) for name, value in values.items()}
    check_ranges(types.SimpleNamespace(**exact), {n: specs()[n] for n in exact}, where)
    return exact


def config_table() -> str:
    """The Markdown table of every SimConfig field (docs/config.md)."""
    return markdown_table(SimConfig, ALIASES)


def _canonical(values: Mapping[str, Value], where: str) -> dict[str, Value]:
    """``values`` keyed by field names: aliases resolved (one spelling per field), unknown
    names refused."""
    out = resolve_aliases(values, ALIASES, f"{where}:")
    for key in out:
        if key not in FIELD_TYPES:
            raise SpecbatchError(f"{where}: field {key}: expected one of the SimConfig fields "
                                 f"({', '.join(sorted(FIELD_TYPES))}), got an unknown name")
    return out


def make_config(values: Mapping[str, Value], where: str = "config") -> SimConfig:
    """Build and validate a :class:`SimConfig` from a dict (aliases allowed, values coerced:
    command-line strings, integral floats and numpy numbers are converted). Memoised on the
    values inside :func:`remembered_configs`."""
    key = config_memo.key_of(values)
    config = config_memo.recall(key)
    if config is None:
        config = config_memo.keep(key, _make_config(values, where))
    return config


def _make_config(values: Mapping[str, Value], where: str) -> SimConfig:
    values = _canonical(values, where)
    if (values.get("policy") == "dsd" and "num_speculative_tokens" in values
            and "dsd_max_k" not in values):  # the k a user gives dsd caps its window
        values["dsd_max_k"] = values["num_speculative_tokens"]
    typed = {name: coerce(specs()[name], value, where) for name, value in values.items()}
    config = SimConfig(**check_fields(typed, where))
    validate_config(config, where)
    return config


def read_toml(path: str | Path) -> dict[str, Value]:
    """A config file's fields (flat, or one ``[simulate]`` table), aliases resolved and each
    value of its field's exact TOML type (``max_num_seqs = "64"`` is refused)."""
    where = f"config {path}"
    data = parse_toml(Path(path), where)
    if "simulate" in data and isinstance(data["simulate"], dict):
        data = {**{k: v for k, v in data.items() if k != "simulate"}, **data["simulate"]}
    for key, value in data.items():
        if isinstance(value, dict):
            raise SpecbatchError(f"{where}: field {key}: expected a value, got a table")
    values = _canonical(data, where)
    return {name: check_toml_value(specs()[name], value, where) for name, value in values.items()}




def load_config(path: str | Path | None = None, **overrides: Value) -> SimConfig:
    """Read a TOML file (:func:`read_toml`), apply ``overrides``, validate.

    ``path=None`` starts from the defaults. Overrides win over the file.
    """
    return load_config_given(path, **overrides)[0]


def load_config_given(path: str | Path | None = None, **overrides: Value
                      ) -> tuple[SimConfig, frozenset[str]]:
    """:func:`load_config`, and the fields the file and ``overrides`` set (the settings a user
    gave, which :func:`check_settings_apply` checks), the file read once."""
    values = read_toml(path) if path is not None else {}
    values.update(_canonical(overrides, "overrides"))
    return make_config(values, "config" if path is None else f"config {path}"), frozenset(values)
