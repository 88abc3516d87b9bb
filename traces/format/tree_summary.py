"""What ``specbatch trace info`` adds for a tree trace: per-depth acceptance per verifier.

For every position row the exact law of τ of each stored verifier follows from the row's
replay numbers alone (:func:`specbatch.theory.trees.stats.tau_law_from_stats`); the summary
averages ``P(τ ≥ d)``, d = 1..D, ``E[τ]`` and ``E[τ + 1]`` uniformly over the rows, as the
chain summary does (:mod:`specbatch.traces.format.describe`). On top-k trees (deterministic given
the context) it adds the ceiling that no valid verifier can pass, ``Σ_{nodes s} Mb(s)``
(each node's path probability under the target, the product of ``pt`` along it: a lossless
verifier outputs prefix s with probability Mb(s)), which recursive rejection sampling and
Traversal reach there (docs/trees.md); sampled trees have no such per-tree ceiling. Last,
the tree's first path verified alone as a chain (BV's ``E[τ] = Σ_i p_i``). Tries of K paths
(``KxL``) add greedy multi-path BV (``gbv``) and the mean node count per position.
"""

from __future__ import annotations

import numpy as np

from specbatch.theory.trees.stats import tau_law_from_stats
from specbatch.traces.format.tree_nodes import node_count


def tree_summary(trace) -> dict:
    """Per-depth acceptance of every stored verifier on ``trace.tree`` (means over rows)."""
    tree = trace.tree
    shape = tree.shape
    meta = trace.meta["tree"]
    laws = {name: np.array([[float(v) for v in tau_law_from_stats(tree.stats(r), name)]
                            for r in range(tree.n_rows)]).reshape(tree.n_rows, shape.depth + 1)
            for name in meta["verifiers"]}
    depths = np.arange(shape.depth + 1)
    counts = np.diff(tree.node_offsets)
    out = {"shape": meta["shape"], "sampling": meta["sampling"],
           "nodes_per_position": node_count(shape), "depth": shape.depth,
           "mean_nodes": float(counts.mean()) if counts.size else 0.0, "verifiers": {}}
    for name, law in laws.items():
        reach = law[:, ::-1].cumsum(axis=1)[:, ::-1]  # [rows, D+1] P(τ ≥ d)
        tau = law @ depths
        out["verifiers"][name] = {"reach": reach[:, 1:].mean(axis=0).tolist(),
                                  "mean_accepted": float(tau.mean()) if tau.size else 0.0,
                                  "mal": float(tau.mean() + 1) if tau.size else 1.0}
    if shape.sampling == "topk":
        mass = path_mass(tree)
        out["node_mass_bound"] = float(mass.mean()) if mass.size else 0.0
    out["first_path_bv"] = float(trace.p.sum(axis=1).mean()) if trace.n_rows else 0.0
    return out


def path_mass(tree) -> np.ndarray:
    """``Σ_{nodes s ≠ root} Π_{u on s} pt_u`` per position row.  returns # [rows]"""
    n = node_count(tree.shape)
    parent = tree.parent.reshape(-1, n).astype(np.int64)
    pt = tree.pt.reshape(-1, n)
    mass = np.ones_like(pt)
    for u in range(1, n):  # pre-order: a parent comes before its children
        mass[:, u] = mass[np.arange(pt.shape[0]), parent[:, u]] * pt[:, u]
    return mass[:, 1:].sum(axis=1)


def format_tree_summary(s: dict) -> list[str]:
    """Lines of ``trace info`` for the ``tree`` part of a summary."""
    d = s["depth"]
    if s["nodes_per_position"] == s.get("mean_nodes", s["nodes_per_position"]):
        size = f"{s['nodes_per_position']} nodes with the root"
    else:  # a trie of paths: fewer nodes where paths share a prefix
        size = (
            f"mean {s['mean_nodes']:.2f} of at most {s['nodes_per_position']} nodes with the root"
        )
    lines = ["", f"draft tree {s['shape']} ({s['sampling']}, {size}), per verifier (means over "
             "all rows):",
             f"{'verifier':<11}" + "".join(f"{f'P(τ≥{i})':>9}" for i in range(1, d + 1))
             + f"{'E[τ]':>8}{'E[τ+1]':>8}"]
    for name, v in s["verifiers"].items():
        lines.append(f"{name:<11}" + "".join(f"{x:>9.4f}" for x in v["reach"])
                     + f"{v['mean_accepted']:>8.4f}{v['mal']:>8.4f}")
    if "node_mass_bound" in s:
        lines.append(f"ceiling of any verifier on these top-k trees, E[τ] = Σ_nodes Mb(path): "
                     f"{s['node_mass_bound']:.4f}")
    lines.append(f"the first path alone as a chain (BV): E[τ] = {s['first_path_bv']:.4f}")
    return lines
