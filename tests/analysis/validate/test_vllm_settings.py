"""A measured run's meta.json mapped onto SimConfig fields: every setting mapped, listed as
not modelled, or named as not read (analysis.validate.vllm_settings)."""

from __future__ import annotations

import pytest

from specbatch.analysis.validate.vllm_settings import default_capture_sizes, engine_settings
from specbatch.errors import SpecbatchError
from specbatch.traces.public.vllm_runs import load_run


def _named(s) -> set[str]:
    return {row[0] for row in (*s.mapped, *s.unmodelled)} | set(s.other)


def test_the_full_resolved_config_of_the_rtx4090_run_maps_by_hand():
    meta = load_run("rtx4090-llama-3.1-8b").meta
    s = engine_settings(meta)
    v = s.values
    assert v["kv_capacity"] == 2588 * 16  # num_gpu_blocks x block_size = 41408 tokens
    assert (v["max_num_seqs"], v["max_num_batched_tokens"], v["max_model_len"]) == (256, 2048,
                                                                                    32768)
    assert (v["tp"], v["data_parallel_size"], v["block_size"], v["policy"]) == (1, 1, 16, "ar")
    assert v["enable_expert_parallel"] is False
    assert v["enable_prefix_caching"] and v["enable_chunked_prefill"]
    sizes = [int(x) for x in v["cuda_graph_sizes"].split(",")]
    assert sizes == meta["resolved_config"]["compilation_config"]["cudagraph_capture_sizes"]
    assert sizes == default_capture_sizes(256)  # vLLM's default rule gives the same list
    assert v["async_scheduling"] is True  # vLLM 0.19's default, recorded in the run
    mapped = {row[0] for row in s.mapped}
    assert "resolved_config.scheduler_config.async_scheduling" in mapped


def test_every_recorded_setting_is_mapped_listed_or_named():
    meta = load_run("rtx4090-llama-3.1-8b").meta
    named = _named(engine_settings(meta))
    keys = [f"engine_kwargs.{k}" for k in meta["engine_kwargs"] if k != "model"]
    keys += [f"kv_cache.{k}" for k in meta["kv_cache"]]
    for section, body in meta["resolved_config"].items():
        keys += ([f"resolved_config.{section}.{k}" for k in body] if isinstance(body, dict)
                 and section in ("scheduler_config", "cache_config", "parallel_config")
                 else [])
    # one setting recorded in several places (block_size in kv_cache and cache_config) is
    # one row, named by the place it was read from
    settings = {n.split(" ")[0].split(".")[-1] for n in named}
    missing = [k for k in keys if k not in named and k.split(".")[-1] not in settings]
    assert not missing


def test_a_minimal_meta_takes_vllm_defaults_and_says_so():
    s = engine_settings(load_run("rtxpro6000-qwen3-32b").meta)
    assert s.values["tp"] == 2 and "kv_capacity" not in s.values
    assert s.values["gpu_memory_utilization"] == 0.9
    assert s.values["cuda_graph_sizes"] == ",".join(map(str, default_capture_sizes(128)))
    assert default_capture_sizes(128) == [1, 2, 4, *range(8, 257, 8)]
    defaults = [row[0] for row in s.mapped if "not recorded" in row[0]]
    assert any(d.startswith("block_size") for d in defaults)
    assert any(row[0].startswith("num_gpu_blocks") for row in s.unmodelled)


def test_data_and_expert_parallel_settings_are_modelled_and_the_lockstep_is_listed():
    s = engine_settings(load_run("rtxpro6000-qwen3-30b-a3b").meta)
    assert s.values["data_parallel_size"] == 2 and s.values["enable_expert_parallel"] is True
    assert "replicas" not in s.values and s.values["router"] == "vllm_dp_lb"
    mapped = " ".join(row[0] for row in s.mapped)
    assert "enable_expert_parallel" in mapped and "data_parallel_size" in mapped
    listed = [row for row in s.unmodelled if row[0].startswith("engine_kwargs.data_parallel")]
    assert len(listed) == 1 and "32-step" in listed[0][2]


@pytest.mark.parametrize("kwargs, needle", [
    ({"kv_cache_dtype": "fp8_inc"}, "kv_cache_dtype: expected one of auto, bfloat16"),
    ({"dtype": "float32"}, "dtype: expected bfloat16"),
    ({"max_num_seqs": None}, "max_num_seqs: expected an integer"),
    ({"enforce_eager": True}, "enforce_eager: expected false"),
    ({"policy": "priority"}, "policy: expected fcfs"),
])
def test_settings_the_roofline_cannot_price_are_refused(kwargs, needle):
    meta = {"engine_kwargs": {"max_num_seqs": 8, "max_num_batched_tokens": 64,
                              "dtype": "bfloat16", **kwargs}}
    with pytest.raises(SpecbatchError, match=needle):
        engine_settings(meta, "meta.json")


