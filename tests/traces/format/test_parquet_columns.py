"""traces/format/parquet_columns.py: the pandas-free readers of a column equal pyarrow's own
(their slow twins): ``numbers`` = ``to_numpy``, ``list_values`` = ``flatten``,
``list_lengths`` = ``value_lengths``, on every numeric type, list kind and sliced array; and a
file reads as ``pq.read_table`` reads it."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from specbatch.traces.format.parquet_columns import (
    list_lengths,
    list_values,
    numbers,
    read_table,
)

NUMERIC = [pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.uint8(), pa.uint32(), pa.uint64(),
           pa.float32(), pa.float64()]


def sliced(arr: pa.Array) -> list[pa.Array]:
    """The array, and slices of it with offsets into its buffers (as row groups give)."""
    return [arr, arr.slice(1), arr.slice(2, max(0, len(arr) - 3)), arr.slice(len(arr))]


@pytest.mark.parametrize("typ", NUMERIC, ids=str)
def test_numbers_is_to_numpy(typ):
    rng = np.random.default_rng(0)
    values = rng.integers(0, 100, 11) if pa.types.is_integer(typ) else rng.normal(size=11)
    values = np.append(values, [np.nan]) if pa.types.is_floating(typ) else values
    for arr in sliced(pa.array(values, type=typ)):
        got, want = numbers(arr), arr.to_numpy(zero_copy_only=False)
        assert got.dtype == want.dtype and got.tobytes() == want.tobytes()


def test_numbers_of_an_array_with_nulls_is_to_numpy():
    arr = pa.array([1, None, 3], type=pa.int64())
    np.testing.assert_array_equal(numbers(arr), arr.to_numpy(zero_copy_only=False))


@pytest.mark.parametrize("kind", ["list", "large_list", "fixed"])
def test_list_values_and_lengths_are_flatten_and_value_lengths(kind):
    rng = np.random.default_rng(1)
    if kind == "fixed":
        rows = [list(rng.normal(size=4)) for _ in range(9)]
        arr = pa.array(rows, type=pa.list_(pa.float64(), 4))
    else:
        rows = [list(rng.normal(size=int(n))) for n in rng.integers(0, 5, 9)]
        arr = pa.array(rows, type=pa.list_(pa.float64()) if kind == "list"
                       else pa.large_list(pa.float64()))
    for part in sliced(arr):
        assert list_values(part).equals(part.flatten())
        assert numbers(list_values(part)).tobytes() == part.flatten().to_numpy().tobytes()
        if kind != "fixed":
            assert list_lengths(part).tolist() == part.value_lengths().to_pylist()


def test_a_file_reads_as_read_table_reads_it(tmp_path):
    table = pa.table({"a": pa.array(np.arange(50, dtype=np.int64)),
                      "q": pa.array([[0.5, 0.25]] * 50, type=pa.list_(pa.float64(), 2))})
    pq.write_table(table, tmp_path / "t.parquet", row_group_size=16, write_page_checksum=True)
    got, want = read_table(tmp_path / "t.parquet"), pq.read_table(tmp_path / "t.parquet")
    assert got.equals(want) and got.schema.equals(want.schema, check_metadata=True)
