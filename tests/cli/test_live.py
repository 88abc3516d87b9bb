"""``specbatch live`` on CPU: one torch thread by default, recorded in live.json and printed."""

from __future__ import annotations

import json

import pytest

from specbatch.cli import main

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

#: A seconds-long live run: one-layer random-weight shapes, random token prompts.
ARGS = ["live", "--draft", "vicuna-68m", "--target", "vicuna-68m", "--layers", "1",
        "--prompts", "random:2:4", "--max-new-tokens", "2", "--k", "1", "--warmup", "0",
        "--json"]


@pytest.fixture
def restore_threads():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


@pytest.mark.parametrize("flags, threads", [([], 1), (["--threads", "2"], 2)])
def test_thread_count_defaults_to_one_and_is_recorded(flags, threads, tmp_path, capsys,
                                                      restore_threads):
    assert main([*ARGS, *flags, "--out", str(tmp_path / "live")]) == 0
    assert json.loads(capsys.readouterr().out)["threads"] == threads
    assert json.loads((tmp_path / "live" / "live.json").read_text())["threads"] == threads


def test_extra_with_policy_fixed_is_refused_not_ignored(tmp_path, capsys):
    assert main([*ARGS, "--policy", "fixed", "--extra", "1", "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--extra: expected 0 for policy fixed" in err


def test_arrival_and_slot_flags_reach_the_run_and_its_simulator_config(tmp_path, capsys):
    out = tmp_path / "live"
    assert main([*ARGS, "--max-num-seqs", "1", "--arrival", "gamma", "--rate", "50", "--cv",
                 "2", "--seed", "3", "--out", str(out)]) == 0
    capsys.readouterr()
    settings = json.loads((out / "live.json").read_text())["settings"]
    assert (settings["max_num_seqs"], settings["arrival"], settings["rate"], settings["cv"]) \
        == (1, "gamma", 50.0, 2.0)
    config = (out / "config.toml").read_text()
    assert 'arrival = "gamma"' in config and "max_num_seqs = 1" in config


@pytest.mark.parametrize("flags,needle", [(["--arrival", "trace"], "--arrival"),
                                          (["--rate", "0"], "--rate"),
                                          (["--max-num-seqs", "0"], "--max-num-seqs")])
def test_bad_arrival_and_slot_flags_are_one_line_errors(flags, needle, tmp_path, capsys):
    assert main([*ARGS, *flags, "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and needle in err


#: ``ARGS`` with the prompt-lookup drafter instead of a draft model.
NGRAM_ARGS = ["live", "--draft", "ngram", "--target", "vicuna-68m", "--layers", "1",
              "--prompts", "random:2:6", "--max-new-tokens", "3", "--k", "2", "--warmup", "0",
              "--json"]


def test_ngram_drafter_runs_without_a_draft_model_and_is_named_in_live_json(tmp_path, capsys):
    out = tmp_path / "live"
    assert main([*NGRAM_ARGS, "--ngram-max", "3", "--out", str(out)]) == 0
    capsys.readouterr()
    manifest = json.loads((out / "live.json").read_text())
    assert manifest["models"]["draft"]["drafter"] == "ngram"
    assert (manifest["models"]["draft"]["n_min"], manifest["models"]["draft"]["n_max"]) == (3, 3)
    settings = manifest["settings"]
    assert (settings["draft"], settings["ngram_min"], settings["ngram_max"]) == ("ngram", 3, 3)
    assert main(["trace", "validate", str(out / "trace")]) == 0
    from specbatch.traces.format.files import read_trace

    assert read_trace(out / "trace").proposed is not None


@pytest.mark.parametrize("flags,needle", [
    (["--ngram-min", "3", "--ngram-max", "2"], "--ngram-max: expected >= --ngram-min (3)"),
    (["--ngram-min", "0"], "--ngram-min: expected an integer >= 1"),
    (["--profile-grid"], "--profile-grid: expected a draft model"),
])
def test_bad_ngram_flags_are_one_line_errors(flags, needle, tmp_path, capsys):
    assert main([*NGRAM_ARGS, *flags, "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and needle in err


def test_ngram_bounds_with_a_draft_model_are_refused(tmp_path, capsys):
    assert main([*ARGS, "--ngram-min", "2", "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "expected only with --draft ngram" in err


def test_validate_prices_an_ngram_runs_drafts_as_free(tmp_path, capsys):
    """A prompt-lookup run has no draft model: validate simulates it with free draft passes
    (simulator.cost.features.free_draft) and says nothing about a draft model's pricing."""
    out = tmp_path / "live"
    assert main([*NGRAM_ARGS, "--out", str(out)]) == 0
    capsys.readouterr()
    assert main(["validate", str(out), "--in-sample", "--json", "--out", str(tmp_path / "v")]) == 0
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    assert report["simulated"]["draft_time"] == 0.0
    assert "priced as" not in captured.err


def test_text_output_has_units_and_rounded_numbers_and_the_grid_shows_progress(tmp_path,
                                                                               capsys):
    import re

    from transformers import LlamaConfig, LlamaForCausalLM

    from specbatch.live.profile_grid import profile_grid

    text_args = [a for a in ARGS if a != "--json"]
    assert main([*text_args, "--out", str(tmp_path / "live")]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^throughput +[\d,]+\.\d tok/s$", out, re.M), out
    assert re.search(r"^makespan +\d+\.\d{3} s$", out, re.M), out
    assert not re.search(r"\d\.\d{5,}", out), out  # no raw floats
    model = LlamaForCausalLM(LlamaConfig(vocab_size=32, hidden_size=16, intermediate_size=32,
                                         num_hidden_layers=1, num_attention_heads=2)).eval()
    cells = {"draft": [(1, 1, 4)], "target": [(1, 2, 4), (2, 1, 0)]}
    frame = profile_grid(model, model, ("d", "t"), cells, "cpu", "float32", warmup=0,
                         repeats=1, progress=True)
    err = capsys.readouterr().err
    assert len(frame) == 3 and "profile grid" in err and "3/3" in err
    profile_grid(model, model, ("d", "t"), cells, "cpu", "float32", warmup=0, repeats=1,
                 progress=False)
    assert capsys.readouterr().err == ""
