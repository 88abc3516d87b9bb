"""Trie capture (``capture --tree KxL``, traces/capture/tree.py): K i.i.d. draft paths of L
tokens per position, drawn with the request's own uniforms and merged into a trie; every
node's q, pt and replay numbers (GBV's included) equal theory.trees.stats computed exactly on
rows recomputed from scratch; the trace validates, reloads bit-identically, subsets, and
``trace info`` reports GBV beside SpecInfer and Traversal."""

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
from specbatch.theory.trees.tree_shapes import parse_shape, trie  # noqa: E402
from specbatch.theory.verify.torch_path_stats import probs_at  # noqa: E402
from specbatch.traces.capture.chain import CaptureConfig, capture, encode_prompt  # noqa: E402
from specbatch.traces.capture.positions import generate_reference, request_uniforms  # noqa: E402
from specbatch.traces.capture.tree import (  # noqa: E402
    capture_tree_positions,
    distinct_paths,
    tree_uniforms,
)
from specbatch.traces.format.files import read_trace, write_trace  # noqa: E402
from tests.traces.capture.test_chain import PROMPTS, _save_pair  # noqa: E402

#: A low temperature makes the tiny draft peaked, so paths often share prefixes.
T = 0.5


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    return _save_pair(tmp_path_factory.mktemp("trie-pair"))


@pytest.fixture(scope="module")
def loaded(pair):
    from specbatch.traces.capture.chain import load_pair

    return load_pair(*pair)


def _exact_rows(model, context: list, paths, temperature: float) -> dict:
    """``{path: row}`` of exact Fractions from one full forward pass per path (no cache)."""
    out = {}
    with torch.inference_mode():
        for path in paths:
            logits = model(input_ids=torch.tensor([context + list(path)])).logits[0, -1]
            out[path] = tuple(Fraction(v) for v in probs_at(logits, temperature).tolist())
    return out


def _paths_of(parent: list, token: list, draws: list, k: int) -> list:
    """The K token paths of a stored trie, read back through the draws in path order."""
    used = [0] * len(parent)
    paths = []
    for _ in range(k):
        u, path = 0, []
        while draws[u]:  # the paths through a node continue in path order
            used[u] += 1
            u = draws[u][used[u] - 1]
            path.append(token[u])
        paths.append(tuple(path))
    return paths


def test_distinct_paths_keeps_one_representative_per_prefix():
    prefixes = np.array([[[1, 2], [1, 2], [3, 4]], [[5, 5], [6, 6], [5, 5]]])
    keep, where = distinct_paths(prefixes)
    assert keep.tolist() == [0, 2, 3, 4]
    assert where.tolist() == [[0, 0, 1], [2, 3, 2]]


