"""Capture static draft trees from a live draft/target pair (``capture --tree SHAPE``).

At every output position t of a request (context ``c + y_<t``, ``y`` the target's reference
output, as for chains: :mod:`specbatch.traces.capture.positions`) the draft expands a tree of the
branching shape ``b_1, .., b_D`` level by level:

- ``topk`` (EAGLE's static trees): the children of a node are the ``b_d`` most probable tokens
  of ``Ms(·|path)`` at temperature T (ties by token id), deterministic;
- ``iid`` (SpecInfer's expansion): ``b_d`` children drawn i.i.d. from ``Ms(·|path)`` at T with
  the request's own uniforms (``numpy.random.default_rng([seed, n])`` after the reference
  output's uniforms), equal tokens staying separate nodes.

The target scores the tree one root-to-leaf path at a time: every leaf's path of D tokens
is one row of the batched scoring pass of chain capture (:func:`positions.score_paths`),
so a position costs ``L·D`` target query tokens (``L`` leaves) instead of the ``N − 1`` of a
tree-attention pass (shape ``2,2,1``: 12 instead of 10), and the draft ``Σ_{d<D} n_d·d``
(``n_d`` nodes at depth d; 2 + 8 for ``2,2,1``). The full float64 rows of every node then
go through :func:`specbatch.theory.trees.stats.tree_stats_numpy`, which gives per node the
replay numbers of recursive rejection sampling and Traversal Verification.

A trie of paths ``KxL`` (the drafting of SpecTr's multi-path setting and of greedy
multi-path BV): K paths of L tokens drawn i.i.d. from ``Ms`` at T (token d of path k with
uniform ``k·L + d − 1`` of the same stream), merged by
:func:`specbatch.theory.trees.tree_shapes.trie`; each distinct prefix is scored once by the draft
and each distinct path once by the target (:func:`distinct_paths`), so a node shared by
several paths has one row, and the replay numbers add GBV's thresholds on its path.

The chain columns of the position row are the tree's first root-to-leaf path (child 0 at
every depth; path 0 of a trie): a sample from ``Ms`` for ``iid`` trees and tries, the draft's
argmax chain for ``topk`` trees, recorded as a greedy draft (one-hot ``Ms``,
``draft_sample_method = "greedy"``).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

from specbatch.errors import require
from specbatch.theory.trees.stats import tree_stats_numpy
from specbatch.theory.trees.tree_shapes import Node, Shape, trie
from specbatch.theory.verify.torch_path_stats import probs_at, sample_inverse_cdf
from specbatch.traces.capture.drafters import ModelDrafter, one_hot_logits
from specbatch.traces.capture.positions import append_path_stats, score_paths
from specbatch.traces.format.tree_nodes import TREE_SAMPLINGS, node_count, shape_text

if TYPE_CHECKING:
    from specbatch.traces.capture.chain import CaptureConfig


def tree_uniforms(seed: int, index: int, max_new: int, draws: int) -> np.ndarray:
    """Request n's drafting uniforms # [max_new, draws]: the stream of
    ``default_rng([seed, n])`` after the reference output's ``max_new`` uniforms (so the
    reference output is the one a chain capture of the same seed samples)."""
    rng = np.random.default_rng([seed, index])
    rng.random(max_new)
    return rng.random((max_new, draws))


def level_sizes(shape: Shape) -> list[int]:
    """Nodes per depth 0..D: ``n_0 = 1``, ``n_d = n_{d−1}·b_d``."""
    sizes = [1]
    for width in shape.widths:
        sizes.append(sizes[-1] * width)
    return sizes


def expand_level(probs, width: int, sampling: str, uniforms):
    """Children tokens of every node of one level.

    probs: # [P, n, V] float64 draft rows at T;  uniforms: # [P, n, width] (iid only)
    returns # [P, n, width] int64
    """
    import torch

    if sampling == "topk":
        order = torch.sort(probs, dim=-1, descending=True, stable=True).indices
        return order[..., :width]
    rows = probs.unsqueeze(-2).expand(*probs.shape[:2], width, probs.shape[-1])
    return sample_inverse_cdf(rows, uniforms)


def draft_tree(draft, state, n_prompt: int, ts, uniforms, shape: Shape, temperature: float):
    """Expand the trees of positions ``ts`` level by level.

    state: ``(draft cache, root logits # [n, V])`` of :meth:`ModelDrafter.start`;
    uniforms: # [P, N − 1] float64.
    returns (paths per depth: [P, n_d, d] int64 for d = 1..D, draft logits per depth:
    [P, n_d, V] for d = 0..D−1)
    """
    import torch

    cache, rows = state
    p = len(ts)
    logits = [rows[ts][:, None]]
    paths = [torch.zeros(p, 1, 0, dtype=torch.long, device=rows.device)]
    used = 0
    sizes = level_sizes(shape)
    for d, width in enumerate(shape.widths, start=1):
        n_prev = sizes[d - 1]
        u = uniforms[:, used:used + n_prev * width].reshape(p, n_prev, width).to(rows.device)
        used += n_prev * width
        kids = expand_level(probs_at(logits[-1], temperature), width, shape.sampling, u)
        prev = paths[-1].unsqueeze(2).expand(-1, -1, width, -1)
        paths.append(torch.cat([prev, kids.unsqueeze(-1)], dim=-1).reshape(p, sizes[d], d))
        if d < shape.depth:
            flat = paths[-1].reshape(p * sizes[d], d)
            scored = score_paths(draft, cache, rows[ts].repeat_interleave(sizes[d], 0),
                                 n_prompt, ts.repeat_interleave(sizes[d]), flat, rows.shape[-1])
            logits.append(scored[:, -1].reshape(p, sizes[d], -1))
    return paths[1:], logits


def _build(shape: Shape, paths: list, b: int) -> Node:
    """Position b's tree as :class:`Node` objects from the level arrays (tokens)."""
    def node(d: int, j: int) -> Node:
        if d == shape.depth:
            return Node(int(paths[d - 1][b, j, -1]))
        width = shape.widths[d]
        kids = tuple(node(d + 1, j * width + i) for i in range(width))
        token = -1 if d == 0 else int(paths[d - 1][b, j, -1])
        return Node(token, kids, tuple(range(width)))
    return node(0, 0)


def tree_rows(shape: Shape, paths: list, draft_logits: list, target_logits, b: int,
              temperature: float) -> tuple:
    """Position b's rows keyed by token path: (target rows, draft rows, draft_conf).

    target_logits: # [P, L, D+1, V] along every leaf's path.  Rows are float64 numpy at T;
    draft_conf is the temperature-1 draft probability of each node's token.
    """
    sizes = level_sizes(shape)
    leaves = sizes[-1]
    t_probs = probs_at(target_logits[b], temperature).cpu().numpy()  # [L, D+1, V]
    target, draft, conf = {(): t_probs[0, 0]}, {}, {(): 1.0}
    for d in range(shape.depth + 1):
        d_probs = probs_at(draft_logits[d][b], temperature).cpu().numpy() \
            if d < shape.depth else None
        d_conf = probs_at(draft_logits[d][b], 1.0).cpu().numpy() if d < shape.depth else None
        for j in range(sizes[d]):
            key = () if d == 0 else tuple(int(x) for x in paths[d - 1][b, j])
            target[key] = t_probs[j * (leaves // sizes[d]), d]
            if d_probs is not None:
                draft[key] = d_probs[j]
                for x in paths[d][b, j * shape.widths[d]:(j + 1) * shape.widths[d], -1]:
                    conf[key + (int(x),)] = float(d_conf[j, int(x)])
    return target, draft, conf


def node_columns(stats, conf: dict) -> dict:
    """One tree's node columns (pre-order) from its :class:`TreeStats`."""
    n = len(stats.parent)
    path: list = [()] * n
    for u in range(1, n):
        path[u] = path[stats.parent[u]] + (stats.token[u],)
    return {"node": np.arange(n), "parent": np.array(stats.parent), "depth": np.array(stats.depth),
            "token": np.array(stats.token), "q": np.array(stats.q), "pt": np.array(stats.pt),
            "draft_conf": np.array([conf[s] for s in path]),
            "trv_accept": np.array(stats.trv_accept),
            "gbv_h": np.array([np.nan if h is None else h for h in stats.gbv_h]),
            "draw_counts": np.array([len(d) for d in stats.draws]),
            "draws": np.array([c for d in stats.draws for c in d], dtype=np.int64),
            "rrs_accept": np.array([a for r in stats.rrs_accept for a in r], dtype=np.float64)}


def capture_tree_positions(draft_model, target, prompt_ids: list[int], index: int,
                           cfg: CaptureConfig, reference: tuple, shape: Shape) -> dict:
    """All output positions of one request with a draft tree each, given its reference
    ``(y, logits, cache)``: the chain columns of the first path # [n, D], ``y``, and
    ``nodes`` (flat node columns, :func:`node_columns` concatenated over positions)."""
    import torch

    drafter = ModelDrafter(draft_model)
    y, t_row0, t_cache = reference
    n, n_prompt = len(y), len(prompt_ids)
    uniforms = tree_uniforms(cfg.seed, index, cfg.max_new_tokens, node_count(shape) - 1)
    parts: dict[str, list] = {}
    nodes: list[dict] = []
    with torch.inference_mode():
        state = drafter.start(prompt_ids, y)
        for a in range(0, n, cfg.batch_size):
            ts = torch.arange(a, min(n, a + cfg.batch_size), device=y.device)
            u = torch.from_numpy(uniforms[a:a + len(ts)])
            if shape.kind == "paths":
                trees = _trie_batch(draft_model, target, state, t_row0, t_cache, n_prompt, ts,
                                    u, shape, cfg.temperature, parts)
            else:
                trees = _branching_batch(draft_model, target, state, t_row0, t_cache,
                                         n_prompt, ts, u, shape, cfg.temperature, parts)
            for root, rows_t, rows_d, conf in trees:
                stats = tree_stats_numpy(root, shape, rows_t, rows_d)
                nodes.append(node_columns(stats, conf))
    result = {name: np.concatenate(v) for name, v in parts.items()}
    result["y"] = y.cpu().numpy()
    result["nodes"] = {k: np.concatenate([t[k] for t in nodes]) for k in nodes[0]}
    return result


def _branching_batch(draft_model, target, state, t_row0, t_cache, n_prompt: int, ts, uniforms,
                     shape: Shape, temperature: float, parts: dict) -> list:
    """One batch of branching trees: the chain columns go to ``parts``; returns an iterator
    of ``(root Node, target rows, draft rows, draft_conf)`` per position."""
    p, leaves = len(ts), level_sizes(shape)[-1]
    paths, dlog = draft_tree(draft_model, state, n_prompt, ts, uniforms, shape, temperature)
    leaf_paths = paths[-1].reshape(p * leaves, shape.depth)
    tl = score_paths(target, t_cache, t_row0[ts].repeat_interleave(leaves, 0), n_prompt,
                     ts.repeat_interleave(leaves), leaf_paths, t_row0.shape[-1])
    tl = tl.reshape(p, leaves, shape.depth + 1, -1)
    _append_chain(parts, shape, paths, dlog, tl[:, 0], temperature)
    return ((_build(shape, paths, b), *tree_rows(shape, paths, dlog, tl, b, temperature))
            for b in range(p))  # lazily: one position's float64 rows at a time


def distinct_paths(prefixes: np.ndarray) -> tuple:
    """One representative per distinct prefix of each position.

    prefixes: # [P, K, d] token paths;  returns (flat ``b·K + k`` index of each distinct
    prefix # [R], its representative's row in those for every (b, k) # [P, K])
    """
    p, k = prefixes.shape[:2]
    keep: list = []
    where = np.empty((p, k), dtype=np.int64)
    for b in range(p):
        seen: dict = {}
        for j in range(k):
            key = prefixes[b, j].tobytes()
            if key not in seen:
                seen[key] = len(keep)
                keep.append(b * k + j)
            where[b, j] = seen[key]
    return np.array(keep, dtype=np.int64), where


def _score_distinct(model, cache, row0, n_prompt: int, ts, tokens):
    """Score every distinct path of ``tokens`` # [P, K, d] once (:func:`score_paths`) and
    hand each (b, k) its representative's rows.  returns # [P, K, d+1, V]"""
    import torch

    p, k, d = tokens.shape
    keep, where = distinct_paths(tokens.cpu().numpy())
    keep = torch.from_numpy(keep).to(tokens.device)
    b = torch.div(keep, k, rounding_mode="floor")
    scored = score_paths(model, cache, row0[b], n_prompt, ts[b],
                         tokens.reshape(p * k, d)[keep], row0.shape[-1])
    return scored[torch.from_numpy(where).to(tokens.device)]


def draft_paths(draft, state, n_prompt: int, ts, uniforms, shape: Shape, temperature: float):
    """K i.i.d. draft paths of L tokens for each position of ``ts``: token d of path k is
    drawn from ``Ms(·|its prefix)`` at T with uniform ``k·L + d − 1``; a prefix shared by
    several paths is scored once, so they draw from the same row.

    state: ``(draft cache, root logits # [n, V])``;  uniforms: # [P, K·L] float64.
    returns (tokens # [P, K, L] int64, draft logits before each token # [P, K, L, V])
    """
    import torch

    cache, rows = state
    p, k, length = len(ts), shape.paths, shape.length
    u = uniforms.reshape(p, k, length).to(rows.device)
    root = rows[ts]
    logits = [root[:, None].expand(p, k, root.shape[-1])]
    tokens = torch.zeros(p, k, 0, dtype=torch.long, device=rows.device)
    for d in range(length):
        tok = sample_inverse_cdf(probs_at(logits[-1], temperature), u[:, :, d])
        tokens = torch.cat([tokens, tok.unsqueeze(-1)], dim=-1)
        if d + 1 < length:
            logits.append(_score_distinct(draft, cache, root, n_prompt, ts, tokens)[:, :, -1])
    return tokens, torch.stack(logits, dim=2)


def trie_rows(tokens, dlog, tl, conf, b: int, temperature: float) -> tuple:
    """Position b's trie of paths with its rows keyed by token path: (root :class:`Node`,
    target rows, draft rows, draft_conf), rows float64 numpy at T.

    tokens: # [P, K, L];  dlog: # [P, K, L, V];  tl: # [P, K, L+1, V];  conf: # [P, K, L]
    temperature-1 draft probability of every path's tokens.
    """
    length = tokens.shape[-1]
    paths = [tuple(int(x) for x in row) for row in tokens[b].tolist()]
    target, draft, confs = {}, {}, {(): 1.0}
    for j, path in enumerate(paths):
        for d in range(length + 1):
            key = path[:d]
            if key in target:
                continue
            target[key] = probs_at(tl[b, j, d], temperature).cpu().numpy()
            if d < length:
                draft[key] = probs_at(dlog[b, j, d], temperature).cpu().numpy()
            if d > 0:
                confs[key] = float(conf[b, j, d - 1])
    return trie(paths, length), target, draft, confs


def _trie_batch(draft_model, target, state, t_row0, t_cache, n_prompt: int, ts, uniforms,
                shape: Shape, temperature: float, parts: dict) -> list:
    """One batch of path tries (see :func:`_branching_batch`): the target scores every
    distinct root-to-leaf path once; the chain columns are path 0."""
    tokens, dlog = draft_paths(draft_model, state, n_prompt, ts, uniforms, shape, temperature)
    tl = _score_distinct(target, t_cache, t_row0[ts], n_prompt, ts, tokens)
    append_path_stats(parts, tokens[:, 0], dlog[:, 0], tl[:, 0], temperature, False)
    conf = probs_at(dlog, 1.0).gather(-1, tokens.unsqueeze(-1)).squeeze(-1).cpu().numpy()
    return (trie_rows(tokens, dlog, tl, conf, b, temperature) for b in range(len(ts)))


def _append_chain(parts: dict, shape: Shape, paths: list, dlog: list, tl_first,
                  temperature: float) -> None:
    """The chain columns of the first root-to-leaf path (child 0 at every depth)."""
    import torch

    x = paths[-1][:, 0]  # [P, D]
    dl = torch.stack([level[:, 0] for level in dlog], dim=1)  # [P, D, V]
    if shape.sampling == "topk":  # the argmax chain: a greedy draft, one-hot Ms
        append_path_stats(parts, x, one_hot_logits(x, dl.shape[-1]), tl_first, temperature,
                          False, signal_logits=dl)
    else:
        append_path_stats(parts, x, dl, tl_first, temperature, False)


def tree_config(cfg: CaptureConfig) -> CaptureConfig:
    """``cfg`` with K set to the tree's depth for ``--tree`` (its first path is the chain) and
    the shape written canonically; a tree needs a sampled draft model at a temperature above
    0, and K i.i.d. paths (``KxL``) are sampled (``--sampling iid``)."""
    from specbatch.traces.capture.chain import PROBABILISTIC

    shape = cfg.tree_shape()
    if shape is None:
        return cfg
    if shape.kind == "paths":
        require(cfg.tree_sampling == "iid", f"--tree {cfg.tree} --sampling "
                f"{cfg.tree_sampling}: expected --sampling iid (K x L draws K i.i.d. paths), "
                f"got another sampling")
    else:
        require(cfg.tree_sampling in TREE_SAMPLINGS, f"--tree {cfg.tree} --sampling "
                f"{cfg.tree_sampling}: expected children per depth like '2,2,1' with sampling "
                f"{' or '.join(TREE_SAMPLINGS)}, or paths like '3x3', got another tree law")
    require(cfg.draft_sample_method == PROBABILISTIC, "--draft-sample greedy: expected no "
            "--tree (a tree's children are chosen by --sampling)")
    require(cfg.temperature > 0, f"--tree: expected --temperature > 0 (at T = 0 the draft rows "
            f"are one-hot and a node's siblings have draft probability 0), got {cfg.temperature}")
    return replace(cfg, depth=shape.depth, tree=shape_text(shape))


def collect_nodes(cols: dict, nodes: dict, index: int) -> None:
    """Add one request's node columns (with request id and output position) to ``cols``;
    a position's nodes start at its root (node 0), so tries of any size line up."""
    position = np.cumsum(nodes["node"] == 0, dtype=np.int64) - 1
    cols.setdefault("nodes", []).append({
        **nodes, "request_id": np.full(len(nodes["node"]), index, dtype=np.int64),
        "position": position})
