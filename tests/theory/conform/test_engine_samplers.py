"""theory/conform/engine_samplers.py: the engines' rules, pinned by hand-computed cases."""

from __future__ import annotations

import math

import torch

from specbatch.theory.conform.engine_samplers import ascend_block_unfixed, sglang_chain

N = 20_000


def rows(*probs) -> torch.Tensor:
    """[N, len(probs), V] target rows, the same for every request."""
    return torch.tensor(probs, dtype=torch.float64)[None].expand(N, -1, -1).contiguous()


def within(freq: float, p: float) -> bool:
    return abs(freq - p) <= 4 * math.sqrt(p * (1 - p) / N) + 1e-12


def test_sglang_threshold_single_accepts_deterministically():
    """Mb(x) = 0.6 ≥ threshold_single 0.5: accepted whatever the coin; at 1: with prob 0.6."""
    drafts = torch.zeros((N, 1), dtype=torch.long)
    target = rows([0.6, 0.4], [0.5, 0.5])
    gen = torch.Generator().manual_seed(0)
    relaxed = sglang_chain(drafts, None, target, gen, threshold_single=0.5)
    assert (relaxed[:, 0] == 0).all() and (relaxed[:, 1] != -1).all()
    exact = sglang_chain(drafts, None, target, gen)
    assert within(float((exact[:, 1] != -1).double().mean()), 0.6)
    rejected = exact[:, 1] == -1  # rejected: the token from Mb without the draft, i.e. 1
    assert (exact[rejected, 0] == 1).all()


def test_sglang_threshold_acc_scales_the_acceptance():
    """Mb(x) = 0.3, threshold_acc 0.5: accepted when coin ≤ 0.3 / 0.5, probability 0.6."""
    drafts = torch.zeros((N, 1), dtype=torch.long)
    out = sglang_chain(drafts, None, rows([0.3, 0.7], [0.5, 0.5]),
                       torch.Generator().manual_seed(1), threshold_acc=0.5)
    assert within(float((out[:, 1] != -1).double().mean()), 0.6)


def test_ascend_unfixed_block_rule_by_hand():
    """γ = 2, r_1 = 1/2, r_2 = 1: the unfixed rule accepts both when η1 η2 < 1/2, probability
    c (1 − ln c) = 0.8466 at c = 1/2; block verification accepts both with p_2 = 1/2 only."""
    drafts = torch.zeros((N, 2), dtype=torch.long)
    draft = rows([0.8, 0.2], [0.4, 0.6])
    target = rows([0.4, 0.6], [0.4, 0.6], [0.5, 0.5])  # r_1 = 0.4/0.8, r_2 = 0.4/0.4
    out = ascend_block_unfixed(drafts, draft, target, torch.Generator().manual_seed(2))
    both = float((out[:, 2] != -1).double().mean())
    assert within(both, 0.5 * (1 - math.log(0.5)))
    none = out[:, 1] == -1  # τ = 0: the token from TV's residual max(Mb − Ms, 0) = token 1
    assert within(float(none.double().mean()), 1 - 0.5 * (1 - math.log(0.5)))
    assert (out[none, 0] == 1).all()
