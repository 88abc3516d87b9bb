"""SimConfig specification: TOML + overrides, aliases, one-line validation errors."""

from __future__ import annotations

import dataclasses

import pytest

from specbatch.errors import SpecbatchError
from specbatch.simulator.config import (
    SimConfig,
    check_extra_applies,
    load_config,
    to_toml,
    validate_against_trace,
)
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
    (dict(enable_chunked_prefill=True), "max_num_batched_tokens"),
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
