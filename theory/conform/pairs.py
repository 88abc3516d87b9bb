"""The model pairs ``specbatch conform`` draws, and their exact tables (THEORY.md §1, §4).

Pair classes (:data:`CLASSES`), seeded, small vocabularies so that every draft and every
output sequence can be enumerated:

- ``iid``: context-free Dirichlet pairs (V = 3, γ = 3);
- ``markov``: first-order Dirichlet pairs (V = 3, γ = 2);
- ``paper``: the block paper's Lemma 1 example (THEORY.md §4: ``Mb = (1/3, 2/3)``,
  ``Ms = (2/3, 1/3)``, γ = 2), exact;
- ``degenerate``: near-degenerate first-order pairs, Dirichlet(0.1) rows mixed with 1e-3 of
  the uniform row (probabilities from about 3e-4 to nearly 1; V = 4, γ = 2);
- ``zero``: exact first-order pairs on multiples of 1/6 in which the target gives probability
  0 to a token the draft proposes (V = 3, γ = 2);
- ``identical``: ``Ms = Mb`` (first order, V = 3, γ = 3): every draft must be accepted.

Greedy drafting (``draft = "greedy"``) replaces the draft by its argmax (ties: the lowest
token id), a one-hot model of the same form, so the exact values (E[τ] of TV and BV, LP B) are
those of the draft the sampler actually sees; in ``identical`` the target is that one-hot
model too.

:class:`PairTables` holds the arrays a sampler run needs: every draft ``x ∈ V^γ`` with its
probability and rows, the target's rows at every prefix of length < γ+1 and the target law of
the first γ+1 output tokens.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from specbatch.theory.exact.small_models import (
    IidModel,
    MarkovModel,
    ModelPair,
    random_pair,
    sequence_prob,
)

#: Pair classes in report order, with (pairs drawn, V, γ).
CLASSES = {
    "iid": (2, 3, 3),
    "markov": (2, 3, 2),
    "paper": (1, 2, 2),
    "degenerate": (2, 4, 2),
    "zero": (2, 3, 2),
    "identical": (1, 3, 3),
}


@dataclass(frozen=True, eq=False)
class PairCase:
    """One pair to check: its class, a label, the pair (draft as the sampler sees it), γ."""

    kind: str
    label: str
    pair: ModelPair
    gamma: int


@dataclass(frozen=True, eq=False)
class PairTables:
    """Float64 arrays of one case, for sampling and for the exact target law.

    ``drafts`` # [D, γ] every draft with ``Ms(x) > 0``, ``draft_prob`` # [D] ``Ms(x)``,
    ``draft_rows`` # [D, γ, V], ``target_rows`` # [D, γ+1, V]; ``prefix_rows[k]`` # [V^k, V]
    ``Mb(·|s)`` for every prefix s of length k (index: s read in base V); ``target_law``
    # [V^(γ+1)] ``Mb(z)`` of the first γ+1 tokens, same indexing.
    """

    drafts: np.ndarray
    draft_prob: np.ndarray
    draft_rows: np.ndarray
    target_rows: np.ndarray
    prefix_rows: tuple
    target_law: np.ndarray


def paper_pair() -> ModelPair:
    """The block paper's Lemma 1 pair (THEORY.md §4), exact: E[τ] TV 10/9, BV 11/9."""
    third = Fraction(1, 3)
    return ModelPair(2, IidModel((2 * third, third)), IidModel((third, 2 * third)), True)


def _row_argmax(row) -> tuple:
    hot = int(np.argmax([float(v) for v in row]))
    one, zero = (Fraction(1), Fraction(0)) if isinstance(row[0], Fraction) else (1.0, 0.0)
    return tuple(one if x == hot else zero for x in range(len(row)))


def greedy_model(model):
    """The one-hot argmax model of an iid or first-order model (same form)."""
    if isinstance(model, IidModel):
        return IidModel(_row_argmax(model.probs))
    return MarkovModel(_row_argmax(model.initial), tuple(_row_argmax(r) for r in model.transition))


def _mix(model, weight: float, vocab: int):
    """``(1 − weight) · row + weight / V`` for every row of a first-order model."""
    def mix(row):
        return tuple((1.0 - weight) * v + weight / vocab for v in row)
    return MarkovModel(mix(model.initial), tuple(mix(r) for r in model.transition))


