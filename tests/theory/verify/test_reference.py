"""theory/verify/reference.py: the full-row numpy reference of TV and BV (THEORY.md §2-3)."""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from specbatch.theory.verify.path_stats import accept_from_stats, position_stats
from specbatch.theory.verify.reference import (
    _verify_block_wrong,
    expected_accepted,
    extra_token_law,
    sample_rows,
    tau_law,
    verify_block,
    verify_token,
)
from tests.theory import lossless

RULES = {"token": verify_token, "block": verify_block}


def law_on_paths(tokens, dr, tr, tau, rule):
    """The numpy extra-token law on full-length paths, BV weights from the numpy stats tier."""
    return extra_token_law(dr, tr, tau, rule, p=position_stats(tokens, dr, tr)["p"])


def random_paths(rng, b, gamma, v, concentration=0.5, one_hot_draft=False, one_hot_target=False):
    """Random full rows (Dirichlet) and drafted tokens sampled from the draft rows."""
    draft_rows = rng.dirichlet(np.full(v, concentration), size=(b, gamma))
    target_rows = rng.dirichlet(np.full(v, concentration), size=(b, gamma + 1))
    # Mix some target mass into the draft so ratios straddle 1 (r > 1 lifts BV's p).
    draft_rows = 0.5 * draft_rows + 0.5 * target_rows[:, :gamma]
    if one_hot_draft:
        draft_rows = np.eye(v)[draft_rows.argmax(axis=2)]
    if one_hot_target:
        target_rows = np.eye(v)[target_rows.argmax(axis=2)]
    cdf = draft_rows.cumsum(axis=2)
    u = rng.random((b, gamma, 1)) * cdf[:, :, -1:]
    tokens = np.minimum((cdf <= u).sum(axis=2), v - 1)
    return tokens, draft_rows, target_rows


# ---------------------------------------------------------------- the paper's example (Lemma 1)


def lemma1_paths():
    """Context-free pair on {a, b}, γ = 2: Mb = (1/3, 2/3), Ms = (2/3, 1/3); all 4 drafts."""
    ms, mb = np.array([2 / 3, 1 / 3]), np.array([1 / 3, 2 / 3])
    drafts = np.array(list(itertools.product(range(2), repeat=2)))  # aa, ab, ba, bb
    weights = ms[drafts].prod(axis=1)
    return drafts, np.broadcast_to(ms, (4, 2, 2)), np.broadcast_to(mb, (4, 3, 2)), weights


def test_lemma1_expected_tau_tv_10_9_and_bv_11_9():
    drafts, dr, tr, w = lemma1_paths()
    for rule, expected in (("token", Fraction(10, 9)), ("block", Fraction(11, 9))):
        mean_exact = (w * (tau_law(drafts, dr, tr, rule) * np.arange(3)).sum(axis=1)).sum()
        mean_weights = (w * expected_accepted(drafts, dr, tr, rule)).sum()
        assert mean_exact == pytest.approx(float(expected), abs=1e-12)
        assert mean_weights == pytest.approx(float(expected), abs=1e-12)


def test_lemma1_per_draft_bv_table():
    # THEORY.md §4: aa -> 1/2, ab -> 2, ba -> 3/2, bb -> 2 under BV.
    drafts, dr, tr, _ = lemma1_paths()
    per_draft = (tau_law(drafts, dr, tr, "block") * np.arange(3)).sum(axis=1)
    assert per_draft == pytest.approx([1 / 2, 2, 3 / 2, 2], abs=1e-12)
    # Σ p_i is P(τ ≥ i | X^i), not the conditional mean given the whole draft (aa: 3/4).
    assert expected_accepted(drafts, dr, tr, "block")[0] == pytest.approx(3 / 4)


# ---------------------------------------------------------------- samplers match their exact law


