"""The replay tables of a verification rule on a trace: the one dispatch from a rule's
catalogue row (:mod:`simulator.replay.rules`) to the class that replays it, chain
(:mod:`simulator.replay.chain`) or tree (:mod:`simulator.replay.trie`). It sits above both, so
the catalogue stays free of replay imports and the replay classes may read the catalogue."""

from __future__ import annotations

from typing import Any

from specbatch.errors import SpecbatchError
from specbatch.simulator.replay.chain import shared_tables
from specbatch.simulator.replay.rules import CATALOGUE, rule_entry
from specbatch.simulator.replay.trie import tree_tables_for


def tables_for(trace: Any, rule: str, cache: Any = None) -> Any:
    """The replay tables of ``rule`` on ``trace``: a chain rule's
    :class:`~simulator.replay.chain.VerifyTables` (a :class:`ChainReplay`), a tree rule's
    :class:`~simulator.replay.tree.TreeTables` or :class:`~simulator.replay.trie.TrieTables`
    (a :class:`TreeReplay`; the same object for every tree rule, taken from ``cache`` when
    given: a ``get(key, build, *args)`` table cache such as the policies' ``TraceTables``).

    Raises SpecbatchError for an unknown rule, a tree rule on a chain trace, or a rule the
    trace's tree kind has no replay class for (gbv on a branching tree)."""
    row = rule_entry(rule)
    if not row.tree:
        (cls,) = row.replay_classes()
        return shared_tables(trace, rule, cls)  # one per loaded trace and rule
    tables = (tree_tables_for(trace) if cache is None
              else cache.get(("tree",), tree_tables_for, trace))
    if type(tables) not in row.replay_classes():
        fits = [r.name for r in CATALOGUE if r.tree and type(tables) in r.replay_classes()]
        raise SpecbatchError(f"verify: expected a rule that replays on this trace's "
                             f"{type(tables).__name__} ({', '.join(fits)}), got {rule!r}")
    return tables
