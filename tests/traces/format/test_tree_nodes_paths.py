"""The checks of a trie trace's nodes files (``capture --tree KxL``; traces/format/tree_trie.py and
traces/format/tree_nodes.py): a corrupted trie row (pre-order, leaf depth, sibling tokens, draws per
path, GBV's path, the replay numbers q and pt determine) is a one-line error naming the nodes
files and the field."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from specbatch.cli import main  # noqa: E402
from specbatch.errors import SpecbatchError  # noqa: E402
from specbatch.traces.format.files import read_trace  # noqa: E402
from tests.traces.format.test_tree_nodes import capture_tree  # noqa: E402

NODES = "nodes-00000.parquet"


@pytest.fixture(scope="module")
def captured(tmp_path_factory):
    return capture_tree(tmp_path_factory, "trie-nodes", temperature=0.5, tree="3x2",
                        tree_sampling="iid")




def _table(directory) -> pa.Table:
    return pq.read_table(directory / NODES)


def _edit(directory, changes: dict) -> None:
    """``{column: {row: value}}`` set in place (list columns take whole lists)."""
    table = _table(directory)
    for column, rows in changes.items():
        col = table.column(column).combine_chunks()
        values = col.to_pylist() if column in ("draws", "rrs_accept") else \
            col.to_numpy(zero_copy_only=False).copy()
        for row, value in rows.items():
            values[row] = value
        table = table.set_column(table.column_names.index(column), column,
                                 pa.array(values, type=col.type))
    pq.write_table(table, directory / NODES)


def _error(directory) -> str:
    with pytest.raises(SpecbatchError) as exc:
        read_trace(directory)
    msg = str(exc.value)
    assert "\n" not in msg and "nodes-" in msg
    return msg


def _rows(directory) -> list:
    """Each position's flat row range [a, b) in the nodes file (one file, position order)."""
    node = _table(directory).column("node").to_numpy()
    starts = np.flatnonzero(node == 0)
    return list(zip(starts.tolist(), [*starts[1:].tolist(), node.size]))


def _shared(directory) -> tuple:
    """A position whose root draws a child twice: (a, b, its root draws)."""
    draws = _table(directory).column("draws").to_pylist()
    for a, b in _rows(directory):
        if len(set(draws[a])) < 3:
            return a, b, draws[a]
    raise AssertionError("no position with a shared prefix")


def test_the_captured_trie_is_valid_with_varying_node_counts(captured):
    trace = read_trace(captured)
    counts = np.diff(trace.tree.node_offsets)
    assert trace.n_rows == 10 and counts.max() <= 7 and counts.min() < 7
    stats = trace.tree.stats(0)
    assert len(stats.draws[0]) == 3 and sum(h is not None for h in stats.gbv_h) == 3


def test_parent_out_of_pre_order(trace_dir):
    t = _table(trace_dir)
    parent, depth = t.column("parent").to_numpy(), t.column("depth").to_numpy()
    for a, b in _rows(trace_dir):  # a leaf that is its parent's second child, re-hung
        second = [u for u in range(a + 2, b) if depth[u] == 2 and depth[u - 1] == 2
                  and parent[u] == parent[u - 1] and parent[u] > 1]
        if second:
            _edit(trace_dir, {"parent": {second[0]: 1}})  # below node 1, out of pre-order
            break
    else:
        raise AssertionError("no node with two leaf children below the root's second child")
    assert "field parent: expected pre-order" in _error(trace_dir)


def test_a_path_shorter_than_l(trace_dir):
    a, _ = _rows(trace_dir)[0]
    _edit(trace_dir, {"parent": {a + 2: 0}, "depth": {a + 2: 1}})  # node 1 loses its child
    assert "field depth: expected leaves exactly at depth 2" in _error(trace_dir)


def test_repeated_sibling_tokens(trace_dir):
    a, _ = _rows(trace_dir)[0]
    token = _table(trace_dir).column("token").to_numpy()
    _edit(trace_dir, {"token": {a + 3: int(token[a + 1])}})
    assert "field token: expected distinct tokens among a node's children" in _error(trace_dir)


