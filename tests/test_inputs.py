"""User-supplied text files: the wrong kind of file is a one-line error, never a hang."""

from __future__ import annotations

import os
import threading

import pytest

from specbatch.errors import SpecbatchError
from specbatch.inputs import (
    check_regular_file,
    load_json_file,
    loads_json,
    loads_toml,
    nesting_depth,
    read_regular_file,
    read_regular_text,
    read_text,
)


def test_a_regular_utf8_file_is_read(tmp_path):
    path = tmp_path / "a.toml"
    path.write_text("x = 'é'\n", encoding="utf-8")
    assert loads_toml(read_text(path, "config"), "config") == {"x": "é"}


@pytest.mark.parametrize("make, message", [
    (lambda p: p.mkdir(), "config: expected a regular file, got a directory"),
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
    with pytest.raises(SpecbatchError, match="expected a regular file of at most 100 bytes, got "
                                             "2,003"):
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


# ---------------------------------------------------------------- read_regular_file


def call_within(seconds: float, fn, *args, **kwargs):
    """``fn(*args, **kwargs)``'s result or exception, failing the test if it blocks."""
    box: dict = {}

    def target():
        try:
            box["value"] = fn(*args, **kwargs)
        except BaseException as exc:  # re-raised in the test thread
            box["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"{fn.__name__} blocked for more than {seconds} s"
    if "error" in box:
        raise box["error"]
    return box["value"]


@pytest.mark.parametrize("reader", [check_regular_file, read_regular_file, read_regular_text,
                                    load_json_file])
def test_a_fifo_is_refused_without_blocking(tmp_path, reader):
    fifo = tmp_path / "meta.json"
    os.mkfifo(fifo)
    with pytest.raises(SpecbatchError, match=r"^file .*meta\.json: expected .*got a FIFO"):
        call_within(5, reader, fifo)


@pytest.mark.parametrize("reader", [read_regular_file, load_json_file])
def test_directories_devices_and_missing_files_are_one_line_errors(tmp_path, reader):
    for path, got in ((tmp_path, "got a directory"), ("/dev/null", "got a character device"),
                      (tmp_path / "absent", "got no such file")):
        with pytest.raises(SpecbatchError, match=got) as exc:
            call_within(5, reader, path)
        assert "\n" not in str(exc.value)


def test_the_size_is_bounded(tmp_path):
    path = tmp_path / "big"
    path.write_bytes(b"x" * 101)
    assert read_regular_file(path, max_bytes=101) == b"x" * 101
    with pytest.raises(SpecbatchError, match="of at most 100 bytes, got 101"):
        read_regular_file(path, max_bytes=100)


@pytest.mark.parametrize("content, reason", [
    (b"\xff\xfe\x00binary", "got binary data"),
    (b"{not json", "got invalid JSON"),
    (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
    (b"[" + b"9" * 5000 + b"]", "got invalid JSON"),  # beyond the int digit limit
])
def test_bad_json_files_are_one_line_errors(tmp_path, content, reason):
    path = tmp_path / "f.json"
    path.write_bytes(content)
    with pytest.raises(SpecbatchError, match=reason) as exc:
        load_json_file(path)
    assert "\n" not in str(exc.value)


def test_a_good_json_file_reads_any_value(tmp_path):
    path = tmp_path / "f.json"
    path.write_text('[1, {"a": "é"}]', encoding="utf-8")
    assert load_json_file(path) == [1, {"a": "é"}]
