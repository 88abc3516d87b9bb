"""``specbatch capture --tree SHAPE --sampling``: a version-2 trace on one JSON line, and a bad
shape or option is one ``specbatch: error:`` line with exit code 2, nothing written."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from specbatch.cli import main  # noqa: E402
from tests.cli.oneline import assert_one_line_error, run_main  # noqa: E402
from tests.traces.capture.test_chain import _save_pair  # noqa: E402


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    return _save_pair(tmp_path_factory.mktemp("cli-tree"))


def _argv(pair, out, *extra):
    return ["capture", "--draft", pair[0], "--target", pair[1], "--prompts", "default:2",
            "--out", str(out), "--max-new-tokens", "4", "--no-progress", *extra]


def test_capture_tree_prints_the_tree_and_its_depth(pair, tmp_path, capsys):
    code, out, err = run_main(capsys, _argv(pair, tmp_path / "t", "--tree", "2,1", "--sampling",
                                        "iid", "--json"))
    assert code == 0, err
    result = json.loads(out)
    assert result["depth"] == 2 and result["tree"]["shape"] == "2,1"
    assert result["tree"]["sampling"] == "iid" and result["status"] == "complete"
    assert main(["trace", "validate", str(tmp_path / "t")]) == 0


def test_capture_a_trie_of_paths_defaults_to_iid_sampling(pair, tmp_path, capsys):
    code, out, err = run_main(capsys, _argv(pair, tmp_path / "t", "--tree", "3x2", "--json"))
    assert code == 0, err
    result = json.loads(out)
    assert result["depth"] == 2 and result["tree"] == {
        "shape": "3x2", "sampling": "iid", "verifiers": ["specinfer", "traversal", "gbv"],
        "nodes_per_position": 7}
    assert main(["trace", "validate", str(tmp_path / "t")]) == 0


@pytest.mark.parametrize("extra, needle", [
    (["--tree", "2,x"], "--tree: expected children per depth"),
    (["--tree", "3x2", "--sampling", "topk"], "expected --sampling iid"),
    (["--tree", "2", "--temperature", "0"], "--temperature > 0"),
    (["--tree", "2", "--draft-sample", "greedy"], "--draft-sample greedy"),
])
def test_bad_tree_options_are_one_line_errors(pair, tmp_path, capsys, extra, needle):
    code, out, err = run_main(capsys, _argv(pair, tmp_path / "t", *extra))
    assert_one_line_error(code, err, needle)
    assert out == "" and not (tmp_path / "t").exists()
