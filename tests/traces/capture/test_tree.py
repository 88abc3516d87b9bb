"""Tree capture (``capture --tree SHAPE``, traces/capture/tree.py): the recorded trees and their
replay numbers equal theory.trees.stats computed exactly on rows recomputed from scratch, the
version-2 trace validates, reloads bit-identically and resumes, and bad options are one-line
errors."""

from __future__ import annotations

import json
from fractions import Fraction

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from specbatch.cli import main  # noqa: E402
from specbatch.errors import SpecbatchError  # noqa: E402
from specbatch.theory.exact.small_models import ModelPair, TableModel  # noqa: E402
from specbatch.theory.trees.stats import tau_law_from_stats, tree_stats  # noqa: E402
from specbatch.theory.trees.tree_shapes import Node, parse_shape  # noqa: E402
from specbatch.theory.verify.torch_path_stats import probs_at  # noqa: E402
from specbatch.traces.capture.chain import CaptureConfig, capture, encode_prompt  # noqa: E402
from specbatch.traces.capture.positions import generate_reference, request_uniforms  # noqa: E402
from specbatch.traces.capture.tree import capture_tree_positions  # noqa: E402
from specbatch.traces.format.files import read_trace, write_trace  # noqa: E402
from specbatch.traces.format.tree_nodes import node_count  # noqa: E402
from tests.traces.capture.test_chain import PROMPTS, _save_pair  # noqa: E402


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    return _save_pair(tmp_path_factory.mktemp("tree-pair"))


@pytest.fixture(scope="module")
def loaded(pair):
    from specbatch.traces.capture.chain import load_pair

    return load_pair(*pair)


def _root(parent: list, token: list) -> Node:
    """The pre-order tree of one position as theory Nodes (each child drawn once)."""
    kids: list = [[] for _ in parent]
    for u in range(len(parent) - 1, 0, -1):
        kids[parent[u]].insert(0, u)

    def node(u: int) -> Node:
        children = tuple(node(c) for c in kids[u])
        return Node(token[u], children, tuple(range(len(children))))
    return node(0)


def _exact_rows(model, context: list, paths: list, temperature: float) -> dict:
    """``{path: row}`` of exact Fractions from one full forward pass per path (no cache)."""
    out = {}
    with torch.inference_mode():
        for path in paths:
            logits = model(input_ids=torch.tensor([context + list(path)])).logits[0, -1]
            out[path] = tuple(Fraction(float(v)) for v in probs_at(logits, temperature))
    return out


@pytest.mark.parametrize("sampling", ["topk", "iid"])
def test_replay_numbers_equal_exact_tree_stats_on_rows_recomputed_from_scratch(loaded, sampling):
    tok, draft, target = loaded
    shape = parse_shape("2,2", sampling)
    cfg = CaptureConfig(max_new_tokens=6, temperature=1.0, batch_size=4, stop_at_eos=False,
                        tree="2,2", tree_sampling=sampling, depth=2)
    prompt = encode_prompt(tok, "def add(a, b):", 64)
    u_ref, _ = request_uniforms(cfg.seed, 0, cfg.max_new_tokens, cfg.depth)
    with torch.inference_mode():
        ref = generate_reference(target, prompt, u_ref, cfg, tok.eos_token_id)
    res = capture_tree_positions(draft, target, prompt, 0, cfg, ref, shape)
    nodes, n = res["nodes"], node_count(shape)
    assert len(nodes["node"]) == n * len(res["y"]) == n * 6
    draws = np.split(nodes["draws"], np.cumsum(nodes["draw_counts"])[:-1])
    accepts = np.split(nodes["rrs_accept"], np.cumsum(nodes["draw_counts"])[:-1])
    for t in (0, 5):
        a = t * n
        parent, token = nodes["parent"][a:a + n].tolist(), nodes["token"][a:a + n].tolist()
        path = [()] * n
        for u in range(1, n):
            path[u] = path[parent[u]] + (token[u],)
        context = prompt + res["y"][:t].tolist()
        rows_t = _exact_rows(target, context, path, 1.0)
        rows_d = _exact_rows(draft, context, [s for s in path if len(s) < shape.depth], 1.0)
        exact = ModelPair(len(rows_t[()]), TableModel(rows_d, shape.depth),
                          TableModel(rows_t, shape.depth), exact=True)
        want = tree_stats(exact, _root(parent, token), shape)
        assert want.parent == tuple(parent) and want.token == tuple(token)
        np.testing.assert_allclose(nodes["q"][a:a + n], [float(v) for v in want.q], atol=1e-5)
        np.testing.assert_allclose(nodes["pt"][a:a + n], [float(v) for v in want.pt], atol=1e-5)
        np.testing.assert_allclose(nodes["trv_accept"][a:a + n],
                                   [float(v) for v in want.trv_accept], atol=1e-5)
        for u in range(n):
            assert tuple(draws[a + u]) == want.draws[u]
            np.testing.assert_allclose(accepts[a + u], [float(v) for v in want.rrs_accept[u]],
                                       atol=1e-5)
        if sampling == "topk":  # the children are the draft's two most probable tokens
            for u in range(n):
                if len(path[u]) < shape.depth:
                    row = np.array([float(v) for v in rows_d[path[u]]])
                    kids = [token[c] for c in draws[a + u]]
                    assert kids == np.argsort(-row, kind="stable")[:2].tolist()
    # the chain columns are the first root-to-leaf path
    first = nodes["token"].reshape(-1, n)[:, 1:shape.depth + 1]
    np.testing.assert_array_equal(res["draft_token"], first)
    if sampling == "topk":
        assert (res["q"] == 1).all()  # the argmax chain, recorded as a greedy draft
    else:
        np.testing.assert_allclose(res["q"], nodes["q"].reshape(-1, n)[:, 1:3], atol=1e-12)


