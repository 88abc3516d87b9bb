"""theory/conform/catalogue.py: conform passes every correct engine sampler and catches every
broken or lossy one, naming the deviation."""

from __future__ import annotations

import pytest

from specbatch.theory.conform.catalogue import CATALOGUE, draws_needed, run_catalogue
from specbatch.theory.conform.check import conform
from specbatch.theory.conform.samplers import BUILTINS, load_sampler

#: The reduced run of the fast suite: three pair classes, 300 samples per pair, one seed.
FAST_KINDS = ("paper", "markov", "ties")

#: The words of the violation each broken or lossy row must be caught by.
NAMED = {
    "sglang-single-0.5": "law of the first",
    "sglang-acc-0.5": "law of the first",
    "vllm-synthetic": "law of the first",
    "ascend-block-unfixed": "law of the first",
    "ragged-misaligned": "differ from the draft",
    "greedy-tie-accepts": "differ from non-speculative greedy decoding",
    "bug-1cat-656": "law of the first",
    "bug-ascend-7839": "law of the first",
    "bug-vllm-32852": "law of the first",
    "bug-vllm-27077": "differ from non-speculative greedy decoding",
    "bug-openvino-4190": "law of the first",
}


def test_every_row_is_a_builtin_with_a_source():
    assert {r.name for r in CATALOGUE} <= set(BUILTINS)
    assert {r.name for r in CATALOGUE if not r.should_pass} == set(NAMED)
    assert all(r.source and (r.should_pass or r.deviation) for r in CATALOGUE)


@pytest.mark.parametrize("row", CATALOGUE, ids=lambda r: r.name)
def test_the_catalogue_at_a_reduced_size(row):
    report = conform(load_sampler(row.name), samples=300, seed=0, alpha=0.01, kinds=FAST_KINDS)
    if row.should_pass:
        assert not report.lossy, [c.violations for c in report.cases]
        return
    assert report.lossy
    assert report.verdict == ("LOSSY" if row.expected == "broken" else "lossy (by design)")
    assert any(NAMED[row.name] in v for c in report.cases for v in c.violations)


@pytest.mark.slow
def test_the_catalogue_at_full_size_over_repeated_seeds():
    """Every row judged right at 20,000 samples per pair for seeds 0-2 (family-wise α = 0.01:
    the correct rows' pass is the stated false-alarm rate at work), and the draws needed."""
    results = run_catalogue(20_000, 3, 0.01)
    assert all(r.correct for r in results), [(r.row.name, r.caught) for r in results]
    assert all(r.draws_needed is not None for r in results if not r.row.should_pass)


def test_draws_needed_climbs_the_ladder_to_the_first_size_that_catches():
    row = next(r for r in CATALOGUE if r.name == "ascend-block-unfixed")
    assert draws_needed(row, 1, 0.01, ("paper",), ladder=(2, 3, 500)) == 500
