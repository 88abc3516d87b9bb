"""A measured vLLM run's engine settings (meta.json) mapped onto SimConfig fields.

Every setting :func:`engine_settings` reads is either *mapped* (a SimConfig field takes its
value, or the simulator already behaves that way) or *listed as not modelled* with the
reason; a setting the run did not record is taken at vLLM's default and says so. The rest of
``resolved_config`` (observability, loading, LoRA, multimodal, profiler, ... sections: no
timing effect on a text-only run) is listed by name in :attr:`Settings.other`, never dropped
silently; so is every recorded key of engine_kwargs, kv_cache and the read sections that no
rule reads (e.g. ``scheduler_config.encoder_cache_size``, multimodal only).

Every value read is checked for its JSON type, never coerced: counts (``max_num_seqs``,
``num_gpu_blocks``, ``tensor_parallel_size``, ...) are JSON integers >= 1 (or null where not
recording them is allowed: vLLM's default then), switches (``enable_expert_parallel``, ...)
are true or false, ``gpu_memory_utilization`` a fraction in (0, 1]; anything else (``true``
for a count, ``2.5``, ``"2588"``, ``0``, NaN, ``"yes"``) is a one-line error naming the file
and the field. ``quantization`` and ``kv_cache_dtype`` map onto the simulator's knobs of the
same names (simulator.cost.analytic.precision); a format it does not price is refused with the list
it does.

vLLM rules cited (vLLM 0.19, the version the bundled runs record):

- ``cudagraph_capture_sizes``: ``vllm/config/compilation.py``
  ``CompilationConfig.post_init_cudagraph_sizes`` / ``VllmConfig._set_cudagraph_sizes``: by
  default ``[1, 2, 4] + range(8, 256, 8) + range(256, max + 1, 16)`` with ``max =
  min(2 * max_num_seqs, 512)`` (the RTX 4090 run's resolved list is exactly this for
  max_num_seqs 256); a pass of T <= max tokens is padded to the next captured size
  (simulator.cost.features.graph_padding).
- ``num_gpu_blocks``: ``vllm/v1/core/kv_cache_utils.py`` ``get_kv_cache_configs``; the KV
  pool is ``num_gpu_blocks × block_size`` tokens per replica (``kv_capacity``).
- ``max_num_batched_tokens``, ``max_num_seqs``, ``enable_chunked_prefill``,
  ``long_prefill_token_threshold``: ``vllm/v1/core/sched/scheduler.py``
  ``Scheduler.schedule`` (the token budget simulator.engine.v1.compose models).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from specbatch.errors import SpecbatchError, require

#: vLLM defaults assumed when a run's meta.json does not record the setting (vLLM 0.19).
#: ``async_scheduling``: what vLLM resolves the unset flag to for the replayed deployment (no
#: speculative config: on; simulator.cost.features.async_overhead.resolve_async), passed as
#: an explicit true, as a recorded value is.
VLLM_DEFAULTS = {"block_size": 16, "enable_prefix_caching": True, "gpu_memory_utilization": 0.9,
                 "enable_chunked_prefill": True, "long_prefill_token_threshold": 0,
                 "async_scheduling": True, "enforce_eager": False, "policy": "fcfs",
                 "dtype": "auto", "kv_cache_dtype": "auto"}
#: resolved_config sections read setting by setting below; the others go to Settings.other.
READ_SECTIONS = ("scheduler_config", "cache_config", "compilation_config", "parallel_config",
                 "model_config", "speculative_config", "kv_transfer_config", "lora_config")

#: scheduler_config settings the V1 composer (simulator.engine.v1.compose) does not model, and why.
SCHEDULER_UNMODELLED = {
    "max_num_partial_prefills": "not modelled: the composer chunks waiting prompts in order "
                                "until the budget runs out, with no cap on concurrent partial "
                                "prefills",
    "max_long_partial_prefills": "not modelled (as max_num_partial_prefills)",
    "scheduler_reserve_full_isl": "not modelled: admission checks the blocks of the chunk "
                                  "scheduled now, not of the whole prompt",
    "stream_interval": "not modelled: a token counts when its step ends (no output batching "
                       "to the client)",
}


@dataclass(frozen=True)
class Settings:
    """``values``: SimConfig fields; ``mapped``/``unmodelled``: (setting, value, how or why)
    rows; ``other``: every recorded setting not read (module docstring)."""

    values: dict
    mapped: tuple = ()
    unmodelled: tuple = ()
    other: tuple = field(default=())
    origins: dict = field(default_factory=dict)  # SimConfig field -> the setting it came from


def default_capture_sizes(max_num_seqs: int) -> list[int]:
    """vLLM 0.19's default ``cudagraph_capture_sizes`` for ``max_num_seqs`` (docstring)."""
    top = min(2 * int(max_num_seqs), 512)
    sizes = [s for s in (1, 2, 4) if s <= top] + list(range(8, min(top + 1, 256), 8))
    return sizes + list(range(256, top + 1, 16))


