"""The specbatch trace files: read, validate, write (format ``specbatch-trace``, version 1).

A trace is a directory ``NAME/`` (field-by-field documentation: ``traces/FORMAT.md``):

- ``meta.json``            format name and version, depth K, temperature, provenance;
- ``requests.parquet``     one row per request: ``request_id, prompt_len, output_len,
  category, arrival``;
- ``positions-*.parquet``  one or more files (capture writes one per chunk of requests so
  ``--resume`` can append), one row per (request, output position t) with ``request_id``,
  ``position`` and fixed-size-K list columns ``draft_token, q, pt, z, draft_conf, entropy, top1``,
  and optionally an integer column ``proposed`` (real draft tokens of the row, 0..K; see
  :mod:`specbatch.traces.format.trace`). The reader concatenates the files and orders rows by
  (request order of ``requests.parquet``, position), whatever order the files hold them in.

Row t of a request holds the K tokens the draft proposes from ``prompt + y_<t`` (``y`` the
target's reference output) and the THEORY.md §3 statistics of that drafted path: ``q`` =
``Ms(X_i|·)``, ``pt`` = ``Mb(X_i|·)`` (so ``r_i = pt/q``), ``z[:, j]`` = ``Z_{j+1}``.

The in-memory :class:`Trace`, :func:`make_trace` and the value checks (temperature-0 rule,
slack) live in :mod:`specbatch.traces.format.trace`.

Files are never trusted: :func:`read_trace` runs every check of :func:`validate_trace` and
raises a one-line :class:`~specbatch.errors.SpecbatchError` naming the file, the field and what
was expected. Probabilities and Z may exceed [0, 1] by at most :data:`SLACK` (1e-6, float
round-off of a capture); values are returned exactly as stored, never clipped.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from specbatch.errors import SpecbatchError, require
from specbatch.inputs import load_json_file
from specbatch.io import atomic_write, write_json
from specbatch.traces.format import trace_cache
from specbatch.traces.format.trace import (
    FORMAT_NAME,
    FORMAT_VERSION,
    LIST_COLUMNS,
    PROPOSED,
    REQUEST_COLUMNS,
    TREE_VERSION,
    Trace,
    as_int,
    check_meta,
    check_requests,
    make_trace,
)

if TYPE_CHECKING:  # pyarrow loads where Parquet is read or written, not for a cached trace
    import pyarrow as pa

#: The names of the trace files and their readers and writers (the in-memory trace and its
#: checks: :mod:`specbatch.traces.format.trace`).
__all__ = [
    "BUNDLED_DIR", "META_FILE", "POSITIONS_GLOB", "REQUESTS_FILE", "bundled_traces", "read_meta",
    "read_trace",
    "resolve_trace", "validate_trace", "write_meta", "write_positions", "write_requests",
    "write_trace",
]

META_FILE = "meta.json"
REQUESTS_FILE = "requests.parquet"
POSITIONS_GLOB = "positions-*.parquet"
NODES_GLOB = "nodes-*.parquet"  # version 2 (tree) traces: traces/format/tree_files.py

#: Names that stand for a bundled trace: ``default`` is the real-model trace.
ALIASES = {"default": "smollm2"}
BUNDLED_DIR = Path(__file__).resolve().parents[1] / "data"


# --------------------------------------------------------------------------------------------
# writing (atomic per file: temporary file in the same directory, then os.replace)


def write_meta(directory: str | os.PathLike, meta: dict) -> None:
    """Write ``meta.json`` atomically (pretty-printed, keys in insertion order)."""
    write_json(Path(directory) / META_FILE, meta)




def write_requests(directory: str | os.PathLike, requests: dict) -> None:
    """Write ``requests.parquet`` atomically.  requests: the five request arrays # [R] each."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    n = len(requests["request_id"])
    arrival = requests.get("arrival")
    table = pa.table({
        "request_id": pa.array(np.asarray(requests["request_id"], dtype=np.int64)),
        "prompt_len": pa.array(np.asarray(requests["prompt_len"], dtype=np.int64)),
        "output_len": pa.array(np.asarray(requests["output_len"], dtype=np.int64)),
        "category": pa.array([str(c) for c in requests["category"]], type=pa.string()),
        "arrival": pa.array(np.full(n, np.nan) if arrival is None
                            else np.asarray(arrival, dtype=np.float64)),
    })
    atomic_write(Path(directory) / REQUESTS_FILE,
                 lambda tmp: pq.write_table(table, tmp, write_page_checksum=True))


