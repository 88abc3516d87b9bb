"""benchmarks/ngram_host_bench.py: the numba twin of vLLM's n-gram proposer whose timings
give simulator.cost.features.host's NGRAM_* constants proposes what vLLM's rule proposes,
skips what vLLM skips, and its fit recovers known coefficients."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("numba")

from tests.benchmark_module import load_benchmark

BENCH = Path(__file__).resolve().parents[4] / "benchmarks" / "ngram_host_bench.py"


@pytest.fixture(scope="module")
def bench():
    module = load_benchmark(BENCH.name)
    warnings.simplefilter("ignore", module.NumbaPendingDeprecationWarning)
    return module


def propose(bench, rows, k=4, n_min=2, n_max=3, sampled=None):
    width = max(len(r) for r in rows)
    ids = np.zeros((len(rows), width), np.int32)  # [n, width]
    for i, r in enumerate(rows):
        ids[i, :len(r)] = r
    num_tokens = np.array([len(r) for r in rows], np.int32)  # [n]
    twin = bench.NgramTwin(len(rows), k=k, n_min=n_min, n_max=n_max)
    return twin.propose(sampled or [[1]] * len(rows), num_tokens, ids)


def test_vllms_docstring_example(bench):
    """[1,2,3,4,2,3], n in [2, 3], k 4: the suffix [2,3] follows [1]; the three tokens after
    it are proposed."""
    assert propose(bench, [[1, 2, 3, 4, 2, 3]]) == [[4, 2, 3]]


def test_requests_that_sampled_nothing_or_are_too_short_get_no_draft(bench):
    rows = [[5, 6, 5, 6], [5, 6, 5, 6], [7]]
    assert propose(bench, rows, sampled=[[1], [], [1]]) == [[5, 6], [], []]


def test_the_twin_proposes_what_specbatchs_ngram_rule_proposes(bench):
    from specbatch.traces.capture.ngram import propose_ngram

    rng = np.random.default_rng(1)
    rows = [rng.integers(0, 6, int(rng.integers(1, 80))).tolist() for _ in range(60)]
    for n_min, n_max in ((1, 1), (2, 5), (3, 4)):
        got = propose(bench, rows, k=3, n_min=n_min, n_max=n_max)
        for row, g in zip(rows, got):
            assert g == propose_ngram(np.array(row), 3, n_min, n_max).tolist()


def test_the_fit_recovers_known_coefficients(bench):
    truth = np.array([1e-5, 2e-6, 1.5e-9, 5e-9])  # c0, c1, c2, c3
    rows = [{"n": n, "tokens": n * length, "t": float(bench.design(n, n * length, True) @ truth)}
            for n in (1, 4, 16, 64, 256) for length in (128, 2048, 32768)]
    coef, mape, worst = bench.fit(rows)
    assert np.allclose(coef, truth, rtol=1e-6) and worst < 1e-9
    assert bench.predict(coef, 10, 1000) == pytest.approx(1e-5 + 2e-5 + 1.5e-6 + 5e-7)
