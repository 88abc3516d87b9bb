"""Trace summaries: signal quality scores, checked against their definitions."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from specbatch.traces.format.describe import signal_quality, trace_summary, weighted_auc
from specbatch.traces.synth import SynthConfig, synth_trace


def brute_force_auc(score, a):
    """Σ_{i,j} a_i (1 − a_j) ([s_i > s_j] + [s_i = s_j] / 2) / (Σ a · Σ (1 − a))."""
    num = sum(a[i] * (1 - a[j]) * ((score[i] > score[j]) + 0.5 * (score[i] == score[j]))
              for i in range(len(a)) for j in range(len(a)))
    return num / (a.sum() * (1 - a).sum())


@given(st.lists(st.tuples(st.integers(0, 4), st.integers(0, 1000).map(lambda x: x / 1000)),
                min_size=2, max_size=12))
def test_weighted_auc_equals_the_pairwise_definition(rows):
    score = np.array([r[0] for r in rows], dtype=float)  # few values: many ties
    a = np.array([r[1] for r in rows])
    if a.sum() == 0 or (1 - a).sum() == 0:
        assert np.isnan(weighted_auc(score, a))
    else:
        assert weighted_auc(score, a) == pytest.approx(brute_force_auc(score, a), abs=1e-12)


def test_binary_labels_give_the_ordinary_auc():
    a = np.array([1.0, 1.0, 0.0, 0.0])
    assert weighted_auc(np.array([0.9, 0.8, 0.1, 0.2]), a) == 1.0
    assert weighted_auc(np.array([0.1, 0.2, 0.9, 0.8]), a) == 0.0
    assert weighted_auc(np.ones(4), a) == 0.5


def test_a_good_surrogate_scores_better_than_a_poor_one():
    good = signal_quality(synth_trace(SynthConfig(surrogate="good", requests=40)))
    poor = signal_quality(synth_trace(SynthConfig(surrogate="poor", requests=40)))
    assert good["confidence"]["auc"] > poor["confidence"]["auc"]
    assert good["confidence"]["corr"] > poor["confidence"]["corr"]


def test_summary_reports_status_and_signals():
    s = trace_summary(synth_trace(SynthConfig(requests=10)))
    assert s["status"] == "complete"
    assert set(s["signals"]) >= {"confidence", "neg_entropy", "top1", "cumulative_confidence"}
