"""The waiting queue of the compiled loop: the priority heap of
simulator.engine.admission's ranks (:func:`heap_push`, :func:`heap_pop`; FCFS needs none) and
the numpy engine's events between two of a replica's steps (:func:`step_events`: arrivals,
STEP_END, SCHEDULE), which an early stop counts.
"""

from __future__ import annotations

from numba import njit


@njit(cache=True)
def heap_push(heap, size, value):
    """Push ``value`` onto the min-heap ``heap[:size]``; returns the new size."""
    i = size
    heap[i] = value
    while i > 0:
        parent = (i - 1) // 2
        if heap[parent] <= heap[i]:
            break
        heap[parent], heap[i] = heap[i], heap[parent]
        i = parent
    return size + 1


@njit(cache=True)
def heap_pop(heap, size):
    """Remove the smallest of the min-heap ``heap[:size]``; returns the new size."""
    size -= 1
    heap[0] = heap[size]
    i = 0
    while True:
        left, right, low = 2 * i + 1, 2 * i + 2, i
        if left < size and heap[left] < heap[low]:
            low = left
        if right < size and heap[right] < heap[low]:
            low = right
        if low == i:
            break
        heap[low], heap[i] = heap[i], heap[low]
        i = low
    return size


@njit(cache=True)
def step_events(arrival, order, arrived, n_req, t, stepped, idle):
    """How many events the numpy engine (simulator.engine.core) pops between the start of
    the replica's last step and the start of its next one (or the run's end), one replica
    behind it: the arrivals while the last step ran (``t`` its end; at equal times arrivals
    pop first), its STEP_END, then, when that leaves it ``idle`` (nothing running or
    queued), the arrivals at the next arrival's time and their SCHEDULE event (the first
    step: those alone). simulator.engine.v1.driver.step_events lists the same events."""
    i = arrived
    events = 0
    if stepped:
        while i < n_req and arrival[order[i]] <= t:
            i += 1
        events = i - arrived + 1
    if idle and i == arrived and arrived < n_req:
        a = arrival[order[i]]
        while i < n_req and arrival[order[i]] <= a:
            i += 1
        events += i - arrived + 1
    return events

