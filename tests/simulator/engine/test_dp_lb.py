"""vLLM's DP load balancer (router vllm_dp_lb; simulator.engine.core.Engine.dp_lb_route) by
hand: least 4 x waiting + running on the counts last published, the pick counted as waiting
until the next publication 100 ms later."""

from __future__ import annotations

from collections import deque
from types import SimpleNamespace

import numpy as np

from specbatch.simulator.engine.core import Engine
from specbatch.simulator.engine.request_state import Replica, Row


def ranks(waiting: list[int], running: list[int]) -> SimpleNamespace:
    reps = []
    for i, (w, r) in enumerate(zip(waiting, running)):
        rep = Replica(i)
        rep.waiting = deque(range(w))
        rep.state = np.zeros((len(Row), r), dtype=np.int64)
        reps.append(rep)
    return SimpleNamespace(replicas=reps, lb_counts=None, lb_published=0.0)


def test_scores_and_the_stale_counts_by_hand():
    e = ranks([1, 0], [0, 3])  # scores 4 and 3
    route = Engine.dp_lb_route
    assert route(e, 0.0) == 1  # 3 < 4; rank 1's waiting count becomes 1: score 7
    assert route(e, 0.05) == 0  # not republished: 4 < 7; rank 0 now 8
    assert route(e, 0.06) == 1  # 7 < 8
    assert e.lb_counts == [[2, 0], [2, 3]]
    e.replicas[0].waiting.clear()  # the ranks' real queues at the next publication
    assert route(e, 0.2) == 0 and e.lb_published == 0.2  # republished: 0 < 3
    assert route(e, 0.21) == 1  # 4 vs 3: rank 1


def test_ties_go_to_the_lowest_rank():
    e = ranks([0, 0, 0], [2, 2, 2])
    assert [Engine.dp_lb_route(e, 0.0) for _ in range(3)] == [0, 1, 2]
