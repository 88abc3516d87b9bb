"""theory/trees/multidraft.py: n drafts of one token — the verifiers, their exact laws, and α*."""

from __future__ import annotations

from fractions import Fraction as F

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specbatch.errors import SpecbatchError
from specbatch.theory.exact.small_models import random_pair
from specbatch.theory.trees import multidraft as md

#: The block paper's Lemma 1 pair (THEORY.md §4): target p = (1/3, 2/3), draft q = (2/3, 1/3).
P, Q = (F(1, 3), F(2, 3)), (F(2, 3), F(1, 3))


def rows(seed: int, vocab: int, exact: bool = True, concentration: float = 1.0) -> tuple:
    pair = random_pair(seed, vocab, "iid", concentration=concentration, exact=exact)
    return pair.target.row(()), pair.draft.row(())


def test_paper_pair_by_hand():
    # α* = min(H = ∅: 1, {a}: 1/3 + 1 − 4/9, {a, b}: 1) = 8/9
    assert md.alpha_star(P, Q, 2) == F(8, 9)
    # RRS: drafts aa (4/9) accept 1/2; ab, ba, bb accept surely -> 4/9·1/2 + 5/9 = 7/9
    accept, law = md.verifier_law(P, Q, 2, "specinfer")
    assert accept == F(7, 9) and law == P
    # without replacement the two drafts are a and b: every output is a draft
    assert md.verifier_law(P, Q, 2, "specinfer_without_replacement") == (1, P)
    assert md.optimal_acceptance_lp(P, Q, 2) == pytest.approx(8 / 9, abs=1e-9)


def test_one_draft_is_the_single_draft_coupling():
    for seed in range(5):
        p, q = rows(seed, 4)
        single = sum(min(a, b) for a, b in zip(p, q))
        assert md.alpha_star(p, q, 1) == single
        for name in md.VERIFIERS:
            assert md.verifier_law(p, q, 1, name)[0] == single


def test_identical_models_accept_always():
    p, _ = rows(3, 4)
    for n in (1, 2, 3):
        assert md.alpha_star(p, p, n) == 1
        assert md.verifier_law(p, p, n, "specinfer")[0] == 1


def test_unit_acceptance_condition():
    """Khisti et al.: α* = 1 iff p(H) >= q(H)^n for every token set H."""
    p, q = (F(1, 4), F(3, 4)), (F(1, 2), F(1, 2))
    # H = {a}: 1/4 >= (1/2)^2 holds, so two drafts accept surely; one draft does not
    assert md.alpha_star(p, q, 2) == 1 and md.alpha_star(p, q, 1) == F(3, 4)
    p = (F(1, 5), F(4, 5))  # 1/5 < 1/4: no longer
    assert md.alpha_star(p, q, 2) == F(1, 5) + 1 - F(1, 4)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10**6), vocab=st.integers(2, 5), n=st.integers(1, 3),
       concentration=st.sampled_from([0.3, 1.0, 3.0]))
def test_alpha_star_sorted_prefixes_equal_all_sets(seed, vocab, n, concentration):
    p, q = rows(seed, vocab, concentration=concentration)
    assert md.alpha_star(p, q, n) == md.alpha_star_bruteforce(p, q, n)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10**6), vocab=st.integers(2, 6), n=st.integers(1, 3),
       concentration=st.sampled_from([0.3, 1.0, 3.0]))
def test_alpha_star_equals_the_ot_lp(seed, vocab, n, concentration):
    p, q = rows(seed, vocab, exact=False, concentration=concentration)
    assert md.optimal_acceptance_lp(p, q, n) == pytest.approx(md.alpha_star(p, q, n), abs=1e-9)


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10**6), vocab=st.integers(2, 4), n=st.integers(1, 3),
       concentration=st.sampled_from([0.3, 1.0, 3.0]))
def test_verifiers_are_lossless_and_below_their_optimum(seed, vocab, n, concentration):
    p, q = rows(seed, vocab, concentration=concentration)
    star = md.alpha_star(p, q, n)
    for name, (_, sampling) in md.VERIFIERS.items():
        accept, law = md.verifier_law(p, q, n, name)
        assert md.law_residual(law, p) == 0, name
        if sampling == "iid":
            assert accept <= star, name
    # SpecTr's guarantee: at least 1 − (1 − 1/n)^n of the optimum
    spectr = md.verifier_law(p, q, n, "spectr")[0]
    assert float(spectr) >= (1 - (1 - 1 / n) ** n) * float(star) - 1e-12


def test_spectr_rho_is_the_smallest_valid_rho():
    for seed in range(6):
        p, q = rows(seed, 3, concentration=0.5)
        for n in (2, 3):
            rho = md.spectr_rho(p, q, n)
            beta = sum(min(b, a / rho) for a, b in zip(p, q))
            assert 1 <= rho <= n and rho * beta >= 1 - (1 - beta) ** n
            if rho > 1:  # a hair below is invalid
                low = rho - F(1, 2**40)
                beta = sum(min(b, a / low) for a, b in zip(p, q))
                assert low * beta < 1 - (1 - beta) ** n


def test_draft_laws():
    p, q = rows(7, 3)
    for n in (1, 2, 3):
        iid = md.draft_law(q, n, "iid")
        distinct = md.draft_law(q, n, "distinct")
        assert sum(iid.values()) == 1 and sum(distinct.values()) == 1
        assert all(len(set(d)) == len(d) for d in distinct)


def test_residual_check_catches_a_wrong_verifier():
    """RRS that keeps the original target after a rejection (no residual) is lossy."""
    def wrong(p, q, drafts):
        zero = p[0] * 0
        accepted, reach = [zero] * len(p), zero + 1
        for x in drafts:
            a = min(zero + 1, p[x] / q[x])
            accepted[x] += reach * a
            reach = reach * (1 - a)
        return md.DraftOutcome(tuple(accepted), tuple(reach * v for v in md.residual(p, q)))

    law = [0, 0]
    for drafts, mass in md.draft_law(Q, 2).items():
        out = wrong(P, Q, drafts)
        for y in range(2):
            law[y] += mass * (out.accepted[y] + out.fallback[y])
    assert md.law_residual(tuple(law), P) > 0


def test_compare_report_and_size_limit():
    out = md.compare(P, Q, 2)
    assert out["optimal_acceptance"] == pytest.approx(8 / 9)
    assert out["fractions"]["specinfer"] == "7/9"
    assert out["verifiers"]["specinfer"]["gap_to_optimum"] == pytest.approx(1 / 9)
    with pytest.raises(SpecbatchError, match="LP variables"):
        md.compare(P, Q, 40)
