"""Reading one trace Parquet file and its columns, checked: the reader of every trace table
(positions, requests, tree nodes) goes through these two functions, so a damaged file or a
column of the wrong kind is one error naming the file and field."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from specbatch.errors import SpecbatchError, require
from specbatch.inputs import check_regular_file


def read_table(path: Path) -> pa.Table:
    """The table in ``path``; pages written with a CRC (every trace specbatch writes) are
    verified. Read as one file (``ParquetFile``), not through ``pq.read_table``'s dataset
    layer: the same table, without importing pyarrow.dataset, which imports pandas (~0.3 s
    of a small run's start-up), or reading partition keys from the folder names."""
    check_regular_file(path, "a Parquet file")
    try:
        with pq.ParquetFile(path, page_checksum_verification=True) as file:
            return file.read()
    except (pa.ArrowException, OSError) as exc:
        raise SpecbatchError(
            f"file {path}: expected a Parquet file, got an unreadable one "
            f"({str(exc).splitlines()[0] if str(exc) else type(exc).__name__})"
        ) from None


_KINDS = {
    "integer": pa.types.is_integer,
    "float": lambda t: pa.types.is_floating(t) and not pa.types.is_float16(t),
    "string": lambda t: pa.types.is_string(t) or pa.types.is_large_string(t),
    "list": lambda t: pa.types.is_list(t) or pa.types.is_large_list(t),
}


def column(table: pa.Table, path: Path, name: str, kind: str) -> pa.Array:
    """Column ``name`` as one Array, checked for presence, type kind (integer, float, string,
    list) and nulls."""
    require(name in table.column_names, f"file {path}: field {name}: expected a {kind} column, "
            f"got none (columns: {', '.join(table.column_names)})")
    col = table.column(name)
    arr = col.combine_chunks() if col.num_chunks else pa.array([], type=col.type)
    require(_KINDS[kind](arr.type), f"file {path}: field {name}: expected {kind} values, got type "
            f"{arr.type}")
    require(arr.null_count == 0, f"file {path}: field {name}: expected no nulls, got "
            f"{arr.null_count}")
    return arr


def numbers(arr: pa.Array) -> np.ndarray:
    """A numeric (integer or float) array without nulls as numpy # [len]: the read-only view
    of its data buffer that ``arr.to_numpy()`` gives, without pyarrow's pandas conversion
    layer, which imports pandas (~0.3 s, more than reading a small trace). Any other array
    goes through ``to_numpy``."""
    typ = arr.type
    if arr.null_count or not (pa.types.is_integer(typ) or pa.types.is_floating(typ)):
        return arr.to_numpy(zero_copy_only=False)
    dtype = np.dtype(typ.to_pandas_dtype())
    data = arr.buffers()[1]
    if data is None or len(arr) == 0:
        return np.empty(0, dtype=dtype)
    return np.frombuffer(data, dtype=dtype, count=len(arr), offset=arr.offset * dtype.itemsize)


def list_offsets(arr: pa.Array) -> np.ndarray:
    """The offsets # [len + 1] of a list or large-list array into its ``values``."""
    width = np.dtype(np.int64 if pa.types.is_large_list(arr.type) else np.int32)
    if len(arr) == 0:
        return np.zeros(1, dtype=width)
    return np.frombuffer(arr.buffers()[1], dtype=width, count=len(arr) + 1,
                         offset=arr.offset * width.itemsize)


def list_lengths(arr: pa.Array) -> np.ndarray:
    """The lengths # [len] of a list or large-list array without null lists (its offsets'
    differences: ``arr.value_lengths()`` without pyarrow.compute, ~0.2 s to import, and
    pandas)."""
    return np.diff(list_offsets(arr))


def list_values(arr: pa.Array) -> pa.Array:
    """The values of a list, large-list or fixed-size-list array without null lists, row
    after row: ``arr.flatten()`` (a zero-copy slice of the child array) without
    pyarrow.compute."""
    if pa.types.is_fixed_size_list(arr.type):
        size = arr.type.list_size
        return arr.values.slice(arr.offset * size, len(arr) * size)
    offsets = list_offsets(arr)
    return arr.values.slice(int(offsets[0]), int(offsets[-1] - offsets[0]))
