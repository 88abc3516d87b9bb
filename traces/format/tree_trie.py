"""The checks a trie of K i.i.d. draft paths of L tokens adds (``capture --tree KxL``).

A trie (:func:`specbatch.theory.trees.tree_shapes.trie`) merges K sampled paths: a node's children
are its distinct next tokens in order of first appearance, and its *draws* are the next nodes
of every path through it, in path order, repeats kept. A position's node count varies
(``1 + L`` when all K paths agree, ``1 + K·L`` when they share nothing). On top of the checks
every tree gets (:mod:`traces.format.tree_nodes`), a trie must be one:

- structure: nodes in pre-order (a node's parent is the previous node or one of its
  ancestors), leaves exactly at depth L (every root-to-leaf path has L tokens), distinct
  tokens among siblings;
- draws: the root draws K times, a leaf never, any other node once per path through it (the
  number of times its parent draws it, at least once), children first drawn in id order;
- GBV: ``gbv_h`` is finite on exactly one root-to-leaf path (1 at the root), which goes at
  every node to the child ranked highest by ``Mb/Ms = pt/q`` (what greedy multi-path BV
  picks; the rows decide the thresholds themselves, so only their range is checked).

Arrays are flat over all positions: ``base[i]`` is the flat index of node i's root and
``glob[i]`` of its parent (0 at a root).
"""

from __future__ import annotations

import numpy as np

from specbatch.errors import SpecbatchError
from specbatch.traces.format.checks import SLACK

#: Relative tolerance of the ratio pt/q that ranks GBV's children (float32 storage of q and
#: pt carries ~1e-7 relative error).
RANK_TOL = 1e-5


def fail_first(bad: np.ndarray, where: str, field: str, expected: str, got: np.ndarray,
               locate) -> None:
    """Raise the one-line error of the first flagged entry: ``file F: field X: expected Y,
    got Z`` with ``locate(i)`` naming where."""
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise SpecbatchError(f"file {where}: field {field}: expected {expected}, got "
                             f"{got[i].item()!r} {locate(i)}")


def _parents(ints: dict, base: np.ndarray) -> tuple:
    """(is-root mask, flat parent index with a root pointing at itself) # [N] each."""
    root = ints["node"] == 0
    return root, np.where(root, np.arange(root.size), base + np.maximum(ints["parent"], 0))


def check_trie_structure(shape, ints: dict, base: np.ndarray, glob: np.ndarray,
                         kids: np.ndarray, where: str, locate) -> None:
    """Leaves at depth L only, pre-order, distinct sibling tokens (module docstring).

    kids: # [N] children per node."""
    depth, token = ints["depth"], ints["token"]
    length = shape.length
    fail_first((kids == 0) != (depth == length), where, "depth", f"leaves exactly at depth "
               f"{length} (every path of a {shape.paths}x{length} trie has {length} tokens)",
               depth, locate)
    root, up = _parents(ints, base)
    size = root.size
    ancestor = np.full((size, length + 1), -1, dtype=np.int64)  # [N, L+1] node's ancestors
    cur = np.arange(size)
    ancestor[cur, depth] = cur
    for _ in range(length):
        cur = up[cur]
        ancestor[np.arange(size), depth[cur]] = cur
    prev = np.maximum(np.arange(size) - 1, 0)
    want = ancestor[prev, np.clip(depth - 1, 0, length)]
    fail_first(~root & (want != up), where, "parent", "pre-order (a node's parent is the "
               "previous node or one of its ancestors)", ints["parent"], locate)
    order = np.lexsort((token, up))
    same = ~root[order][1:] & (up[order][1:] == up[order][:-1]) & \
        (token[order][1:] == token[order][:-1])
    bad = np.zeros(size, dtype=bool)
    bad[order[1:][same]] = True
    fail_first(bad, where, "token", "distinct tokens among a node's children (a trie)", token,
               locate)


def check_trie_draws(shape, ints: dict, base: np.ndarray, draw_offsets: np.ndarray,
                     draws: np.ndarray, owner: np.ndarray, where: str, locate) -> None:
    """One draw per path through a node, children first drawn in id order (module docstring).

    draws: # [M] child ids local to the row, already checked to be children of ``owner``."""
    root = ints["node"] == 0
    size = root.size
    child = base[owner] + draws  # [M] flat child index
    through = np.bincount(child, minlength=size)  # paths through each non-root node
    counts = np.diff(draw_offsets)
    fail_first(~root & (through < 1), where, "draws", "every child drawn by its parent at "
               "least once (each node lies on a path)", through, locate)
    expected = np.where(root, shape.paths, np.where(ints["depth"] == shape.length, 0, through))
    fail_first(counts != expected, where, "draws", f"one draw per path through the node (the "
               f"root {shape.paths}, a leaf none)", counts, locate)
    _, first = np.unique(child, return_index=True)
    first = np.sort(first)
    later = (owner[first][1:] == owner[first][:-1]) & (draws[first][1:] <= draws[first][:-1])
    bad = np.zeros(size, dtype=bool)
    bad[owner[first][1:][later]] = True
    fail_first(bad, where, "draws", "children first drawn in node order (paths in order, "
               "children by first appearance)", counts, locate)


def check_gbv_path(ints: dict, floats: dict, base: np.ndarray, where: str, locate) -> None:
    """``gbv_h`` finite on one root-to-leaf path, 1 at the root, along the highest pt/q."""
    root, up = _parents(ints, base)
    depth, gbv = ints["depth"], floats["gbv_h"]
    on = ~np.isnan(gbv)
    fail_first(root & (~on | (np.abs(gbv - 1) > SLACK)), where, "gbv_h", "1 at the root (GBV's "
               "threshold h_0)", gbv, locate)
    fail_first(on & ~on[up], where, "gbv_h", "NaN off GBV's path (finite only below a finite "
               "parent)", gbv, locate)
    row = np.cumsum(root) - 1
    width = int(depth.max()) + 1 if depth.size else 1
    per = np.bincount((row * width + depth)[on], minlength=int(row[-1] + 1) * width
                      if row.size else 0)
    bad_key = np.flatnonzero(per != 1)
    if bad_key.size:
        r = int(bad_key[0] // width)
        i = int(np.flatnonzero(row == r)[0])
        raise SpecbatchError(f"file {where}: field gbv_h: expected one finite value per depth "
                             f"0..{width - 1} (GBV's root-to-leaf path), got "
                             f"{int(per[bad_key[0]])} at depth {int(bad_key[0] % width)} "
                             f"{locate(i)}")
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = floats["pt"] / floats["q"]
    best = np.zeros(root.size)
    np.maximum.at(best, up[~root], ratio[~root])
    fail_first(on & ~root & (best[up] > ratio * (1 + RANK_TOL) + RANK_TOL), where, "gbv_h",
               "GBV's path through the child of highest pt/q (= Mb/Ms) at every node", ratio,
               locate)
