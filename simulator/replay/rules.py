"""The verification-rule catalogue: one row per rule, the single place a rule's identity is written.

A rule (the ``verify`` field) decides how a verified draft turns into τ accepted tokens. Each
row says whether it verifies chains or trees, which replay classes realise it on a trace's
recorded numbers (:mod:`simulator.replay.protocols`), how the rejection sampler's seconds
price it (the key of :class:`simulator.cost.verify_cost.VerifyCost`), whether it is lossless
(THEORY.md §4; pinned by exact enumeration in tests/simulator/replay/test_rules.py) and the
theory function the replay reproduces. Every former name list derives from :data:`CATALOGUE`:
``--verify``'s choices (simulator.config.sim_config, live.config, ``specbatch cost``), the
tree checks (simulator.config.tree_checks), docs/config.md's rule table
(analysis.config_docs), the sweep and planner's tree tests. A question of the kind "is this
token verification?" reads a row's property (:attr:`RuleEntry.additive`,
:attr:`RuleEntry.accept_column`, ...), never the name.

A new rule is one row here plus its replay: a tree rule a ``REPLAYS`` entry (and its
``uniforms_needed``) in each class its row names and a walk in ``tree.tau_reference``; a chain
rule a ``scan`` :class:`~simulator.replay.chain.VerifyTables` implements (it refuses any
other); and its theory verifier, against which the tests check ``lossless`` by enumeration.

:func:`simulator.replay.replay_tables.tables_for` returns the replay tables of any rule; an
unknown rule is a one-line :class:`~specbatch.errors.SpecbatchError` naming the ``verify``
field and the known rules, never a fallback. Like the policy catalogue, the module imports no
numpy and no replay class (they load on first use), so the configuration modules read it at
no cost.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

from specbatch.errors import SpecbatchError

#: The keys :class:`simulator.cost.verify_cost.VerifyCost` prices: TV's one pass, or BV's
#: pass plus the extra token's two draw passes (that module's docstring).
SAMPLER_COSTS = ("token", "block")

_CHAIN = "specbatch.simulator.replay.chain"
_TREE = "specbatch.simulator.replay.tree"
_TRIE = "specbatch.simulator.replay.trie"
_VERIFY = "specbatch.theory.verify.reference"
_TREES = "specbatch.theory.trees.verifiers"


@dataclass(frozen=True)
class RuleEntry:
    """One verification rule.

    name:          its public name (``verify`` field, ``--verify``)
    kind:          "chain" (one drafted path, γ = s_i) or "tree" (a recorded draft tree)
    replay:        ``module:Class`` of each class that replays it
                   (:func:`~simulator.replay.replay_tables.tables_for` picks one by the trace:
                   TreeTables for a branching tree, TrieTables for K paths)
    sampler_cost:  the :data:`SAMPLER_COSTS` key its verification is priced with
    lossless:      whether its output law is the target's (THEORY.md §4, residual exactly 0)
    theory:        ``module:function`` of the theory verifier the replay reproduces
    doc:           one line for docs/config.md
    scan:          chain rules: "leading" (τ = the leading successes under γ-free thresholds
                   ``min(1, r_j)``, TV) or "last" (τ = the last success under thresholds
                   ``h_j`` that depend on γ at its last position, BV); "" for tree rules
    accept_column: chain rules: the trace column holding ``P(τ ≥ j | X^j)`` (TV
                   ``accept_tv`` = Π min(1, r), BV ``p``); "" for tree rules
    subtree:       tree rules: replays on any draw-prefix-closed subtree, not only the whole
                   recorded tree (SpecInfer's walk; docs/trees.md)
    branching:     tree rules: replays on a branching tree trace, not only on K-path tries
    """

    name: str
    kind: str
    replay: tuple[str, ...]
    sampler_cost: str
    lossless: bool
    theory: str
    doc: str
    scan: str = ""
    accept_column: str = ""
    subtree: bool = False
    branching: bool = True

    @property
    def tree(self) -> bool:
        """Whether it verifies draft trees (a tree trace, a tree policy)."""
        return self.kind == "tree"

    @property
    def additive(self) -> bool:
        """Whether ``E[τ | X^s] = Σ_{j≤s} P(τ ≥ j | X^j)`` for every verified length s: true
        for a leading-success scan (its thresholds do not depend on γ, so ``τ^{(s)} =
        min(s, τ_K)``), which makes the greedy top-C allocation optimal (THEORY.md §7)."""
        return self.scan == "leading"

    def replay_classes(self) -> tuple[type, ...]:
        """The classes :attr:`replay` names (imports their modules)."""
        return tuple(_load(path) for path in self.replay)

    def theory_function(self) -> Any:
        """The theory verifier :attr:`theory` names (imports its module)."""
        return _load(self.theory)


def _load(path: str) -> Any:
    module, name = path.split(":")
    return getattr(importlib.import_module(module), name)


#: The verification rules, chain rules first.
CATALOGUE: tuple[RuleEntry, ...] = (
    RuleEntry(name="token", kind="chain", replay=(f"{_CHAIN}:VerifyTables",),
              sampler_cost="token", lossless=True, theory=f"{_VERIFY}:verify_token",
              doc="token verification (TV, Leviathan et al. 2023): accept X_j while η_j < "
                  "min(1, Mb/Ms), THEORY.md §2", scan="leading", accept_column="accept_tv"),
    RuleEntry(name="block", kind="chain", replay=(f"{_CHAIN}:VerifyTables",),
              sampler_cost="block", lossless=True, theory=f"{_VERIFY}:verify_block",
              doc="block verification (BV, Sun et al. 2025): τ = the last j with η_j < h_j, "
                  "THEORY.md §3", scan="last", accept_column="p"),
    RuleEntry(name="specinfer", kind="tree",
              replay=(f"{_TREE}:TreeTables", f"{_TRIE}:TrieTables"), sampler_cost="token",
              lossless=True, theory=f"{_TREES}:specinfer",
              doc="recursive rejection sampling down the tree (SpecInfer, Miao et al. 2024); "
                  "any draw-prefix-closed subtree", subtree=True),
    RuleEntry(name="traversal", kind="tree",
              replay=(f"{_TREE}:TreeTables", f"{_TRIE}:TrieTables"), sampler_cost="token",
              lossless=True, theory=f"{_TREES}:traversal",
              doc="Traversal Verification (Weng et al. 2025), leaf to root in post-order; the "
                  "whole recorded tree"),
    RuleEntry(name="gbv", kind="tree", replay=(f"{_TRIE}:TrieTables",), sampler_cost="token",
              lossless=True, theory=f"{_TREES}:gbv",
              doc="greedy multi-path block verification (Thomas & Pal 2026) on K i.i.d. paths "
                  "(capture --tree KxL); the whole trie", branching=False),
)

#: Each row by name.
BY_NAME: dict[str, RuleEntry] = {row.name: row for row in CATALOGUE}


def names(**want: Any) -> tuple[str, ...]:
    """The names of the rows whose fields (or properties) equal ``want``, in catalogue
    order: ``names(kind="tree")`` is the tree rules, ``names()`` every rule."""
    return tuple(row.name for row in CATALOGUE
                 if all(getattr(row, key) == value for key, value in want.items()))


def rule_entry(rule: str) -> RuleEntry:
    """The row of ``rule``; a one-line error naming the ``verify`` field and the known rules
    for any other name (never a fallback to another rule)."""
    row = BY_NAME.get(rule)
    if row is None:
        raise SpecbatchError(f"verify: expected one of {', '.join(BY_NAME)}, got {rule!r}")
    return row
