"""Exact output law of vLLM's ``synthetic`` mode, so ``specbatch conform`` can say how far from
the target it is (THEORY.md §4), not only that it is lossy.

The synthetic mode (:func:`specbatch.theory.conform.vllm_modes.vllm_synthetic`) accepts position i
with a fixed conditional rate ``c_i`` whatever the models say, so given a draft x
``P(τ = k | x) = Π_{j<k} c_j · (1 − c_k)`` (k < γ) and ``Π_j c_j`` (k = γ); the extra token
comes from the residual ``max(Mb − Ms, 0)`` at τ (for a one-hot draft: ``Mb`` without the
drafted token; the target row when that residual is empty) or the bonus row ``Mb(·|x)``.
One iteration followed by target sampling to γ+1 tokens has the law
``Σ_x Ms(x) Σ_k P(τ = k | x) [z^k = x^k] Y_k(z_{k+1}) Mb(z_{k+2..γ+1} | z^{k+1})``,
enumerated here over every draft and every ``z ∈ V^(γ+1)``.
"""

from __future__ import annotations

import itertools

import numpy as np

from specbatch.theory.conform.pairs import PairCase, PairTables
from specbatch.theory.conform.vllm_modes import SYNTHETIC_RATES, conditional_rates


def _tau_law(gamma: int, rates) -> np.ndarray:
    """``P(τ = k)``, k = 0..γ, of fixed conditional rates ``c_1..c_γ``."""
    c = conditional_rates(rates[:gamma])
    survive, law = 1.0, []
    for k in range(gamma + 1):
        law.append(survive * ((1.0 - c[k]) if k < gamma else 1.0))
        if k < gamma:
            survive *= c[k]
    return np.array(law)


def _extra_law(tables: PairTables, d: int, k: int, greedy: bool) -> np.ndarray:
    """Law of the extra token after accepting k tokens of draft d (vLLM's resampling)."""
    mb = tables.target_rows[d, k]
    if k == tables.drafts.shape[1]:
        return mb
    if greedy:
        residual = mb.copy()
        residual[tables.drafts[d, k]] = 0.0
    else:
        residual = np.maximum(mb - tables.draft_rows[d, k], 0.0)
    return residual / residual.sum() if residual.sum() > 0 else mb


def synthetic_law(case: PairCase, tables: PairTables, greedy: bool = False,
                  rates=SYNTHETIC_RATES) -> np.ndarray:
    """Exact law of the first γ+1 tokens (indexed like ``tables.target_law``).  # [V^(γ+1)]"""
    vocab, gamma = case.pair.vocab, case.gamma
    n = gamma + 1
    seqs = list(itertools.product(range(vocab), repeat=n))
    # completion[k][z] = Mb(z_{k+1..n-1} | z^k ... ) : product of target rows after position k
    completion = np.ones((n + 1, len(seqs)))
    for zi, z in enumerate(seqs):
        for start in range(n):
            prob, code = 1.0, 0
            for j in range(n):
                if j >= start:
                    prob *= tables.prefix_rows[j][code][z[j]]
                code = code * vocab + z[j]
            completion[start, zi] = prob
        completion[n, zi] = 1.0
    tau = _tau_law(gamma, rates)
    law = np.zeros(len(seqs))
    for d, x in enumerate(tables.drafts):
        for k in range(gamma + 1):
            extra = _extra_law(tables, d, k, greedy)
            for zi, z in enumerate(seqs):
                if tuple(z[:k]) == tuple(x[:k]):
                    law[zi] += tables.draft_prob[d] * tau[k] * extra[z[k]] * completion[k + 1, zi]
    return law

