"""Policies that verify a subtree of each request's recorded draft tree (docs/trees.md).

Every request drafts its whole recorded tree (the capture's shape: D draft passes, pass d
over the nodes at depth d); the policy chooses which nodes the target verifies, a node mask
# [n, N] that is draw-prefix closed (:mod:`simulator.replay.tree`). The verify pass carries
s_i + 1 query tokens per request (root included) and the verifier (``verify = specinfer`` or
``traversal``) replays on the verified subtree with common random numbers.

- ``static-tree``: k nodes per request, the k of highest path draft confidence (the product
  of draft probabilities along the path). This is SGLang's EAGLE rule:
  ``python/sglang/srt/speculative/eagle_utils.py::organize_draft_results`` takes
  ``torch.topk(score_list, num_draft_tokens - 1)`` of the cumulative path scores, so
  SGLang's ``--speculative-num-draft-tokens`` is k + 1 here (the root is the last verified
  token). With k = N − 1 it verifies the whole tree, the static trees of TensorRT-LLM's
  ``eagle_choices`` and vLLM's ``speculative_token_tree`` (``num_speculative_tokens`` = the
  tree's nodes); on a path-trie trace (K draft paths of L tokens) k = K·L verifies each
  position's whole trie, whatever its node count.
- ``tetris-tree``: TETRIS over tree nodes: the global top-C nodes of the batch by path draft
  confidence (C = ``budget``, default k·n), at most k + e per request. Scores fall along
  every path and across siblings in draw order, so each request's share is a prefix of its
  own ranking and the frontier stays connected.
- ``tree-optimum``: the bound. The closed subtrees of the batch that maximise Σ_i E[τ_i] under
  C nodes (at most k + e per request), E[τ | S] = Σ_{u∈S} r(u) with SpecInfer's reach r
  (:func:`theory.trees.alloc.optimal_subtrees`, an exact tree-knapsack DP; docs/trees.md). It
  reads the acceptance numbers, which no engine has before verifying.

``static-tree`` and ``tetris-tree`` read only draft-side signals. With ``--predictor
learned|logistic`` both rank by a model of each draw's acceptance fitted on held-out calibration
requests (:mod:`simulator.replay.tree_accept_predictor`): ``static-tree`` then takes the first k
nodes of each request's own frontier-greedy order on the predicted reach, ``tetris-tree`` the
batch's top-C of it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from specbatch.errors import SpecbatchError
from specbatch.simulator.policies.base import Policy
from specbatch.simulator.policies.view import StepView
from specbatch.theory.trees.alloc import optimal_subtrees

if TYPE_CHECKING:
    from specbatch.simulator.config.sim_config import SimConfig

_I64 = np.int64


class TreePolicy(Policy):
    """Base of the tree policies: :meth:`decide_tree` returns ``(drafted, verified, mask)``.

    depth: the most nodes one request may have verified (k, or k + e for ``tetris-tree``),
    which is also what the KV accounting reserves per request for the verify pass."""

    tree = True

    def __init__(self, config: SimConfig, trace_k: int) -> None:
        super().__init__(config, trace_k)
        self.kind = config.predictor
        self.predictor = None  # the fitted TreePredictor (calibrate)

    @classmethod
    def required_depth(cls, config: SimConfig) -> int:
        return int(config.num_speculative_tokens)

    def calibrate(self, trace: Any) -> None:
        """Fit ``config.predictor`` on the tree nodes of the calibration requests ``trace`` (a
        run calls it only with a fitted predictor: the catalogue row's ``predictor``,
        simulator.policies.calibration); the confidence ranking has nothing to fit."""
        if self.kind == "confidence":
            return
        from specbatch.simulator.replay.tree_accept_predictor import fit_tree_predictor

        self.predictor = fit_tree_predictor(trace, self.kind)

    def learned_ranking(self, view: StepView) -> Any:
        """The fitted predictor's :class:`~simulator.replay.tree_accept_predictor.NodeRanking` of
        every trace row (built once per run), or a one-line error before calibration."""
        if self.predictor is None:
            raise SpecbatchError(f"policy {self.name}: predictor {self.kind} needs calibration "
                                 "requests to fit on (set calibration_split > 0)")
        return view.tree_table(("tree_predictor", self.predictor.key), self.predictor.ranking)

    def decide(self, view: StepView) -> tuple[np.ndarray, np.ndarray]:
        drafted, verified, _ = self.decide_tree(view)
        return drafted, verified

    def decide_tree(self, view: StepView) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(drafted # [n], verified # [n], mask # [n, N] bool)``: every request drafts its
        whole tree (N − 1 nodes) and verifies the ``verified[i]`` nodes of ``mask[i]``."""
        counts = self.counts(view)
        tree = view.tree
        drafted = np.full(view.n, tree.drafted, dtype=_I64)
        return drafted, counts, tree.prefix_mask(view.rows, counts)

    def counts(self, view: StepView) -> np.ndarray:
        """Nodes verified per request, each a prefix of its confidence order.  # [n]"""
        raise NotImplementedError


