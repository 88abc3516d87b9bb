"""User-supplied text files: the wrong kind of file is a one-line error, never a hang."""

from __future__ import annotations

import os

import pytest

from specbatch.errors import SpecbatchError
from specbatch.inputs import loads_json, loads_toml, nesting_depth, read_text


def test_a_regular_utf8_file_is_read(tmp_path):
    path = tmp_path / "a.toml"
    path.write_text("x = 'é'\n", encoding="utf-8")
    assert loads_toml(read_text(path, "config"), "config") == {"x": "é"}


@pytest.mark.parametrize("make, message", [
    (lambda p: p.mkdir(), "config: expected a file, got a directory"),
    (lambda p: os.mkfifo(p), "config: expected a regular file, got a FIFO"),
    (lambda p: p.write_bytes(b"x = 1\n\xff\xfe"), "config: expected UTF-8 text, got binary data "
                                                  "(byte 6)"),
])
def test_the_wrong_kind_of_file_is_refused(tmp_path, make, message):
    path = tmp_path / "input"
    make(path)
    with pytest.raises(SpecbatchError, match=message.replace("(", r"\(").replace(")", r"\)")):
        read_text(path, "config")


def test_a_file_over_the_size_cap_is_refused_before_reading(tmp_path):
    path = tmp_path / "big.json"
    path.write_text("[" + "0," * 1000 + "0]")
    with pytest.raises(SpecbatchError, match="expected at most 0 MiB"):
        read_text(path, "pair", max_bytes=100)


def test_a_missing_file_is_left_to_the_caller(tmp_path):
    with pytest.raises(FileNotFoundError):
        read_text(tmp_path / "nope", "spec")


def test_deep_documents_are_refused_without_recursing():
    assert nesting_depth({"a": [1, {"b": []}]}) == 4
    assert nesting_depth(5) == 0
    with pytest.raises(SpecbatchError, match="nested at most 64 levels deep, got deeper"):
        loads_json("[" * 100_000 + "]" * 100_000, "pair")
    with pytest.raises(SpecbatchError, match="got 65"):
        loads_json("[" * 65 + "]" * 65, "pair")
    assert loads_json("[" * 64 + "]" * 64, "pair") is not None
    with pytest.raises(SpecbatchError, match="TOML nested at most 64"):
        loads_toml("a = " + "[" * 5000 + "]" * 5000, "spec")
