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
