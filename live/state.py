"""What the live loop's verbs share (:class:`Live`) and its small helpers: counter-based draws, and
closing a step as one :class:`simulator.engine.request_state.StepRecord` on the measured clock."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from specbatch.live.cache import SlotCache
from specbatch.live.config import LiveConfig
from specbatch.live.pool import Pool
from specbatch.live.record import Recorder
from specbatch.live.timeline import Timeline
from specbatch.simulator.engine.request_state import step_record
from specbatch.simulator.policies.registry import Policy
from specbatch.simulator.replay.chain import uniforms
from specbatch.theory.verify.torch_path_stats import probs_at, sample_inverse_cdf

#: Stream tags of the live engine's own draws, xor-ed into the simulator's request keys.
STREAMS = {"first": np.uint64(0x11FE_0001_F125_7000), "draft": np.uint64(0x11FE_0002_D4AF_7000),
           "extra": np.uint64(0x11FE_0003_E874_A000)}


@dataclass
class Live:
    """What the verbs of one run share: models, settings, policy, caches, clocks, records."""

    draft_model: Any
    target_model: Any
    cfg: LiveConfig
    device: Any
    policy: Policy
    keys: np.ndarray  # [N] uint64 the simulator's per-request uniform streams
    pool: Pool
    clock: Timeline
    rec: Recorder
    dcache: SlotCache | None  # None for the n-gram drafter (no draft model)
    tcache: SlotCache
    vocab: int  # V, the target's output rows (the n-gram filler id)
    now: float = 0.0  # the live clock (workload seconds)
    mark: float = 0.0  # timeline reading at the end of the last step (or the idle jump)


def stream_uniforms(live: Live, stream: str, uid: np.ndarray, pos: np.ndarray, width: int):
    """Counter-based uniforms of ``stream`` for requests ``uid`` at output positions ``pos``
    (# [n] each) -> # [n, width] float64."""
    return uniforms(live.keys[uid] ^ STREAMS[stream], pos, width)


def draw(live: Live, logits, u: np.ndarray):
    """One token per row at temperature T (argmax at T = 0).  logits # [n, V], u # [n]"""
    import torch

    if live.cfg.temperature == 0:
        return logits.argmax(-1)
    return sample_inverse_cdf(probs_at(logits, float(live.cfg.temperature)),
                              torch.from_numpy(np.ascontiguousarray(u)).to(live.device))


def step_start(live: Live) -> float:
    return live.now


def step_end(live: Live, start: float, **counts: Any) -> float:
    """Close a step: its duration is the timeline since ``mark``; record it as one
    :class:`simulator.engine.request_state.StepRecord` (``counts``: its fields but replica, time,
    end, verify_time = 0 (the live verification is not timed apart: it is in the overhead) and
    overhead_time = duration − draft_time − target_time)."""
    wall = live.clock.now()
    duration = wall - live.mark
    end = start + duration
    live.rec.step_rows.append(step_record(
        replica=0, time=start, end=end, **counts, verify_time=0.0,
        overhead_time=duration - counts["draft_time"] - counts["target_time"]))
    live.now, live.mark = end, wall
    return end
