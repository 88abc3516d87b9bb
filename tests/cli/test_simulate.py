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
        "config.toml", "requests.parquet", "steps.parquet", "summary.json"]
    assert 'num_speculative_tokens = 2' in (out / "config.toml").read_text()


def test_text_table(capsys):
    assert main(["simulate", "--trace", "synth", "--requests", "8", "--policy", "ar"]) == 0
    text = capsys.readouterr().out
    assert "throughput" in text and "tok/s" in text


@pytest.mark.parametrize("argv, field", [
    (["--budget", "-1"], "budget"),
    (["--policy", "nope"], "policy"),
    (["--hardware", "abacus"], "hardware"),
    (["--k", "9"], "num_speculative_tokens"),  # synth trace K = 8
    (["--kv-capacity", "50"], "kv_capacity"),
])
def test_bad_configs_exit_2_with_one_line(argv, field, capsys):
    code = main(["simulate", "--trace", "synth", "--requests", "8", *argv])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("specbatch: error:") and field in err


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
    from specbatch.simulator import config
    from specbatch.simulator.hardware import HARDWARE
    from specbatch.simulator.policies import POLICIES

    with pytest.raises(SystemExit):
        main(["simulate", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for options in (POLICIES, config.VERIFY_RULES, config.ARRIVALS, config.ROUTERS,
                    config.COSTS, config.SAMPLINGS, config.THRESHOLD_MODES, HARDWARE):
        assert "one of " + ", ".join(sorted(options) if isinstance(options, dict)
                                     else options) in text
    assert "None" not in text