def _has_blocked_draft(pair: ModelPair) -> bool:
    """Some row where the draft proposes a token the target gives probability 0."""
    rows = [(pair.draft.initial, pair.target.initial)]
    rows += list(zip(pair.draft.transition, pair.target.transition))
    return any(s > 0 and b == 0 for ds, ts in rows for s, b in zip(ds, ts))


def _draw(kind: str, rng: np.random.Generator, vocab: int) -> ModelPair:
    if kind == "iid":
        return random_pair(rng, vocab, "iid")
    if kind == "markov":
        return random_pair(rng, vocab, "markov")
    if kind == "paper":
        return paper_pair()
    if kind == "degenerate":
        raw = random_pair(rng, vocab, "markov", concentration=0.1)
        return ModelPair(vocab, _mix(raw.draft, 1e-3, vocab), _mix(raw.target, 1e-3, vocab), False)
    if kind == "zero":
        while True:
            pair = random_pair(rng, vocab, "markov", concentration=0.7, exact=True, denominator=6)
            if _has_blocked_draft(pair):
                return pair
    target = random_pair(rng, vocab, "markov").target  # identical
    return ModelPair(vocab, target, target, False)


def draw_cases(seed: int, draft: str = "probabilistic") -> list[PairCase]:
    """The seeded pairs of every class, with the draft as a ``draft``-law sampler sees it."""
    rng = np.random.default_rng(seed)
    cases = []
    for kind, (count, vocab, gamma) in CLASSES.items():
        for i in range(count):
            pair = _draw(kind, rng, vocab)
            if draft == "greedy":
                hot = greedy_model(pair.draft)
                pair = ModelPair(vocab, hot, hot if kind == "identical" else pair.target,
                                 pair.exact)
            cases.append(PairCase(kind, f"{kind}#{i + 1}", pair, gamma))
    return cases


#: Pairs whose target rows tie at their maximum (V = 3, γ = 3), added when the target is greedy
#: (temperature 0): non-speculative greedy decoding takes the lowest tied token id, the case a
#: greedy verifier that accepts any tied draft gets wrong.
TIE_CASES = 2


def tie_cases(seed: int, draft: str = "probabilistic") -> list[PairCase]:
    """Seeded first-order pairs whose every target row is a permutation of (3/8, 3/8, 1/4)."""
    rng = np.random.default_rng([seed, 7])
    cases = []
    for i in range(TIE_CASES):
        def tied():
            return tuple(float(v) for v in rng.permutation([0.375, 0.375, 0.25]))
        target = MarkovModel(tied(), tuple(tied() for _ in range(3)))
        drafted = random_pair(rng, 3, "markov").draft
        if draft == "greedy":
            drafted = greedy_model(drafted)
        cases.append(PairCase("ties", f"ties#{i + 1}", ModelPair(3, drafted, target, False), 3))
    return cases


def _floats(row) -> list:
    return [float(v) for v in row]


def pair_tables(case: PairCase) -> PairTables:
    """Enumerate drafts, rows and the target law of the first γ+1 tokens (see the class)."""
    pair, gamma, vocab = case.pair, case.gamma, case.pair.vocab
    drafts, probs, d_rows, t_rows = [], [], [], []
    for x in itertools.product(range(vocab), repeat=gamma):
        prob = float(sequence_prob(pair.draft, x))
        if prob <= 0.0:
            continue
        drafts.append(x)
        probs.append(prob)
        d_rows.append([_floats(pair.draft.row(x[:i])) for i in range(gamma)])
        t_rows.append([_floats(pair.target.row(x[:i])) for i in range(gamma + 1)])
    prefix_rows = tuple(
        np.array([_floats(pair.target.row(s)) for s in itertools.product(range(vocab), repeat=k)])
        for k in range(gamma + 1))
    law = np.array([float(sequence_prob(pair.target, z))
                    for z in itertools.product(range(vocab), repeat=gamma + 1)])
    prob = np.array(probs)
    return PairTables(np.array(drafts, dtype=np.int64), prob / prob.sum(), np.array(d_rows),
                      np.array(t_rows), prefix_rows, law)
