"""theory/exact/enumeration.py: exact laws of one iteration and of the loop (THEORY.md §2-4).

The paper's example must match as exact Fractions; random pairs (V <= 4, γ <= 3, all three
model forms, exact rationals with zeros) must satisfy every identity exactly.
"""

from __future__ import annotations

from fractions import Fraction as F

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import specbatch.theory.exact.enumeration as exact
from specbatch.theory.exact.small_models import one_hot_draft, pair_from_dict, random_pair

PAPER = pair_from_dict({"vocab": 2, "draft": {"iid": ["2/3", "1/3"]},
                        "target": {"iid": ["1/3", "2/3"]}})


# ----------------------------------------------------------------- the paper's example (§4)


def test_paper_example_expected_tau_is_exact():
    assert exact.expected_tau(PAPER, 2, "token") == F(10, 9)
    assert exact.expected_tau(PAPER, 2, "block") == F(11, 9)
    assert exact.lp_joint_formula(PAPER, 2) == F(12, 9)
    assert exact.expected_tau_formula(PAPER, 2, "token") == F(10, 9)
    assert exact.expected_tau_formula(PAPER, 2, "block") == F(11, 9)


def test_paper_example_per_draft_table():
    table = exact.per_draft(PAPER, 2, "block")
    a, b = 0, 1
    assert table == {
        (a, a): (F(4, 9), F(1, 2)),
        (a, b): (F(2, 9), F(2)),
        (b, a): (F(2, 9), F(3, 2)),
        (b, b): (F(1, 9), F(2)),
    }


def test_paper_example_lost_ninth_is_the_ba_constraint():
    # P(τ ≥ 2, X² = ba) <= P(τ ≥ 1, X_1 = b) · Mb(a | b) = 1/3 · 1/3 = 1/9 (THEORY.md §4)
    paths = {p.draft: p for p in exact.draft_paths(PAPER, 2, "block")}
    assert paths[(1, 0)].prob * paths[(1, 0)].tail(2) == F(1, 9)
    assert F(12, 9) - exact.expected_tau(PAPER, 2, "block") == F(1, 9)


def test_paper_example_is_lossless_both_rules():
    for rule in ("token", "block"):
        assert exact.validity_residual(PAPER, 2, rule) == 0
        assert exact.tail_residual(PAPER, 2, rule) == 0
        assert exact.loop_residual(PAPER, 2, rule, 4) == 0
        law = exact.iteration_law(PAPER, 2, rule)
        assert sum(law.values()) == 1
        assert all(len(out) == tau + 1 for tau, out in law)


def test_theory_note_conditioning_on_the_whole_draft_differs_from_sum_p():
    # Σ_i p_i for draft aa is 1/2 + 1/4, while E[τ | X² = aa] = 1/2: only E over X matches.
    path = next(p for p in exact.draft_paths(PAPER, 2, "block") if p.draft == (0, 0))
    assert path.p[1] + path.p[2] == F(3, 4)
    assert path.expected_tau() == F(1, 2)


# ----------------------------------------------------------------- random pairs (hypothesis)


@st.composite
def pairs(draw, max_vocab=4, max_gamma=3, n=0):
    vocab = draw(st.integers(2, max_vocab))
    gamma = draw(st.integers(1, max_gamma))
    form = draw(st.sampled_from(["iid", "markov", "table"]))
    seed = draw(st.integers(0, 2**32 - 1))
    conc = draw(st.sampled_from([0.3, 1.0, 3.0]))
    depth = gamma + max(n - 1, 0)
    return random_pair(seed, vocab, form, depth=depth, concentration=conc, exact=True), gamma


@settings(max_examples=40)
@given(pairs())
def test_both_rules_are_valid_exactly(case):
    pair, gamma = case
    for rule in ("token", "block"):
        law = exact.iteration_law(pair, gamma, rule)
        assert sum(law.values()) == 1
        assert exact.validity_residual(pair, gamma, rule) == 0


