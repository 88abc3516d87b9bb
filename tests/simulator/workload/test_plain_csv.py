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
    (b"prompt_len,output_len,arrival\n5,6,0\n", True),  # an integer arrival: float64 0.0
    (b"prompt_len,output_len,arrival\n5,6,0.127508\n7,8,0.130674\n", True),
    (b"arrival,prompt_len,output_len\n.5,5,6\n", True),
    (b"prompt_len,output_len,arrival\n5,6,2.5\n7,8,1.5\n", False),  # decreasing: pandas names it
    (b"prompt_len,output_len,arrival\n5,6,-1\n", False),
    (b"prompt_len,output_len,arrival\n5,6,1e3\n", False),
    (b"prompt_len,output_len,arrival\n5,6,5.\n", False),
    (b"prompt_len,output_len,arrival\n5,6,1.234567890123456\n", False),  # 16 digits
    (b"prompt_len,output_len,arrival\n5,6,\n", False),
    (b"prompt_len,output_len,timestamp\n5,6,1.5\n", False),
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


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 10**9), st.integers(0, 14)), min_size=1, max_size=40),
       st.integers(0, 2**31))
def test_random_decimal_arrivals_read_as_pandas_reads_them(tmp_path_factory, cells, seed):
    # each arrival: a random digit string with a point placed f digits from its end (at most
    # 15 significant digits), sorted so that the column is non-decreasing
    rng = np.random.default_rng(seed)
    texts = []
    for whole, f in cells:
        frac = "".join(str(d) for d in rng.integers(0, 10, f)) if f else ""
        whole = str(whole)[: max(1, 15 - f)]
        texts.append(whole + ("." + frac if frac else ""))
    texts.sort(key=lambda t: (float(t), t))
    data = ("prompt_len,output_len,arrival\n"
            + "".join(f"{i + 1},{i + 2},{t}\n" for i, t in enumerate(texts))).encode()
    path = tmp_path_factory.mktemp("w") / "w.csv"
    path.write_bytes(data)
    assert arrivals.plain_lengths(path) is not None
    fast, slow = both(path.parent, data)
    assert_same(fast, slow)


def test_the_vidur_workload_reads_as_pandas_reads_it(tmp_path):
    from pathlib import Path

    shared = Path(__file__).resolve().parents[4] / "shared" / "workloads"
    path = shared / "vidur-splitwise-conv-19200.csv"
    if not path.is_file():
        pytest.skip("shared/workloads is not beside this checkout")
    fast = arrivals.plain_lengths(path)
    assert fast is not None  # 19,200 rows of integers and six-decimal arrivals
    assert_same(fast, arrivals.read_with_pandas(path, None, 0))