def test_trie_replay_numbers_equal_exact_tree_stats_on_rows_recomputed_from_scratch(loaded):
    tok, draft, target = loaded
    shape = parse_shape("3x2")
    cfg = CaptureConfig(max_new_tokens=8, temperature=T, batch_size=3, stop_at_eos=False,
                        tree="3x2", tree_sampling="iid", depth=2)
    prompt = encode_prompt(tok, "def add(a, b):", 64)
    u_ref, _ = request_uniforms(cfg.seed, 0, cfg.max_new_tokens, cfg.depth)
    with torch.inference_mode():
        ref = generate_reference(target, prompt, u_ref, cfg, tok.eos_token_id)
    res = capture_tree_positions(draft, target, prompt, 0, cfg, ref, shape)
    nodes = res["nodes"]
    starts = np.flatnonzero(nodes["node"] == 0)
    ends = np.r_[starts[1:], nodes["node"].size]
    counts = ends - starts
    assert starts.size == len(res["y"]) == 8
    assert (counts >= 3).all() and (counts <= 7).all() and counts.min() < 7  # shared prefixes
    split = np.cumsum(nodes["draw_counts"])[:-1]
    draws, accepts = np.split(nodes["draws"], split), np.split(nodes["rrs_accept"], split)
    uniforms = tree_uniforms(cfg.seed, 0, cfg.max_new_tokens, 6)
    for t in sorted({0, int(np.argmin(counts)), 7}):  # one with shared prefixes
        a, n = int(starts[t]), int(counts[t])
        parent, token = nodes["parent"][a:a + n].tolist(), nodes["token"][a:a + n].tolist()
        node_draws = [tuple(int(x) for x in draws[a + u]) for u in range(n)]
        paths = _paths_of(parent, token, node_draws, 3)
        context = prompt + res["y"][:t].tolist()
        prefixes = {p[:d] for p in paths for d in range(3)}
        rows_t = _exact_rows(target, context, prefixes, T)
        rows_d = _exact_rows(draft, context, [s for s in prefixes if len(s) < 2], T)
        for j, path in enumerate(paths):  # inverse-CDF draws with uniform k·L + d
            for d in range(2):
                cdf = np.cumsum([float(v) for v in rows_d[path[:d]]])
                assert path[d] == np.searchsorted(cdf / cdf[-1], uniforms[t, 2 * j + d],
                                                  side="right")
        exact = ModelPair(len(rows_t[()]), TableModel(rows_d, 2), TableModel(rows_t, 2),
                          exact=True)
        want = tree_stats(exact, trie(list(paths), 2), shape)
        assert want.parent == tuple(parent) and want.token == tuple(token)
        assert want.draws == tuple(node_draws) and len(want.draws[0]) == 3
        for name in ("q", "pt", "trv_accept"):
            np.testing.assert_allclose(nodes[name][a:a + n],
                                       [float(v) for v in getattr(want, name)], atol=1e-5)
        gbv = [np.nan if h is None else float(h) for h in want.gbv_h]
        np.testing.assert_allclose(nodes["gbv_h"][a:a + n], gbv, atol=1e-5)
        assert np.isfinite(nodes["gbv_h"][a:a + n]).sum() == 3  # root + one node per depth
        for u in range(n):
            np.testing.assert_allclose(accepts[a + u], [float(v) for v in want.rrs_accept[u]],
                                       atol=1e-5)
        if t == 0:
            first = paths[0]
    # the chain columns are path 0, a sample of the draft
    np.testing.assert_array_equal(res["draft_token"][0], first)
    first_path = np.stack([nodes["token"][starts + 1], nodes["token"][starts + 2]], axis=1)
    np.testing.assert_array_equal(res["draft_token"], first_path)
    np.testing.assert_allclose(res["q"], np.stack([nodes["q"][starts + 1],
                                                   nodes["q"][starts + 2]], axis=1), atol=1e-12)


@pytest.fixture(scope="module")
def trie_trace(pair, tmp_path_factory):
    out = tmp_path_factory.mktemp("trie") / "trace"
    cfg = CaptureConfig(max_new_tokens=6, temperature=T, batch_size=4, chunk_requests=2,
                        tree="4x2", tree_sampling="iid")
    capture(*pair, PROMPTS[:3], out, cfg, progress=False)
    return out


