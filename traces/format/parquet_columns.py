"""Reading one trace Parquet file and its columns, checked: the reader of every trace table
(positions, requests, tree nodes) goes through these two functions, so a damaged file or a
column of the wrong kind is one error naming the file and field."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from specbatch.errors import SpecbatchError, require
from specbatch.inputs import check_regular_file


def read_table(path: Path) -> pa.Table:
    """The table in ``path``; pages written with a CRC (every trace specbatch writes) are
    verified."""
    check_regular_file(path, "a Parquet file")
    try:
        return pq.read_table(path, page_checksum_verification=True)
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
