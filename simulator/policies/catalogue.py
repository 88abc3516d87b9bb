"""The policy catalogue: one row per built-in policy, the single place its identity is written.

Every former name list is derived from :data:`CATALOGUE`: the registry
(simulator.policies.registry.POLICIES, classes loaded from each row's ``path``), ``--help``'s list
(simulator.config.field_values.POLICY_NAMES), the settings a policy would ignore (``extra``, k,
verify, ``predictor``, an engine knob; simulator.config.checks, simulator.policies.knobs), the
policies that calibrate, the tree policies and the live loop's (live.config.LIVE_POLICIES). A new
built-in is one class plus one row here. The module imports nothing of the simulator, so the
configuration modules read it without loading numpy or any policy (no import cycle: the policy
modules import simulator.policies.base, never the registry).

A user's ``package.module:Class`` (docs/policies.md) has no row: the checks that need a row
treat it as using k and e, verifying, reading no predictor and no engine knob, as before.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class PolicyEntry:
    """One built-in policy.

    name:       its public name (``policy`` field, ``--policy``)
    path:       ``module:Class`` of its class, imported when the registry is built
    knobs:      the SimConfig fields only this policy reads (refused for any other policy)
    uses_k:     whether its window is ``num_speculative_tokens`` (``ar`` never drafts; ``dsd``
                plans its own window), so a summary reports k and e
    uses_extra: whether it may draft beyond k (e > 0 is refused otherwise)
    verifies:   whether it verifies drafts at all (block verification is refused otherwise)
    calibrates: whether it always calibrates on held-out requests (simulator.policies.calibration)
    predictor:  whether it reads the ``predictor`` field (a fitted predictor calibrates)
    tree:       whether it verifies subtrees of a tree trace (a tree rule; simulator.policies.trees)
    whole_tree: whether it verifies the whole recorded tree (the only policy for ``traversal``,
                ``gbv`` and path tries)
    engine:     whether it models a serving engine's rule (simulator.policies.engines and kin)
    live:       whether the live loop runs it (live.loop; its class says ``live = True``)
    min_draft:  what must be >= 1 for it to draft: "k", "depth" (k + e) or "" (nothing)
    confidence: whether its choices read the draft's per-token confidences (an acceptance
                profile has none: simulator.replay.profile_replay)
    compiled:   whether the compiled vllm-v1 loop (simulator.engine.v1.compiled) runs it, for
                the runs it covers (its ``compiled_gap`` names the settings it leaves to numpy)
    """

    name: str
    path: str
    knobs: tuple[str, ...] = ()
    uses_k: bool = True
    uses_extra: bool = True
    verifies: bool = True
    calibrates: bool = False
    predictor: bool = False
    tree: bool = False
    whole_tree: bool = False
    engine: bool = False
    live: bool = False
    min_draft: str = ""
    confidence: bool = False
    compiled: bool = False

    def load(self) -> type:
        """The policy class this row names (imports its module)."""
        module, cls = self.path.split(":")
        return getattr(importlib.import_module(module), cls)


_CORE = "specbatch.simulator.policies.papers"
_ENGINE = "specbatch.simulator.policies.engines"
_STOP = "specbatch.simulator.policies.stops"
_TREE = "specbatch.simulator.policies.trees"
_ADAPTIVE = "specbatch.simulator.policies.adaptive"

#: The built-in policies, sorted by name.
CATALOGUE: tuple[PolicyEntry, ...] = (
    PolicyEntry(name="ar", path=f"{_CORE}:AutoRegressive", uses_k=False, uses_extra=False,
                verifies=False, compiled=True),
    PolicyEntry(name="batch-schedule", path=f"{_ENGINE}:BatchSchedule",
                knobs=("num_speculative_tokens_per_batch_size", "draft_len_schedule"),
                uses_extra=False, engine=True, min_draft="k", compiled=True),
    PolicyEntry(name="dsd", path=f"{_CORE}:DynamicSD", knobs=("dsd_max_k",), uses_k=False,
                uses_extra=False, compiled=True),
    PolicyEntry(name="ema-adaptive", path=f"{_ENGINE}:EmaAdaptive",
                knobs=("speculative_adaptive_config",), uses_extra=False, engine=True,
                compiled=True),
    PolicyEntry(name="entropy-stop", path=f"{_STOP}:EntropyStop", knobs=("entropy_threshold",),
                engine=True, min_draft="depth", confidence=True, compiled=True),
    PolicyEntry(name="fixed", path=f"{_CORE}:Fixed", uses_extra=False, live=True, min_draft="k",
                compiled=True),
    PolicyEntry(name="hindsight", path=f"{_CORE}:Hindsight", min_draft="depth", compiled=True),
    PolicyEntry(name="oracle", path=f"{_CORE}:Oracle", min_draft="depth", compiled=True),
    PolicyEntry(name="specdec++", path=f"{_STOP}:SpecDecPP", knobs=("specdec_threshold",),
                calibrates=True, engine=True, min_draft="depth", confidence=True,
                compiled=True),
    PolicyEntry(name="static-tree", path=f"{_TREE}:StaticTree", predictor=True, tree=True,
                whole_tree=True),
    PolicyEntry(name="tetris", path=f"{_CORE}:Tetris", predictor=True, live=True,
                min_draft="depth", confidence=True, compiled=True),
    PolicyEntry(name="tetris-tree", path=f"{_TREE}:TetrisTree", predictor=True, tree=True,
                confidence=True),
    PolicyEntry(name="threshold", path=f"{_CORE}:Threshold", min_draft="depth", confidence=True,
                compiled=True),
    PolicyEntry(name="tree-optimum", path=f"{_TREE}:TreeOptimum", tree=True),
    PolicyEntry(name="vllm-adaptive", path=f"{_ADAPTIVE}:VllmAdaptive",
                knobs=("adaptive_confidences", "adaptive_cost_tables", "adaptive_survival",
                       "adaptive_profile_context_len"),
                uses_extra=False, predictor=True, engine=True, min_draft="k", confidence=True,
                compiled=True),
    PolicyEntry(name="vllm-dynamic", path=f"{_ENGINE}:VllmDynamic", uses_extra=False,
                calibrates=True, engine=True, min_draft="k", compiled=True),
)

#: Each row by name.
BY_NAME: dict[str, PolicyEntry] = {row.name: row for row in CATALOGUE}


def names(**want: Any) -> tuple[str, ...]:
    """The names of the rows whose fields equal ``want`` (all rows without arguments), in
    catalogue order: ``names(tree=True)`` is the tree policies."""
    return tuple(row.name for row in CATALOGUE
                 if all(getattr(row, key) == value for key, value in want.items()))


def entry(name: str) -> PolicyEntry | None:
    """The row of built-in ``name``; None for a user's ``module:Class``."""
    return BY_NAME.get(name)


#: Each engine-policy knob and the policy that reads it.
KNOB_POLICY: dict[str, str] = {knob: row.name for row in CATALOGUE for knob in row.knobs}
