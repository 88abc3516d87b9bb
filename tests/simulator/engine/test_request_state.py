"""The engine's state layout: the fresh columns a request is admitted with."""

from __future__ import annotations

import numpy as np
import pytest

from specbatch.simulator.engine.request_state import FreshColumns, Row


def matrix(prompt, out, base, key) -> np.ndarray:
    """The [len(Row), N] matrix FreshColumns stands for, built row by row."""
    m = np.zeros((len(Row), prompt.shape[0]), dtype=np.int64)
    m[Row.UID] = np.arange(prompt.shape[0])
    m[Row.PROMPT] = m[Row.FILL] = prompt
    m[Row.OUT], m[Row.BASE], m[Row.KEY] = out, base, key.view(np.int64)
    return m


def test_fresh_columns_read_as_the_held_matrix():
    rng = np.random.default_rng(1)
    n = 9
    prompt, out = rng.integers(1, 4096, n), rng.integers(1, 512, n)
    base = rng.integers(0, 10**6, n)
    key = rng.integers(0, 2**64, n, dtype=np.uint64)  # top bit set: read as negative int64
    fresh, want = FreshColumns(prompt, out, base, key), matrix(prompt, out, base, key)
    assert fresh.shape == want.shape
    for uids in ([], [3], [8, 0, 8, 2], list(range(n))):
        got = fresh.take(uids, axis=1)
        assert got.dtype == np.int64 and np.array_equal(got, want.take(uids, axis=1))
    for a, b in ((2, 5), (4, 5), (8, 9), (0, n), (5, 5), (7, 99)):
        assert np.array_equal(fresh[:, a:b], want[:, a:b]), (a, b)
    assert np.array_equal(fresh[:, 7], want[:, 7]) and np.array_equal(fresh.column(3), want[:, 3:4])
    col = fresh[:, 4:5]
    col[Row.POS] = 5  # a fresh array: writing it changes no later read
    assert fresh[:, 4:5][Row.POS, 0] == 0
    with pytest.raises(ValueError, match="axis=1"):
        fresh.take([0], axis=0)
    with pytest.raises(TypeError, match=r"\[:, a:b\]"):
        fresh[0]