class _Reader:
    """Looks settings up in engine_kwargs, kv_cache and resolved_config, in that order."""

    def __init__(self, meta: dict, where: str):
        self.kwargs = meta.get("engine_kwargs") or {}
        self.kv = meta.get("kv_cache") or {}
        self.resolved = meta.get("resolved_config") or {}
        self.where = where
        self.mapped: list = []
        self.unmodelled: list = []
        self.read: set = set()
        self.origins: dict = {}

    def unread(self) -> tuple[str, ...]:
        """Every recorded setting not read: engine_kwargs and kv_cache keys, the keys of the
        read resolved_config sections, and the other sections by name."""
        keys = [f"engine_kwargs.{k}" for k in self.kwargs] + [f"kv_cache.{k}" for k in self.kv]
        for name, sec in self.resolved.items():
            if name in READ_SECTIONS and isinstance(sec, dict):
                keys += [f"resolved_config.{name}.{k}" for k in sec]
            elif name not in READ_SECTIONS:
                keys.append(f"resolved_config.{name}")
        return tuple(sorted(k for k in keys if k not in self.read))

    def get(self, key: str, section: str | None = None):
        """(value, where it came from); (VLLM_DEFAULTS[key], "default") when not recorded.
        The key counts as read in engine_kwargs, kv_cache and ``section``: one setting recorded
        in several places (e.g. block_size in kv_cache and cache_config) is one row."""
        self.read.update({f"engine_kwargs.{key}", f"kv_cache.{key}"})
        if section:
            self.read.add(f"resolved_config.{section}.{key}")
        if key in self.kwargs and self.kwargs[key] is not None:
            return self.kwargs[key], f"engine_kwargs.{key}"
        if key in self.kv and self.kv[key] is not None:
            return self.kv[key], f"kv_cache.{key}"
        sec = self.resolved.get(section) if section else None
        if isinstance(sec, dict) and key in sec and sec[key] is not None:
            return sec[key], f"resolved_config.{section}.{key}"
        return VLLM_DEFAULTS.get(key), f"{key} (not recorded: vLLM default)"

    def _refuse(self, origin: str, expected: str, value) -> None:
        raise SpecbatchError(f"{self.where}: field {origin.split(' ')[0]}: expected {expected}, "
                             f"got {value!r}")

    def integer(self, key: str, section: str | None = None, minimum: int = 1,
                required: bool = False):
        """(int or None, origin): a JSON integer >= ``minimum`` (not a bool, float or string:
        vLLM's settings are ints); None only when not recorded and not ``required``."""
        v, o = self.get(key, section)
        if v is None and not required:
            return None, o
        if type(v) is not int or v < minimum:
            self._refuse(o, f"an integer >= {minimum}" + ("" if required else " or null"), v)
        return v, o

    def flag(self, key: str, section: str | None = None):
        """(bool or None, origin): JSON true or false (not 0/1 or "yes")."""
        v, o = self.get(key, section)
        if v is not None and not isinstance(v, bool):
            self._refuse(o, "true or false", v)
        return v, o

    def map(self, origin: str, value, how: str) -> None:
        self.mapped.append((origin, value, how))

    def skip(self, origin: str, value, why: str) -> None:
        self.unmodelled.append((origin, value, why))


