"""theory/trees/stats.py: per-node replay numbers reproduce every tree verifier's law of τ."""

from __future__ import annotations

import numpy as np
import pytest

from specbatch.theory.exact.small_models import random_pair
from specbatch.theory.trees import stats as TS
from specbatch.theory.trees import tree_shapes as S
from specbatch.theory.trees import verifiers as T

CASES = [("2,1", "iid"), ("2,2", "distinct"), ("1,2", "iid"), ("2x2", "iid"), ("3x1", "iid"),
         ("3,2,1", "topk")]


def pair_for(seed: int, shape):
    form = ("iid", "markov", "table")[seed % 3]
    return random_pair(seed, 3, form, depth=shape.depth, concentration=0.7, exact=True)


def reference_tau_law(pair, root, shape, verifier) -> tuple:
    law = [0] * (shape.depth + 1)
    for (path, _), mass in T.VERIFIERS[verifier](pair, root, shape).items():
        law[len(path)] += mass
    return tuple(law)


@pytest.mark.parametrize("spec, sampling", CASES)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_stats_give_each_verifiers_exact_tau_law_tree_by_tree(spec, sampling, seed):
    shape = S.parse_shape(spec, sampling)
    pair = pair_for(seed, shape)
    for root in S.tree_law(pair, shape):
        stats = TS.tree_stats(pair, root, shape)
        for verifier in T.verifiers_for(shape):
            assert TS.tau_law_from_stats(stats, verifier) == reference_tau_law(
                pair, root, shape, verifier), verifier


def test_stats_layout():
    shape = S.parse_shape("3x2")
    pair = random_pair(4, 2, "markov", exact=True)
    root = next(iter(S.tree_law(pair, shape)))
    stats = TS.tree_stats(pair, root, shape)
    n = len(stats.parent)
    assert stats.parent[0] == -1 and stats.depth[0] == 0 and stats.trv_accept[0] == 1
    assert all(len(d) == len(a) for d, a in zip(stats.draws, stats.rrs_accept))
    assert len(stats.draws[0]) == 3  # one draw per path at the root
    assert sum(h is not None for h in stats.gbv_h) == 3  # root + the chosen path's 2 nodes
    assert all(stats.parent[u] < u for u in range(1, n))  # pre-order


@pytest.mark.parametrize("verifier", ["specinfer", "traversal", "gbv"])
def test_replay_draws_tau_from_its_exact_law(verifier):
    """Mean of 4000 replays within 5 standard errors of the exact E[τ] (a fixed seed)."""
    shape = S.parse_shape("2x2")
    pair = pair_for(1, shape)
    root = max(S.tree_law(pair, shape).items(), key=lambda kv: kv[1])[0]
    stats = TS.tree_stats(pair, root, shape)
    law = np.array([float(v) for v in TS.tau_law_from_stats(stats, verifier)])
    rng = np.random.default_rng(0)
    draws = np.array([TS.replay_tau(stats, verifier, rng) for _ in range(4000)])
    mean = float((np.arange(len(law)) * law).sum())
    sd = float(np.sqrt((((np.arange(len(law)) - mean) ** 2) * law).sum()))
    assert abs(draws.mean() - mean) <= 5 * sd / np.sqrt(len(draws)) + 1e-12
    assert set(np.unique(draws)) <= set(np.flatnonzero(law > 0))


@pytest.mark.parametrize("spec, sampling", CASES + [("2,2", "iid")])
def test_numpy_twin_matches_the_exact_stats_on_float_rows(spec, sampling):
    shape = S.parse_shape(spec, sampling)
    for seed in range(3):
        pair = random_pair(seed, 3, ("iid", "markov", "table")[seed], depth=shape.depth,
                           concentration=0.7)
        for root in list(S.tree_law(pair, shape))[:40]:
            ref = TS.tree_stats(pair, root, shape)
            paths = S.node_set(root)
            got = TS.tree_stats_numpy(root, shape, {s: pair.target.row(s) for s in paths},
                                      {s: pair.draft.row(s) for s in paths if len(s) < shape.depth})
            assert got.parent == ref.parent and got.draws == ref.draws
            for name in ("q", "pt", "trv_accept"):
                assert np.allclose(getattr(got, name), getattr(ref, name), rtol=0, atol=1e-12)
            for a, b in zip(got.rrs_accept, ref.rrs_accept):
                assert np.allclose(a, b, rtol=0, atol=1e-12)
            assert [h is None for h in got.gbv_h] == [h is None for h in ref.gbv_h]
            assert np.allclose([h for h in got.gbv_h if h is not None],
                               [h for h in ref.gbv_h if h is not None], rtol=0, atol=1e-12)