@pytest.mark.parametrize("rule", ["token", "block"])
def test_sampled_tau_and_extra_token_follow_the_exact_law(rule):
    # One fixed path repeated n times: τ frequencies vs tau_law, extra tokens vs extra_token_law.
    rng = np.random.default_rng(3)
    tokens, dr, tr = random_paths(rng, 1, 4, 6)
    n = 40_000
    tokens, dr, tr = (np.repeat(a, n, axis=0) for a in (tokens, dr, tr))
    tau, extra = RULES[rule](tokens, dr, tr, rng.random((n, 4)), rng)
    law = tau_law(tokens[:1], dr[:1], tr[:1], rule)[0]
    assert lossless.chi_square_pvalue(np.bincount(tau, minlength=5), n * law) > lossless.ALPHA
    for t in np.unique(tau):
        picked = tau == t
        expected = law_on_paths(tokens[:1], dr[:1], tr[:1], [t], rule)[0] * picked.sum()
        counts = np.bincount(extra[picked], minlength=6)
        assert lossless.chi_square_pvalue(counts, expected) > lossless.ALPHA


def test_extra_token_laws():
    rng = np.random.default_rng(4)
    tokens, dr, tr = random_paths(rng, 50, 3, 7)
    for t in range(4):
        tau = np.full(50, t)
        tv = law_on_paths(tokens, dr, tr, tau, "token")
        bv = law_on_paths(tokens, dr, tr, tau, "block")
        if t == 3:  # bonus from the last target row, both rules
            assert np.allclose(tv, tr[:, 3]) and np.allclose(bv, tr[:, 3])
            continue
        residual = np.maximum(tr[:, t] - dr[:, t], 0.0)
        assert np.allclose(tv, residual / residual.sum(axis=1, keepdims=True))
        if t == 0:  # p_0 = 1: BV's first residual is TV's
            assert np.allclose(bv, tv)
        p = position_stats(tokens, dr, tr)["p"][:, t - 1] if t else np.ones(50)
        residual = np.maximum(p[:, None] * tr[:, t] - dr[:, t], 0.0)
        mass = residual.sum(axis=1, keepdims=True)
        # Zero mass (small p_τ) means h_τ = 0: τ = t has probability 0; the law falls back.
        expected = np.where(mass > 0, residual / np.where(mass > 0, mass, 1.0), tr[:, t])
        assert np.allclose(bv, expected)


def test_sample_rows_never_draws_a_zero_mass_token():
    rng = np.random.default_rng(5)
    law = rng.random((2000, 9)) * (rng.random((2000, 9)) < 0.4)
    law[:, 4] += 1e-3  # every row has some mass
    draws = sample_rows(law, rng)
    assert (law[np.arange(2000), draws] > 0).all()


# ---------------------------------------------------------------- identities on random paths


@given(st.integers(0, 2**32 - 1), st.integers(1, 5), st.integers(2, 6), st.booleans())
def test_one_hot_draft_gives_the_same_law_under_both_rules(seed, gamma, v, one_hot_target):
    # THEORY.md §3: BV = TV for a deterministic (one-hot) draft, in the law of τ given the
    # path and of the extra token given τ.
    rng = np.random.default_rng(seed)
    tokens, dr, tr = random_paths(
        rng, 20, gamma, v, one_hot_draft=True, one_hot_target=one_hot_target
    )
    assert np.allclose(tau_law(tokens, dr, tr, "token"), tau_law(tokens, dr, tr, "block"))
    for t in range(gamma + 1):
        tau = np.full(20, t)
        assert np.allclose(
            law_on_paths(tokens, dr, tr, tau, "token"),
            law_on_paths(tokens, dr, tr, tau, "block"),
        )


