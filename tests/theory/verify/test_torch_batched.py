"""theory/verify/torch_batched.py: batched torch TV/BV against the numpy reference (THEORY.md
§2-3)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import specbatch.theory.verify.torch_residual as residual_torch_module
from specbatch.theory.verify.path_stats import block_thresholds, position_stats
from specbatch.theory.verify.reference import verify_block as np_block
from specbatch.theory.verify.reference import verify_token as np_token
from specbatch.theory.verify.torch_batched import (
    accept_and_residual,
    sample_weights,
    verify_torch,
)
from tests.theory import lossless
from tests.theory.verify.test_reference import law_on_paths, random_paths

NUMPY = {"token": np_token, "block": np_block}
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
KINDS = ["dirichlet", "peaked", "one_hot_draft", "greedy"]


def make_paths(kind, seed, b=2000, k=6, v=12):
    rng = np.random.default_rng(seed)
    tokens, dr, tr = random_paths(
        rng,
        b,
        k,
        v,
        concentration=0.05 if kind == "peaked" else 0.7,
        one_hot_draft=kind in ("one_hot_draft", "greedy"),
        one_hot_target=kind == "greedy",
    )
    return rng, tokens, dr, tr, rng.random((b, k))


def reference_ragged(rule, tokens, dr, tr, uniforms, lengths, rng):
    """numpy reference τ for ragged lengths: each γ group on its sliced rows. # [B]"""
    tau = np.empty(len(tokens), dtype=np.int64)
    for g in np.unique(lengths):
        rows = lengths == g
        tau[rows], _ = NUMPY[rule](
            tokens[rows, :g], dr[rows, :g], tr[rows, : g + 1], uniforms[rows, :g], rng
        )
    return tau


def thresholds(rule, tokens, dr, tr):
    """Acceptance thresholds t_i of the reference (TV: min(1, r_i), BV: h_i). # [B, γ]"""
    s = position_stats(tokens, dr, tr)
    if rule == "token":
        return np.minimum(s["pt"] / s["q"], 1.0)
    return block_thresholds(s["p"], s["z"], np.full(len(tokens), tokens.shape[1]))


def packed(tokens, dr, tr, uniforms, lengths):
    """The vLLM-style packed layout of ragged requests (offsets = cumulative draft counts)."""
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    keep = np.arange(tokens.shape[1])[None, :] < lengths[:, None]
    keep_t = np.arange(tr.shape[1])[None, :] <= lengths[:, None]
    return tokens[keep], dr[keep], tr[keep_t], uniforms[keep], offsets


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("rule", ["token", "block"])
@pytest.mark.parametrize("kind", KINDS)
def test_same_uniforms_give_the_same_tau_float64(device, rule, kind):
    rng, tokens, dr, tr, uniforms = make_paths(kind, 1)
    lengths = rng.integers(0, 7, size=len(tokens))
    expected = reference_ragged(rule, tokens, dr, tr, uniforms, lengths, rng)
    t = {
        k: torch.as_tensor(a, device=device)
        for k, a in dict(tk=tokens, dr=dr, tr=tr, u=uniforms).items()
    }
    tau, _ = verify_torch(rule, t["tk"], t["dr"], t["tr"], t["u"], lengths=torch.as_tensor(lengths))
    assert np.array_equal(tau.cpu().numpy(), expected)
    # The packed layout (cumulative offsets) gives the same answer.
    p_tokens, p_dr, p_tr, p_u, offsets = packed(tokens, dr, tr, uniforms, lengths)
    tau_packed, _ = verify_torch(
        rule,
        torch.as_tensor(p_tokens, device=device),
        torch.as_tensor(p_dr, device=device),
        torch.as_tensor(p_tr, device=device),
        torch.as_tensor(p_u, device=device),
        offsets=torch.as_tensor(offsets),
    )
    assert np.array_equal(tau_packed.cpu().numpy(), expected)