def test_trie_trace_validates_reloads_bit_identically_and_reports_gbv(trie_trace, tmp_path,
                                                                      capsys):
    trace = read_trace(trie_trace)
    meta = json.loads((trie_trace / "meta.json").read_text())
    assert meta["version"] == 2 and meta["depth"] == 2 == trace.K
    assert meta["tree"] == {"shape": "4x2", "sampling": "iid",
                            "verifiers": ["specinfer", "traversal", "gbv"],
                            "nodes_per_position": 9}
    assert meta["draft_sample_method"] == "probabilistic"
    counts = np.diff(trace.tree.node_offsets)
    assert trace.tree.n_rows == trace.n_rows and (counts <= 9).all() and (counts >= 3).all()
    write_trace(trace, tmp_path / "copy")
    again = read_trace(tmp_path / "copy")
    np.testing.assert_array_equal(again.tree.node_offsets, trace.tree.node_offsets)
    for name, arr in trace.tree.columns().items():
        np.testing.assert_array_equal(again.tree.columns()[name], arr)
    half = trace.subset(np.array([2, 0]))
    a, b = int(trace.offsets[2]), int(trace.offsets[3])
    lo, hi = int(trace.tree.node_offsets[a]), int(trace.tree.node_offsets[b])
    np.testing.assert_array_equal(half.tree.token[:hi - lo], trace.tree.token[lo:hi])
    assert main(["trace", "validate", str(trie_trace)]) == 0
    capsys.readouterr()
    assert main(["trace", "info", str(trie_trace), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)["tree"]
    assert info["mean_nodes"] == pytest.approx(counts.mean())
    assert set(info["verifiers"]) == {"specinfer", "traversal", "gbv"}
    for name in ("specinfer", "traversal", "gbv"):
        law = np.array([[float(v) for v in tau_law_from_stats(trace.tree.stats(r), name)]
                        for r in range(trace.n_rows)])
        np.testing.assert_allclose(info["verifiers"][name]["reach"],
                                   [law[:, 1:].sum(1).mean(), law[:, 2].mean()], atol=1e-12)
        assert info["verifiers"][name]["mal"] == pytest.approx(1 + law @ np.arange(3) @
                                                                np.full(len(law), 1 / len(law)))
    assert main(["trace", "info", str(trie_trace)]) == 0
    text = capsys.readouterr().out
    assert "draft tree 4x2 (iid, mean" in text and "\ngbv " in text


def test_resume_of_a_trie_capture_equals_an_uninterrupted_run(pair, trie_trace, tmp_path):
    out = tmp_path / "resumed"
    cfg = CaptureConfig(max_new_tokens=6, temperature=T, batch_size=4, chunk_requests=2,
                        tree="4x2", tree_sampling="iid")
    capture(*pair, PROMPTS[:3], out, cfg, progress=False, stop_after_chunks=1)
    capture(*pair, PROMPTS[:3], out, cfg, progress=False, resume=True)
    a, b = read_trace(out), read_trace(trie_trace)
    np.testing.assert_array_equal(a.tree.node_offsets, b.tree.node_offsets)
    for name, arr in b.tree.columns().items():
        np.testing.assert_array_equal(a.tree.columns()[name], arr)


def test_a_trie_is_sampled_iid(pair, tmp_path):
    cfg = CaptureConfig(max_new_tokens=4, tree="3x2", tree_sampling="topk")
    with pytest.raises(SpecbatchError, match="expected --sampling iid"):
        capture(*pair, PROMPTS[:1], tmp_path / "x", cfg, progress=False)
    assert not (tmp_path / "x").exists()


def test_the_bundled_trie_trace_shares_the_iid_tree_reference_outputs():
    """smollm2-drop2-trie: 3x3 tries on the requests of smollm2-drop2-tree-iid (same prompts,
    seed and reference outputs); its first path is a sample of the draft (q of path 0)."""
    trie_trace = read_trace("smollm2-drop2-trie")
    iid = read_trace("smollm2-drop2-tree-iid")
    assert trie_trace.meta["tree"] == {"shape": "3x3", "sampling": "iid",
                                       "verifiers": ["specinfer", "traversal", "gbv"],
                                       "nodes_per_position": 10}
    assert trie_trace.meta["draft_sample_method"] == "probabilistic"
    np.testing.assert_array_equal(trie_trace.output_len, iid.output_len)
    tree = trie_trace.tree
    counts = np.diff(tree.node_offsets)
    assert counts.min() >= 4 and counts.max() == 10 and (counts < 10).any()
    first = tree.node_offsets[:-1, None] + np.arange(1, 4)[None, :]
    np.testing.assert_allclose(trie_trace.q, tree.q[first], rtol=1e-6)
    assert (np.bincount(np.repeat(np.arange(tree.n_rows), counts)[~np.isnan(tree.gbv_h)])
            == 4).all()  # GBV's path: the root and one node per depth