class StaticTree(TreePolicy):
    """``static-tree``: the k most confident nodes of every request's tree (module docstring;
    SGLang's ``organize_draft_results``). Ignores C (its total is k·n, the default C)."""

    name = "static-tree"
    budgeted = False

    def decide_tree(self, view: StepView) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        if self.kind == "confidence":
            return super().decide_tree(view)
        counts = self.counts(view)  # the k best of each row's learned order (module docstring)
        drafted = np.full(view.n, view.tree.drafted, dtype=_I64)
        return drafted, counts, self.learned_ranking(view).prefix_mask(view.rows, counts)

    def counts(self, view: StepView) -> np.ndarray:
        return np.minimum(self.k, view.tree.nodes(view.rows))


class TetrisTree(TreePolicy):
    """``tetris-tree``: the batch's top-C nodes by path draft confidence, at most k + e per
    request; ties go to the lower batch index, then to the earlier node in the request's
    order (module docstring).

    ``config.predictor = "learned" | "logistic"`` ranks by the predicted reach of a model of
    each draw's acceptance fitted on the calibration_split requests' tree nodes instead
    (simulator.replay.tree_accept_predictor: ``frontier_greedy`` on r̂ with the same cap)."""

    name = "tetris-tree"

    @classmethod
    def required_depth(cls, config: SimConfig) -> int:
        return int(config.num_speculative_tokens) + int(config.extra)

    def decide_tree(self, view: StepView) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        if self.kind == "confidence":
            return super().decide_tree(view)
        ranking = self.learned_ranking(view)
        rows = view.rows
        cap = min(self.depth, view.tree.drafted)
        counts = top_counts(ranking.score[rows, :cap], view.budget)
        drafted = np.full(view.n, view.tree.drafted, dtype=_I64)
        return drafted, counts, ranking.prefix_mask(rows, counts)

    def counts(self, view: StepView) -> np.ndarray:
        tree, rows = view.tree, view.rows
        cap = min(self.depth, tree.drafted)
        order = tree.order[rows, :cap]  # [n, cap]
        score = np.take_along_axis(tree.conf[rows], order, axis=1)  # [n, cap], non-increasing
        return top_counts(score, view.budget)


def top_counts(score: np.ndarray, budget: int) -> np.ndarray:
    """Each request's share of the batch's top-C entries of ``score`` # [n, cap] (rows
    non-increasing: a share is a prefix of its row); ties go to the lower request, then to
    the earlier column.  Returns # [n] int64."""
    n, cap = score.shape
    take = min(int(budget), n * cap)
    if take <= 0:
        return np.zeros(n, dtype=_I64)
    req = np.repeat(np.arange(n), cap)
    col = np.tile(np.arange(cap), n)
    chosen = np.lexsort((col, req, -score.ravel()))[:take]
    return np.bincount(req[chosen], minlength=n).astype(_I64)


class TreeOptimum(TetrisTree):
    """``tree-optimum``: the expected-accepted optimum over closed subtrees at the same C and
    cap as ``tetris-tree`` (module docstring). Reads the truth: a bound, not an engine."""

    name = "tree-optimum"

    def decide_tree(self, view: StepView) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        tree, rows = view.tree, view.rows
        masks, _ = optimal_subtrees(tree.pred, tree.reach[rows], int(view.budget),
                                    limit=min(self.depth, tree.drafted))
        drafted = np.full(view.n, tree.drafted, dtype=_I64)
        return drafted, masks[:, 1:].sum(axis=1).astype(_I64), masks


TREE_POLICIES = (StaticTree, TetrisTree, TreeOptimum)
