"""``specbatch.io`` input readers: only regular files are opened (a FIFO never blocks), sizes
are bounded, and every failure is one line naming the file."""

from __future__ import annotations

import os
import threading

import pytest

from specbatch.errors import SpecbatchError
from specbatch.io import (
    check_regular_file,
    load_json_file,
    read_regular_file,
    read_regular_text,
)


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
