"""The policy base class: what every draft/verify policy, built-in or a user's, implements.

A policy sees a :class:`~simulator.policies.view.StepView` of the decode batch and returns
``(drafted, verified)``, both # [n] int64 with ``0 ≤ verified_i ≤ drafted_i ≤ depth``: the draft
model runs ``max(drafted)`` sequential passes over the batch and the target verifies the prefix of
length ``s_i = verified_i`` (query ``s_i + 1``). :func:`simulator.policies.step_plan.plan_step`
turns that into the step's :class:`~simulator.policies.step_plan.Plan` (budget, proposal cap, draft
passes) for the simulator and the live loop alike.

Users import it as ``specbatch.simulator.policies.registry.Policy`` (docs/policies.md); it lives
here so the built-in policies (simulator.policies.papers) and the registry
(simulator.policies.registry) import it without a cycle.
"""

from __future__ import annotations

import numbers
from typing import TYPE_CHECKING, Any

import numpy as np

from specbatch.errors import SpecbatchError
from specbatch.simulator.policies.view import StepView
from specbatch.simulator.replay.rules import rule_entry

if TYPE_CHECKING:
    from specbatch.simulator.config.sim_config import SimConfig
    from specbatch.simulator.cost.interface import CostModel
    from specbatch.simulator.cost.verify_cost import VerifyCost


class Policy:
    """Base class of every policy, the built-in ones and a user's (docs/policies.md).

    ``Policy(config, trace_k)`` is built once per run (and copied per replica) from the run's
    :class:`simulator.config.sim_config.SimConfig` and the trace's draft depth K. At every decode
    step :func:`simulator.policies.step_plan.plan_step` calls :meth:`decide` on a :class:`StepView`
    of the decoding requests, then :meth:`observe` with what the verifier accepted.

    k:      ``config.num_speculative_tokens``
    depth:  the most draft tokens this policy may ask of a request (:meth:`required_depth`)
    rule:   ``config.verify`` ("token" TV | "block" BV | a tree rule)
    rule_row: its :class:`simulator.replay.rules.RuleEntry`: which kind of rule it is
            (``additive``, ``scan``, ``accept_column``, ``tree``) is asked of the row
    budget: ``config.budget`` (None: C = k per decoding request;
    :func:`simulator.policies.step_plan.step_budget`)
    """

    name = "base"
    #: Whether the policy drafts at all (``ar`` does not, so it pays no draft prefill either).
    speculates = True
    #: Whether Σ verified ≤ C holds at every step (checked for a user's policy; built-in
    #: policies that choose per-request lengths say False).
    budgeted = True
    #: The :class:`StepView` fields ``decide`` reads besides n, budget and depth.
    reads: tuple[str, ...] = ()
    #: Whether the policy verifies subtrees of a tree trace (simulator.policies.trees): its
    #: ``decide_tree`` returns a node mask too, and it runs only under a tree rule.
    tree = False

    def __init__(self, config: SimConfig, trace_k: int) -> None:
        self.k = int(config.num_speculative_tokens)
        self.depth = valid_depth(type(self), self.required_depth(config))
        self.rule = config.verify
        self.rule_row = rule_entry(self.rule)
        self.budget = None if config.budget is None else int(config.budget)

    @classmethod
    def required_depth(cls, config: SimConfig) -> int:
        """Draft tokens per request this policy may ask for under ``config`` (a
        :class:`simulator.config.sim_config.SimConfig`): the trace must hold at least this many
        columns and the live loop drafts this many. Default K = k + e (THEORY.md §5)."""
        return int(config.num_speculative_tokens) + int(config.extra)

    def decide(self, view: StepView) -> tuple[np.ndarray, np.ndarray]:
        """``(drafted, verified)``, # [n] int64 each with 0 ≤ verified ≤ drafted ≤ depth."""
        raise NotImplementedError

    def observe(self, verified: np.ndarray, accepted: np.ndarray) -> None:
        """Feedback after verification (``verified``, ``accepted`` # [n] int64)."""

    # Optional hooks. The engine calls each only where a policy implements it (:func:`defines`:
    # its class overrides the base's, or the instance sets it, as ``tetris`` does with a fitted
    # predictor); the defaults below do nothing, so a policy without them runs as before.

    def decide_tree(self, view: StepView) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """A tree policy's (``tree = True``) decision: ``(drafted, verified, mask)``, the node
        mask (``[n, nodes]`` bool) choosing each request's draw-prefix-closed subtree
        (simulator.policies.trees; called by :func:`simulator.policies.step_plan.plan_step`
        instead of :meth:`decide`). A chain policy has none."""
        raise NotImplementedError(f"policy {self.name} is not a tree policy (tree = False)")

    def calibrate(self, trace: Any) -> None:
        """Fit the policy on the held-out calibration requests ``trace`` (a Trace) before the
        replay starts (simulator.policies.calibration.calibrate_policy: a built-in policy is
        calibrated when its catalogue row says so, or it reads a fitted predictor; a user's
        when it defines this, and the run fails without a split). Default: nothing to
        calibrate."""

    def price_verification(self, sampler: VerifyCost | None) -> None:
        """Receive the verification sampler cost the engine charges this run
        (simulator.run.attach_verify_cost; None under ``verify_cost = "none"``), for a
        policy that prices its own steps (``dsd``, ``vllm-dynamic``, ``vllm-adaptive``).
        Default: the policy prices nothing."""

    def run_notes(self, config: SimConfig, cost: CostModel) -> tuple[str, ...]:
        """Notes the run's output adds after the simulation (simulator.run; e.g. what a
        calibrated table assumed). Default: none."""
        return ()


#: The optional hooks of :class:`Policy` (see :func:`defines`).
HOOKS = ("decide_tree", "calibrate", "price_verification", "run_notes")


def defines(policy: Any, hook: str) -> bool:
    """Whether ``policy`` (an instance) implements optional ``hook`` of :data:`HOOKS`: set on
    the instance, or defined by its class other than as :class:`Policy`'s default. A user's
    class that does not subclass Policy is judged by the attribute alone."""
    if hook in getattr(policy, "__dict__", {}):
        return getattr(policy, hook) is not None
    found = getattr(type(policy), hook, None)
    return found is not None and found is not getattr(Policy, hook)


def valid_depth(cls: type, depth: Any) -> int:
    """``required_depth``'s answer as an int, or a one-line error naming the class: an
    integer >= 0 (not a bool, 2.5 or NaN, which would slice the trace's columns wrongly)."""
    if not isinstance(depth, numbers.Integral) or isinstance(depth, (bool, np.bool_)) \
            or depth < 0:
        raise SpecbatchError(f"policy {cls.__module__}:{cls.__qualname__}: required_depth "
                             f"returned {depth!r}, expected an integer >= 0 (draft tokens "
                             "per request; docs/policies.md)")
    return int(depth)