@given(st.integers(0, 2**32 - 1), st.integers(1, 6), st.integers(2, 8))
def test_tau_law_is_a_distribution_and_tv_matches_its_product(seed, gamma, v):
    rng = np.random.default_rng(seed)
    tokens, dr, tr = random_paths(rng, 30, gamma, v)
    for rule in ("token", "block"):
        law = tau_law(tokens, dr, tr, rule)
        assert (law >= -1e-15).all() and np.allclose(law.sum(axis=1), 1.0)
    # TV: E[τ | X^γ] = Σ_i Π_{j≤i} min(1, r_j) exactly, path by path.
    mean_tv = (tau_law(tokens, dr, tr, "token") * np.arange(gamma + 1)).sum(axis=1)
    assert np.allclose(mean_tv, expected_accepted(tokens, dr, tr, "token"))


def test_bv_weights_average_to_the_exact_mean_over_all_drafts():
    # Markov pair, V = 3, γ = 3: enumerate all 27 drafts with weight Ms(x^γ); the mean of Σ p_i
    # equals the exact E[τ_BV] from tau_law, and TV ≤ BV.
    rng = np.random.default_rng(6)
    v, gamma = 3, 3
    ms_init, mb_init = rng.dirichlet(np.ones(v), 2)
    ms_trans, mb_trans = rng.dirichlet(np.ones(v), (2, v))
    drafts = np.array(list(itertools.product(range(v), repeat=gamma)))
    prev = np.concatenate([np.full((len(drafts), 1), -1), drafts], axis=1)  # X^i's last token

    def rows(init, trans, length):
        return np.stack([init if t < 0 else trans[t] for t in prev[:, :length].ravel()]).reshape(
            len(drafts), length, v
        )

    dr, tr = rows(ms_init, ms_trans, gamma), rows(mb_init, mb_trans, gamma + 1)
    weight = np.take_along_axis(dr, drafts[:, :, None], 2)[:, :, 0].prod(axis=1)
    assert weight.sum() == pytest.approx(1.0)
    means = {}
    for rule in ("token", "block"):
        exact = (weight * (tau_law(drafts, dr, tr, rule) * np.arange(gamma + 1)).sum(1)).sum()
        assert (weight * expected_accepted(drafts, dr, tr, rule)).sum() == pytest.approx(exact)
        means[rule] = exact
    assert means["token"] <= means["block"] + 1e-12


# ---------------------------------------------------------------- parity with accept_from_stats


@pytest.mark.parametrize("rule", ["token", "block"])
@pytest.mark.parametrize("kind", ["dirichlet", "peaked", "one_hot_draft", "greedy"])
def test_accept_from_stats_matches_the_full_row_reference(rule, kind):
    # Same uniforms -> same τ, for the full draft length and for every shorter γ' (ragged
    # gamma reusing the same K-column statistics: h_i for i < γ' unchanged, h_γ' = p_γ').
    rng = np.random.default_rng(7)
    b, k, v = 3000, 6, 12
    tokens, dr, tr = random_paths(
        rng,
        b,
        k,
        v,
        concentration=0.05 if kind == "peaked" else 0.7,
        one_hot_draft=kind in ("one_hot_draft", "greedy"),
        one_hot_target=kind == "greedy",
    )
    uniforms = rng.random((b, k))
    st_ = position_stats(tokens, dr, tr)
    gamma = rng.integers(0, k + 1, size=b)
    tau_stats = accept_from_stats(st_["q"], st_["pt"], st_["z"], gamma, uniforms, rule)
    tau_ref = np.empty(b, dtype=np.int64)
    for g in range(k + 1):
        rows = gamma == g
        tau_ref[rows], _ = RULES[rule](
            tokens[rows, :g], dr[rows, :g], tr[rows, : g + 1], uniforms[rows, :g], rng
        )
    assert np.array_equal(tau_stats, tau_ref)
    assert (tau_ref <= gamma).all()


# ---------------------------------------------------------------- statistical losslessness


def numpy_verifier(fn):
    return lambda tokens, dr, tr, uniforms, rng: fn(tokens, dr, tr, uniforms, rng)


