"""`specbatch tune`: one JSON object on stdout, OUT/ written atomically and refused when it
holds something else, one-line errors, and bit-identical reruns. Tiny runs (batch cap 2,
K <= 1, 8 requests, one rate) keep each a few seconds."""

from __future__ import annotations

import json

import pytest

from specbatch.cli import main
from tests.cli.oneline import assert_one_line_error, run_cli, run_json, run_main

TINY = ["--max-num-seqs", "2", "--k-max", "1", "--requests", "4", "--rates", "0.5",
        "--prompt-len", "fixed:8", "--output-len", "fixed:8", "--workers", "1"]


def test_one_json_object_and_the_out_folder(tmp_path, capsys):
    """The smallest tune: batch cap 1 (one bucket), K <= 1."""
    code, report = run_json(capsys, ["tune", "--out", str(tmp_path / "t"), *TINY[:1], "1",
                                     *TINY[2:]])
    assert code == 0 and report["ranges"] == report["engines_verdict"]["vllm"]["ranges"]
    assert json.loads((tmp_path / "t" / "tune.json").read_text()) == report
    lines = (tmp_path / "t" / "settings.txt").read_text().splitlines()
    assert [line.split(":")[0] for line in lines] == ["vllm", "tensorrt-llm", "sglang"]
    assert not any(v["wins"] for v in report["engines_verdict"].values())  # one bucket


@pytest.mark.slow
def test_json_is_one_object_in_a_subprocess_and_reruns_are_identical(tmp_path, capsys):
    done = run_cli(["tune", "--out", str(tmp_path / "a"), *TINY, "--json"], cwd=tmp_path,
                   timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout)  # exactly one object
    assert set(report["engines_verdict"]) == {"vllm", "tensorrt-llm", "sglang"}
    assert report["loads"] == ["0.5", "burst"]
    written = json.loads((tmp_path / "a" / "tune.json").read_text())
    assert written == report
    assert len((tmp_path / "a" / "settings.txt").read_text().splitlines()) == 3
    assert main(["tune", "--out", str(tmp_path / "b"), *TINY]) == 0
    assert "best fixed K" in capsys.readouterr().out
    again = json.loads((tmp_path / "b" / "tune.json").read_text())
    paths = [r["question"].pop("workload") for r in (report, again)]  # OUT/workload.csv
    assert again == report  # bit-identical numbers
    assert [open(p).read() for p in paths] == [open(paths[0]).read()] * 2


def test_a_folder_holding_something_else_is_refused(tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("mine")
    code, _, err = run_main(capsys, ["tune", "--out", str(tmp_path), *TINY])
    assert_one_line_error(code, err, "not a tune result")
    assert (tmp_path / "notes.txt").read_text() == "mine"


def test_bad_flags_are_one_line_errors(tmp_path, capsys):
    for flags, needle in ((["--tax", "-1"], "--tax"), (["--rates", "abc"], "--rates"),
                          (["--acceptance", "2"], "--acceptance"),
                          (["--hardware", "tpu9"], "hardware")):
        code, _, err = run_main(capsys, ["tune", "--out", str(tmp_path / "x"), *TINY, *flags])
        assert_one_line_error(code, err, needle)
