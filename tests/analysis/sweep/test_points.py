"""analysis.sweep.points' per-request tables: the numeric fast path (arrays straight to
pyarrow) reads back as the frame pandas' own writer stores, NaN, derived columns and index
included; a table with a text column takes pandas' writer."""

from __future__ import annotations

import numpy as np
import pandas as pd

from specbatch.analysis.sweep.points import REQUEST_COLUMNS, request_writer, store_point
from specbatch.analysis.sweep.runner import read_requests


def reference(requests: pd.DataFrame) -> pd.DataFrame:
    """The table as stored before the fast path: pandas' copy, derived columns, to_parquet."""
    requests = requests.copy()
    requests["e2e"] = requests["finish"] - requests["arrival"]
    requests["ttft"] = requests["first_token"] - requests["arrival"]
    cols = [c for c in REQUEST_COLUMNS if c in requests.columns]
    return requests[cols].reset_index(drop=True)


def table(n: int = 5, text: bool = False) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    arrival = rng.random(n)
    frame = pd.DataFrame({"uid": np.arange(n), "arrival": arrival,
                          "first_token": arrival + 0.5, "finish": arrival + 2.0,
                          "tokens": np.full(n, 7), "replica": np.zeros(n, dtype=np.int64),
                          "steps_taken": np.ones(n)}, index=np.arange(10, 10 + n))
    frame.loc[12, "finish"] = np.nan  # an unfinished request (a stopped run)
    if text:
        frame["category"] = ["chat", "code"] * (n // 2) + ["chat"] * (n % 2)
    return frame


def test_numeric_tables_read_back_as_pandas_stores_them(tmp_path):
    requests = table()
    store_point(tmp_path, {"seed": 0}, {"n": 5}, requests, 0.1, "k")
    pd.testing.assert_frame_equal(read_requests(tmp_path, "k"), reference(requests))
    assert "steps_taken" not in read_requests(tmp_path, "k")  # only the kept columns


def test_a_text_column_goes_through_pandas(tmp_path):
    requests = table(text=True)
    path = tmp_path / "t.parquet"
    request_writer(requests)(str(path))
    pd.testing.assert_frame_equal(pd.read_parquet(path), reference(requests))


def test_numeric_columns_make_the_same_file_bytes_as_pa_table(tmp_path):
    # arrow_column wraps the buffers (no pandas): byte for byte pa.table's file, NaN, other
    # widths and a strided view included
    import pyarrow as pa
    import pyarrow.parquet as pq

    from specbatch.analysis.sweep.points import arrow_column

    rng = np.random.default_rng(1)
    f = rng.random(11)
    f[3] = np.nan
    columns = {"a": np.arange(11), "b": f, "c": rng.integers(0, 9, 11).astype(np.int32),
               "d": rng.random(22)[::2], "g": rng.integers(0, 200, 11).astype(np.uint8)}
    ours = pa.Table.from_arrays([arrow_column(v) for v in columns.values()], names=list(columns))
    pq.write_table(ours, tmp_path / "ours.parquet")
    pq.write_table(pa.table(columns), tmp_path / "theirs.parquet")
    assert (tmp_path / "ours.parquet").read_bytes() == (tmp_path / "theirs.parquet").read_bytes()
    empty = pa.Table.from_arrays([arrow_column(np.zeros(0))], names=["z"])
    assert empty.equals(pa.table({"z": np.zeros(0)}))


def test_stored_requests_read_back_as_columns_are_read_requests_arrays(tmp_path):
    from specbatch.analysis.sweep.points import request_columns

    requests = table(n=9)
    store_point(tmp_path, {"seed": 0}, {"n": 9}, requests, 0.1, "k")
    frame = read_requests(tmp_path, "k")
    columns = request_columns(tmp_path, "k")
    assert list(columns) == list(frame.columns)
    for name in frame.columns:
        want = frame[name].to_numpy()
        assert columns[name].dtype == want.dtype
        assert np.array_equal(columns[name].view(np.int64) if want.dtype.kind == "f" else
                              columns[name], want.view(np.int64) if want.dtype.kind == "f"
                              else want)
    # a text column, a missing table: None (read_requests reads them)
    store_point(tmp_path, {"seed": 1}, {"n": 5}, table(text=True), 0.1, "t")
    assert request_columns(tmp_path, "t") is None and read_requests(tmp_path, "t") is not None
    store_point(tmp_path, {"seed": 2}, {"n": 5}, None, 0.1, "none")
    assert request_columns(tmp_path, "none") is None
    table(n=4).to_parquet(tmp_path / "points" / "idx.requests.parquet")  # its index stored
    assert request_columns(tmp_path, "idx") is None
