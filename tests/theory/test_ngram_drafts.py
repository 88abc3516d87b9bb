"""N-gram (prompt-lookup) drafts in the exact tier (THEORY.md §3-4): a one-hot draft that
proposes m ≤ γ tokens and then the virtual filler (a token the target gives probability 0,
as capture records it) is verified losslessly, block verification has the same law of τ and
of the emitted tokens as token verification, and verifying the fillers changes nothing: the
law at γ equals the law at γ = m."""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from specbatch.theory.exact import enumeration as exact
from specbatch.theory.exact.small_models import ModelPair, TableModel
from specbatch.traces.capture.ngram import propose_ngram


def exact_row(rng: np.random.Generator, vocab: int, denominator: int = 12) -> tuple:
    """A random row over ``vocab`` real tokens in multiples of 1/denominator (zeros occur),
    then 0 for the virtual filler."""
    counts = rng.multinomial(denominator, rng.dirichlet(np.full(vocab, 0.7)))
    return tuple(Fraction(int(c), denominator) for c in counts) + (Fraction(0),)


def ngram_pair(seed: int, vocab: int, gamma: int, context: list[int], n_min: int,
               n_max: int) -> tuple[ModelPair, int]:
    """(target table over vocab + 1 tokens with the filler at probability 0 and an n-gram
    one-hot draft of depth γ, m = tokens the proposer found).

    The draft follows the proposal ``X_1..X_m`` from ``context``, then proposes the filler
    (id ``vocab``); prefixes off that path (never drafted) get arbitrary one-hot rows.
    """
    rng = np.random.default_rng(seed)
    filler = vocab
    proposal = [int(x) for x in propose_ngram(context, gamma, n_min, n_max)]
    path = tuple(proposal + [filler] * (gamma - len(proposal)))
    target, draft = {}, {}
    for length in range(gamma + 2):
        for prefix in itertools.product(range(vocab + 1), repeat=length):
            target[prefix] = exact_row(rng, vocab)
            if length <= gamma:
                hot = path[length] if length < gamma and prefix == path[:length] else \
                    int(rng.integers(vocab + 1))
                draft[prefix] = tuple(Fraction(int(x == hot)) for x in range(vocab + 1))
    pair = ModelPair(vocab + 1, TableModel(draft, gamma, "draft"),
                     TableModel(target, gamma + 1, "target"), exact=True)
    return pair, len(proposal)


@st.composite
def cases(draw):
    vocab = draw(st.integers(2, 3))
    gamma = draw(st.integers(1, 3))
    context = draw(st.lists(st.integers(0, vocab - 1), max_size=10))
    n_min = draw(st.integers(1, 2))
    return vocab, gamma, context, n_min, n_min + draw(st.integers(0, 1)), \
        draw(st.integers(0, 2**32 - 1))


@settings(max_examples=40, deadline=None)
@given(cases())
def test_block_equals_token_and_both_are_lossless(case):
    vocab, gamma, context, n_min, n_max, seed = case
    pair, _ = ngram_pair(seed, vocab, gamma, context, n_min, n_max)
    block = exact.iteration_law(pair, gamma, "block")
    assert block == exact.iteration_law(pair, gamma, "token")  # law of (τ, emitted tokens)
    assert exact.tau_law(pair, gamma, "block") == exact.tau_law(pair, gamma, "token")
    assert exact.expected_tau(pair, gamma, "block") == exact.expected_tau(pair, gamma, "token")
    assert exact.validity_residual(pair, gamma, "token") == 0
    assert all(vocab not in out for (_, out) in block)  # the filler is never emitted


@settings(max_examples=40, deadline=None)
@given(cases())
def test_verifying_the_fillers_equals_verifying_the_proposal(case):
    vocab, gamma, context, n_min, n_max, seed = case
    pair, m = ngram_pair(seed, vocab, gamma, context, n_min, n_max)
    law = exact.iteration_law(pair, gamma, "token")
    if m == 0:  # nothing proposed: one ordinary target step, τ = 0
        want = {(0, (y,)): p for y, p in enumerate(pair.target.row(())) if p > 0}
        assert law == want
    else:
        for rule in ("token", "block"):
            assert exact.iteration_law(pair, gamma, rule) == exact.iteration_law(pair, m, rule)
    # E[τ] of a one-hot draft: Σ_i Π_{j≤i} Mb(x_j | x^{j-1}) over the proposed tokens only
    path = next(iter(exact.draft_paths(pair, gamma, "token"))).draft
    reach, total = Fraction(1), Fraction(0)
    for i in range(m):
        reach *= pair.target.row(path[:i])[path[i]]
        total += reach
    assert exact.expected_tau(pair, gamma, "token") == total
