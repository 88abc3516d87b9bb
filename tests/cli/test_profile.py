"""``specbatch profile``: .parquet or .csv only, checked before measuring; one CPU thread by
default, recorded in a ``threads`` column."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from specbatch.cli import main

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

#: One cell of a one-layer random-weight shape: a second on CPU.
ARGS = ["profile", "--model", "vicuna-68m", "--layers", "1", "--batch", "1", "--query", "1",
        "--kv", "0", "--warmup", "0", "--repeats", "1", "--json"]


@pytest.fixture
def restore_threads():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


def test_other_suffixes_are_a_one_line_error_before_measuring(tmp_path, capsys):
    code = main([*ARGS, "--out", str(tmp_path / "p.txt")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert "--out" in err and "expected a file name ending in .parquet or .csv" in err
    assert not (tmp_path / "p.txt").exists()


@pytest.mark.parametrize("name, flags, threads", [
    ("p.csv", [], 1), ("p.parquet", ["--threads", "2"], 2)])
def test_thread_count_defaults_to_one_and_is_a_column(name, flags, threads, tmp_path, capsys,
                                                      restore_threads):
    assert main([*ARGS, *flags, "--out", str(tmp_path / name)]) == 0
    assert json.loads(capsys.readouterr().out)["threads"] == threads
    frame = (pd.read_csv if name.endswith(".csv") else pd.read_parquet)(tmp_path / name)
    assert frame["threads"].tolist() == [threads]
