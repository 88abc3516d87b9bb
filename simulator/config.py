"""Simulation configuration: one frozen dataclass, loaded from TOML with overrides.

Knob names follow vLLM where one exists (``max_num_seqs``, ``num_speculative_tokens``,
``max_num_batched_tokens``, ``enable_chunked_prefill``); the rest follow THEORY.md §5
(``extra`` = e, ``budget`` = C). A TOML file is a flat table of these fields (an optional
``[simulate]`` table is read the same way); ``k`` is accepted as an alias of
``num_speculative_tokens``.

Static checks live in :func:`validate_config`; checks that need the trace (draft depth
against the trace's K, KV capacity against the largest request, recorded arrival offsets)
live in :func:`validate_against_trace`. Every failure is one line,
``config FILE: field X: expected Y, got Z`` (exit code 2 through the CLI).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from specbatch.errors import SpecbatchError
from specbatch.simulator.hardware import DEFAULT_EXECUTION, EXECUTIONS, HARDWARE, get_hardware

try:
    import tomllib
except ModuleNotFoundError:  # pragma: no cover - Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

ARRIVALS = ("burst", "poisson", "gamma", "trace")
ROUTERS = ("round_robin", "least_outstanding")
VERIFY_RULES = ("token", "block")
COSTS = ("roofline", "profiled")
SAMPLINGS = ("auto", "in_order", "resample")
THRESHOLD_MODES = ("cumulative", "per_token")
KV_MODES = ("reserve", "paged")
#: Override/TOML spellings that map onto a field name.
ALIASES = {"k": "num_speculative_tokens", "e": "extra", "n": "requests"}


@dataclass(frozen=True)
class SimConfig:
    """Everything one simulation run depends on (same config + seed ⇒ identical results).

    Workload
      trace:     "default" (bundled, via traces.format.resolve_trace), a trace directory, or
                 "synth" (traces.synth.synth_trace with ``synth_alpha``/seed)
      requests:  N simulated requests; ``sampling`` "auto" takes trace requests in order when
                 N ≤ R and resamples with ``seed`` when N > R ("in_order" cycles, "resample"
                 always resamples)
      arrival:   "burst" (all at t = 0, the TETRIS offline setting), "poisson" (``rate``
                 req/s), "gamma" (``rate`` req/s, inter-arrival CV ``cv``), "trace" (recorded
                 offsets; with ``workload``, the file's arrival times)
      workload:  None (requests and lengths from the trace), "example" (bundled), or a
                 CSV/Parquet/JSONL file of request lengths and optional arrival times and
                 categories, mapped onto trace requests (simulator.workload)
    Engine (per replica)
      max_num_seqs, max_num_batched_tokens (prompt tokens per prefill step; the token budget
      of a mixed step with ``enable_chunked_prefill``), replicas (data parallel), router
      ("round_robin" | "least_outstanding")
    KV cache (per replica; simulator.kv, vLLM's names)
      kv_mode:    "reserve" (a request reserves prompt + output + K + 1 tokens at admission,
                  never preempted) or "paged" (vLLM-style blocks allocated as the KV grows,
                  preemption of the newest request by recomputation when they run out)
      kv_capacity: KV-cache tokens per replica; None = unlimited in "reserve" mode and, in
                  "paged" mode, what the cost model's memory leaves next to the weights:
                  (tp·M·u − W_target − W_draft) / KV bytes per token
      block_size: tokens per KV block ("paged"); gpu_memory_utilization: u above ("paged"
                  with kv_capacity None); max_model_len: the longest prompt + output (None = no
                  limit): prompts that leave no room for one output token are refused, outputs
                  are capped at max_model_len − prompt (SimResult.notes counts them)
    Speculation
      policy (simulator.policies.POLICIES), num_speculative_tokens (k), extra (e, TETRIS
      draws K = k + e), budget (C draft tokens verified per step; None = k × running),
      verify ("token" TV | "block" BV), threshold/threshold_mode (threshold policy),
      dsd_interval (steps between DSD re-plans)
    Cost model (simulator.cost.build_cost_model)
      cost, hardware, target, draft, tp, profile, execution (the roofline's launch-latency
      preset: "cuda_graph" as a serving engine runs, or "eager": ~1.07 ms per decoder layer,
      fitted to the H100 profiles; simulator.hardware.EXECUTIONS)
    Metrics
      slo (seconds of e2e latency for SLO goodput; None = not computed), speedup (also
      simulate ``ar`` on the same workload and cost model for ``speedup_vs_ar``)
    """

    trace: str = "default"
    workload: str | None = None
    requests: int = 512
    sampling: str = "auto"
    arrival: str = "burst"
    rate: float = 10.0
    cv: float = 1.0
    synth_alpha: float | None = None
    max_num_seqs: int = 64
    max_num_batched_tokens: int | None = None
    enable_chunked_prefill: bool = False
    kv_capacity: int | None = None
    kv_mode: str = "reserve"
    block_size: int = 16
    gpu_memory_utilization: float = 0.9
    max_model_len: int | None = None
    replicas: int = 1
    router: str = "round_robin"
    policy: str = "fixed"
    num_speculative_tokens: int = 3
    extra: int = 0
    budget: int | None = None
    verify: str = "token"
    threshold: float = 0.3
    threshold_mode: str = "cumulative"
    dsd_interval: int = 20
    cost: str = "roofline"
    hardware: str = "h100"
    target: str = "vicuna-33b"
    draft: str = "vicuna-68m"
    tp: int = 1
    profile: str | None = None
    execution: str = DEFAULT_EXECUTION
    seed: int = 0
    slo: float | None = None
    speedup: bool = False

    @property
    def k(self) -> int:
        """THEORY.md §5's window k (= ``num_speculative_tokens``)."""
        return self.num_speculative_tokens

    @property
    def depth(self) -> int:
        """Tokens drafted per request by the budgeted policies: K = k + e."""
        return self.num_speculative_tokens + self.extra

    def replace(self, **changes: Any) -> SimConfig:
        """A copy with ``changes`` applied (aliases allowed) and validated."""
        return make_config(dataclasses.asdict(self) | _canonical(changes, "overrides"))

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


FIELD_TYPES: dict[str, type] = {
    "trace": str, "workload": str, "requests": int, "sampling": str, "arrival": str, "rate": float, "cv": float,
    "synth_alpha": float, "max_num_seqs": int, "max_num_batched_tokens": int,
    "enable_chunked_prefill": bool, "kv_capacity": int, "kv_mode": str,
    "block_size": int, "gpu_memory_utilization": float, "max_model_len": int, "replicas": int, "router": str,
    "policy": str, "num_speculative_tokens": int, "extra": int, "budget": int, "verify": str,
    "threshold": float, "threshold_mode": str, "dsd_interval": int, "cost": str,
    "hardware": str, "target": str, "draft": str, "tp": int, "profile": str, "execution": str, "seed": int,
    "slo": float, "speedup": bool,
}
#: Fields whose value may be None (TOML omits them; CLI spells it "none").
OPTIONAL = {"workload", "synth_alpha", "max_num_batched_tokens", "kv_capacity", "max_model_len",
            "budget", "profile", "slo"}


def _canonical(values: dict[str, Any], where: str) -> dict[str, Any]:
    out = {}
    names = {f.name for f in fields(SimConfig)}
    for key, value in values.items():
        name = ALIASES.get(key, key)
        if name not in names:
            raise SpecbatchError(f"{where}: field {key}: expected one of the SimConfig fields "
                                 f"({', '.join(sorted(names))}), got an unknown name")
        out[name] = value
    return out


#: How an error message names the value a field of each type expects.
KIND_WORDS = {int: "an integer", float: "a number", bool: "true or false", str: "a string"}


def coerce(name: str, value: Any, where: str = "config") -> Any:
    """Convert ``value`` to field ``name``'s type (strings from the CLI included)."""
    kind = FIELD_TYPES[name]
    if value is None or (isinstance(value, str) and value.lower() == "none" and name in OPTIONAL):
        if name in OPTIONAL:
            return None
        raise SpecbatchError(f"{where}: field {name}: expected {KIND_WORDS[kind]}, got none")
    try:
        if kind is bool:
            if isinstance(value, str):
                low = value.lower()
                if low not in ("true", "false", "1", "0", "yes", "no"):
                    raise ValueError
                return low in ("true", "1", "yes")
            if not isinstance(value, (bool, int)):
                raise ValueError
            return bool(value)
        if kind is int:
            if isinstance(value, bool):
                raise ValueError
            if isinstance(value, float):
                if not value.is_integer():
                    raise ValueError
                return int(value)
            return int(value)
        if kind is float:
            if isinstance(value, bool):
                raise ValueError
            return float(value)
        if not isinstance(value, str):
            raise ValueError
        return value
    except (TypeError, ValueError):
        raise SpecbatchError(
            f"{where}: field {name}: expected {KIND_WORDS[kind]}, got {value!r}") from None


def make_config(values: dict[str, Any], where: str = "config") -> SimConfig:
    """Build and validate a :class:`SimConfig` from a dict (aliases allowed, values coerced)."""
    values = _canonical(values, where)
    typed = {name: coerce(name, value, where) for name, value in values.items()}
    config = SimConfig(**typed)
    validate_config(config, where)
    return config


def load_config(path: str | Path | None = None, **overrides: Any) -> SimConfig:
    """Read a TOML file (flat, or one ``[simulate]`` table), apply ``overrides``, validate.

    ``path=None`` starts from the defaults. Overrides win over the file.
    """
    values: dict[str, Any] = {}
    where = "config"
    if path is not None:
        where = f"config {path}"
        try:
            with open(path, "rb") as fh:
                data = tomllib.load(fh)
        except FileNotFoundError:
            raise SpecbatchError(f"{where}: expected an existing TOML file, got no such file") from None
        except tomllib.TOMLDecodeError as exc:
            raise SpecbatchError(f"{where}: expected valid TOML, got {exc}") from None
        if "simulate" in data and isinstance(data["simulate"], dict):
            data = {**{k: v for k, v in data.items() if k != "simulate"}, **data["simulate"]}
        for key, value in data.items():
            if isinstance(value, dict):
                raise SpecbatchError(f"{where}: field {key}: expected a value, got a table")
        values.update(_canonical(data, where))
    values.update(_canonical({k: v for k, v in overrides.items()}, "overrides"))
    return make_config(values, where)


#: Policies that never draft beyond k, so a nonzero ``extra`` would be silently ignored.
NO_EXTRA_POLICIES = ("ar", "fixed", "dsd")


def _fail(where: str, name: str, expected: str, got: Any) -> None:
    raise SpecbatchError(f"{where}: field {name}: expected {expected}, got {got!r}")


def validate_config(c: SimConfig, where: str = "config") -> None:
    """Static checks (no trace needed); raises a one-line :class:`SpecbatchError`."""
    from specbatch.simulator.policies import POLICIES  # local: policies import nothing from here

    def positive(name: str, value: Any, minimum: float = 1) -> None:
        if value is not None and (not math.isfinite(value) or value < minimum):
            _fail(where, name, f"a number >= {minimum:g}", value)

    def choice(name: str, value: str, options: tuple[str, ...] | list[str]) -> None:
        if value not in options:
            _fail(where, name, f"one of {', '.join(options)}", value)

    positive("requests", c.requests)
    positive("max_num_seqs", c.max_num_seqs)
    positive("max_num_batched_tokens", c.max_num_batched_tokens)
    positive("kv_capacity", c.kv_capacity)
    positive("block_size", c.block_size)
    positive("max_model_len", c.max_model_len, 2)
    positive("replicas", c.replicas)
    positive("num_speculative_tokens", c.num_speculative_tokens, 0)
    positive("extra", c.extra, 0)
    positive("budget", c.budget, 0)
    positive("dsd_interval", c.dsd_interval)
    positive("tp", c.tp)
    positive("seed", c.seed, 0)
    choice("policy", c.policy, sorted(POLICIES))
    choice("verify", c.verify, VERIFY_RULES)
    choice("arrival", c.arrival, ARRIVALS)
    choice("router", c.router, ROUTERS)
    choice("cost", c.cost, COSTS)
    choice("execution", c.execution, sorted(EXECUTIONS))
    choice("sampling", c.sampling, SAMPLINGS)
    choice("threshold_mode", c.threshold_mode, THRESHOLD_MODES)
    choice("kv_mode", c.kv_mode, KV_MODES)
    if not (math.isfinite(c.gpu_memory_utilization) and 0.0 < c.gpu_memory_utilization <= 1.0):
        _fail(where, "gpu_memory_utilization", "a fraction in (0, 1]", c.gpu_memory_utilization)
    if not (math.isfinite(c.rate) and c.rate > 0):
        _fail(where, "rate", "requests per second > 0", c.rate)
    if not (math.isfinite(c.cv) and c.cv > 0):
        _fail(where, "cv", "a coefficient of variation > 0", c.cv)
    if not (0.0 < c.threshold <= 1.0):
        _fail(where, "threshold", "a probability in (0, 1]", c.threshold)
    if c.slo is not None and not (math.isfinite(c.slo) and c.slo > 0):
        _fail(where, "slo", "seconds > 0", c.slo)
    if c.synth_alpha is not None and not (0.0 < c.synth_alpha <= 1.0):
        _fail(where, "synth_alpha", "an acceptance probability in (0, 1]", c.synth_alpha)
    if c.policy == "fixed" and c.num_speculative_tokens < 1:
        _fail(where, "num_speculative_tokens", "k >= 1 for policy fixed", c.num_speculative_tokens)
    if c.policy in ("tetris", "oracle", "hindsight", "threshold") and c.depth < 1:
        _fail(where, "num_speculative_tokens", f"k + extra >= 1 for policy {c.policy}", c.depth)
    if c.enable_chunked_prefill and c.max_num_batched_tokens is None:
        _fail(where, "max_num_batched_tokens", "a token budget when enable_chunked_prefill is set",
              None)
    if c.cost == "profiled" and c.profile is None:
        _fail(where, "profile", "a latency profile path when cost = 'profiled'", None)
    try:
        get_hardware(c.hardware)  # the preset lookup accepts any case and its aliases
    except SpecbatchError:
        _fail(where, "hardware", f"one of {', '.join(sorted(HARDWARE))}", c.hardware)


def check_extra_applies(c: SimConfig, where: str = "config") -> None:
    """Refuse ``extra`` > 0 with a policy that never drafts beyond k (one run's settings).

    Not part of :func:`validate_config`: a sweep grid over policy x extra legitimately
    pairs those policies with an e they ignore.
    """
    if c.extra and c.policy in NO_EXTRA_POLICIES:
        _fail(where, "extra", f"0 for policy {c.policy} (e widens the drafts of budgeted "
              "policies only; it would be ignored)", c.extra)


def validate_against_trace(c: SimConfig, trace: Any, max_footprint: int | None = None) -> None:
    """Checks that need the trace: draft depth ≤ trace K, KV capacity ≥ one request, offsets.

    max_footprint: the largest KV reservation of one simulated request (tokens), when known
    (reserve mode; paged mode checks its block pool in simulator.kv.check_fits).
    """
    depth = policy_depth(c)
    if depth > trace.K:
        _fail("config", "num_speculative_tokens",
              f"k + extra <= the trace's draft depth K = {trace.K}", depth)
    if (c.kv_mode == "reserve" and c.kv_capacity is not None and max_footprint is not None
            and c.kv_capacity < max_footprint):
        _fail("config", "kv_capacity",
              f"at least one request's footprint (prompt + output + K + 1 = {max_footprint} tokens)",
              c.kv_capacity)


def policy_depth(c: SimConfig) -> int:
    """Deepest draft the configured policy may ask of the trace: its class's
    :meth:`simulator.policies.Policy.required_depth`."""
    from specbatch.simulator.policies import POLICIES

    return POLICIES[c.policy].required_depth(c)


def to_toml(config: SimConfig) -> str:
    """The config as a flat TOML table (None fields are omitted), fields in declaration order."""
    lines = []
    for f in fields(SimConfig):
        value = getattr(config, f.name)
        if value is None:
            continue
        if isinstance(value, bool):
            text = "true" if value else "false"
        elif isinstance(value, (int, float)):
            text = repr(value)
        else:
            text = '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'
        lines.append(f"{f.name} = {text}")
    return "\n".join(lines) + "\n"
