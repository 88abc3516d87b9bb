"""An example user policy: ``specbatch simulate --policy my_policy:ConfidenceFloor``."""

import numpy as np

from specbatch.simulator.policies.registry import Policy


class ConfidenceFloor(Policy):
    """Every request drafts its full depth K = k + e; verify the prefix whose cumulative draft
    confidence Π_{l≤j} conf_l stays at or above FLOOR, and when those prefixes hold more than
    the step's budget C tokens, only the C most confident of them."""

    reads = ("conf",)  # StepView signals used before verification
    FLOOR = 0.3

    def decide(self, view):
        conf = np.cumprod(np.minimum(view.conf, 1.0), axis=1)  # [n, depth], rows non-increasing
        score = np.where(conf >= self.FLOOR, conf, -1.0).ravel()
        best = np.argsort(-score, kind="stable")[: view.budget]  # ties: earlier token first
        keep = np.zeros(score.shape, dtype=bool)
        keep[best] = score[best] >= 0
        verified = keep.reshape(conf.shape).sum(axis=1)  # kept tokens form a prefix of each row
        drafted = np.full(view.n, self.depth)
        return drafted, verified