@pytest.mark.slow
@pytest.mark.parametrize("rule", ["token", "block"])
def test_numpy_rules_are_lossless_on_a_large_vocabulary(rule):
    # V = 1000, γ = 3, 200k iterations (see tests/theory/lossless.py for the tolerance).
    ms, mb = lossless.iid_pair()
    outputs, taus = lossless.iteration_outputs(RULES[rule], ms, mb, lossless.GAMMA, 200_000, 11)
    pvalues = lossless.lossless_pvalues(outputs, mb)
    assert min(pvalues.values()) > lossless.ALPHA, pvalues
    z = lossless.acceptance_zscore(taus, ms, mb, lossless.GAMMA, rule, 11)
    assert abs(z) < 5.0


@pytest.mark.parametrize("rule", ["token", "block"])
def test_numpy_rules_are_lossless_quick(rule):
    # The same check with 30k iterations (default run); the slow test above uses 200k.
    ms, mb = lossless.iid_pair()
    outputs, taus = lossless.iteration_outputs(RULES[rule], ms, mb, lossless.GAMMA, 30_000, 12)
    pvalues = lossless.lossless_pvalues(outputs, mb)
    assert min(pvalues.values()) > lossless.ALPHA, pvalues
    z = lossless.acceptance_zscore(taus, ms, mb, lossless.GAMMA, rule, 12)
    assert abs(z) < 5.0


def test_known_wrong_block_variant_fails_the_losslessness_test():
    # Π min(1, r) against Π η with TV's residual (THEORY.md §3): not lossless. 30k iterations
    # already give p-values far below the threshold.
    ms, mb = lossless.iid_pair()
    outputs, _ = lossless.iteration_outputs(_verify_block_wrong, ms, mb, lossless.GAMMA, 30_000, 13)
    pvalues = lossless.lossless_pvalues(outputs, mb)
    assert min(pvalues.values()) < 1e-8, pvalues


@pytest.mark.parametrize("bad", [-1, 5])
@pytest.mark.parametrize("rule", ["token", "block"])
def test_token_ids_outside_the_vocabulary_are_refused(bad, rule):
    """A negative id would wrap around to the last vocabulary entry: refused like ids ≥ V."""
    from specbatch.errors import SpecbatchError
    from specbatch.theory.verify.reference import verify_block, verify_token

    tokens, dr, tr = random_paths(np.random.default_rng(0), 2, 3, 5)
    tokens[1, 2] = bad
    verify = verify_token if rule == "token" else verify_block
    with pytest.raises(SpecbatchError, match=r"draft_tokens: expected token ids in 0\.\.4"):
        verify(tokens, dr, tr, np.full((2, 3), 0.5), np.random.default_rng(0))


def _zero_target_paths(b: int = 64):
    """Paths whose first drafted token (id 0) has target probability 0, drafted with
    probability 1/2; every uniform is exactly 0, the one value a closed interval accepts."""
    draft = np.tile(np.array([0.5, 0.5, 0.0]), (b, 2, 1))  # [B, 2, V]
    target = np.tile(np.array([0.0, 0.5, 0.5]), (b, 3, 1))  # [B, 3, V]
    tokens = np.zeros((b, 2), dtype=np.int64)
    tokens[:, 1] = 1
    return tokens, draft, target, np.zeros((b, 2))


@pytest.mark.parametrize("rule", ["token", "block"])
def test_a_token_the_target_gives_probability_zero_is_never_accepted_even_at_eta_zero(rule):
    from specbatch.theory.verify.path_stats import accept_from_stats, position_stats

    tokens, draft, target, eta = _zero_target_paths()
    verify = verify_token if rule == "token" else verify_block
    tau, extra = verify(tokens, draft, target, eta, np.random.default_rng(0))
    assert np.all(tau == 0) and np.all(target[0, 0, extra] > 0)
    stats = position_stats(tokens, draft, target)
    tau = accept_from_stats(stats["q"], stats["pt"], stats["z"], np.full(len(tokens), 2), eta,
                            rule)
    assert np.all(tau == 0)
