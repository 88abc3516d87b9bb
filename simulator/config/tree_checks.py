"""The checks a tree run's settings get: tree policies with tree rules, and a trace that
records trees deep enough for them (one-line errors naming the field). Imports no numpy, so
the configuration modules stay light."""

from __future__ import annotations

from typing import Any

from specbatch.errors import SpecbatchError
from specbatch.simulator.policies.catalogue import names

#: Tree verification rules (``verify``; simulator.replay.tree), and the ones that replay on
#: any draw-prefix-closed subtree (the rest verify the whole recorded tree only).
TREE_RULES = ("specinfer", "traversal", "gbv")
SUBTREE_RULES = ("specinfer",)
#: The tree policies (simulator.policies.catalogue ``tree``), and the one that verifies the whole
#: recorded tree (``whole_tree``: the only policy for traversal, gbv and path tries).
TREE_POLICIES = names(tree=True)
(WHOLE_TREE,) = names(whole_tree=True)


def _fail(where: str, field: str, expected: str, got: Any) -> None:
    raise SpecbatchError(f"{where}: field {field}: expected {expected}, got {got!r}")


def check_tree_config(c: Any, tree_policy: bool, where: str = "config") -> None:
    """A tree policy (simulator.policies.trees) runs under a tree rule and a chain policy
    under a chain rule; ``traversal`` verifies only a whole tree (``static-tree``)."""
    if tree_policy and c.verify not in TREE_RULES:
        _fail(where, "verify", f"a tree rule ({', '.join(TREE_RULES)}) for policy {c.policy} "
              "(it verifies subtrees of a tree trace)", c.verify)
    if not tree_policy and c.verify in TREE_RULES and c.policy != "ar":
        _fail(where, "verify", f"token or block for policy {c.policy} (a chain policy; the "
              "tree policies are {', '.join(TREE_POLICIES[:-1])} and {TREE_POLICIES[-1]})", c.verify)
    if c.verify not in SUBTREE_RULES and c.verify in TREE_RULES and c.policy != WHOLE_TREE:
        _fail(where, "policy", f"{WHOLE_TREE} with verify = {c.verify} (its replay numbers "
              "hold for the whole recorded tree only)", c.policy)


def check_tree_trace(c: Any, trace: Any, depth: int) -> None:
    """Trace checks of a tree run: the trace records trees, a request verifies at most its
    tree's N − 1 nodes, and ``traversal`` verifies all of them."""
    tree = getattr(trace, "tree", None)
    if tree is None:
        _fail("config", "verify", "token or block on a chain trace (specinfer and traversal "
              "replay recorded draft trees: capture --tree SHAPE)", c.verify)
    offsets = tree.node_offsets
    trie = tree.shape.kind == "paths"
    if trie:  # K·L draft tokens; a row's trie has at most that many nodes
        nodes = int(tree.shape.paths) * int(tree.shape.length)
    else:
        nodes = int(offsets[1] - offsets[0]) - 1 if offsets.shape[0] > 1 else 0
    if depth > nodes:
        _fail("config", "num_speculative_tokens", f"k + extra <= the trace tree's {nodes} "
              f"draft nodes (shape {tree.shape.describe()})", depth)
    if c.verify == "gbv" and not trie:
        _fail("config", "verify", "specinfer or traversal on a branching tree trace (gbv "
              "verifies K draft paths: capture --tree KxL)", c.verify)
    if trie and c.policy != WHOLE_TREE:
        _fail("config", "policy", f"{WHOLE_TREE} on a path-trie trace (a trie replays whole "
              "only)", c.policy)
    if (trie or c.verify == "traversal") and c.num_speculative_tokens != nodes:
        what = "K·L, every position's whole trie" if trie else "the whole recorded tree"
        _fail("config", "num_speculative_tokens", f"{nodes}, {what}, for verify = {c.verify} "
              f"(shape {tree.shape.describe()})", c.num_speculative_tokens)
