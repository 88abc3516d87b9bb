"""Row gathers over CSR offsets: the rows of chosen requests (or a tree's nodes) as one index
array, without a Python loop per request."""

from __future__ import annotations

import numpy as np


def concat_ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Concatenation of ``arange(s, s + l)`` for every (s, l), without a Python loop."""
    lengths = np.asarray(lengths, dtype=np.int64)
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    block_start = np.cumsum(lengths) - lengths
    return np.repeat(np.asarray(starts, dtype=np.int64) - block_start, lengths) + np.arange(total)
