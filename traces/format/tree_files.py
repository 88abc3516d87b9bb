"""The ``nodes-*.parquet`` files of a version-2 (tree) trace: write and read.

One row per (request, position, node); columns in ``traces/FORMAT.md`` ("Tree traces").
Capture writes one file per chunk of requests, next to the chunk's positions file, so
``--resume`` appends; the reader concatenates them, orders rows by (request order, position,
node) and hands them to :func:`~specbatch.traces.format.tree_nodes.make_tree_nodes` for the checks.
A position's node count is the shape's (branching trees) or at most ``nodes_per_position``
(tries of paths, whose paths may share prefixes).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from specbatch.errors import SpecbatchError, require
from specbatch.io import atomic_write
from specbatch.traces.format.parquet_columns import column, read_table
from specbatch.traces.format.tree_nodes import (
    NODE_FLOAT_COLUMNS,
    NODE_INT_COLUMNS,
    TreeNodes,
    make_tree_nodes,
    node_count,
)

NODES_GLOB = "nodes-*.parquet"


def write_nodes(directory: str | os.PathLike, chunk: int, request_id: np.ndarray,
                position: np.ndarray, cols: dict, float_dtype: str = "float64") -> Path:
    """Write ``nodes-<chunk>.parquet`` atomically; returns its path.

    request_id, position: # [N] per node;  cols: the node columns # [N] and ``draw_counts``
    # [N], ``draws`` # [M], ``rrs_accept`` # [M] (draws per node, concatenated).
    """
    offsets = np.zeros(len(cols["draw_counts"]) + 1, dtype=np.int32)
    np.cumsum(cols["draw_counts"], out=offsets[1:])
    data = {"request_id": pa.array(np.asarray(request_id, dtype=np.int64)),
            "position": pa.array(np.asarray(position, dtype=np.int64)),
            "node": pa.array(np.asarray(cols["node"], dtype=np.int32)),
            "parent": pa.array(np.asarray(cols["parent"], dtype=np.int32)),
            "depth": pa.array(np.asarray(cols["depth"], dtype=np.int8)),
            "token": pa.array(np.asarray(cols["token"], dtype=np.int32))}
    for name in NODE_FLOAT_COLUMNS:
        data[name] = pa.array(np.asarray(cols[name], dtype=float_dtype))
    data["draws"] = pa.ListArray.from_arrays(
        pa.array(offsets), pa.array(np.asarray(cols["draws"], dtype=np.int32)))
    data["rrs_accept"] = pa.ListArray.from_arrays(
        pa.array(offsets), pa.array(np.asarray(cols["rrs_accept"], dtype=np.float64)))
    path = Path(directory) / f"nodes-{chunk:05d}.parquet"
    table = pa.table(data)
    atomic_write(path, lambda tmp: pq.write_table(table, tmp, compression="zstd",
                                                  write_page_checksum=True))
    return path


def write_tree(directory: Path, tree: TreeNodes, request_id: np.ndarray, offsets: np.ndarray,
               float_dtype: str = "float64") -> Path:
    """Write a whole trace's trees as ``nodes-00000.parquet`` (rows in trace order)."""
    counts = np.diff(tree.node_offsets)
    row = np.repeat(np.arange(tree.n_rows), counts)
    req = np.searchsorted(offsets, row, side="right") - 1
    cols = tree.columns()
    cols["draw_counts"] = np.diff(cols.pop("draw_offsets"))
    return write_nodes(directory, 0, request_id[req], row - offsets[req], cols, float_dtype)


def _read_file(path: Path) -> dict:
    table = read_table(path)
    out = {name: column(table, path, name, "integer").to_numpy().astype(np.int64)
           for name in ("request_id", "position", *NODE_INT_COLUMNS)}
    for name in NODE_FLOAT_COLUMNS:
        out[name] = column(table, path, name, "float").to_numpy(
            zero_copy_only=False).astype(np.float64)
    lists = {name: column(table, path, name, "list") for name in ("draws", "rrs_accept")}
    lengths = [lists[n].value_lengths().to_numpy(zero_copy_only=False) for n in lists]
    require(np.array_equal(lengths[0], lengths[1]), f"file {path}: field rrs_accept: expected "
            "one number per draw (lists as long as draws), got other lengths")
    require(lists["draws"].flatten().null_count == 0 and lists["rrs_accept"].flatten().null_count
            == 0, f"file {path}: field draws: expected no null entries, got some")
    out["lists"] = lists
    return out


