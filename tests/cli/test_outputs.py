"""Every command that writes checks its ``--out`` before any long work: a file, a path through
a file or an uncreatable folder is a one-line error (exit 2), never a traceback; trace synth
and zoo train never overwrite an earlier result without ``--force``."""

from __future__ import annotations

from pathlib import Path

import pytest

from specbatch.cli import main

ROOT = Path(__file__).resolve().parents[2]
SPEC = str(ROOT / "analysis" / "specs" / "tetris.toml")

#: Each writing command with its other arguments; OUT marks where --out goes.
COMMANDS = {
    "simulate": ["simulate", "--trace", "synth", "--requests", "4", "--out", "OUT"],
    "sweep": ["sweep", SPEC, "--out", "OUT", "--no-progress"],
    "demo": ["demo", "--quick", "--out", "OUT", "--json"],
    "live": ["live", "--draft", "vicuna-68m", "--target", "vicuna-68m", "--layers", "1",
             "--prompts", "random:2:4", "--out", "OUT"],
    "validate": ["validate", "LIVE", "--out", "OUT"],
    "zoo train": ["zoo", "train", "--out", "OUT", "--steps", "1"],
    "trace synth": ["trace", "synth", "--requests", "2", "--out", "OUT"],
    "capture": ["capture", "--draft", "D", "--target", "T", "--prompts", "default:2",
                "--out", "OUT"],
    "profile": ["profile", "--model", "vicuna-68m", "--out", "OUT.csv"],
}


def _run(capsys, argv: list[str], out: str) -> tuple[int, str]:
    argv = [a.replace("OUT", out) for a in argv]
    code = main(argv)
    return code, capsys.readouterr().err


def _one_line_error(code: int, err: str, needle: str) -> None:
    assert code == 2, err
    assert err.startswith("specbatch: error: --out ") and err.count("\n") == 1, err
    assert needle in err and "Traceback" not in err


@pytest.mark.parametrize("name", [n for n in COMMANDS if n != "profile"])
def test_out_that_is_a_file_is_a_one_line_error(name, tmp_path, capsys):
    target = tmp_path / "file"
    target.write_text("keep me")
    code, err = _run(capsys, COMMANDS[name], str(target))
    _one_line_error(code, err, "exists and is not a directory")
    assert target.read_text() == "keep me"


@pytest.mark.parametrize("name", list(COMMANDS))
def test_out_below_a_file_is_a_one_line_error(name, tmp_path, capsys):
    (tmp_path / "file").write_text("keep me")
    code, err = _run(capsys, COMMANDS[name], str(tmp_path / "file" / "x"))
    _one_line_error(code, err, "is not a directory")


@pytest.mark.parametrize("name", ["sweep", "simulate", "demo", "trace synth"])
def test_uncreatable_out_is_a_one_line_error(name, capsys):
    code, err = _run(capsys, COMMANDS[name], "/proc/specbatch-x")
    _one_line_error(code, err, "cannot create the directory")


def test_profile_refuses_a_directory_as_its_out_file(tmp_path, capsys):
    (tmp_path / "p.csv").mkdir()
    code, err = _run(capsys, COMMANDS["profile"], str(tmp_path / "p"))
    _one_line_error(code, err, "is a directory")


@pytest.mark.parametrize("name", ["zoo train"])
def test_non_empty_out_is_refused_without_force(name, tmp_path, capsys):
    out = tmp_path / "result"
    out.mkdir()
    (out / "meta.json").write_text("{}")
    code, err = _run(capsys, COMMANDS[name], str(out))
    _one_line_error(code, err, "directory is not empty (pass --force to overwrite)")
    assert (out / "meta.json").read_text() == "{}"


def test_trace_synth_refuses_an_unmarked_trace_without_force(tmp_path, capsys):
    out = tmp_path / "result"
    out.mkdir()
    (out / "meta.json").write_text("{}")
    code, err = _run(capsys, COMMANDS["trace synth"], str(out))
    _one_line_error(code, err, "holds a trace result that records no configuration")
    assert (out / "meta.json").read_text() == "{}"


def test_trace_synth_force_replaces_an_existing_trace(tmp_path, capsys):
    out = str(tmp_path / "t")
    assert _run(capsys, COMMANDS["trace synth"], out)[0] == 0
    assert _run(capsys, COMMANDS["trace synth"], out)[0] == 0  # a rerun of the same settings
    assert _run(capsys, [*COMMANDS["trace synth"], "--seed", "1"], out)[0] == 2
    assert _run(capsys, [*COMMANDS["trace synth"], "--force", "--seed", "1"], out)[0] == 0


def test_sweep_and_demo_reuse_their_output_folder(tmp_path, capsys):
    out = str(tmp_path / "demo")
    assert _run(capsys, COMMANDS["demo"], out)[0] == 0
    assert _run(capsys, COMMANDS["demo"], out)[0] == 0
