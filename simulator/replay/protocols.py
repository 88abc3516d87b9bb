"""The replay interface: what the engine and the policies read from a rule's replay tables.

:func:`simulator.replay.replay_tables.tables_for` returns one of two kinds, by the rule's row
(:mod:`simulator.replay.rules`, ``kind``); every class a row names conforms to its kind's
protocol (tests/simulator/replay/test_rules.py checks members and ``tau``'s parameters).

- :class:`ChainReplay` (``kind = "chain"``, :class:`~simulator.replay.chain.VerifyTables`):
  built for one rule; ``tau(rows, verified, eta, out=None)``: request i verifies the first
  ``verified[i] = s_i`` tokens (γ = s_i) of trace row ``rows[i]``'s drafted path, reading
  uniforms ``eta[i, :D]`` (one per draft index, D ≥ max s_i); returns τ # [n] int64, written
  into ``out`` when given. A chain verifies a *count*.
- :class:`TreeReplay` (``kind = "tree"``, :class:`~simulator.replay.tree.TreeTables` for a
  branching tree, :class:`~simulator.replay.trie.TrieTables` for K-path tries): one object
  per trace shared by every tree rule, so the rule is ``tau``'s first argument:
  ``tau(rule, rows, mask, eta)``: request i verifies the node set ``mask[i]`` # [N] bool (root
  included) of row ``rows[i]``'s recorded tree, reading ``eta[i, :uniforms_needed(rule)]``;
  returns τ # [n] int64, the accepted depth. A tree verifies a *node set*. The class's
  ``REPLAYS`` maps each rule it replays to its method; any other rule is a SpecbatchError,
  never another rule's walk.

Both draw η from the same counter-based streams (:func:`simulator.replay.chain.uniforms`),
so every policy faces the same coins (common random numbers).
"""

from __future__ import annotations

from typing import ClassVar, Protocol, runtime_checkable

import numpy as np


@runtime_checkable
class ChainReplay(Protocol):
    """A chain rule's replay tables (module docstring)."""

    rule: str

    def tau(self, rows: np.ndarray, verified: np.ndarray, eta: np.ndarray,
            out: np.ndarray | None = None) -> np.ndarray:
        """τ_i for verified prefix ``s_i``.  rows, verified # [n];  eta # [n, D];
        returns # [n] int64, 0 ≤ τ_i ≤ s_i"""
        ...


@runtime_checkable
class TreeReplay(Protocol):
    """A tree trace's replay tables, read by the engine and the tree policies (module
    docstring).

    REPLAYS:    rule -> the name of the method replaying it (exactly the catalogue rows that
                name the class)
    max_depth:  D, the deepest node (draft passes per request)
    widths:     # [D] query tokens of draft pass d per request
    drafted:    draft tokens per request (the whole tree less the root)
    """

    REPLAYS: ClassVar[dict[str, str]]
    max_depth: int
    widths: np.ndarray

    @property
    def drafted(self) -> int:
        """Draft tokens per request."""
        ...

    def nodes(self, rows: np.ndarray) -> np.ndarray:
        """Non-root nodes of each row's tree.  # [n]"""
        ...

    def uniforms_needed(self, rule: str) -> int:
        """Uniforms one verification under ``rule`` reads (the width of ``tau``'s eta)."""
        ...

    def prefix_mask(self, rows: np.ndarray, counts: np.ndarray) -> np.ndarray:
        """# [n, N] the root and the first ``counts[i]`` nodes of each row's ranking."""
        ...

    def tau(self, rule: str, rows: np.ndarray, mask: np.ndarray, eta: np.ndarray) -> np.ndarray:
        """τ_i, the accepted depth of each request's verified node set.  rows # [n];
        mask # [n, N] bool;  eta # [n, uniforms_needed(rule)];  returns # [n] int64"""
        ...