def _parallel(r: _Reader, values: dict) -> None:
    tp, o = r.integer("tensor_parallel_size", "parallel_config")
    values["tp"] = tp or 1
    r.map(o, values["tp"], f"tp = {values['tp']} (all-reduce over the preset's link)")
    dp, o = r.integer("data_parallel_size", "parallel_config")
    dp = dp or 1
    values["data_parallel_size"] = dp
    if dp > 1:
        values["router"] = "vllm_dp_lb"
    r.map(o, dp, f"data_parallel_size = {dp}" + (
        " (one replica per DP rank, router vllm_dp_lb: least 4 x waiting + running; an MoE "
        "target's ranks in lockstep, simulator.engine.lockstep)" if dp > 1 else ""))
    if dp > 1:
        r.skip(o + " (DP details)", dp, "not modelled: the CPU all-reduce agreeing on each "
               "step's token counts and the 32-step lag of a wave's end; the load balancer's "
               "counts are taken at the first arrival 100 ms after the last publication")
    ep, o = r.flag("enable_expert_parallel", "parallel_config")
    values["enable_expert_parallel"] = bool(ep)
    r.map(o, ep, "enable_expert_parallel = " + (
        f"true: E / {dp} experts per GPU, all-gather / reduce-scatter dispatch over the "
        "link (simulator.cost.features.expert_parallel)" if ep else "false"))
    pp, o = r.integer("pipeline_parallel_size", "parallel_config")
    if pp not in (None, 1):
        r.skip(o, pp, "pipeline parallelism is not modelled")
    elif pp is not None:
        r.map(o, pp, "no pipeline parallelism")


#: KV-cache dtypes (vLLM's ``--kv-cache-dtype``) -> the simulator's ``kv_cache_dtype``
#: (simulator.cost.analytic.precision): a 16-bit cache is "auto" (the model's 2 bytes).
KV_DTYPES = {"auto": "auto", "bfloat16": "auto", "float16": "auto", "fp8": "fp8",
             "fp8_e4m3": "fp8_e4m3", "fp8_e5m2": "fp8_e5m2"}
#: Weight formats (vLLM's ``--quantization`` and the resolved ``model_config.quantization``)
#: -> the simulator's ``quantization``: awq_marlin and gptq_marlin are vLLM's Marlin kernels
#: for the same AWQ / GPTQ checkpoints (vllm/model_executor/layers/quantization/awq_marlin.py,
#: gptq_marlin.py: the same packed 4-bit weights, zero points and group scales).
#: ``compressed-tensors`` is the checkpoint's own format (vLLM resolves it from config.json):
#: "none" here, the shape's format from its ``quantization_config`` (traces.models.hf_moe).
QUANTIZATIONS = {"fp8": "fp8", "awq": "awq", "awq_marlin": "awq", "gptq": "gptq",
                 "gptq_marlin": "gptq", "mxfp4": "mxfp4", "compressed-tensors": "none"}