@pytest.fixture(scope="module")
def tree_trace(pair, tmp_path_factory):
    out = tmp_path_factory.mktemp("tree") / "trace"
    cfg = CaptureConfig(max_new_tokens=6, temperature=1.0, batch_size=4, chunk_requests=2,
                        tree="2,1", tree_sampling="iid")
    capture(*pair, PROMPTS[:3], out, cfg, progress=False)
    return out


def test_tree_trace_validates_reloads_bit_identically_and_reports_per_depth(tree_trace,
                                                                             tmp_path, capsys):
    trace = read_trace(tree_trace)
    meta = json.loads((tree_trace / "meta.json").read_text())
    assert meta["version"] == 2 and meta["depth"] == 2 == trace.K
    assert meta["tree"] == {"shape": "2,1", "sampling": "iid",
                            "verifiers": ["specinfer", "traversal"], "nodes_per_position": 5}
    assert meta["draft_sample_method"] == "probabilistic"
    assert sorted(p.name for p in tree_trace.glob("nodes-*.parquet")) == \
        ["nodes-00000.parquet", "nodes-00001.parquet"]
    assert trace.tree.n_rows == trace.n_rows and trace.tree.parent.size == 5 * trace.n_rows
    write_trace(trace, tmp_path / "copy")
    again = read_trace(tmp_path / "copy")
    for name, arr in trace.tree.columns().items():
        np.testing.assert_array_equal(getattr(again.tree, name, None) if name != "node"
                                      else again.tree.columns()["node"], arr)
    np.testing.assert_array_equal(again.draft_token, trace.draft_token)
    half = trace.subset(np.array([2, 0]))
    assert half.tree.n_rows == half.n_rows
    np.testing.assert_array_equal(half.tree.token[:5], trace.tree.token[
        5 * int(trace.offsets[2]):5 * int(trace.offsets[2]) + 5])
    assert main(["trace", "validate", str(tree_trace)]) == 0
    capsys.readouterr()
    assert main(["trace", "info", str(tree_trace), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)["tree"]
    for name in ("specinfer", "traversal"):
        law = np.array([[float(v) for v in tau_law_from_stats(trace.tree.stats(r), name)]
                        for r in range(trace.n_rows)])
        np.testing.assert_allclose(info["verifiers"][name]["reach"],
                                   [law[:, 1:].sum(1).mean(), law[:, 2].mean()], atol=1e-12)
        reach = info["verifiers"][name]["reach"]
        assert 1 >= reach[0] >= reach[1] >= 0
        assert info["verifiers"][name]["mean_accepted"] == pytest.approx(sum(reach))


def test_a_v1_chain_trace_loads_unchanged():
    trace = read_trace("tiny")
    assert trace.meta["version"] == 1 and trace.tree is None and "tree" not in trace.meta


def test_top_k_tree_verifiers_reach_the_node_mass_ceiling(pair, tmp_path, capsys):
    out = tmp_path / "topk"
    cfg = CaptureConfig(max_new_tokens=5, temperature=0.8, tree="3,2", tree_sampling="topk")
    capture(*pair, PROMPTS[:1], out, cfg, progress=False)
    assert json.loads((out / "meta.json").read_text())["draft_sample_method"] == "greedy"
    capsys.readouterr()
    assert main(["trace", "info", str(out), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)["tree"]
    for name in ("specinfer", "traversal"):  # docs/trees.md: optimal on top-k trees
        assert info["verifiers"][name]["mean_accepted"] == pytest.approx(
            info["node_mass_bound"], abs=1e-9)


def test_resume_of_a_tree_capture_equals_an_uninterrupted_run(pair, tree_trace, tmp_path):
    out = tmp_path / "resumed"
    cfg = CaptureConfig(max_new_tokens=6, temperature=1.0, batch_size=4, chunk_requests=2,
                        tree="2,1", tree_sampling="iid")
    capture(*pair, PROMPTS[:3], out, cfg, progress=False, stop_after_chunks=1)
    assert read_trace(out).status == "partial"
    capture(*pair, PROMPTS[:3], out, cfg, progress=False, resume=True)
    a, b = read_trace(out), read_trace(tree_trace)
    assert a.status == "complete"
    for name, arr in b.tree.columns().items():
        np.testing.assert_array_equal(a.tree.columns()[name], arr)


@pytest.mark.parametrize("change, message", [
    ({"tree": "2x2"}, "expected --sampling iid"),  # K i.i.d. paths, never top-k
    ({"tree": "2,2", "tree_sampling": "distinct"}, "expected children per depth"),
    ({"tree": "2,2", "temperature": 0.0}, "--temperature > 0"),
    ({"tree": "2,2", "draft_sample_method": "greedy"}, "--draft-sample greedy"),
])
def test_bad_tree_options_are_one_line_errors(pair, tmp_path, change, message):
    cfg = CaptureConfig(**{"max_new_tokens": 4, **change})
    with pytest.raises(SpecbatchError, match=message.replace("+", r"\+")):
        capture(*pair, PROMPTS[:1], tmp_path / "x", cfg, progress=False)
    assert not (tmp_path / "x").exists()


def test_tree_with_the_ngram_drafter_is_refused(pair, tmp_path):
    with pytest.raises(SpecbatchError, match="--tree: expected a draft model"):
        capture("ngram", pair[1], PROMPTS[:1], tmp_path / "x",
                CaptureConfig(max_new_tokens=4, tree="2"), progress=False)


def test_the_bundled_tree_trace_is_the_greedy_drop2_trace_grown_into_trees():
    """smollm2-drop2-tree: top-k trees of the drop-2 draft on the prompts, seed and reference
    outputs of smollm2-drop2-greedy; the first path of a top-k tree is the draft's argmax chain,
    so its tokens and target probabilities are the greedy trace's first three (up to the float
    round-off of other batch shapes, which may flip a near-tie argmax)."""
    tree = read_trace("smollm2-drop2-tree")
    greedy = read_trace("smollm2-drop2-greedy")
    assert tree.meta["tree"]["shape"] == "2,2,1" and tree.meta["tree"]["sampling"] == "topk"
    assert tree.K == 3 and tree.temperature == 1.0 and tree.n_requests >= 4
    n = min(tree.n_requests, greedy.n_requests)
    a, b = tree.subset(np.arange(n)), greedy.subset(np.arange(n))
    np.testing.assert_array_equal(a.output_len, b.output_len)
    same = (a.draft_token == b.draft_token[:, :3]).all(axis=1)
    assert same.mean() > 0.99
    np.testing.assert_allclose(a.pt[same], b.pt[same, :3], atol=1e-4)
    np.testing.assert_allclose(a.draft_conf[same], b.draft_conf[same, :3], atol=1e-4)


def test_the_bundled_iid_tree_trace_shares_the_drop2_reference_outputs():
    """smollm2-drop2-tree-iid: i.i.d. trees (SpecInfer's expansion) on the first requests of
    smollm2-drop2; the reference outputs come from the same uniforms, so the lengths agree and
    the first path is a sample of the draft (its q is the first child's q)."""
    tree = read_trace("smollm2-drop2-tree-iid")
    assert tree.meta["tree"]["sampling"] == "iid" and tree.meta["draft_sample_method"] == \
        "probabilistic"
    chain = read_trace("smollm2-drop2").subset(np.arange(tree.n_requests))
    np.testing.assert_array_equal(tree.output_len, chain.output_len)
    n = tree.meta["tree"]["nodes_per_position"]
    first = tree.tree.q.reshape(tree.n_rows, n)[:, 1:4]
    np.testing.assert_allclose(tree.q, first, rtol=1e-6)
