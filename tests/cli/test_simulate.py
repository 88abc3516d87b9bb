"""`specbatch simulate` specification: JSON keys, files, one-line errors with exit code 2."""

from __future__ import annotations

import json

import pytest

from specbatch.cli import main

JSON_KEYS = {"throughput", "e2e_mean", "e2e_p99", "vsr", "mal", "tokens", "requests"}


def test_json_summary_and_output_files(tmp_path, capsys):
    config = tmp_path / "sim.toml"
    config.write_text('trace = "synth"\npolicy = "tetris"\nextra = 1\nrequests = 32\n')
    out = tmp_path / "out"
    code = main(["simulate", "--config", str(config), "--verify", "block", "--k", "2",
                 "--out", str(out), "--json"])
    assert code == 0
    summary = json.loads(capsys.readouterr().out)
    assert JSON_KEYS <= set(summary)
    assert summary["requests"] == 32 and summary["verify"] == "block"
    assert sorted(p.name for p in out.iterdir()) == [
        ".specbatch-result.json", "config.toml", "requests.parquet", "steps.parquet",
        "summary.json"]
    assert 'num_speculative_tokens = 2' in (out / "config.toml").read_text()


def test_json_carries_the_verification_time_beside_draft_and_target(capsys):
    """Every decode step pays its rejection sampler (simulator.cost.verify_cost): the measured torch
    sampler costs more than the fused one, and ``--verify-cost none`` nothing."""
    times = {}
    for sampler in ("none", "fused", "torch"):
        assert main(["simulate", "--trace", "synth", "--requests", "16", "--verify", "block",
                     "--verify-cost", sampler, "--json"]) == 0
        summary = json.loads(capsys.readouterr().out)
        assert {"draft_time", "target_time", "verify_time", "verify_share"} <= set(summary)
        times[sampler] = summary["verify_time"]
        total = sum(summary[k] for k in ("draft_time", "target_time", "verify_time",
                                         "overhead_time"))
        assert summary["verify_share"] == pytest.approx(summary["verify_time"] / total)
    assert times["none"] == 0.0 < times["fused"] < times["torch"]


def test_text_table(capsys):
    assert main(["simulate", "--trace", "synth", "--requests", "8", "--policy", "ar"]) == 0
    text = capsys.readouterr().out
    assert "throughput" in text and "tok/s" in text and "verify_share" in text


@pytest.mark.parametrize("argv, field", [
    (["--budget", "-1"], "budget"),
    (["--policy", "nope"], "policy"),
    (["--hardware", "abacus"], "hardware"),
    (["--k", "9"], "num_speculative_tokens"),  # synth trace K = 8
    (["--kv-capacity", "50"], "kv_capacity"),
    (["--async-scheduling", "maybe"], "async_scheduling"),
    (["--async-scheduling", "on"], "async_scheduling"),
])
def test_bad_configs_exit_2_with_one_line(argv, field, capsys):
    code = main(["simulate", "--trace", "synth", "--requests", "8", *argv])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("specbatch: error:") and field in err


