"""The decode-step contract both engines run: a policy's :class:`Plan`, built by :func:`plan_step`.

At every decode step the simulator (:mod:`simulator.engine.core`) and the live loop
(:mod:`live.loop`) hand the policy a :class:`~simulator.policies.view.StepView` of the decoding
requests and call :func:`plan_step`, the one place that

1. sets the step's budget C (:func:`step_budget`: ``config.budget``, or k per decoding
   request when unset; THEORY.md §5),
2. asks the policy for its per-request draft and verify lengths (``Policy.decide``),
3. checks them against the contract when asked (policies loaded from a user's module, the
   reference engine; :func:`check_lengths`),
4. caps them at what the drafter proposed (n-gram drafts; :meth:`StepView.cap`),
5. returns the plan, whose :meth:`Plan.draft_passes` D = max_i d_i is the count of
   sequential draft passes over the requests still drafting.

The plan is a chain per request (request i drafts ``drafted[i]`` tokens and the target verifies
their first ``verified[i]``) or, for a tree policy, a verified subtree (:attr:`Plan.tree`).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from specbatch.errors import SpecbatchError
from specbatch.simulator.policies.registry import Policy, call_user, is_builtin
from specbatch.simulator.policies.view import StepView

_tuple_new = tuple.__new__  # a NamedTuple from a tuple without its class call (per-step record)


class Plan(NamedTuple):
    """One decode step's decision for the n decoding requests (batch order of the view).

    drafted:  # [n] int64 d_i, draft tokens request i drafts
    verified: # [n] int64 s_i ≤ d_i, the prefix of its draft the target verifies
    depth:    the most tokens any request may draft (the policy's depth, d_i ≤ depth)
    tree:     None: every request's draft is a chain (token j's parent is token j − 1); else
              # [n, N] bool, the verified nodes of each request's recorded draft tree (root
              included; simulator.replay.tree), and drafted[i] the whole tree's draft tokens
              (N − 1, or K·L for a trie of K paths; its draft passes are the tree's depth).

    The draft passes D = max_i d_i are :meth:`draft_passes`.
    """

    drafted: np.ndarray
    verified: np.ndarray
    depth: int
    tree: Any = None

    def draft_passes(self, drafted_total: int | None = None) -> int:
        """D = max_i d_i, the draft model's sequential passes (0 for an empty batch).

        drafted_total: Σ d_i when the caller already has it. Σ d_i = n·depth means every
        request drafts ``depth`` (each d_i ≤ depth), the common case, answered without a
        reduction over the batch (the simulator's hot path).
        """
        n = self.drafted.shape[0]
        if n and drafted_total == n * self.depth:
            return self.depth
        return int(self.drafted.max()) if n else 0


def step_budget(k: int, budget: int | None, n: int) -> int:
    """C, the draft tokens the target may verify this step: ``budget`` when set, else k per
    decoding request (THEORY.md §5)."""
    return k * n if budget is None else int(budget)


def plan_step(policy: Policy, view: StepView, check: bool = False) -> Plan:
    """The policy's :class:`Plan` for ``view`` (module docstring, steps 1-5).

    check: verify the policy's lengths against the contract (:func:`check_lengths`) and turn
    any exception its ``decide`` raises into a one-line error naming the policy.
    """
    budget = view.budget = step_budget(policy.k, policy.budget, view.n)
    if policy.tree:  # a node mask per request (simulator.policies.trees)
        if check and not is_builtin(type(policy)):
            drafted, verified, mask = call_user(type(policy), "decide_tree", policy.decide_tree,
                                                view)
        else:
            drafted, verified, mask = policy.decide_tree(view)
        return _tuple_new(Plan, (drafted, verified, view.depth, mask))  # hot path: no class call
    if check:
        decided = call_user(type(policy), "decide", policy.decide, view)
        view.budget = budget  # checked against C as given, whatever decide did to the view
        drafted, verified = check_lengths(policy, view, decided)
    else:
        drafted, verified = policy.decide(view)
    drafted, verified = view.cap(drafted, verified)
    return _tuple_new(Plan, (drafted, verified, view.depth, None))  # d, s, depth, tree


def policy_label(policy: Any) -> str:
    """How errors name a policy: its registry name, or ``module:Class`` for a user's class."""
    cls = type(policy)
    if is_builtin(cls):
        return cls.name
    return f"{cls.__module__}:{cls.__qualname__}"


def check_lengths(policy: Policy, view: StepView, decided: Any) -> tuple[np.ndarray, np.ndarray]:
    """``decide``'s (drafted, verified) as int64 arrays, or a one-line error naming the policy
    and the broken rule: two integer arrays of shape [n], 0 ≤ s_i ≤ d_i ≤ depth, and Σ s_i ≤ C
    unless the policy declares ``budgeted = False``."""
    label, n = policy_label(policy), view.n

    def fail(what: str) -> None:
        raise SpecbatchError(f"policy {label}: decide {what} (the contract: docs/policies.md)")

    if not isinstance(decided, (tuple, list)) or len(decided) != 2:
        fail(f"returned {type(decided).__name__}, expected a pair (drafted, verified)")
    out = []
    for name, value in zip(("drafted", "verified"), decided):
        arr = np.asarray(value)
        if arr.shape != (n,):
            fail(f"returned {name} of shape {arr.shape}, expected ({n},): one length per "
                 "decoding request")
        if n and arr.dtype.kind not in "iu":
            fail(f"returned {name} of dtype {arr.dtype}, expected integers")
        out.append(arr.astype(np.int64, copy=False))
    drafted, verified = out
    for bad, what in ((verified < 0, "verified < 0"), (verified > drafted, "verified > drafted"),
                      (drafted > view.depth, f"drafted > depth = {view.depth}")):
        if bad.any():
            i = int(np.argmax(bad))
            fail(f"returned {what} for {int(bad.sum())} of {n} requests (first: request {i}, "
                 f"drafted {int(drafted[i])}, verified {int(verified[i])})")
    total = int(verified.sum())
    if policy.budgeted and total > view.budget:
        fail(f"verified {total} tokens, over the step's budget C = {view.budget} (set "
             "budgeted = False on a policy that ignores C)")
    return drafted, verified
