"""The running batch of the live engine: one row per running request, row r = cache row r."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass
class Batch:
    """The running requests, row r = cache row r of the target cache (and of the draft cache,
    when the drafter is a model).

    uid:     # [n] request ids
    pend_t:  # [n] the last emitted token, not yet in the target cache
    pend_d:  # [n, 2] tokens not yet in the draft cache, right-padded
    pend_w:  # [n] how many of pend_d are real (1, or 2 after a fully accepted draft)
    """

    uid: np.ndarray
    pend_t: Any
    pend_d: Any
    pend_w: Any

    @property
    def n(self) -> int:
        return int(self.uid.shape[0])

    def take(self, rows: np.ndarray) -> Batch:
        import torch

        idx = torch.from_numpy(rows).to(self.pend_t.device)
        return Batch(self.uid[rows], self.pend_t[idx], self.pend_d[idx], self.pend_w[idx])

    def join(self, other: Batch) -> Batch:
        import torch

        return Batch(np.concatenate([self.uid, other.uid]),
                     torch.cat([self.pend_t, other.pend_t]),
                     torch.cat([self.pend_d, other.pend_d]),
                     torch.cat([self.pend_w, other.pend_w]))


def empty_pending(device):
    """The pending tensors of an empty batch: (pend_t # [0], pend_d # [0, 2], pend_w # [0])."""
    import torch

    z = torch.zeros(0, dtype=torch.long, device=device)
    return z, torch.zeros((0, 2), dtype=torch.long, device=device), z