def _kv(r: _Reader, values: dict) -> None:
    bs, o = r.integer("block_size", "cache_config", required=True)
    values["block_size"] = bs
    r.map(o, bs, f"block_size = {bs}")
    blocks, o = r.integer("num_gpu_blocks", "cache_config")
    r.origins["kv_capacity"] = o
    util, ou = r.get("gpu_memory_utilization", "cache_config")
    if not (isinstance(util, (int, float)) and not isinstance(util, bool) and 0 < util <= 1):
        r._refuse(ou, "a fraction 0 < u <= 1", util)
    values["gpu_memory_utilization"] = float(util)
    if blocks:
        values["kv_capacity"] = blocks * bs
        r.map(o, blocks, f"kv_capacity = {blocks} x {bs} = {values['kv_capacity']} tokens")
        r.map(ou, util, "superseded by num_gpu_blocks (what vLLM allocated)")
    else:
        r.map(ou, util, "gpu_memory_utilization: KV = u x memory - weights (roofline)")
        r.skip("num_gpu_blocks (not recorded)", None, "vLLM also subtracts its activation "
               "peak and CUDA context, which the simulator does not: its KV pool is larger "
               "than vLLM's (matters only when the pool fills)")
    pc, o = r.flag("enable_prefix_caching", "cache_config")
    values["enable_prefix_caching"] = bool(pc)
    r.map(o, pc, f"enable_prefix_caching = {bool(pc)}")
    if pc:
        r.skip(o + " (hits)", pc, "requests.jsonl records lengths, not token ids: no "
               "shared prefixes are known, so no cross-request cache hits are simulated")
    kvd, o = r.get("kv_cache_dtype", "cache_config")
    if o.endswith("(not recorded: vLLM default)"):  # vLLM's own name of it, when resolved
        dtype = (r.resolved.get("cache_config") or {}).get("cache_dtype")
        if dtype is not None:
            kvd, o = dtype, "resolved_config.cache_config.cache_dtype"
            r.read.add(o)
    if kvd not in KV_DTYPES:
        r._refuse(o, f"one of {', '.join(KV_DTYPES)} (the KV element types the simulator "
                  "prices, simulator.cost.analytic.precision)", kvd)
    if KV_DTYPES[kvd] != "auto":
        values["kv_cache_dtype"] = KV_DTYPES[kvd]
    r.map(o, kvd, f"kv_cache_dtype = {KV_DTYPES[kvd]}" + (
        " (16-bit KV cache)" if KV_DTYPES[kvd] == "auto" else
        " (1-byte KV: half the attention's KV bytes)"))


def _scheduler(r: _Reader, values: dict) -> None:
    for key, field_ in (("max_num_seqs", "max_num_seqs"),
                        ("max_num_batched_tokens", "max_num_batched_tokens")):
        v, o = r.integer(key, "scheduler_config", required=True)
        values[field_] = v
        r.map(o, v, f"{field_} = {v}")
    mml, o = r.integer("max_model_len", "model_config")
    r.origins["max_model_len"] = o
    if mml:
        values["max_model_len"] = mml
    r.map(o, mml, f"max_model_len = {mml or 'none (no cap)'}")
    chunked, o = r.flag("enable_chunked_prefill", "scheduler_config")
    values["enable_chunked_prefill"] = bool(chunked)
    r.map(o, chunked, f"enable_chunked_prefill = {values['enable_chunked_prefill']}")
    threshold, o = r.integer("long_prefill_token_threshold", "scheduler_config", minimum=0,
                             required=True)
    values["long_prefill_token_threshold"] = threshold
    r.map(o, threshold, f"long_prefill_token_threshold = {threshold}")
    pol, o = r.get("policy", "scheduler_config")
    require(pol == "fcfs", f"{r.where}: field {o}: expected fcfs (the simulated order), got "
            f"{pol!r}")
    r.map(o, pol, "first come, first served (the V1 composer's order)")
    asy, o = r.flag("async_scheduling", "scheduler_config")
    values["async_scheduling"] = bool(asy)
    r.map(o, asy, "async_scheduling = " + ("true: the per-step CPU overhead overlaps the "
                                           "target pass (simulator.cost.features.async_overhead)"
                                           " and each step is scheduled one step ahead "
                                           "(simulator.engine.async_lag)"
                                           if asy else "false"))
    sched = r.resolved.get("scheduler_config") or {}
    for key, why in SCHEDULER_UNMODELLED.items():
        r.read.add(f"resolved_config.scheduler_config.{key}")
        if key in sched:
            r.skip(f"resolved_config.scheduler_config.{key}", sched[key], why)


