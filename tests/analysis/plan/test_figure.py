"""analysis/plan/figure.py: the frontier figure's ticks read as plain numbers (issue 46:
"2x10^1" on the latency axis, fractional GPU counts on the cost axis)."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from specbatch.analysis.plan.figure import readable_ticks  # noqa: E402


def tick_labels(latencies, gpus, priced=False):
    fig, ax = plt.subplots()
    ax.scatter(gpus, latencies)
    readable_ticks(ax, latencies, priced)
    fig.canvas.draw()
    ys = [t.get_text() for t in ax.get_yticklabels(minor=False) if t.get_text()]
    ys += [t.get_text() for t in ax.get_yticklabels(minor=True) if t.get_text()]
    xs = [t.get_text() for t in ax.get_xticklabels() if t.get_text()]
    y_lo, y_hi = ax.get_ylim()
    shown = [float(v) for v in ys if y_lo <= float(v) <= y_hi]
    plt.close(fig)
    return ys, xs, shown


@pytest.mark.parametrize("latencies", [
    [1.5, 3.2, 19.0, 25.0],  # more than a decade: log, 1-2-5 ticks
    [2.8, 4.1, 9.5],  # 3x-10x: log, every digit
    [3.05, 3.1, 3.3],  # narrow: linear
    [0.9, 0.95, 1.2, 40.0, 120.0],
])
def test_latency_ticks_are_plain_numbers_and_some_fall_in_view(latencies):
    ys, _, shown = tick_labels(latencies, [1, 2, 4, 8, 16][:len(latencies)])
    assert ys and all(v.replace(".", "", 1).replace("−", "").isdigit() for v in ys), ys
    assert not any("10^" in v or "times" in v or "$" in v for v in ys)
    assert len(shown) >= 2, (ys, latencies)


def test_a_gpu_axis_has_whole_number_ticks_only():
    _, xs, _ = tick_labels([2.0, 3.0], [1, 2])
    assert xs and all(float(v.replace("−", "-")) == int(float(v.replace("−", "-"))) for v in xs)
