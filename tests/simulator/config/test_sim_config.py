"""SimConfig specification: TOML + overrides, aliases, one-line validation errors."""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest

from specbatch.errors import SpecbatchError
from specbatch.simulator.config.sim_config import (
    SimConfig,
    check_extra_applies,
    load_config,
    validate_against_trace,
)
from specbatch.simulator.config.toml_writer import to_toml
from tests.simulator.helpers import const_trace


def test_toml_file_overrides_and_aliases(tmp_path):
    path = tmp_path / "sim.toml"
    path.write_text('policy = "tetris"\nk = 2\nextra = 1\nverify = "block"\n'
                    "max_num_seqs = 16\nbudget = 40\n")
    config = load_config(path, max_num_seqs=8, seed=3)
    assert (config.policy, config.num_speculative_tokens, config.extra, config.verify) == (
        "tetris", 2, 1, "block")
    assert (config.max_num_seqs, config.budget, config.seed, config.depth) == (8, 40, 3, 3)
    nested = tmp_path / "nested.toml"
    nested.write_text('[simulate]\npolicy = "ar"\n')
    assert load_config(nested).policy == "ar"


def test_cli_strings_are_coerced_and_config_round_trips(tmp_path):
    config = load_config(None, k="4", budget="none", speedup="true", rate="2.5")
    assert (config.k, config.budget, config.speedup, config.rate) == (4, None, True, 2.5)
    path = tmp_path / "back.toml"
    path.write_text(to_toml(config))
    assert load_config(path) == config
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.k = 5  # type: ignore[misc]


@pytest.mark.parametrize("overrides, field", [
    (dict(budget=-1), "budget"),
    (dict(policy="magic"), "policy"),
    (dict(hardware="tpu-v9"), "hardware"),
    (dict(verify="typical"), "verify"),
    (dict(arrival="weekly"), "arrival"),
    (dict(max_num_seqs=0), "max_num_seqs"),
    (dict(rate=0.0), "rate"),
    (dict(k="three"), "num_speculative_tokens"),
    (dict(scheduler="vllm-v0", enable_chunked_prefill=True), "max_num_batched_tokens"),
    (dict(cost="profiled"), "profile"),
    (dict(colour="blue"), "colour"),
])
def test_bad_values_give_one_line_errors_naming_the_field(overrides, field):
    with pytest.raises(SpecbatchError) as err:
        load_config(None, **overrides)
    message = str(err.value)
    assert "\n" not in message and f"field {field}" in message and "expected" in message