def test_draws_that_do_not_count_the_paths(trace_dir):
    a, _, root_draws = _shared(trace_dir)
    twice = next(c for c in root_draws if root_draws.count(c) == 2)
    once = next(c for c in root_draws if root_draws.count(c) == 1)
    _edit(trace_dir, {"draws": {a: [once if c == twice else twice for c in root_draws]}})
    assert "field draws: expected one draw per path through the node" in _error(trace_dir)


def test_draws_out_of_path_order(trace_dir):
    a, _ = _rows(trace_dir)[0]
    _edit(trace_dir, {"draws": {a: [3, 1, 5]}})
    assert "field draws: expected children first drawn in node order" in _error(trace_dir)


def test_gbv_threshold_at_the_root_and_off_its_path(trace_dir):
    a, _ = _rows(trace_dir)[0]
    _edit(trace_dir, {"gbv_h": {a: 0.5}})
    assert "field gbv_h: expected 1 at the root" in _error(trace_dir)


def test_gbv_values_off_the_path(trace_dir):
    a, b = _rows(trace_dir)[0]
    gbv = _table(trace_dir).column("gbv_h").to_numpy()
    parent = _table(trace_dir).column("parent").to_numpy()
    off_leaf = next(u for u in range(a + 1, b) if np.isnan(gbv[u]) and np.isnan(gbv[a + parent[u]]))
    _edit(trace_dir, {"gbv_h": {off_leaf: 0.25}})
    assert "field gbv_h: expected NaN off GBV's path" in _error(trace_dir)


def test_gbv_path_not_through_the_best_child(trace_dir):
    a, b = _rows(trace_dir)[0]
    t = _table(trace_dir)
    gbv, parent = t.column("gbv_h").to_numpy().copy(), t.column("parent").to_numpy()
    ratio = t.column("pt").to_numpy() / t.column("q").to_numpy()
    kids = [u for u in range(a + 1, b) if parent[u] == 0]
    best = next(u for u in kids if np.isfinite(gbv[u]))
    other = min((u for u in kids if u != best), key=lambda u: ratio[u])
    assert ratio[other] < ratio[best]
    moved = {best: np.nan, best + 1: np.nan, other: 0.5, other + 1: 0.5}  # leaves follow
    _edit(trace_dir, {"gbv_h": moved})
    assert "field gbv_h: expected GBV's path through the child of highest pt/q" in \
        _error(trace_dir)


@pytest.mark.parametrize("column, offset, value, message", [
    ("rrs_accept", 0, [0.777, 0.0, 0.0], "field rrs_accept: expected"),  # min(1, pt/q)
    ("trv_accept", 2, 0.123, "field trv_accept: expected block verification's weight"),
    ("q", 1, 0.0, "field q: expected q > 0"),
    ("gbv_h", 1, 1.5, "field gbv_h: expected NaN or values in [0, 1]"),
])
def test_replay_numbers_and_ranges(trace_dir, column, offset, value, message):
    a, _ = _rows(trace_dir)[0]
    _edit(trace_dir, {column: {a + offset: value}})
    assert message in _error(trace_dir)


def test_a_missing_node_row(trace_dir):
    table = _table(trace_dir)
    a, b = _rows(trace_dir)[0]
    pq.write_table(pa.concat_tables([table.slice(0, b - 1), table.slice(b)]), trace_dir / NODES)
    assert "field depth: expected leaves exactly at depth 2" in _error(trace_dir)


@pytest.mark.parametrize("key, value, message", [
    ("nodes_per_position", 6, "field tree.nodes_per_position: expected 7"),
    ("sampling", "topk", "field tree.sampling: expected 'iid' for a trie"),
    ("verifiers", ["specinfer", "traversal"], "field tree.verifiers: expected ['specinfer', "
     "'traversal', 'gbv']"),
])
def test_bad_trie_meta(trace_dir, capsys, key, value, message):
    meta = json.loads((trace_dir / "meta.json").read_text())
    meta["tree"][key] = value
    (trace_dir / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(SpecbatchError, match=None) as exc:
        read_trace(trace_dir)
    assert message in str(exc.value)
    capsys.readouterr()
    assert main(["trace", "validate", str(trace_dir)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("specbatch: error:")