def read_nodes(directory: Path, trace, shape) -> TreeNodes:
    """The trees of ``trace``'s position rows from ``directory``'s nodes files, checked."""
    files = sorted(directory.glob(NODES_GLOB))
    where = str(directory / NODES_GLOB)
    require(bool(files), f"file {where}: expected the nodes files of a version 2 (tree) trace, "
            "got none")
    parts = [_read_file(f) for f in files]
    merged = {k: np.concatenate([p[k] for p in parts])
              for k in ("request_id", "position", *NODE_INT_COLUMNS, *NODE_FLOAT_COLUMNS)}
    n = node_count(shape)
    ids = trace.request_id
    sorter = np.argsort(ids, kind="stable")
    loc = np.minimum(np.searchsorted(ids[sorter], merged["request_id"]), max(ids.size - 1, 0))
    req = sorter[loc] if ids.size else loc
    known = (ids[req] == merged["request_id"]) if ids.size else np.zeros(loc.size, bool)
    pos, node = merged["position"], merged["node"]
    ok = known & (pos >= 0) & (pos < trace.output_len[req]) & (node >= 0) & (node < n)
    if not ok.all():
        i = int(np.flatnonzero(~ok)[0])
        raise SpecbatchError(f"file {where}: field position: expected (request, position, "
                             f"node) of a position row and a node id below {n}, got request "
                             f"{int(merged['request_id'][i])} position {int(pos[i])} node "
                             f"{int(node[i])}")
    key = (trace.offsets[req] + pos) * n + node
    order = np.argsort(key, kind="stable")
    node_offsets = _node_offsets(key[order], n, trace.n_rows, where)
    cols = {k: v[order] for k, v in merged.items() if k not in ("request_id", "position")}
    lists = {name: pa.concat_arrays([p["lists"][name].cast(pa.list_(
        pa.int64() if name == "draws" else pa.float64())) for p in parts]).take(pa.array(order))
        for name in ("draws", "rrs_accept")}
    lengths = lists["draws"].value_lengths().to_numpy(zero_copy_only=False)
    cols["draw_offsets"] = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    cols["draws"] = lists["draws"].flatten().to_numpy()
    cols["rrs_accept"] = lists["rrs_accept"].flatten().to_numpy(zero_copy_only=False)

    def locate(i: int) -> str:
        row = int(np.searchsorted(node_offsets, i, side="right")) - 1
        r = int(np.searchsorted(trace.offsets, row, side="right")) - 1
        return (f"at node {int(i) - int(node_offsets[row])} (request {int(ids[r])}, output "
                f"position {row - int(trace.offsets[r])})")

    from specbatch.traces.format.trace import _target_vocab

    tree = make_tree_nodes(shape, node_offsets, cols, where, locate, _target_vocab(trace.meta))
    first = tree.token[node_offsets[:-1, None] + np.arange(1, shape.depth + 1)[None, :]]
    bad = np.flatnonzero((first != trace.draft_token).any(axis=1))
    require(bad.size == 0, f"file {where}: field token: expected the first root-to-leaf path "
            f"to be the position row's draft_token, got {first[bad[0]].tolist() if bad.size else 0}"
            f" {locate(int(node_offsets[bad[0]])) if bad.size else ''}")
    return tree


def _node_offsets(keys: np.ndarray, n: int, rows: int, where: str) -> np.ndarray:
    """CSR offsets of each position row's nodes from sorted keys ``row·n + node``: every row
    holds nodes 0..c−1 once each (c ≥ 1; the shape's checks bound c)."""
    row, node = np.divmod(keys, n)
    counts = np.bincount(row, minlength=rows)
    offsets = np.zeros(rows + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    local = np.arange(keys.size) - np.repeat(offsets[:-1], counts)
    require(bool((counts >= 1).all()) and np.array_equal(node, local), f"file {where}: field "
            f"node: expected every position's nodes 0..c-1 exactly once (c at most {n}), got "
            f"{keys.size} rows with duplicates or gaps")
    return offsets