def write_positions(
    directory: str | os.PathLike,
    chunk: int | str,
    request_id: np.ndarray,
    position: np.ndarray,
    columns: dict,
    float_dtype: str = "float64",
) -> Path:
    """Write one positions file ``positions-<chunk>.parquet`` atomically; returns its path.

    chunk:       int (zero-padded to 5 digits) or a string suffix; capture writes one file per
                 chunk of requests so a resumed run appends new files.
    request_id:  # [n] int   position: # [n] int (output position t)
    columns:     the seven LIST_COLUMNS # [n, K] each, and optionally ``proposed`` # [n] int
    float_dtype: "float64" (default, round trip is bit-identical) or "float32" (half the
                 size; the reader widens to float64)
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    require(float_dtype in ("float64", "float32"),
            f"float_dtype: expected 'float64' or 'float32', got {float_dtype!r}")
    name = (
        f"positions-{chunk:05d}.parquet" if isinstance(chunk, int) else f"positions-{chunk}.parquet"
    )
    k = np.asarray(columns["draft_token"]).shape[1]
    data: dict[str, pa.Array] = {
        "request_id": pa.array(np.asarray(request_id, dtype=np.int64)),
        "position": pa.array(np.asarray(position, dtype=np.int64)),
    }
    for col in LIST_COLUMNS:
        dtype = np.int32 if col == "draft_token" else np.dtype(float_dtype)
        flat = np.ascontiguousarray(columns[col], dtype=dtype).reshape(-1)
        if col == "q" and float_dtype == "float32":
            require(bool(np.all(flat > 0)), f"file {Path(directory) / name}: field q: expected "
                    "values > 0 after rounding to float32 storage, got 0 (q below 1.4e-45): "
                    "store float64")
        data[col] = pa.FixedSizeListArray.from_arrays(pa.array(flat), k)
    if columns.get(PROPOSED) is not None:
        data[PROPOSED] = pa.array(np.asarray(columns[PROPOSED], dtype=np.int32))
    table = pa.table(data)
    path = Path(directory) / name
    atomic_write(path, lambda tmp: pq.write_table(table, tmp, compression="zstd",
                                                  write_page_checksum=True))
    return path


def write_trace(trace: Trace, path: str | os.PathLike, float_dtype: str = "float64") -> None:
    """Write ``trace`` to directory ``path`` (created if needed), each file atomically.

    Writes ``requests.parquet``, ``positions-00000.parquet`` (then removes any other
    ``positions-*.parquet`` left from an earlier trace in that directory) and ``meta.json``
    last. With float64 storage, ``read_trace(path)`` returns bit-identical arrays.
    """
    require((trace.tree is None) == (trace.meta.get("version") != TREE_VERSION),
            f"trace {path}: expected draft trees exactly when meta.json says version "
            f"{TREE_VERSION}, got version {trace.meta.get('version')} "
            f"{'with' if trace.tree is not None else 'without'} trees")
    directory = Path(path)
    directory.mkdir(parents=True, exist_ok=True)
    write_requests(directory, trace.requests())
    position = np.arange(trace.n_rows, dtype=np.int64) - np.repeat(
        trace.offsets[:-1], trace.output_len
    )
    request_id = np.repeat(trace.request_id, trace.output_len)
    kept = [write_positions(directory, 0, request_id, position, trace.columns(), float_dtype)]
    if trace.tree is not None:
        from specbatch.traces.format.tree_files import write_tree

        kept.append(write_tree(directory, trace.tree, trace.request_id, trace.offsets,
                               float_dtype))
    for stale in (*directory.glob(POSITIONS_GLOB), *directory.glob(NODES_GLOB)):
        if stale not in kept:
            stale.unlink()
    write_meta(directory, trace.meta)


# --------------------------------------------------------------------------------------------
# reading and validating


def bundled_traces() -> list[str]:
    """Names of the bundled traces: the folders under ``traces/data/`` holding a meta.json
    (``profiles/`` holds latency profiles, not a trace)."""
    if not BUNDLED_DIR.is_dir():
        return []
    return sorted(p.name for p in BUNDLED_DIR.iterdir() if (p / META_FILE).is_file())


def resolve_trace(name_or_path: str | os.PathLike) -> str:
    """Map a bundled name under ``traces/data/`` (or an alias in :data:`ALIASES`, such as
    ``"default"``) or a path to a path.

    An existing directory wins over a bundled name of the same spelling.
    """
    text = str(name_or_path)
    if Path(text).is_dir():
        return text
    if "/" not in text and os.sep not in text:
        for name in (text, ALIASES.get(text)):
            if name is not None and name in bundled_traces():
                return str(BUNDLED_DIR / name)
    names = bundled_traces()
    names += [f"{alias} (= {name})" for alias, name in ALIASES.items()]
    raise SpecbatchError(f"trace {text}: expected a trace directory or a bundled trace name "
                         f"({', '.join(names) or 'none bundled yet'}), got neither")


def read_trace(path: str | os.PathLike) -> Trace:
    """Load a trace directory (``"default"`` and bundled names are resolved), fully validated.

    Files are read with pyarrow into contiguous numpy arrays (``[rows, K]`` from the flattened
    list values, no per-row Python loop); rows are ordered by request then position. The
    checked trace is kept in the cache folder and read back from there while the folder's
    files and the reader stay as they were (:mod:`specbatch.traces.format.trace_cache`: the
    same arrays, without pyarrow).
    """
    directory = Path(resolve_trace(path))
    at = trace_cache.entry(directory)
    trace = trace_cache.load(at)
    if trace is None:
        trace = validate_trace(directory)
        trace_cache.store(at, trace)
    return trace


def validate_trace(path: str | os.PathLike) -> Trace:
    """Check everything the reader relies on; return the loaded :class:`Trace`.

    Raises a one-line :class:`SpecbatchError` ``file F: field X: expected Y, got Z`` on: a
    missing file, wrong format name or version, a missing or mistyped column, nulls, NaN/inf,
    probabilities or Z outside [0, 1] (slack :data:`SLACK`), q = 0 on a drafted token, list
    length != K, positions of an unknown request, duplicate or missing positions, and
    output lengths that disagree with the position rows.
    """
    directory = Path(resolve_trace(path))
    meta = _read_meta(directory / META_FILE)
    k = int(meta["depth"])
    requests = _read_requests(directory / REQUESTS_FILE)
    files = sorted(directory.glob(POSITIONS_GLOB))
    require(bool(files), f"file {directory / 'positions-*.parquet'}: expected at least one "
            "positions file, got none")
    parts = [_read_positions(f, k) for f in files]
    where = str(directory / POSITIONS_GLOB)
    names = ["request_id", "position", *LIST_COLUMNS]
    with_proposed = [PROPOSED in p for p in parts]
    if any(with_proposed) and not all(with_proposed):
        odd = files[with_proposed.index(not with_proposed[0])]
        raise SpecbatchError(f"file {odd}: field {PROPOSED}: expected the column in every "
                             "positions file or in none, got a mix")
    names += [PROPOSED] if with_proposed[0] else []
    merged = {name: _concat([p[name] for p in parts]) for name in names}
    order = _order_rows(merged["request_id"], merged["position"], requests, where)
    in_order = bool(np.all(order == np.arange(order.size)))  # the usual case: no copy needed
    cols = {name: merged[name] if in_order else merged[name][order] for name in names[2:]}
    try:
        trace = make_trace(meta, requests, cols, path=str(directory))
    except SpecbatchError as exc:
        raise SpecbatchError(_row_to_file(str(exc), str(directory))) from None
    if meta["version"] == TREE_VERSION:
        from specbatch.traces.format.tree_files import read_nodes
        from specbatch.traces.format.tree_nodes import check_tree_meta

        shape = check_tree_meta(meta, str(directory / META_FILE))
        trace = dataclasses.replace(trace, tree=read_nodes(directory, trace, shape))
    return trace


def _concat(arrays: list[np.ndarray]) -> np.ndarray:
    return arrays[0] if len(arrays) == 1 else np.concatenate(arrays)


def _row_to_file(msg: str, directory: str) -> str:
    # make_trace names the trace directory; column errors concern the positions files and
    # request errors requests.parquet.
    head = f"file {directory}: field "
    if msg.startswith(head):
        field = msg[len(head):].split(":", 1)[0]
        if field in REQUEST_COLUMNS:
            return msg.replace(head, f"file {Path(directory) / REQUESTS_FILE}: field ", 1)
        if field in LIST_COLUMNS or field == PROPOSED:
            return msg.replace(head, f"file {Path(directory) / POSITIONS_GLOB}: field ", 1)
        return msg.replace(head, f"file {Path(directory) / META_FILE}: field ", 1)
    return msg


def read_meta(path: str | os.PathLike) -> dict:
    """The validated ``meta.json`` of trace ``path`` (a directory or a bundled name), without
    reading the Parquet files: what a caller that needs only K or the provenance reads."""
    return _read_meta(Path(resolve_trace(path)) / META_FILE)


def _read_meta(path: Path) -> dict:
    meta = load_json_file(path, "the trace's meta.json")
    require(isinstance(meta, dict), f"file {path}: expected a JSON object, got "
                                    f"{type(meta).__name__}")
    require("format" in meta, f"file {path}: field format: expected {FORMAT_NAME!r}, got no field")
    require("version" in meta, f"file {path}: field version: expected {FORMAT_VERSION}, got no "
                               "field")
    check_meta(meta, str(path))
    return meta


def _read_requests(path: Path) -> dict:
    from specbatch.traces.format.parquet_columns import column, numbers, read_table

    table = read_table(path)
    req = {
        "request_id": _int64_column(table, path, "request_id"),
        "prompt_len": _int64_column(table, path, "prompt_len"),
        "output_len": _int64_column(table, path, "output_len"),
        "category": np.asarray(column(table, path, "category", "string").to_pylist(), dtype=object),
        "arrival": numbers(column(table, path, "arrival", "float")).astype(np.float64),
    }
    check_requests(req, str(path))
    return req


def _read_positions(path: Path, k: int) -> dict:
    import pyarrow as pa

    from specbatch.traces.format.parquet_columns import (
        list_lengths,
        list_values,
        numbers,
        read_table,
    )

    table = read_table(path)
    out = {
        "request_id": _int64_column(table, path, "request_id"),
        "position": _int64_column(table, path, "position"),
    }
    n = table.num_rows
    for name in LIST_COLUMNS:
        require(name in table.column_names, f"file {path}: field {name}: expected a list column "
                f"of length K = {k}, got none (columns: {', '.join(table.column_names)})")
        col = table.column(name)
        arr = col.combine_chunks() if col.num_chunks else pa.array([], type=col.type)
        typ = arr.type
        is_list = (
            pa.types.is_fixed_size_list(typ) or pa.types.is_list(typ) or pa.types.is_large_list(typ)
        )
        require(is_list, f"file {path}: field {name}: expected a list column of length K = {k}, "
                f"got type {typ}")
        value_kind = pa.types.is_integer if name == "draft_token" else pa.types.is_floating
        require(value_kind(typ.value_type) and not pa.types.is_float16(typ.value_type),
                f"file {path}: field {name}: expected lists of "
                f"{'integers' if name == 'draft_token' else 'float64'}, got type {typ}")
        require(arr.null_count == 0, f"file {path}: field {name}: expected no null lists, "
                f"got {arr.null_count}")
        if pa.types.is_fixed_size_list(typ):
            require(typ.list_size == k, f"file {path}: field {name}: expected lists of length "
                    f"K = {k} (meta depth), got fixed length {typ.list_size}")
        else:
            lengths = list_lengths(arr)
            bad = np.flatnonzero(lengths != k)
            require(bad.size == 0, f"file {path}: field {name}: expected lists of length K = {k} "
                    f"(meta depth), got {int(lengths[bad[0]]) if bad.size else 0} at row "
                    f"{int(bad[0]) if bad.size else 0}")
        values = list_values(arr)
        require(values.null_count == 0, f"file {path}: field {name}: expected no null "
                f"entries, got {values.null_count}")
        flat = numbers(values)
        if name == "draft_token":  # range-checked by make_trace before narrowing to int32
            out[name] = as_int(flat, str(path), name).reshape(n, k)
        else:
            out[name] = np.ascontiguousarray(flat, dtype=np.float64).reshape(n, k)
    if PROPOSED in table.column_names:
        out[PROPOSED] = _int64_column(table, path, PROPOSED)
    return out


def _int64_column(table: pa.Table, path: Path, name: str) -> np.ndarray:
    """Integer column ``name`` as int64, refusing unsigned values that int64 cannot hold."""
    from specbatch.traces.format.parquet_columns import column, numbers

    return as_int(numbers(column(table, path, name, "integer")), str(path), name)


def _order_rows(request_id: np.ndarray, position: np.ndarray, req: dict, where: str) -> np.ndarray:
    """Permutation putting rows in (request order, position) order, with coverage checks.

    request_id, position: # [rows]; returns # [rows] int64
    """
    ids = req["request_id"]
    sorter = np.argsort(ids, kind="stable")
    sorted_ids = ids[sorter]
    loc = np.searchsorted(sorted_ids, request_id)
    loc_clip = np.minimum(loc, max(ids.size - 1, 0))
    known = (
        (loc < ids.size) & (sorted_ids[loc_clip] == request_id)
        if ids.size
        else np.zeros(request_id.size, bool)
    )
    if not known.all():
        bad = int(request_id[np.flatnonzero(~known)[0]])
        raise SpecbatchError(f"file {where}: field request_id: expected ids listed in "
                             f"requests.parquet, got {bad}")
    req_index = sorter[loc_clip] if ids.size else loc_clip
    order = np.lexsort((position, req_index))
    r_sorted, t_sorted = req_index[order], position[order]
    dup = (r_sorted[1:] == r_sorted[:-1]) & (t_sorted[1:] == t_sorted[:-1])
    if dup.any():
        i = int(np.flatnonzero(dup)[0])
        raise SpecbatchError(f"file {where}: field position: expected each (request, position) "
                             f"once, got request {int(ids[r_sorted[i]])} position "
                             f"{int(t_sorted[i])} twice")
    counts = np.bincount(req_index, minlength=ids.size)
    out_len = req["output_len"]
    bad = np.flatnonzero(counts != out_len)
    starts = np.repeat(np.cumsum(counts) - counts, counts)
    expected_t = np.arange(order.size) - starts
    gap = t_sorted != expected_t
    if gap.any():
        i = int(np.flatnonzero(gap)[0])
        raise SpecbatchError(f"file {where}: field position: expected positions 0..output_len-1 "
                             f"of request {int(ids[r_sorted[i]])}, got {int(t_sorted[i])} where "
                             f"{int(expected_t[i])} is missing")
    if bad.size:
        r = int(bad[0])
        raise SpecbatchError(f"file {where.rsplit('/', 1)[0]}/{REQUESTS_FILE}: field output_len: "
                             f"expected the {int(counts[r])} position rows of request "
                             f"{int(ids[r])}, "
                             f"got {int(out_len[r])}")
    return order