def test_async_scheduling_bad_values_name_the_field_and_what_it_takes(tmp_path, capsys):
    """--async-scheduling and the TOML field take auto, true or false (specbatch.fields.
    AutoBool): anything else is one line naming the field, exit 2."""
    code = main(["simulate", "--trace", "synth", "--requests", "8",
                 "--async-scheduling", "maybe"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert "field async_scheduling: expected auto, true or false, got 'maybe'" in err
    for value, good in (('"auto"', True), ("true", True), ("false", True), ('"on"', False),
                        ("1", False), ('"true"', False)):  # TOML's own types: "true" is text
        path = tmp_path / "sim.toml"
        path.write_text(f'trace = "synth"\nrequests = 4\nasync_scheduling = {value}\n')
        code = main(["simulate", "--config", str(path), "--json", "--sensitivity", "off"])
        out, err = capsys.readouterr()
        if good:
            want = value.strip('"') + (" -> off" if value == "false" else " -> on")
            assert code == 0 and json.loads(out)["async_scheduling"].startswith(want), value
        else:
            assert code == 2 and err.count("\n") == 1, value
            assert "field async_scheduling: expected auto, true or false" in err, value


def test_json_names_the_setting_that_was_simulated(capsys):
    code = main(["simulate", "--trace", "synth", "--requests", "8", "--policy", "tetris",
                 "--k", "2", "--extra", "1", "--verify", "block", "--json"])
    assert code == 0
    summary = json.loads(capsys.readouterr().out)
    assert {k: summary[k] for k in ("trace", "policy", "verify", "k", "e")} == {
        "trace": "synth", "policy": "tetris", "verify": "block", "k": 2, "e": 1}


def test_extra_with_policy_fixed_is_a_one_line_error(capsys):
    code = main(["simulate", "--trace", "synth", "--requests", "8", "--policy", "fixed",
                 "--extra", "1"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "field extra: expected 0 for policy fixed" in err


def test_help_lists_the_allowed_values_of_every_choice(capsys):
    from specbatch.simulator.config import sim_config as config
    from specbatch.simulator.cost.gpus.hardware import HARDWARE
    from specbatch.simulator.policies.registry import POLICIES
    from specbatch.simulator.replay.rules import names as rule_names

    with pytest.raises(SystemExit):
        main(["simulate", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for options in (POLICIES, rule_names(), config.ARRIVALS, config.ROUTERS,
                    config.COSTS, config.SAMPLINGS, config.THRESHOLD_MODES, HARDWARE):
        assert "one of " + ", ".join(sorted(options) if isinstance(options, dict)
                                     else options) in text
    assert "None" not in text


@pytest.mark.parametrize("argv, words", [
    (["--policy", "ar", "--verify", "block"], "field verify: expected token for policy ar"),
    (["--policy", "ar", "--k", "3"], "field num_speculative_tokens: expected no k for policy ar"),
    (["--policy", "fixed", "--dsd-max-k", "4"], "field dsd_max_k: expected no dsd_max_k for "
     "policy fixed"),
])
def test_settings_a_policy_would_ignore_are_refused(argv, words, capsys):
    code = main(["simulate", "--trace", "synth", "--requests", "8", *argv])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and words in err


def test_a_k_for_dsd_caps_its_window_from_flags_and_config_files(tmp_path, capsys):
    """dsd used to refuse --k; engines' users set num_speculative_tokens as the cap of a
    dynamic window, so it is DSD's upper bound (dsd_max_k), saved in config.toml."""
    config = tmp_path / "sim.toml"
    config.write_text('trace = "synth"\npolicy = "dsd"\nk = 2\nrequests = 8\n')
    assert main(["simulate", "--config", str(config), "--out", str(tmp_path / "a")]) == 0
    assert main(["simulate", "--trace", "synth", "--policy", "dsd", "--k", "2", "--requests",
                 "8", "--out", str(tmp_path / "b")]) == 0
    capsys.readouterr()
    saved = (tmp_path / "a" / "config.toml").read_text()
    assert "dsd_max_k = 2" in saved and saved == (tmp_path / "b" / "config.toml").read_text()


@pytest.mark.parametrize("policy", ["ar", "dsd"])
def test_policies_without_a_window_print_no_k(policy, capsys):
    assert main(["simulate", "--trace", "synth", "--requests", "8", "--policy", policy,
                 "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["k"] is None
    assert main(["simulate", "--trace", "synth", "--requests", "8", "--policy", policy]) == 0
    assert "\nk                             -" in capsys.readouterr().out


def test_toml_string_for_an_integer_field_is_a_one_line_error(tmp_path, capsys):
    config = tmp_path / "sim.toml"
    config.write_text('max_num_seqs = "64"\n')
    assert main(["simulate", "--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert err == (f"specbatch: error: config {config}: field max_num_seqs: expected an "
                   "integer, got '64'\n")


def test_every_field_is_a_flag_with_its_type_and_default(capsys):
    from specbatch.fields import metavar
    from specbatch.simulator.config.sim_config import specs

    with pytest.raises(SystemExit):
        main(["simulate", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for spec in specs().values():
        assert f"{spec.option} {metavar(spec)}" in text, spec.option
    assert "--async-scheduling AUTO|BOOL" in text and "(default: auto)" in text
    assert "--num-speculative-tokens INT, --k INT" in text
    assert "(default: k x running requests)" in text and "(default: 64)" in text


@pytest.mark.parametrize("mode", ["reserve", "paged"])
def test_models_that_do_not_fit_the_device_are_refused_in_one_line(mode, tmp_path, capsys):
    out = tmp_path / "sim"
    argv = ["simulate", "--target", "llama-3.1-70b", "--draft", "llama-3.2-1b", "--requests",
            "4", "--kv-mode", mode, "--out", str(out)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "the weights do not fit (set tp >= 2" in err
    assert not out.exists() or not any(out.iterdir())  # nothing written
    assert main([*argv, "--tp", "2"]) == 0
