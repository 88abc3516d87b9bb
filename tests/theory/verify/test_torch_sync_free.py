"""theory/verify/torch_sync_free.py: TV/BV with no host synchronisation (THEORY.md §2-3)."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from specbatch.theory.verify.reference import extra_token_law
from specbatch.theory.verify.torch_batched import verify_torch
from specbatch.theory.verify.torch_sync_free import (
    accept_and_weights_sync_free,
    sample_rows_sync_free,
    verify_sync_free,
)
from tests.theory.verify.test_torch_batched import KINDS, make_paths, packed, reference_ragged


class CountOps(TorchDispatchMode):
    """Counts every aten operator dispatched while active."""

    def __init__(self):
        super().__init__()
        self.ops = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops[str(func.overloadpacket)] += 1
        return func(*args, **(kwargs or {}))


def count_ops(rule, b, seed=0, layout="padded"):
    rng, tokens, dr, tr, uniforms = make_paths("dirichlet", seed, b=b, k=5, v=16)
    lengths = rng.integers(1, 6, size=b)
    generator = torch.Generator().manual_seed(0)
    if layout == "padded":
        t = [torch.as_tensor(a) for a in (tokens, dr, tr, uniforms)]
        kwargs = {"lengths": torch.as_tensor(lengths)}
    else:
        *t, offsets = [torch.as_tensor(a) for a in packed(tokens, dr, tr, uniforms, lengths)]
        kwargs = {"offsets": offsets, "max_len": 5}
    with CountOps() as mode:
        verify_sync_free(rule, *t, generator=generator, **kwargs)
    return mode.ops


@pytest.mark.parametrize("layout", ["padded", "packed"])
@pytest.mark.parametrize("rule", ["token", "block"])
def test_no_host_sync_and_a_fixed_operator_count(rule, layout):
    small, large = count_ops(rule, 8, 0, layout), count_ops(rule, 512, 1, layout)
    for ops in (small, large):
        assert "aten._local_scalar_dense" not in ops  # no .item(), .tolist(), bool(tensor)
        assert "aten.nonzero" not in ops  # no data-dependent shapes
    assert small == large  # the same operators, the same number of times, whatever B


def test_the_lazy_cpu_path_does_synchronise():
    """The dispatch counter sees what it must: the lazy path's row loop reads scalars."""
    rng, tokens, dr, tr, uniforms = make_paths("dirichlet", 0, b=8, k=5, v=16)
    t = [torch.as_tensor(a) for a in (tokens, dr, tr, uniforms)]
    with CountOps() as mode:
        verify_torch("block", *t, sync_free=False)
    assert mode.ops["aten._local_scalar_dense"] > 0


@pytest.mark.parametrize("rule", ["token", "block"])
@pytest.mark.parametrize("kind", KINDS)
def test_same_uniforms_give_the_numpy_tau(rule, kind):
    rng, tokens, dr, tr, uniforms = make_paths(kind, 3, b=1500)
    lengths = rng.integers(0, 7, size=len(tokens))
    expected = reference_ragged(rule, tokens, dr, tr, uniforms, lengths, rng)
    tau, _ = verify_sync_free(rule, *(torch.as_tensor(a) for a in (tokens, dr, tr, uniforms)),
                              lengths=torch.as_tensor(lengths))
    assert np.array_equal(tau.numpy(), expected)


@pytest.mark.parametrize("rule", ["token", "block"])
def test_extra_token_law_matches_numpy(rule):
    rng, tokens, dr, tr, uniforms = make_paths("dirichlet", 5, b=600)
    tau, weights = accept_and_weights_sync_free(
        rule, *(torch.as_tensor(a) for a in (tokens, dr, tr, uniforms)))
    from specbatch.theory.verify.path_stats import block_weights, gather_drafted

    p = block_weights(gather_drafted(dr, tokens), gather_drafted(tr[:, :-1], tokens))
    law = extra_token_law(dr, tr, tau.numpy(), rule, p=p if rule == "block" else None)
    got = weights.numpy() / weights.numpy().sum(axis=1, keepdims=True)
    assert np.allclose(got, law, atol=1e-12)


def test_sampling_never_draws_a_zero_weight_token():
    weights = torch.zeros((2000, 9), dtype=torch.float32)
    weights[:, 3] = 1e-30
    weights[:, 7] = 1.0
    tokens = sample_rows_sync_free(weights, torch.Generator().manual_seed(0))
    assert set(tokens.tolist()) <= {3, 7}


@pytest.mark.parametrize("rule", ["token", "block"])
def test_packed_layout_gives_the_padded_answer(rule):
    rng, tokens, dr, tr, uniforms = make_paths("peaked", 4, b=300)
    lengths = rng.integers(0, 7, size=len(tokens))
    padded = verify_sync_free(rule, *(torch.as_tensor(a) for a in (tokens, dr, tr, uniforms)),
                              lengths=torch.as_tensor(lengths),
                              generator=torch.Generator().manual_seed(2))
    *t, offsets = [torch.as_tensor(a) for a in packed(tokens, dr, tr, uniforms, lengths)]
    got = verify_sync_free(rule, *t, offsets=offsets, max_len=6,
                           generator=torch.Generator().manual_seed(2))
    assert torch.equal(padded[0], got[0]) and torch.equal(padded[1], got[1])


def test_verify_torch_dispatches_to_it_on_request():
    rng, tokens, dr, tr, uniforms = make_paths("peaked", 2, b=64)
    t = [torch.as_tensor(a) for a in (tokens, dr, tr, uniforms)]
    a = verify_torch("block", *t, sync_free=True, generator=torch.Generator().manual_seed(1))
    b = verify_sync_free("block", *t, generator=torch.Generator().manual_seed(1))
    assert all(torch.equal(x, y) for x, y in zip(a, b))
