"""The live loop's side of the decode-step contract: a :class:`~simulator.policies.step_plan.Plan`
from the draft it just ran.

The policy sees the draft's own signals (``conf``: the draft's temperature-1 probability of each
drafted token, or 1/0 for an n-gram draft's real/filler tokens) through an array
:class:`~simulator.policies.view.StepView`, the requests in the simulator's batch order (admission
order), and :func:`simulator.policies.step_plan.plan_step` applies the budget C = k·n, the proposal
cap and the contract checks exactly as the simulator does.
"""

from __future__ import annotations

import numpy as np

from specbatch.errors import require
from specbatch.live.ngram import proposed_confidence
from specbatch.simulator.policies.registry import Policy
from specbatch.simulator.policies.step_plan import Plan, plan_step, policy_label
from specbatch.simulator.policies.view import StepView


def draft_confidence(draft_logits, draft_tokens) -> np.ndarray:
    """The draft's temperature-1 probability of each drafted token, computed exactly as
    :func:`theory.verify.torch_path_stats.path_stats_torch` computes ``draft_conf`` (so the trace
    records what the policy read).  draft_logits # [n, K, V], draft_tokens # [n, K] -> # [n, K]"""
    import torch

    p1 = torch.log_softmax(draft_logits.double(), dim=-1).exp()
    return p1.gather(-1, draft_tokens.unsqueeze(-1)).squeeze(-1).cpu().numpy()


def plan_from_draft(policy: Policy, rank: np.ndarray, kv: np.ndarray, x, draft_logits,
                    proposed: np.ndarray | None) -> Plan:
    """The step's :class:`simulator.policies.step_plan.Plan`
    (:func:`simulator.policies.step_plan.plan_step`, checked) from the simulator's policy on the
    draft's signals, the rows handed over in the simulator's batch order (admission order) and the
    plan returned in the batch's row order. With ``proposed`` # [n] (n-gram drafts) the plan caps
    every request at its proposed count. The
    draft already ran: a plan that drafts anything but that (every request's full depth, or
    its proposed count) is a one-line error.

    rank: # [n] each request's place in the FCFS order;  kv: # [n];  x: # [n, K] drafted
    tokens;  draft_logits: # [n, K, V];  proposed: # [n] or None
    """
    n, depth = x.shape
    order = np.argsort(rank, kind="stable")
    signals = {}
    if "conf" in policy.reads:
        signals["conf"] = (draft_confidence(draft_logits, x) if proposed is None
                           else proposed_confidence(proposed, depth))[order]
    view = StepView.from_signals(kv[order], 0, depth,
                                 proposed=None if proposed is None else proposed[order],
                                 **signals)
    plan = plan_step(policy, view, check=True)
    drafted, verified = np.empty(n, dtype=np.int64), np.empty(n, dtype=np.int64)
    drafted[order], verified[order] = plan.drafted, plan.verified
    ran = np.full(n, depth, dtype=np.int64) if proposed is None else proposed
    require(np.array_equal(drafted, ran),
            f"policy {policy_label(policy)}: expected a plan drafting what the live loop "
            f"drafted (every request's full depth {depth}, or its proposed count), got drafted "
            f"{drafted[:8].tolist()}{' ...' if n > 8 else ''}")
    return plan._replace(drafted=drafted, verified=verified)
