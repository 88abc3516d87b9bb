"""Input files of every kind (simulate config, sweep spec, model pair, values) are read only
when they are regular files: a FIFO, a directory, binary or too deeply nested content, and
inputs too large for exact arithmetic are one line and exit 2, within seconds."""

from __future__ import annotations

import json
import os
import re

import numpy as np
import pytest

from specbatch.cli import main
from tests.test_inputs import call_within


def command(kind: str, path) -> list[str]:
    return {
        "config": ["simulate", "--config", str(path)],
        "spec": ["sweep", str(path), "--out", str(path) + "-out", "--no-progress"],
        "pair": ["optimum", "verify", "--pair", str(path), "--gamma", "2"],
        "values": ["optimum", "allocate", "--values", str(path), "--budget", "2"],
    }[kind]


def run(capsys, args: list[str]) -> str:
    code = call_within(30, main, args)
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("specbatch: error: "), err
    return err[0]


KINDS = ["config", "spec", "pair", "values"]


@pytest.mark.parametrize("kind", KINDS)
def test_a_fifo_input_is_refused_without_blocking(tmp_path, capsys, kind):
    path = tmp_path / "input.csv"
    os.mkfifo(path)
    assert re.search(r"got (a FIFO|not a regular file)", run(capsys, command(kind, path)))


@pytest.mark.parametrize("kind", KINDS)
def test_a_directory_input_is_refused(tmp_path, capsys, kind):
    (tmp_path / "input").mkdir()
    assert "got a directory" in run(capsys, command(kind, tmp_path / "input"))


@pytest.mark.parametrize("kind", KINDS)
def test_binary_input_is_refused(tmp_path, capsys, kind):
    path = tmp_path / "input.csv"
    path.write_bytes(b"\x89PNG\r\n\x1a\n\x00\xff\xfe")
    run(capsys, command(kind, path))


@pytest.mark.parametrize("kind, text", [
    ("config", "a = " + "[" * 5000 + "]" * 5000),
    ("spec", "a = " + "[" * 5000 + "]" * 5000),
    ("pair", "[" * 100_000 + "]" * 100_000),
])
def test_deeply_nested_input_is_refused(tmp_path, capsys, kind, text):
    path = tmp_path / "input"
    path.write_text(text)
    assert "nest" in run(capsys, command(kind, path))


@pytest.mark.parametrize("probability", ["1e-99999999", "1e+99999999", "1/" + "3" * 2000])
def test_an_exact_probability_too_large_to_compute_with_is_refused(tmp_path, capsys,
                                                                   probability):
    path = tmp_path / "pair.json"
    path.write_text(json.dumps({"vocab": 2, "draft": {"iid": [probability, "1"]},
                                "target": {"iid": ["1/2", "1/2"]}}))
    assert "expected an exact probability of at most 1000 digits" in run(
        capsys, command("pair", path))


def test_optimum_allocate_refuses_complex_and_empty_values(tmp_path, capsys):
    np.save(tmp_path / "c.npy", np.ones((3, 2)) + 0.5j)
    assert "expected real values, got complex" in run(
        capsys, command("values", tmp_path / "c.npy"))
    (tmp_path / "e.csv").write_text("")
    assert "expected a non-empty [N, K] array" in run(
        capsys, command("values", tmp_path / "e.csv"))
