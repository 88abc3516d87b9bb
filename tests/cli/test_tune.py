"""`specbatch tune`: one JSON object on stdout, OUT/ written atomically and refused when it
holds something else, one-line errors, and bit-identical reruns. Tiny runs (batch cap 2,
K <= 1, 8 requests, one rate) keep each a few seconds."""

from __future__ import annotations

import json

from specbatch.cli import main
from tests.cli.oneline import assert_one_line_error, run_cli, run_main

TINY = ["--max-num-seqs", "2", "--k-max", "1", "--requests", "8", "--rates", "0.5",
        "--workers", "1"]


def test_json_is_one_object_and_reruns_are_identical(tmp_path, capsys):
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
    assert (tmp_path / "b" / "tune.json").read_text() == (tmp_path / "a" / "tune.json").read_text()


def test_a_folder_holding_something_else_is_refused(tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("mine")
    code, _, err = run_main(capsys, ["tune", "--out", str(tmp_path), *TINY])
    assert_one_line_error(code, err, "not tune's")
    assert (tmp_path / "notes.txt").read_text() == "mine"


def test_bad_flags_are_one_line_errors(tmp_path, capsys):
    for flags, needle in ((["--tax", "-1"], "--tax"), (["--rates", "abc"], "--rates"),
                          (["--acceptance", "2"], "--acceptance"),
                          (["--hardware", "tpu9"], "hardware")):
        code, _, err = run_main(capsys, ["tune", "--out", str(tmp_path / "x"), *TINY, *flags])
        assert_one_line_error(code, err, needle)