def _compilation(r: _Reader, values: dict) -> None:
    eager, o = r.flag("enforce_eager", "model_config")
    require(not eager, f"{r.where}: field {o}: expected false (the roofline prices a "
            "CUDA-graph engine), got true")
    values["execution"] = "cuda_graph"
    r.map(o, eager, "execution = cuda_graph")
    comp = r.resolved.get("compilation_config") or {}
    r.read.update(f"resolved_config.compilation_config.{k}" for k in
                  ("cudagraph_capture_sizes", "cudagraph_mode", "max_cudagraph_capture_size"))
    sizes = comp.get("cudagraph_capture_sizes")
    origin = "resolved_config.compilation_config.cudagraph_capture_sizes"
    if sizes is not None and not (isinstance(sizes, list) and all(
            type(x) is int and x >= 1 for x in sizes)):
        r._refuse(origin, "a list of integers >= 1", sizes)
    if not sizes:
        sizes = default_capture_sizes(values["max_num_seqs"])
        origin = "cudagraph_capture_sizes (not recorded: vLLM default)"
    values["cuda_graph_sizes"] = ",".join(str(int(s)) for s in sizes)
    r.map(origin, f"{len(sizes)} sizes up to {max(sizes)}", "cuda_graph_sizes: passes padded "
          "to the next captured size")
    if "cudagraph_mode" in comp:
        r.skip("resolved_config.compilation_config.cudagraph_mode", comp["cudagraph_mode"],
               "full vs piecewise graphs are priced alike (padding only)")


def _model(r: _Reader, values: dict) -> None:
    dt, o = r.get("dtype", "model_config")
    require(str(dt).replace("torch.", "") in ("bfloat16", "float16", "auto"),
            f"{r.where}: field {o}: expected bfloat16 or float16 (2-byte weights), got {dt!r}")
    r.map(o, dt, "2-byte weights and activations (roofline dtype_bytes)")
    quant, o = r.get("quantization", "model_config")
    if quant is not None:
        if quant not in QUANTIZATIONS:
            r._refuse(o, f"null or one of {', '.join(QUANTIZATIONS)} (the weight formats the "
                      "simulator prices, simulator.cost.analytic.precision)", quant)
        values["quantization"] = QUANTIZATIONS[quant]
        if QUANTIZATIONS[quant] == "none":
            r.map(o, quant, "quantization = none (the checkpoint's own format, from "
                  "config.json's quantization_config: fp8 for 8-bit float weights)")
        else:
            r.map(o, quant, f"quantization = {QUANTIZATIONS[quant]} (weights held, streamed "
                  "and multiplied in that format)")
    else:
        r.map(o, None, "quantization = none (the checkpoint's own format, from config.json)")
    for key, section in (("speculative_config", None),
                         ("kv_transfer_config", None), ("lora_config", None)):
        r.read.add(f"resolved_config.{section}.{key}" if section else f"resolved_config.{key}")
        v = (r.resolved.get(section) or {}).get(key) if section else r.resolved.get(key)
        if v:
            r.skip(f"resolved_config.{section + '.' if section else ''}{key}", v,
                   "not modelled (this replay is plain autoregressive decoding)")
    seed, o = r.get("seed", "model_config")
    r.map(o, seed, "no effect: output lengths are replayed from requests.jsonl")


def engine_settings(meta: dict, where: str = "meta.json") -> Settings:
    """The SimConfig values of a run's meta.json, and every setting read, mapped or listed
    (module docstring)."""
    r = _Reader(meta, where)
    values = {"scheduler": "vllm-v1", "kv_mode": "paged", "policy": "ar",
              "num_speculative_tokens": 0, "draft": "ngram", "verify_cost": "none"}
    r.map("speculative_config", None, "policy ar (no drafts, no verification)")
    _scheduler(r, values)
    _kv(r, values)
    _parallel(r, values)
    _compilation(r, values)
    _model(r, values)
    r.read.update(f"engine_kwargs.{k}" for k in ("model",))  # the config.json names it
    if meta.get("schema_version") is None:
        r.skip("schema_version (not recorded)", None, "read as the recorder's schema 1")
    return Settings(values=values, mapped=tuple(r.mapped), unmodelled=tuple(r.unmodelled),
                    other=r.unread(), origins=dict(r.origins))
