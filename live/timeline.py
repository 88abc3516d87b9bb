"""The measured clock of a live run: seconds since an origin, minus paused instrumentation.

Work done only to record the run (trace statistics the torch verifier does not need) runs
inside :meth:`Timeline.paused` and is cut out of the timeline, so the recorded step times
are those of the decoding alone. On CUDA every read calls ``torch.cuda.synchronize()``, so
a time stamp marks finished device work.
"""

from __future__ import annotations

import time
from contextlib import contextmanager


class Timeline:
    """``now()``: seconds on the measured timeline; ``paused()``: a block cut out of it."""

    def __init__(self, device) -> None:
        self.device = device
        self.cuda = device.type == "cuda"
        self.paused_s = 0.0

    def now(self) -> float:
        if self.cuda:
            import torch

            torch.cuda.synchronize(self.device)
        return time.perf_counter() - self.paused_s

    @contextmanager
    def paused(self):
        start = self.now()
        try:
            yield
        finally:
            self.paused_s += self.now() - start
