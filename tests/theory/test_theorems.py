"""theory/theorems.py: every theorem passes on seeded instances, and a broken rule fails."""

from __future__ import annotations

import pytest

import specbatch.theory.exact.enumeration as exact
import specbatch.theory.theorems as catalogue
from specbatch.theory.theorems import CATALOGUE, CheckResult, Theorem, run_catalogue

REQUIRED = {"tv_lossless", "bv_lossless", "tv_tail", "bv_tail", "ordering", "lp_b_is_bv",
            "bv_tv_one_hot", "bv_tv_gamma_one", "iid_formula", "greedy_optimal_monotone",
            "greedy_suboptimal_block", "dp_equals_milp"}


def test_catalogue_covers_every_required_theorem_and_entries_are_complete():
    names = [t.name for t in CATALOGUE]
    assert REQUIRED <= set(names) and len(names) == len(set(names))
    for t in CATALOGUE:
        assert t.statement.endswith(".") and t.source and t.kind in catalogue.KINDS


def test_every_theorem_passes_on_a_few_seeded_instances():
    results = run_catalogue(instances=3, seed=1)
    assert [t.name for t, _ in results] == [t.name for t in CATALOGUE]
    for theorem, result in results:
        assert result.passed, (theorem.name, result)
        assert result.instances >= 3
        if theorem.kind == "error" and theorem.tolerance == 0:
            assert result.margin == 0.0  # exact enumeration: no rounding at all


def test_checks_are_seeded():
    a = run_catalogue(instances=2, seed=5, names=["ordering", "dp_equals_milp"])
    b = run_catalogue(instances=2, seed=5, names=["ordering", "dp_equals_milp"])
    assert [r for _, r in a] == [r for _, r in b]


def test_greedy_counterexample_is_reported():
    [(_, result)] = run_catalogue(instances=5, seed=0, names=["greedy_suboptimal_block"])
    assert result.passed and result.margin > 0
    assert "greedy s=" in result.detail and "optimum s=" in result.detail


def test_a_wrong_block_rule_fails_the_lossless_check(monkeypatch):
    """Block thresholds with TV's residual (THEORY.md §3's wrong variant) must be caught."""
    original = exact.extra_token_law_exact

    def tv_residual(pair, path, k, context=()):
        wrong = exact.DraftPath(path.draft, path.prob, path.accept, path.p, path.z, path.h,
                                path.tau, "token")
        return original(pair, wrong, k, context)

    monkeypatch.setattr(exact, "extra_token_law_exact", tv_residual)
    [(_, result)] = run_catalogue(instances=10, seed=0, names=["bv_lossless"])
    assert not result.passed and result.margin > 0
    [(_, token)] = run_catalogue(instances=5, seed=0, names=["tv_lossless"])
    assert token.passed


@pytest.mark.parametrize(
    "kind, margins, violated, expected",
    [("error", [0, 0.0], False, True), ("error", [0, 1e-3], False, False),
     ("slack", [0.2, -1e-12], False, True), ("slack", [0.2, -1e-3], False, False),
     ("witness", [0.0, 0.3], False, True), ("witness", [0.0, 0.0], False, False),
     ("witness", [0.3], True, False)],
)
def test_verdict_rules(kind, margins, violated, expected):
    theorem = Theorem("t", "s.", "src", kind, 1e-9, lambda rng, n, t: CheckResult(0, 0, True))
    assert catalogue._verdict(theorem, margins, violated=violated).passed is expected