def test_bad_toml_and_missing_file(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("policy = \n")
    for path in (bad, tmp_path / "missing.toml"):
        with pytest.raises(SpecbatchError, match=str(path)):
            load_config(path)


def test_trace_dependent_checks():
    trace = const_trace(depth=4)
    with pytest.raises(SpecbatchError, match="field num_speculative_tokens"):
        validate_against_trace(load_config(None, policy="tetris", k=3, extra=2), trace)
    validate_against_trace(load_config(None, policy="tetris", k=3, extra=1), trace)
    with pytest.raises(SpecbatchError, match="field kv_capacity"):
        validate_against_trace(load_config(None, kv_capacity=10), trace, max_footprint=30)


def test_defaults_are_the_tetris_paper_setting():
    c = SimConfig()
    assert (c.requests, c.max_num_seqs, c.arrival, c.budget) == (512, 64, "burst", None)


@pytest.mark.parametrize("policy", ["fixed", "ar", "dsd"])
def test_extra_is_refused_for_policies_that_would_ignore_it(policy):
    with pytest.raises(SpecbatchError, match=f"field extra: expected 0 for policy {policy}"):
        check_extra_applies(load_config(None, policy=policy, extra=1))
    check_extra_applies(load_config(None, policy=policy, extra=0))
    check_extra_applies(load_config(None, policy="tetris", extra=1))


@pytest.mark.parametrize("overrides, words", [
    (dict(requests="many"), "expected an integer, got 'many'"),
    (dict(rate="fast"), "expected a number, got 'fast'"),
    (dict(speedup="maybe"), "expected true or false, got 'maybe'"),
])
def test_type_errors_name_the_expected_kind_in_words(overrides, words):
    with pytest.raises(SpecbatchError, match=words):
        load_config(None, **overrides)


@pytest.mark.parametrize("line, words", [
    ('max_num_seqs = "64"', "field max_num_seqs: expected an integer, got '64'"),
    ("max_num_seqs = 64.0", "field max_num_seqs: expected an integer, got 64.0"),
    ("max_model_len = 1e21", "field max_model_len: expected an integer, got 1e+21"),
    ("speedup = 1", "field speedup: expected true or false, got 1"),
    ("requests = true", "field requests: expected an integer, got True"),
    ("rate = \"fast\"", "field rate: expected a number, got 'fast'"),
    ('policy = 3', "field policy: expected a string, got 3"),
    ("seed = 1180591620717411303424", "field seed: expected an integer within the int64 range"),
])
def test_toml_values_must_have_their_fields_type(tmp_path, line, words):
    path = tmp_path / "sim.toml"
    path.write_text(line + "\n")
    with pytest.raises(SpecbatchError, match=words.replace("(", r"\(").replace("+", r"\+")) as err:
        load_config(path)
    assert str(err.value).startswith(f"config {path}: ") and "\n" not in str(err.value)


def test_a_float_field_takes_a_toml_integer(tmp_path):
    path = tmp_path / "sim.toml"
    path.write_text("rate = 4\nslo = 2\n")
    config = load_config(path)
    assert (config.rate, config.slo) == (4.0, 2.0) and isinstance(config.rate, float)


def test_integers_beyond_int64_are_refused_from_every_source():
    with pytest.raises(SpecbatchError, match="field seed: expected an integer within the int64"):
        load_config(None, seed=2 ** 70)
    with pytest.raises(SpecbatchError, match="field max_model_len: expected an integer within"):
        load_config(None, max_model_len="100000000000000000000000")


@pytest.mark.parametrize("text", ['k = 2\nnum_speculative_tokens = 4\n', 'e = 1\nextra = 2\n',
                                  '[simulate]\nn = 4\nrequests = 8\n'])
def test_a_field_given_under_two_spellings_is_refused(tmp_path, text):
    path = tmp_path / "sim.toml"
    path.write_text(text)
    with pytest.raises(SpecbatchError, match="given twice .* keep one spelling"):
        load_config(path)
    with pytest.raises(SpecbatchError, match="field 'num_speculative_tokens': given twice"):
        load_config(None, k=2, num_speculative_tokens=4)


def test_every_field_declares_its_help_and_its_type_comes_from_the_annotation():
    from specbatch.fields import exact_value
    from specbatch.simulator.config.sim_config import FIELD_TYPES, OPTIONAL, specs

    for name, spec in specs().items():
        assert spec.help and not spec.help.endswith("."), name
        assert spec.default is None or exact_value(spec, spec.default, "t") == spec.default, name
        assert (spec.default is None) <= spec.optional, name
    assert FIELD_TYPES["max_num_seqs"] is int and FIELD_TYPES["rate"] is float
    assert OPTIONAL == {"workload", "acceptance_profile", "synth_alpha", "max_num_batched_tokens",
                        "kv_capacity", "enable_chunked_prefill",
                        "max_model_len", "budget", "profile", "slo",
                        "num_speculative_tokens_per_batch_size", "draft_len_schedule",
                        "speculative_adaptive_config", "cuda_graph_sizes", "dsd_max_k",
                        "draft_head"}


def test_the_policy_choices_are_the_policy_registry():
    from specbatch.simulator.config.field_values import POLICY_NAMES
    from specbatch.simulator.policies.registry import POLICIES

    assert POLICY_NAMES == tuple(sorted(POLICIES))


@pytest.mark.parametrize("overrides, given, words", [
    (dict(policy="fixed", dsd_max_k=4), {"dsd_max_k"}, "no dsd_max_k for policy fixed"),
    (dict(policy="ar", k=2), {"num_speculative_tokens"}, "no k for policy ar"),
    (dict(policy="ar", verify="block"), {"verify"}, "field verify: expected token for policy ar"),
    (dict(policy="dsd", extra=1), {"extra"}, "field extra: expected 0 for policy dsd"),
])
def test_one_run_refuses_settings_its_policy_would_ignore(overrides, given, words):
    from specbatch.simulator.config.sim_config import check_settings_apply

    config = load_config(None, **overrides)
    with pytest.raises(SpecbatchError, match=words):
        check_settings_apply(config, given)


def test_a_default_k_is_not_the_users_choice():
    from specbatch.simulator.config.sim_config import applied_k, check_settings_apply

    for policy in ("ar", "dsd"):
        config = load_config(None, policy=policy)
        check_settings_apply(config, set())
        assert applied_k(config) is None
    assert applied_k(load_config(None, policy="fixed", k=5)) == 5
    check_settings_apply(load_config(None, policy="dsd", verify="block"), {"verify"})


def test_config_files_that_are_not_toml_text_are_one_line_errors(tmp_path):
    import os

    binary = tmp_path / "binary.toml"
    binary.write_bytes(bytes(range(256)))
    nested = tmp_path / "nested.toml"
    nested.write_text("x = " + "[" * 100_000 + "]" * 100_000 + "\n")
    fifo = tmp_path / "fifo.toml"
    os.mkfifo(fifo)
    for path, words in ((binary, "expected valid TOML"), (tmp_path, "got a directory"),
                        (fifo, "got not a regular file"), (nested, "nested too deeply")):
        with pytest.raises(SpecbatchError, match=words) as err:
            load_config(path)
        assert "\n" not in str(err.value)


@pytest.mark.parametrize("field, bad, expected", [
    ("requests", 2.5, "an integer"), ("requests", True, "an integer"),
    ("seed", 1.5, "an integer"), ("max_num_seqs", 2.5, "an integer"),
    ("max_num_seqs", "64", "an integer"), ("rate", float("nan"), "a finite number"),
    ("rate", float("inf"), "a finite number"), ("rate", True, "a number"),
    ("speedup", 1, "true or false"), ("policy", 3, "a string"), ("requests", None, "an integer"),
    ("requests", 0, "a number >= 1"), ("seed", 2**63, "int64"),
    ("gpu_memory_utilization", 1e300, "a fraction in (0, 1]"),
])
def test_a_config_built_in_python_refuses_wrong_types_naming_the_field(field, bad, expected):
    """The Python API never converts with a loss: SimConfig(requests=2.5) used to run 2
    requests, requests=True one."""
    with pytest.raises(SpecbatchError, match=rf"^SimConfig: field {field}: expected "
                       rf"[^\n]*{re.escape(expected)}"):
        SimConfig(**{field: bad})
    base = SimConfig()
    with pytest.raises(SpecbatchError, match=f"field {field}"):
        dataclasses.replace(base, **{field: bad})


def test_a_config_built_in_python_stores_python_numbers():
    config = SimConfig(requests=np.int64(5), rate=3, slo=None, speedup=np.bool_(True))
    assert type(config.requests) is int and config.requests == 5
    assert type(config.rate) is float and config.rate == 3.0
    assert config.speedup is True
    assert to_toml(config) == to_toml(SimConfig(requests=5, rate=3.0, speedup=True))


@pytest.mark.parametrize("overrides", [{"policy": "ar"}, {"policy": "fixed", "k": 2},
                                       {"policy": "dsd"}, {"policy": "entropy-stop", "k": 3,
                                                           "entropy_threshold": 1.5}])
def test_a_written_config_reads_back_as_simulate_reads_it(tmp_path, overrides):
    """simulate --config refuses settings given to a policy that ignores them
    (check_settings_apply, with every field of the file counted as given), so to_toml leaves
    them out: k for ar and dsd (read back, a k would set dsd's dsd_max_k), an engine knob for
    another policy; the policy's own knobs stay."""
    from specbatch.simulator.config.checks import check_settings_apply
    from specbatch.simulator.config.sim_config import load_config_given

    config = load_config(None, requests=4, **overrides)
    path = tmp_path / "back.toml"
    path.write_text(to_toml(config))
    again, given = load_config_given(path)
    check_settings_apply(again, given, "config")
    assert to_toml(again) == to_toml(config)
    text = path.read_text()
    assert ("num_speculative_tokens" in text) == (config.policy not in ("ar", "dsd"))
    assert ("entropy_threshold" in text) == (config.policy == "entropy-stop")


def test_configs_are_remembered_only_inside_the_block_and_by_value_and_type():
    from specbatch.simulator.config.sim_config import make_config, remembered_configs

    fields = {"requests": 8, "rate": 4.0, "policy": "fixed"}
    assert make_config(fields) is not make_config(fields)  # outside: built each time
    with remembered_configs():
        first = make_config(fields)
        assert make_config(dict(fields), "elsewhere") is first
        assert make_config({**fields, "rate": 4}) is not first  # 4 and 4.0: other inputs
        assert make_config({**fields, "rate": 4}) == first
        with pytest.raises(SpecbatchError):
            make_config({**fields, "requests": True})  # bool is not an integer, memo or not
        with pytest.raises(SpecbatchError):
            make_config({**fields, "requests": True})
    assert make_config(fields) is not first
