"""The checks a tree run's settings get: tree policies with tree rules, and a trace that
records trees deep enough for them (one-line errors naming the field). Imports no numpy, so
the configuration modules stay light."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from specbatch.errors import SpecbatchError
from specbatch.simulator.policies.catalogue import names
from specbatch.simulator.replay.rules import names as rule_names
from specbatch.simulator.replay.rules import rule_entry

if TYPE_CHECKING:
    from specbatch.simulator.config.sim_config import SimConfig
    from specbatch.traces.format.trace import Trace

#: The tree policies (simulator.policies.catalogue ``tree``), and the one that verifies the whole
#: recorded tree (``whole_tree``: the only policy for traversal, gbv and path tries).
TREE_POLICIES = names(tree=True)
(WHOLE_TREE,) = names(whole_tree=True)


def _fail(where: str, field: str, expected: str, got: Any) -> None:
    raise SpecbatchError(f"{where}: field {field}: expected {expected}, got {got!r}")


def check_tree_config(c: SimConfig, tree_policy: bool, where: str = "config") -> None:
    """A tree policy (simulator.policies.trees) runs under a tree rule and a chain policy
    under a chain rule; a rule that replays no subtree (simulator.replay.rules ``subtree``:
    ``traversal``, ``gbv``) verifies only a whole tree (``static-tree``)."""
    rule = rule_entry(c.verify)
    if tree_policy and not rule.tree:
        _fail(where, "verify", f"a tree rule ({', '.join(rule_names(kind='tree'))}) for policy "
              f"{c.policy} (it verifies subtrees of a tree trace)", c.verify)
    if not tree_policy and rule.tree and c.policy != "ar":
        _fail(where, "verify", f"{' or '.join(rule_names(kind='chain'))} for policy {c.policy} "
              f"(a chain policy; the tree policies are {', '.join(TREE_POLICIES[:-1])} and "
              f"{TREE_POLICIES[-1]})", c.verify)
    if rule.tree and not rule.subtree and c.policy != WHOLE_TREE:
        _fail(where, "policy", f"{WHOLE_TREE} with verify = {c.verify} (its replay numbers "
              "hold for the whole recorded tree only)", c.policy)


def check_tree_trace(c: SimConfig, trace: Trace, depth: int) -> None:
    """Trace checks of a tree run: the trace records trees, a request verifies at most its
    tree's N − 1 nodes, and a rule that replays no subtree (``traversal``, ``gbv``) verifies
    all of them."""
    rule = rule_entry(c.verify)
    tree = getattr(trace, "tree", None)
    if tree is None:
        _fail("config", "verify", f"{' or '.join(rule_names(kind='chain'))} on a chain trace "
              f"({', '.join(rule_names(kind='tree'))} replay recorded draft trees: capture "
              "--tree SHAPE)", c.verify)
    offsets = tree.node_offsets
    trie = tree.shape.kind == "paths"
    if trie:  # K·L draft tokens; a row's trie has at most that many nodes
        nodes = int(tree.shape.paths) * int(tree.shape.length)
    else:
        nodes = int(offsets[1] - offsets[0]) - 1 if offsets.shape[0] > 1 else 0
    if depth > nodes:
        _fail("config", "num_speculative_tokens", f"k + extra <= the trace tree's {nodes} "
              f"draft nodes (shape {tree.shape.describe()})", depth)
    if not rule.branching and not trie:
        _fail("config", "verify", f"{' or '.join(rule_names(kind='tree', branching=True))} on "
              f"a branching tree trace ({c.verify} verifies K draft paths: capture --tree KxL)",
              c.verify)
    if trie and c.policy != WHOLE_TREE:
        _fail("config", "policy", f"{WHOLE_TREE} on a path-trie trace (a trie replays whole "
              "only)", c.policy)
    if (trie or not rule.subtree) and c.num_speculative_tokens != nodes:
        what = "K·L, every position's whole trie" if trie else "the whole recorded tree"
        _fail("config", "num_speculative_tokens", f"{nodes}, {what}, for verify = {c.verify} "
              f"(shape {tree.shape.describe()})", c.num_speculative_tokens)
