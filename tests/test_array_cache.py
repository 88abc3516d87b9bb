"""specbatch.array_cache: a result built once per inputs' contents and code, read back bit for
bit by the next caller; a changed input or parser builds afresh; a damaged entry or an
unwritable folder never fails the caller."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from specbatch import array_cache
from specbatch.array_cache import cached_arrays, content_digest, entry_path


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("SPECBATCH_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture
def code(tmp_path) -> Path:
    path = tmp_path / "parser.py"
    path.write_text("VERSION = 1\n")
    return path


def counted(value):
    calls = []

    def build():
        calls.append(1)
        return value

    return build, calls


def arrays() -> dict[str, np.ndarray]:
    return {"t": np.array([0.1, np.nan, 1e-300, -0.0]), "n": np.arange(5, dtype=np.int64),
            "name": np.array(["a100", "h100"])}


def test_a_result_is_built_once_and_read_back_bit_for_bit(cache, code):
    build, calls = counted(arrays())
    first = cached_arrays("demo", ("x",), [code], build)
    again = cached_arrays("demo", ("x",), [code], build)
    assert len(calls) == 1
    for name, want in arrays().items():
        assert again[name].dtype == want.dtype
        assert again[name].tobytes() == want.tobytes()
        assert first[name].tobytes() == want.tobytes()
    assert entry_path("demo", ("x",), [code]).is_file()


def test_other_contents_or_other_code_build_afresh(cache, code):
    build, calls = counted(arrays())
    cached_arrays("demo", (content_digest(b"v1"),), [code], build)
    cached_arrays("demo", (content_digest(b"v2"),), [code], build)
    assert len(calls) == 2
    code.write_text("VERSION = 2\n")  # the parser changed: its results are not reused
    cached_arrays("demo", (content_digest(b"v2"),), [code], build)
    assert len(calls) == 3


def test_a_damaged_entry_is_built_again(cache, code):
    build, calls = counted(arrays())
    cached_arrays("demo", ("x",), [code], build)
    entry_path("demo", ("x",), [code]).write_bytes(b"PK\x03\x04 not a zip")
    got = cached_arrays("demo", ("x",), [code], build)
    assert len(calls) == 2 and got["n"].tolist() == [0, 1, 2, 3, 4]


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only folder")
def test_an_unwritable_folder_returns_the_result_without_keeping_it(cache, code):
    cache.mkdir()
    cache.chmod(0o500)
    try:
        build, calls = counted(arrays())
        assert cached_arrays("demo", ("x",), [code], build)["n"].sum() == 10
        cached_arrays("demo", ("x",), [code], build)
        assert len(calls) == 2
    finally:
        cache.chmod(0o700)


def test_an_unwritable_folder_as_root_too(cache, code, monkeypatch):
    def refuse(path, data):
        raise OSError("read-only file system")

    monkeypatch.setattr(array_cache, "atomic_write", refuse)
    build, calls = counted(arrays())
    assert cached_arrays("demo", ("x",), [code], build)["n"].sum() == 10
    assert len(calls) == 1 and not entry_path("demo", ("x",), [code]).exists()


def test_none_and_object_arrays_are_returned_but_not_kept(cache, code):
    build, calls = counted(None)
    assert cached_arrays("demo", ("none",), [code], build) is None
    assert cached_arrays("demo", ("none",), [code], build) is None
    assert len(calls) == 2
    objects = {"category": np.array([None, None], dtype=object)}
    build, calls = counted(objects)
    assert cached_arrays("demo", ("obj",), [code], build) is objects
    cached_arrays("demo", ("obj",), [code], build)
    assert len(calls) == 2 and not entry_path("demo", ("obj",), [code]).exists()