@settings(max_examples=15)
@given(pairs(max_vocab=3, max_gamma=2, n=3))
def test_loop_output_law_equals_target_law(case):
    pair, gamma = case
    for rule in ("token", "block"):
        assert exact.loop_residual(pair, gamma, rule, 3) == 0


@settings(max_examples=40)
@given(pairs())
def test_tail_identities_and_closed_forms(case):
    pair, gamma = case
    for rule in ("token", "block"):
        assert exact.tail_residual(pair, gamma, rule) == 0
        assert exact.expected_tau(pair, gamma, rule) == exact.expected_tau_formula(
            pair, gamma, rule
        )


@settings(max_examples=40)
@given(pairs())
def test_ordering_tv_le_bv_le_joint(case):
    pair, gamma = case
    tv = exact.expected_tau(pair, gamma, "token")
    bv = exact.expected_tau(pair, gamma, "block")
    assert tv <= bv <= exact.lp_joint_formula(pair, gamma)


@settings(max_examples=30)
@given(pairs(), st.integers(0, 1000))
def test_block_equals_token_for_one_hot_drafts(case, seed):
    pair, gamma = case
    hot = one_hot_draft(pair, seed, depth=gamma)
    assert exact.iteration_law(hot, gamma, "block") == exact.iteration_law(hot, gamma, "token")


@settings(max_examples=30)
@given(pairs(max_gamma=1))
def test_block_equals_token_for_gamma_one(case):
    pair, _ = case
    assert exact.iteration_law(pair, 1, "block") == exact.iteration_law(pair, 1, "token")


@settings(max_examples=30)
@given(st.integers(2, 4), st.integers(1, 3), st.integers(0, 2**32 - 1))
def test_iid_acceptance_formula(vocab, gamma, seed):
    iid = random_pair(seed, vocab, "iid", exact=True)
    alpha = sum(min(s, b) for s, b in zip(iid.draft.row(()), iid.target.row(())))
    lhs = exact.expected_tau(iid, gamma, "token") + 1
    rhs = sum(alpha**i for i in range(gamma + 1))  # = (1 − α^{γ+1}) / (1 − α)
    assert lhs == rhs
    if alpha != 1:
        assert lhs == (1 - alpha ** (gamma + 1)) / (1 - alpha)


def test_float_pairs_are_lossless_to_rounding():
    pair = random_pair(11, 4, "markov", depth=3)
    for rule in ("token", "block"):
        assert exact.validity_residual(pair, 3, rule) < 1e-12
        assert abs(exact.expected_tau(pair, 3, rule)
                   - exact.expected_tau_formula(pair, 3, rule)) < 1e-12


# ----------------------------------------------------------------- catching wrong rules


def test_validity_residual_catches_tv_residual_under_block_thresholds(monkeypatch):
    """The known wrong variant (THEORY.md §3) reuses TV's residual: not lossless."""
    original = exact.extra_token_law_exact

    def tv_residual(pair, path, k, context=()):
        return original(pair, exact.DraftPath(path.draft, path.prob, path.accept, path.p,
                                              path.z, path.h, path.tau, "token"), k, context)

    pair = random_pair(5, 3, "markov", exact=True)
    assert exact.validity_residual(pair, 3, "block") == 0
    monkeypatch.setattr(exact, "extra_token_law_exact", tv_residual)
    assert exact.validity_residual(pair, 3, "block") > F(1, 1000)
    assert exact.loop_residual(pair, 3, "block", 3) > 0


def test_errors_are_specbatch_errors():
    from specbatch.errors import SpecbatchError

    with pytest.raises(SpecbatchError, match="rule: expected one of"):
        exact.expected_tau(PAPER, 2, "greedy")
    shallow = random_pair(0, 2, "table", depth=1)
    with pytest.raises(SpecbatchError, match="table model 'draft': depth 1 is too small"):
        exact.loop_law(shallow, 2, "token", 3)
    with pytest.raises(SpecbatchError, match="n: expected 1..4"):
        exact.loop_law(PAPER, 2, "token", 5)
