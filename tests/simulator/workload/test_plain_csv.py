"""simulator.workload.plain_csv: plain integer CSV tables read and written without pandas,
only where the result is pandas' own; everything else returns None and pandas reads it."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specbatch.errors import SpecbatchError
from specbatch.simulator.workload import arrivals
from specbatch.simulator.workload.plain_csv import int_columns, int_csv


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 40), st.integers(0, 2**40), st.sampled_from([np.int64, np.int32, np.uint16]))
def test_int_csv_is_pandas_to_csv(n, high, dtype):
    rng = np.random.default_rng(n)
    high = min(high, np.iinfo(dtype).max)
    columns = {"prompt_len": rng.integers(0, high + 1, n).astype(dtype),
               "output_len": rng.integers(0, high + 1, n).astype(dtype)}
    assert int_csv(columns) == pd.DataFrame(columns).to_csv(index=False)


def test_int_csv_declines_what_pandas_would_quote_or_format():
    assert int_csv({"a": np.array([1.0])}) is None  # floats: pandas' float format
    assert int_csv({"a": np.array(["x"], dtype=object)}) is None
    assert int_csv({"a,b": np.array([1])}) is None  # a name pandas quotes
    assert int_csv({"a": np.array([1]), "b": np.array([1, 2])}) is None
    assert int_csv({}) is None


def both(tmp_path, text: bytes, name: str = "w.csv"):
    """read_workload_file_uncached (plain path where it applies) and pandas' reader."""
    path = tmp_path / name
    path.write_bytes(text)
    out = []
    for read in (arrivals.read_workload_file_uncached,
                 lambda p: arrivals.read_with_pandas(p, None, 0)):
        try:
            out.append(read(path))
        except SpecbatchError as exc:
            out.append(str(exc))
    return out


def assert_same(a, b):
    if isinstance(a, str) or isinstance(b, str):
        assert a == b
        return
    assert list(a) == list(b)
    for name in a:
        assert a[name].dtype == b[name].dtype, name
        assert np.array_equal(a[name], b[name], equal_nan=a[name].dtype.kind == "f"), name


@pytest.mark.parametrize("text, plain", [
    (b"prompt_len,output_len\n500,200\n500,200\n", True),
    (b"prompt_len,output_len\r\n7,9\r\n12,3", True),  # CRLF, no last line end
    (b"\xef\xbb\xbfPrompt_Tokens,generated_len\n007,1\n", True),  # BOM, aliases, zeros
    (b"output_len,prompt_len\n3,4\n", True),
    (b" prompt_len ,output_len\n3,4\n", True),
    (b"prompt_len,output_len\n5,0\n", False),  # a bad length: pandas names it
    (b"prompt_len,output_len\n5,99999999999\n", False),
    (b"prompt_len,output_len\n5,6\n\n7,8\n", False),  # a blank line
    (b"prompt_len,output_len\n5, 6\n", False),
    (b"prompt_len,output_len\n5,6.0\n", False),
    (b'prompt_len,output_len\n"5",6\n', False),
    (b"prompt_len,output_len\n5,\n", False),
    (b"prompt_len,output_len\n5,6,7\n", False),
    (b"prompt_len,output_len,category\n5,6,a\n", False),
    (b"prompt_len,output_len,arrival\n5,6,0\n", False),
    (b"prompt_len,input_len,output_len\n5,6,7\n", False),
    (b"prompt_len,output_len\n", False),
    (b"prompt_len,output_len\r5,6\r", False),
    (b"prompt_len,output_len\n-5,6\n", False),
])
def test_the_plain_path_reads_what_pandas_reads(tmp_path, text, plain):
    fast, slow = both(tmp_path, text)
    assert_same(fast, slow)
    is_plain = arrivals.plain_lengths(tmp_path / "w.csv") is not None
    assert is_plain == plain


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 2**24), st.integers(1, 2**24)), min_size=1,
                max_size=30), st.booleans(), st.booleans())
def test_random_plain_tables_read_as_pandas_reads_them(tmp_path_factory, rows, crlf, bom):
    end = "\r\n" if crlf else "\n"
    text = ("prompt_len,output_len" + end + "".join(f"{p},{o}{end}" for p, o in rows))
    data = (b"\xef\xbb\xbf" if bom else b"") + text.encode()
    assert int_columns(data) is not None
    fast, slow = both(tmp_path_factory.mktemp("w"), data)
    assert_same(fast, slow)