@pytest.mark.parametrize("rule", ["token", "block"])
@pytest.mark.parametrize("kind", KINDS)
def test_float32_rows_agree_except_within_rounding_of_a_threshold(rule, kind):
    # float32 rows: the reference sees the same float32 numbers (as float64); τ may differ only
    # where a uniform lies within 1e-5 of its threshold (float32 vocabulary sums round ~1e-7).
    rng, tokens, dr, tr, uniforms = make_paths(kind, 2)
    dr32, tr32 = dr.astype(np.float32), tr.astype(np.float32)
    expected, _ = NUMPY[rule](tokens, dr32, tr32, uniforms, rng)
    tau, _ = verify_torch(rule, tokens, torch.as_tensor(dr32), torch.as_tensor(tr32), uniforms)
    differ = tau.numpy() != expected
    near = (np.abs(uniforms - thresholds(rule, tokens, dr32, tr32)) < 1e-5).any(axis=1)
    assert not (differ & ~near).any()
    assert differ.mean() < 1e-3


@pytest.mark.parametrize("rule", ["token", "block"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_extra_token_weights_equal_the_exact_residual_law(rule, dtype):
    rng, tokens, dr, tr, uniforms = make_paths("dirichlet", 3)
    lengths = rng.integers(0, 7, size=len(tokens))
    tau, weights = accept_and_residual(
        rule,
        tokens,
        torch.as_tensor(dr, dtype=dtype),
        torch.as_tensor(tr, dtype=dtype),
        uniforms,
        lengths=lengths,
    )
    tau, weights = tau.numpy(), weights.double().numpy()
    law = weights / weights.sum(axis=1, keepdims=True)
    for g in np.unique(lengths):
        rows = lengths == g
        exact = law_on_paths(tokens[rows, :g], dr[rows, :g], tr[rows, : g + 1], tau[rows], rule)
        assert np.allclose(law[rows], exact, atol=1e-12 if dtype == torch.float64 else 1e-5)


@pytest.mark.parametrize("rule", ["token", "block"])
def test_sampled_extra_tokens_follow_the_exact_law(rule):
    # One fixed path repeated; for every τ the torch samples pass a chi-square test against the
    # numpy reference's exact law.
    rng = np.random.default_rng(4)
    tokens, dr, tr = random_paths(rng, 1, 4, 8)
    n = 40_000
    tokens, dr, tr = (np.repeat(a, n, axis=0) for a in (tokens, dr, tr))
    generator = torch.Generator().manual_seed(5)
    tau, extra = verify_torch(
        rule,
        tokens,
        torch.as_tensor(dr, dtype=torch.float32),
        torch.as_tensor(tr, dtype=torch.float32),
        rng.random((n, 4)),
        generator=generator,
    )
    tau, extra = tau.numpy(), extra.numpy()
    for t in np.unique(tau):
        picked = tau == t
        law = law_on_paths(tokens[:1], dr[:1], tr[:1], [t], rule)[0]
        counts = np.bincount(extra[picked], minlength=8)
        assert lossless.chi_square_pvalue(counts, law * picked.sum()) > lossless.ALPHA


def test_greedy_rows_accept_the_matching_prefix_and_emit_the_target_argmax():
    # Temperature 0: one-hot draft and target rows; τ = length of the agreeing prefix, the extra
    # token is the target's argmax at τ, whatever the uniforms, under both rules.
    rng, tokens, dr, tr, uniforms = make_paths("greedy", 6)
    target_top = tr.argmax(axis=2)  # [B, K+1]
    agree = np.cumprod(target_top[:, :-1] == tokens, axis=1).sum(axis=1)
    for rule in ("token", "block"):
        for dtype in (torch.float32, torch.float64, torch.bfloat16):
            tau, extra = verify_torch(
                rule,
                tokens,
                torch.as_tensor(dr, dtype=dtype),
                torch.as_tensor(tr, dtype=dtype),
                uniforms,
            )
            assert np.array_equal(tau.numpy(), agree)
            assert np.array_equal(extra.numpy(), target_top[np.arange(len(tokens)), agree])


def test_zero_length_requests_take_the_bonus_from_the_first_target_row():
    rng, tokens, dr, tr, uniforms = make_paths("dirichlet", 7, b=5)
    for rule in ("token", "block"):
        tau, weights = accept_and_residual(rule, tokens, dr, tr, uniforms, lengths=np.zeros(5, int))
        assert tau.tolist() == [0] * 5
        assert np.allclose(weights.numpy(), tr[:, 0])


def torch_verifier(rule):
    def verify(tokens, dr, tr, uniforms, rng):
        generator = torch.Generator().manual_seed(int(rng.integers(2**62)))
        tau, extra = verify_torch(
            rule,
            torch.from_numpy(tokens),
            torch.from_numpy(np.ascontiguousarray(dr, dtype=np.float32)),
            torch.from_numpy(np.ascontiguousarray(tr, dtype=np.float32)),
            torch.from_numpy(uniforms),
            generator=generator,
        )
        return tau.numpy(), extra.numpy()

    return verify


@pytest.mark.slow
@pytest.mark.parametrize("rule", ["token", "block"])
def test_torch_rules_are_lossless_on_a_large_vocabulary(rule):
    # V = 1000, γ = 3, 200k iterations, float32 rows (tolerance: tests/theory/lossless.py).
    # About 10-25 s each on 2 shared cores, hence slow; the quick test below runs by default.
    ms, mb = lossless.iid_pair()
    outputs, taus = lossless.iteration_outputs(
        torch_verifier(rule), ms, mb, lossless.GAMMA, 200_000, 21
    )
    pvalues = lossless.lossless_pvalues(outputs, mb)
    assert min(pvalues.values()) > lossless.ALPHA, pvalues
    assert abs(lossless.acceptance_zscore(taus, ms, mb, lossless.GAMMA, rule, 21)) < 5.0


@pytest.mark.parametrize("rule", ["token", "block"])
def test_torch_rules_are_lossless_quick(rule):
    # The same check with 30k iterations (default run).
    ms, mb = lossless.iid_pair()
    outputs, taus = lossless.iteration_outputs(
        torch_verifier(rule), ms, mb, lossless.GAMMA, 30_000, 22
    )
    pvalues = lossless.lossless_pvalues(outputs, mb)
    assert min(pvalues.values()) > lossless.ALPHA, pvalues
    assert abs(lossless.acceptance_zscore(taus, ms, mb, lossless.GAMMA, rule, 22)) < 5.0


@pytest.mark.parametrize("vocab", [7, 128, 300, 1000])
def test_sample_weights_follows_the_weights_and_never_draws_zero_weight(vocab):
    # Two-level inverse CDF (blocks of 128): one row repeated, chi-square against its law;
    # sparse rows: zero-weight tokens (and zero blocks) are never drawn.
    rng = np.random.default_rng(vocab)
    row = rng.random(vocab) * (rng.random(vocab) < 0.3)
    row[rng.integers(vocab)] += 0.5
    n = 60_000
    weights = torch.as_tensor(np.tile(row, (n, 1)), dtype=torch.float32)
    draws = sample_weights(weights, torch.Generator().manual_seed(vocab)).numpy()
    law = row / row.sum()
    assert (row[draws] > 0).all()
    assert lossless.chi_square_pvalue(np.bincount(draws, minlength=vocab), n * law) > lossless.ALPHA
    sparse = torch.as_tensor(rng.random((500, vocab)) * (rng.random((500, vocab)) < 0.01))
    sparse[:, -1] += 1e-3
    picks = sample_weights(sparse).numpy()
    assert (sparse.numpy()[np.arange(500), picks] > 0).all()


@pytest.mark.parametrize("rule", ["token", "block"])
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_cpu_row_loop_and_batched_chunks_give_the_same_tau_and_law(monkeypatch, rule, kind, dtype):
    # The CPU row-at-a-time path and the batched chunked path (the one CUDA takes) compute the
    # same residual rows; they may round differently only in the last bits, so τ is equal and
    # the normalised extra-token laws agree to the rows' precision (packed ragged layout).
    rng, tokens, dr, tr, uniforms = make_paths(kind, 7, b=600)
    lengths = rng.integers(0, 7, size=len(tokens))
    args = packed(tokens, dr, tr, uniforms, lengths)
    t, d_rows, t_rows, u, offsets = args
    results = {}
    for loop in (True, False):
        monkeypatch.setattr(residual_torch_module, "CPU_ROW_LOOP", loop)
        tau, weights = accept_and_residual(
            rule,
            t,
            torch.as_tensor(d_rows, dtype=dtype),
            torch.as_tensor(t_rows, dtype=dtype),
            u,
            offsets=offsets,
        )
        weights = weights.double()
        assert bool((weights >= 0).all())
        results[loop] = (tau, weights / weights.sum(dim=1, keepdim=True))
    assert torch.equal(results[True][0], results[False][0])
    atol = 1e-12 if dtype == torch.float64 else 1e-6
    assert torch.allclose(results[True][1], results[False][1], atol=atol)


def test_extra_token_law_torch_matches_the_numpy_reference():
    from specbatch.theory.verify.path_stats import block_weights, gather_drafted
    from specbatch.theory.verify.reference import extra_token_law as reference
    from specbatch.theory.verify.torch_batched import extra_token_law_torch

    rng = np.random.default_rng(0)
    b, g, v = 6, 3, 5
    ms = rng.dirichlet(np.ones(v), size=(b, g))
    mb = rng.dirichlet(np.ones(v), size=(b, g + 1))
    tokens = rng.integers(0, v, size=(b, g))
    tau = np.array([0, 1, 2, 3, 3, 1])
    p = block_weights(gather_drafted(ms, tokens), gather_drafted(mb, tokens))
    for rule in ("token", "block"):
        ours = extra_token_law_torch(torch.from_numpy(ms), torch.from_numpy(mb),
                                     torch.from_numpy(tau), rule, gamma=torch.full((b,), g),
                                     p=torch.from_numpy(p)).numpy()
        np.testing.assert_allclose(ours, reference(ms, mb, tau, rule, p=p), atol=1e-12)
        # ragged draft lengths (the live loop's case): τ = γ_b takes the bonus row Mb(·|X^γ_b)
        gamma = np.array([0, 1, 2, 3, 3, 2])
        tau_r = np.minimum(tau, gamma)
        ours = extra_token_law_torch(torch.from_numpy(ms), torch.from_numpy(mb),
                                     torch.from_numpy(tau_r), rule,
                                     gamma=torch.from_numpy(gamma), p=torch.from_numpy(p)).numpy()
        theirs = reference(ms, mb, tau_r, rule, gamma=gamma, p=p)
        np.testing.assert_allclose(ours, theirs, atol=1e-12)
        bonus = tau_r == gamma
        np.testing.assert_allclose(theirs[bonus], mb[bonus, tau_r[bonus]], atol=1e-12)


@pytest.mark.parametrize("bad", [-1, 5])
def test_token_ids_outside_the_vocabulary_are_refused(bad):
    """Negative ids would index from the end of the vocabulary: refused like ids ≥ V."""
    from specbatch.errors import SpecbatchError
    from specbatch.theory.verify.torch_batched import verify_torch

    tokens, dr, tr = random_paths(np.random.default_rng(0), 2, 3, 5)
    tokens[0, 1] = bad
    with pytest.raises(SpecbatchError, match=r"draft_tokens: expected token ids in 0\.\.4"):
        verify_torch("block", torch.from_numpy(tokens), torch.from_numpy(dr),
                     torch.from_numpy(tr), torch.full((2, 3), 0.5, dtype=torch.float64))


@pytest.mark.parametrize("rule", ["token", "block"])
@pytest.mark.parametrize("row_loop", [True, False])
def test_torch_never_accepts_a_zero_probability_token_at_eta_zero(rule, row_loop, monkeypatch):
    from tests.theory.verify.test_reference import _zero_target_paths

    monkeypatch.setattr(residual_torch_module, "CPU_ROW_LOOP", row_loop)
    tokens, draft, target, eta = _zero_target_paths()
    tau, extra = verify_torch(rule, torch.as_tensor(tokens), torch.as_tensor(draft),
                              torch.as_tensor(target), torch.as_tensor(eta),
                              generator=torch.Generator().manual_seed(0))
    assert torch.all(tau == 0) and np.all(target[0, 0, extra.numpy()] > 0)
