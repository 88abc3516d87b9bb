"""Statistical losslessness harness shared by test_verify.py and test_verify_torch.py.

A context-free (iid) model pair on a large vocabulary, so the target law of the output is
known: one verification iteration ``O = X^τ Y`` followed by fresh target sampling up to length
γ+1 must give γ+1 i.i.d. ``Mb`` tokens (THEORY.md §4: "one iteration followed by ordinary
target sampling is valid iff ..."). Each position is tested against ``Mb`` over the whole
vocabulary, and the joint law of all γ+1 positions over a coarse partition of the vocabulary
(G groups of roughly equal target mass) against the product law: chi-square tests with bins of
expected count < 5 pooled.

Tolerance: under the null every p-value is Uniform(0, 1); ``ALPHA = 1e-4`` per test with at
most γ+2 = 5 tests gives a family-wise false alarm below 5e-4 for a random seed, and the seeds
are fixed so the tests are deterministic. Against the known wrong variant p-values are below
1e-30, so the threshold is not tuned to the data.

The same run also checks the acceptance rate (a verifier that always rejects is lossless but
useless): mean τ must match the Monte Carlo mean of ``Σ_i P(τ ≥ i | X^i)`` (TV's product, BV's
p_i) over independent draft paths within 5 standard errors.
"""

from __future__ import annotations

import numpy as np
from scipy import stats

ALPHA = 1e-4
VOCAB = 1000
GAMMA = 3


def iid_pair(vocab: int = VOCAB, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(Ms, Mb) # [V] each: Dirichlet target, draft = 0.4·target + 0.6·another Dirichlet."""
    rng = np.random.default_rng(seed)
    mb = rng.dirichlet(np.full(vocab, 0.5))
    ms = 0.4 * mb + 0.6 * rng.dirichlet(np.full(vocab, 0.5))
    return ms, mb


def draw(dist: np.ndarray, size, rng: np.random.Generator) -> np.ndarray:
    """i.i.d. draws from ``dist`` # [V] by inverse CDF."""
    cdf = np.cumsum(dist)
    return np.minimum(np.searchsorted(cdf, rng.random(size) * cdf[-1], side="right"), len(dist) - 1)


def iteration_outputs(verify, ms, mb, gamma, n, seed, chunk=5000):
    """Run ``verify`` on n fresh iid draft paths; return (outputs # [n, γ+1], τ # [n]).

    ``verify(draft_tokens, draft_rows, target_rows, uniforms, seed) -> (τ, extra)`` with numpy
    inputs and outputs (the torch tests wrap their functions). Outputs are ``X^τ Y`` followed by
    fresh ``Mb`` draws.
    """
    rng = np.random.default_rng(seed)
    v = len(ms)
    outputs, taus = [], []
    for start in range(0, n, chunk):
        b = min(chunk, n - start)
        tokens = draw(ms, (b, gamma), rng)
        draft_rows = np.broadcast_to(ms, (b, gamma, v))
        target_rows = np.broadcast_to(mb, (b, gamma + 1, v))
        tau, extra = verify(tokens, draft_rows, target_rows, rng.random((b, gamma)), rng)
        tau, extra = np.asarray(tau), np.asarray(extra)
        out = draw(mb, (b, gamma + 1), rng)  # fresh target sampling after the iteration
        position = np.arange(gamma + 1)[None, :]
        out = np.where(position < tau[:, None], np.pad(tokens, ((0, 0), (0, 1))), out)
        out[np.arange(b), tau] = extra
        outputs.append(out)
        taus.append(tau)
    return np.concatenate(outputs), np.concatenate(taus)


def chi_square_pvalue(observed: np.ndarray, expected: np.ndarray) -> float:
    """Pearson chi-square p-value, bins with expected count < 5 pooled into one."""
    small = expected < 5.0
    obs = np.append(observed[~small], observed[small].sum())
    exp = np.append(expected[~small], expected[small].sum())
    keep = exp > 0
    obs, exp = obs[keep], exp[keep]
    stat = float(((obs - exp) ** 2 / exp).sum())
    return float(stats.chi2.sf(stat, df=len(obs) - 1))


def groups_of(mb: np.ndarray, n_groups: int) -> np.ndarray:
    """Token -> group in 0..G-1, consecutive tokens of roughly equal target mass."""
    edges = np.cumsum(mb) - mb / 2
    return np.minimum((edges * n_groups).astype(np.int64), n_groups - 1)


def lossless_pvalues(outputs: np.ndarray, mb: np.ndarray, n_groups: int = 6) -> dict:
    """p-values: each position vs Mb (V bins) and the joint of all positions (G^(γ+1) cells)."""
    n, length = outputs.shape
    v = len(mb)
    result = {}
    for position in range(length):
        counts = np.bincount(outputs[:, position], minlength=v)
        result[f"position {position + 1}"] = chi_square_pvalue(counts, n * mb)
    group = groups_of(mb, n_groups)
    group_mass = np.bincount(group, weights=mb, minlength=n_groups)
    cell = np.zeros(n, dtype=np.int64)
    expected = np.full(1, float(n))
    for position in range(length):
        cell = cell * n_groups + group[outputs[:, position]]
        expected = np.multiply.outer(expected, group_mass).ravel()
    counts = np.bincount(cell, minlength=n_groups**length)
    result["joint"] = chi_square_pvalue(counts, expected)
    return result


def acceptance_zscore(taus: np.ndarray, ms, mb, gamma, rule, seed, n=200_000) -> float:
    """z-score of mean τ against the Monte Carlo mean of Σ_i P(τ ≥ i | X^i) (TV / BV)."""
    rng = np.random.default_rng(seed + 1)
    tokens = draw(ms, (n, gamma), rng)
    ratio = mb[tokens] / ms[tokens]  # [n, γ]
    if rule == "token":
        weights = np.cumprod(np.minimum(ratio, 1.0), axis=1)
    else:
        p = np.ones(n)
        weights = np.empty((n, gamma))
        for i in range(gamma):
            p = np.minimum(p * ratio[:, i], 1.0)
            weights[:, i] = p
    estimate = weights.sum(axis=1)
    se = np.sqrt(taus.var() / len(taus) + estimate.var() / n)
    return float((taus.mean() - estimate.mean()) / se)