def _meta(**kwargs) -> dict:
    return {"engine_kwargs": {"max_num_seqs": 8, "max_num_batched_tokens": 64,
                              "dtype": "bfloat16", **kwargs}}


@pytest.mark.parametrize("recorded, knob", [
    ("fp8", "fp8"), ("awq", "awq"), ("awq_marlin", "awq"), ("gptq_marlin", "gptq"),
    ("mxfp4", "mxfp4"),
    ("compressed-tensors", "none")])  # the checkpoint's own format, from config.json
def test_quantization_maps_onto_the_simulator_s_knob(recorded, knob):
    s = engine_settings(_meta(quantization=recorded))
    assert s.values["quantization"] == knob
    assert ("engine_kwargs.quantization", recorded) in {row[:2] for row in s.mapped}


@pytest.mark.parametrize("recorded, knob", [("fp8", "fp8"), ("fp8_e5m2", "fp8_e5m2"),
                                            ("bfloat16", None), ("auto", None)])
def test_kv_cache_dtype_maps_onto_the_simulator_s_knob(recorded, knob):
    assert engine_settings(_meta(kv_cache_dtype=recorded)).values.get("kv_cache_dtype") == knob


def test_the_resolved_cache_dtype_is_read_when_engine_kwargs_has_none():
    meta = {**_meta(), "resolved_config": {"cache_config": {"cache_dtype": "fp8_e4m3"}}}
    s = engine_settings(meta)
    assert s.values["kv_cache_dtype"] == "fp8_e4m3"
    assert "resolved_config.cache_config.cache_dtype" in {row[0] for row in s.mapped}


def test_an_unrecorded_schema_version_is_a_visible_note_and_the_bundled_runs_record_1():
    notes = {row[0]: row[2] for row in engine_settings(_meta()).unmodelled}
    assert notes["schema_version (not recorded)"] == "read as the recorder's schema 1"
    assert load_run("rtx4090-llama-3.1-8b").meta["schema_version"] == 1


@pytest.mark.parametrize("kwargs, needle", [
    ({"max_num_seqs": True}, "field engine_kwargs.max_num_seqs: expected an integer >= 1, "
                             "got True"),
    ({"max_num_seqs": 8.0}, "got 8.0"),  # a float is not a count, even an integral one
    ({"long_prefill_token_threshold": -1}, "long_prefill_token_threshold: expected an "
                                           "integer >= 0"),
    ({"enable_prefix_caching": 1}, "enable_prefix_caching: expected true or false, got 1"),
    ({"gpu_memory_utilization": 1.5}, "gpu_memory_utilization: expected a fraction"),
    ({"block_size": 0}, "block_size: expected an integer >= 1, got 0"),
    ({"pipeline_parallel_size": 0}, "pipeline_parallel_size: expected an integer >= 1"),
    ({"quantization": "gguf"}, "quantization: expected null or one of fp8"),
])
def test_a_value_of_the_wrong_type_is_refused_never_coerced(kwargs, needle):
    with pytest.raises(SpecbatchError, match=needle.replace("(", r"\(")):
        engine_settings(_meta(**kwargs), "meta.json")


@pytest.mark.parametrize("recorded, want", [(True, True), (False, False), (None, True)])
def test_a_replay_gives_the_runs_own_async_scheduling_explicitly(recorded, want):
    """validate --vllm replays with the run's resolved setting as an explicit true/false
    (never the simulator's "auto"): recorded, or vLLM's unset default for the replay's
    deployment (ar: no speculative config, so on); the replayed config resolves the same."""
    import copy

    from specbatch.simulator.config.sim_config import make_config

    meta = copy.deepcopy(load_run("rtx4090-llama-3.1-8b").meta)
    sched = meta["resolved_config"]["scheduler_config"]
    if recorded is None:
        del sched["async_scheduling"]
    else:
        sched["async_scheduling"] = recorded
    s = engine_settings(meta)
    assert s.values["async_scheduling"] is want
    config = make_config({**s.values, "trace": "synth"})
    assert config.async_setting.on is want and config.async_setting.asked == str(want).lower()
