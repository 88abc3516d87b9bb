"""The checks of a version-2 trace's nodes files (traces/format/tree_nodes.py,
traces/format/tree_files.py): every damaged structure, probability or replay number is a one-line
error naming the field."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from specbatch.cli import main  # noqa: E402
from specbatch.errors import SpecbatchError  # noqa: E402
from specbatch.traces.capture.chain import CaptureConfig, capture  # noqa: E402
from specbatch.traces.format.files import read_trace  # noqa: E402
from tests.traces.capture.test_chain import PROMPTS, _save_pair  # noqa: E402

NODES = "nodes-00000.parquet"


def capture_tree(tmp_path_factory, name: str, **tree) -> Path:
    """A two-prompt tree capture of the tiny in-process pair (5 positions each)."""
    root = tmp_path_factory.mktemp(name)
    pair = _save_pair(root)
    out = root / "trace"
    cfg = CaptureConfig(max_new_tokens=5, stop_at_eos=False, **tree)
    capture(*pair, PROMPTS[:2], out, cfg, progress=False)
    return out


@pytest.fixture(scope="module")
def captured(tmp_path_factory):
    return capture_tree(tmp_path_factory, "nodes", temperature=1.0, tree="2,2",
                        tree_sampling="topk")




def _edit(directory, column: str, index: int, value) -> None:
    """Set entry ``index`` of a scalar node column (or the first draw's list) in place."""
    path = directory / NODES
    table = pq.read_table(path)
    col = table.column(column).combine_chunks()
    if column in ("draws", "rrs_accept"):
        values = col.to_pylist()
        values[index] = [value] + values[index][1:]
        new = pa.array(values, type=col.type)
    else:
        values = col.to_numpy(zero_copy_only=False).copy()
        values[index] = value
        new = pa.array(values, type=col.type)
    table = table.set_column(table.column_names.index(column), column, new)
    pq.write_table(table, path)


def _error(directory) -> str:
    with pytest.raises(SpecbatchError) as exc:
        read_trace(directory)
    msg = str(exc.value)
    assert "\n" not in msg
    return msg


def test_the_captured_tree_trace_is_valid(captured):
    trace = read_trace(captured)
    assert trace.tree.n_rows == trace.n_rows == 10 and trace.tree.parent.size == 70


@pytest.mark.parametrize("column, index, value, field", [
    ("parent", 2, 2, "parent"),          # a node its own parent
    ("parent", 3, 0, "depth"),           # re-hung below the root: its depth no longer follows
    ("depth", 1, 2, "depth"),
    ("token", 0, 5, "token"),            # the root holds no token
    ("token", 1, 10**6, "token"),        # outside the vocabulary
    ("q", 1, 1.5, "q"),
    ("q", 1, 0.0, "q"),
    ("pt", 0, 0.5, "pt"),                # the root's pt is 1
    ("trv_accept", 2, 0.123, "trv_accept"),  # the first leaf: BV's weight of the first path
    ("gbv_h", 1, 0.5, "gbv_h"),
    ("rrs_accept", 0, 0.777, "rrs_accept"),  # min(1, pt) of the first top-k child
    ("draws", 0, 4, "draws"),            # node 4 is a grandchild of the root
])
def test_damaged_nodes_are_one_line_errors(trace_dir, column, index, value, field):
    _edit(trace_dir, column, index, value)
    msg = _error(trace_dir)
    assert f"field {field}:" in msg and "expected" in msg and "nodes-" in msg


def test_missing_rows_and_files(trace_dir):
    table = pq.read_table(trace_dir / NODES)
    pq.write_table(table.slice(0, table.num_rows - 1), trace_dir / NODES)
    assert "field node:" in _error(trace_dir)
    (trace_dir / NODES).unlink()
    assert "expected the nodes files" in _error(trace_dir)


def test_the_first_path_must_be_the_chain_row(trace_dir):
    table = pq.read_table(trace_dir / NODES)
    token = table.column("token").to_numpy().copy()
    order = [0, 4, 5, 6, 1, 2, 3]  # swap the root's two subtrees: a valid tree, another path
    token[:7] = token[:7][order]
    parent = table.column("parent").to_numpy()
    assert parent[:7].tolist() == [-1, 0, 1, 1, 0, 4, 4]
    table = table.set_column(table.column_names.index("token"), "token", pa.array(token))
    rrs = table.column("rrs_accept").to_pylist()
    trv = table.column("trv_accept").to_numpy().copy()
    pt = table.column("pt").to_numpy().copy()
    for name, arr in (("pt", pt), ("trv_accept", trv)):
        arr[:7] = arr[:7][order]
        table = table.set_column(table.column_names.index(name), name, pa.array(arr))
    rrs[0] = [min(1.0, pt[1]), min(1.0, pt[4] / (1 - pt[1]))]
    rrs[1:7] = [rrs[i] for i in order[1:]]
    table = table.set_column(table.column_names.index("rrs_accept"), "rrs_accept",
                             pa.array(rrs, type=pa.list_(pa.float64())))
    pq.write_table(table, trace_dir / NODES)
    msg = _error(trace_dir)
    assert "field token: expected the first root-to-leaf path to be the position row's " \
        "draft_token" in msg


def test_bad_tree_meta(trace_dir, capsys):
    meta = json.loads((trace_dir / "meta.json").read_text())
    meta["tree"]["nodes_per_position"] = 9
    (trace_dir / "meta.json").write_text(json.dumps(meta))
    assert "field tree.nodes_per_position: expected 7" in _error(trace_dir)
    capsys.readouterr()
    assert main(["trace", "validate", str(trace_dir)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("specbatch: error:")


def test_stats_of_a_row_match_its_arrays(captured):
    tree = read_trace(captured).tree
    stats = tree.stats(3)
    a = 3 * 7
    assert stats.parent == tuple(tree.parent[a:a + 7].tolist())
    assert stats.draws[0] == (1, 4) and stats.gbv_h == (None,) * 7
    np.testing.assert_array_equal(stats.trv_accept, tree.trv_accept[a:a + 7])
