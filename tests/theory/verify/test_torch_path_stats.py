"""theory/verify/torch_path_stats.py: the torch tier of the path statistics against the numpy
reference.

``p_i`` (THEORY.md §3's cumsum/cummax identity in log space), ``Z_{i+1}``, the draft's
temperature-1 signals and :func:`path_stats_torch` as capture and the live loop call it:
random Dirichlet rows, temperatures 1, 0.7 and 0 (one-hot rows), and the ``gamma`` mask of
paths the target scored only up to γ_b.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

torch = pytest.importorskip("torch")

from specbatch.theory.verify.path_stats import (  # noqa: E402
    block_weights,
    draft_signals,
    position_stats,
    residual_masses,
)
from specbatch.theory.verify.torch_path_stats import (  # noqa: E402
    block_weights_torch,
    draft_signals_torch,
    path_stats_torch,
    probs_at,
    residual_masses_torch,
)
from tests.theory.verify.test_path_stats import probability_pairs  # noqa: E402

STATS = ("q", "pt", "p", "z")
SIGNALS = ("draft_conf", "entropy", "top1")


def softmax_np(logits: np.ndarray, temperature: float) -> np.ndarray:
    """The numpy twin of ``probs_at``: softmax at T, one-hot at the argmax when T = 0."""
    if temperature == 0:
        return (np.arange(logits.shape[-1]) == logits.argmax(-1)[..., None]).astype(np.float64)
    x = logits / temperature
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def random_logits(seed: int, p: int, k: int, v: int, concentration: float = 0.5):
    """Draft/target logits whose temperature-1 rows are Dirichlet, and drafted tokens.

    returns (tokens # [P, K] int64, draft_logits # [P, K, V], target_logits # [P, K+1, V])
    """
    rng = np.random.default_rng(seed)
    draft = rng.dirichlet(np.full(v, concentration), size=(p, k))
    target = rng.dirichlet(np.full(v, concentration), size=(p, k + 1))
    draft = 0.999 * draft + 0.001 / v  # full support at T = 1: every token can be drafted
    tokens = (draft.cumsum(axis=2) < rng.random((p, k, 1))).sum(axis=2).clip(0, v - 1)
    return tokens, np.log(draft), np.log(target + 1e-300)


def drafted_at(tokens, draft_logits, temperature):
    """Tokens a drafter would propose at T: the argmax at T = 0 (one-hot rows need q > 0)."""
    return draft_logits.argmax(-1) if temperature == 0 else tokens


@given(probability_pairs())
def test_block_weights_torch_equal_the_numpy_reference(pair):
    # q in (0, 1], pt in [0, 1] with exact zeros and ratios above 1 (p may rise along i).
    q, pt = pair
    ours = block_weights_torch(torch.from_numpy(q), torch.from_numpy(pt)).numpy()
    assert np.allclose(ours, block_weights(q, pt), rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("seed", range(4))
def test_residual_masses_and_signals_torch_equal_the_numpy_reference(seed):
    tokens, dl, tl = random_logits(seed, 30, 5, 11)
    ms, mb = softmax_np(dl, 1.0), softmax_np(tl, 1.0)
    p = np.random.default_rng(seed).random((30, 5))
    ours = residual_masses_torch(torch.from_numpy(p), torch.from_numpy(ms),
                                 torch.from_numpy(mb[:, :5])).numpy()
    assert np.allclose(ours, residual_masses(p, ms, mb), rtol=1e-12, atol=1e-14)
    signals = draft_signals_torch(torch.from_numpy(tokens), torch.from_numpy(dl))
    reference = draft_signals(tokens, ms)
    for name in SIGNALS:
        assert np.allclose(signals[name].numpy(), reference[name], rtol=1e-10, atol=1e-12), name


@given(st.integers(0, 2**32 - 1), st.integers(1, 6), st.integers(2, 13),
       st.sampled_from([1.0, 0.7, 0.0]))
def test_path_stats_torch_equal_position_stats(seed, k, v, temperature):
    tokens, dl, tl = random_logits(seed, 20, k, v, concentration=0.3)
    tokens = drafted_at(tokens, dl, temperature)
    got = path_stats_torch(torch.from_numpy(tokens), torch.from_numpy(dl), torch.from_numpy(tl),
                           temperature)
    reference = position_stats(tokens, softmax_np(dl, temperature), softmax_np(tl, temperature))
    reference.update(draft_signals(tokens, softmax_np(dl, 1.0)))  # signals: always T = 1
    for name in STATS + SIGNALS:
        assert got[name].shape == (20, k) and got[name].dtype == np.float64
        assert np.allclose(got[name], reference[name], rtol=1e-10, atol=1e-12), name
    if temperature == 0:  # the format's temperature-0 rule (THEORY.md §3, one-hot draft)
        assert np.array_equal(got["q"], np.ones((20, k)))
        assert set(np.unique(got["pt"])) <= {0.0, 1.0}
        p_prev = np.concatenate([np.ones((20, 1)), got["p"][:, :-1]], axis=1)
        assert np.allclose(got["z"], p_prev * (1.0 - got["pt"]))


@given(st.integers(0, 2**32 - 1), st.integers(1, 6), st.sampled_from([1.0, 0.0]))
def test_gamma_masks_unscored_positions(seed, k, temperature):
    # The target scored only X^0..X^G (G ≤ K) and path b only up to γ_b ≤ G: inside γ_b the
    # statistics are the full path's; past it pt = 0 (hence p = 0) and Z_{i+1} = p_i (the
    # trace reader's bounds for pt = 0 allow it), q and signals unchanged.
    rng = np.random.default_rng(seed)
    p_count, v = 24, 9
    tokens, dl, tl = random_logits(seed, p_count, k, v)
    tokens = drafted_at(tokens, dl, temperature)
    g = int(rng.integers(0, k + 1))
    gamma = rng.integers(0, g + 1, size=p_count)
    got = path_stats_torch(torch.from_numpy(tokens), torch.from_numpy(dl),
                           torch.from_numpy(tl[:, : g + 1]), temperature,
                           gamma=torch.from_numpy(gamma))
    full = path_stats_torch(torch.from_numpy(tokens), torch.from_numpy(dl), torch.from_numpy(tl),
                            temperature)
    inside = np.arange(k)[None, :] < gamma[:, None]
    for name in ("pt", "p", "z"):
        assert np.allclose(got[name][inside], full[name][inside], rtol=1e-12, atol=1e-15), name
    for name in ("pt", "p"):
        assert np.array_equal(got[name][~inside], np.zeros((~inside).sum())), name
    p_prev = np.concatenate([np.ones((p_count, 1)), got["p"][:, :-1]], axis=1)
    assert np.array_equal(got["z"][~inside], p_prev[~inside])
    for name in ("q",) + SIGNALS:
        assert np.array_equal(got[name], full[name]), name


def test_probs_at_temperature_zero_is_one_hot_at_the_argmax():
    logits = torch.tensor([[0.1, 2.0, -1.0], [3.0, 3.5, 0.0]])
    assert torch.equal(probs_at(logits, 0.0), torch.tensor([[0.0, 1.0, 0.0], [0.0, 1.0, 0.0]],
                                                           dtype=torch.float64))
    assert torch.allclose(probs_at(logits, 1.0).sum(-1), torch.ones(2, dtype=torch.float64))
