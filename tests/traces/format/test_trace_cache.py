"""traces/format/trace_cache.py: read_trace keeps the checked trace in the cache folder and
reads it back, bit for bit and read-only, without pyarrow, until a file of the folder or the
reader changes; a folder changed moments ago is never kept; a damaged entry is read around."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from specbatch.errors import SpecbatchError
from specbatch.traces.format import trace_cache
from specbatch.traces.format.files import read_trace, validate_trace, write_trace
from specbatch.traces.format.trace import Trace
from specbatch.traces.synth import SynthConfig, synth_trace


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    """A private cache folder, and folders kept as soon as written (no settling wait)."""
    monkeypatch.setenv("SPECBATCH_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(trace_cache, "SETTLE_S", 0.0)
    return tmp_path / "cache" / "traces"


@pytest.fixture
def written(tmp_path) -> Path:
    path = tmp_path / "trace"
    write_trace(synth_trace(SynthConfig(requests=5, depth=4, output_mean=10, vocab=8, seed=1)),
                path)
    return path


def arrays(trace: Trace) -> dict[str, np.ndarray]:
    return {k: v for k, v in vars(trace).items() if isinstance(v, np.ndarray)}


def test_the_second_read_comes_from_the_cache_bit_for_bit_and_read_only(cache, written):
    first = read_trace(written)
    assert len(list(cache.glob("*.pickle"))) == 1
    second = read_trace(written)
    assert second is not first and second.path == first.path == str(written)
    assert second.meta == first.meta
    want, got = arrays(validate_trace(written)), arrays(second)
    assert want.keys() == got.keys() and len(got) >= 12
    for name, arr in want.items():
        assert got[name].dtype == arr.dtype and got[name].shape == arr.shape, name
        if arr.dtype == object:
            assert got[name].tolist() == arr.tolist(), name
        else:
            assert got[name].tobytes() == arr.tobytes(), name  # NaN payloads too
        assert not got[name].flags.writeable, name  # as make_trace leaves them


def test_a_changed_file_is_read_again_and_its_error_is_not_hidden(cache, written):
    read_trace(written)
    (written / "meta.json").write_text("{not json")
    with pytest.raises(SpecbatchError, match="meta.json"):
        read_trace(written)


def test_changed_contents_get_a_new_entry_and_the_old_one_goes(cache, written, monkeypatch):
    read_trace(written)
    (old,) = cache.glob("*.pickle")
    meta = written / "meta.json"
    meta.write_text(meta.read_text() + "\n")  # the same JSON, other bytes
    monkeypatch.setattr(trace_cache, "SETTLE_S", 0.0)
    read_trace(written)
    (new,) = cache.glob("*.pickle")
    assert new != old and new.name.split("-")[0] == old.name.split("-")[0]


def test_a_touched_file_keeps_its_entry(cache, written):
    """The key is the files' contents, not their time stamps."""
    read_trace(written)
    (old,) = cache.glob("*.pickle")
    stat = (written / "requests.parquet").stat()
    os.utime(written / "requests.parquet", ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    assert trace_cache.entry(written).path == old


def test_a_folder_changed_moments_ago_is_not_kept(cache, written, monkeypatch):
    monkeypatch.setattr(trace_cache, "SETTLE_S", 3600.0)
    read_trace(written)
    assert not cache.exists() or not list(cache.glob("*.pickle"))


def test_a_damaged_entry_is_read_around(cache, written):
    want = read_trace(written)
    (entry,) = cache.glob("*.pickle")
    entry.write_bytes(b"not a pickle")
    got = read_trace(written)
    assert got.q.tobytes() == want.q.tobytes()


def test_a_warm_cache_reads_the_default_trace_without_pyarrow(tmp_path):
    """The point of the cache: a small ``simulate`` does not import pyarrow (~0.06 s) nor
    parse eight Parquet files (~0.1 s) once the bundled trace was read once."""
    env = dict(os.environ, SPECBATCH_CACHE=str(tmp_path))
    code = ("import sys; from specbatch.traces.format.files import read_trace; "
            "t = read_trace('default'); print(t.n_rows, 'pyarrow' in sys.modules)")
    runs = [subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                           text=True, timeout=120, check=True).stdout.split()
            for _ in range(2)]
    assert runs[0][1] == "True" and runs[1] == [runs[0][0], "False"]
