"""theory/conform*.py: the conformance check of engine-shaped rejection samplers."""

from __future__ import annotations

import json
from fractions import Fraction

import numpy as np
import pytest
import torch

from specbatch.errors import SpecbatchError
from specbatch.theory.conform import vllm_modes as conform_vllm
from specbatch.theory.conform.catalogue import CATALOGUE
from specbatch.theory.conform.check import DEFAULT_SAMPLES, conform
from specbatch.theory.conform.pairs import CLASSES, draw_cases, pair_tables, paper_pair
from specbatch.theory.conform.samplers import BUILTINS, Sampler, emit_tokens, load_sampler
from specbatch.theory.exact.enumeration import expected_tau_formula

#: The project's own verifiers (the engines' are judged in test_conform_catalogue.py).
LOSSLESS = [name for name, s in BUILTINS.items()
            if not s.lossy_by_design and not name.endswith("-triton")
            and name not in {row.name for row in CATALOGUE}]


def resample_from_target(draft_token_ids, draft_probs, target_probs, generator=None):
    """Broken on purpose: standard acceptance, but the correction is drawn from ``Mb`` itself
    instead of the residual ``max(Mb − Ms, 0)``."""
    u = torch.rand(draft_token_ids.shape, generator=generator, dtype=torch.float64)
    pt = target_probs[:, :-1].gather(2, draft_token_ids[..., None]).squeeze(2).double()
    q = draft_probs.gather(2, draft_token_ids[..., None]).squeeze(2).double()
    tau = torch.cumprod((u * q < pt).long(), dim=1).sum(dim=1)
    rows = torch.arange(len(tau))
    law = target_probs[rows, tau].double()
    extra = torch.multinomial(law, 1, generator=generator).squeeze(1)
    return emit_tokens(draft_token_ids, tau, extra)


def accept_everything(draft_token_ids, draft_probs, target_probs, generator=None):
    """Broken on purpose: every draft accepted, the bonus drawn from the last target row."""
    b, gamma = draft_token_ids.shape
    extra = torch.multinomial(target_probs[:, -1].double(), 1, generator=generator).squeeze(1)
    return emit_tokens(draft_token_ids, torch.full((b,), gamma), extra)


def sampler(fn, name="test") -> Sampler:
    return Sampler(name, fn)


@pytest.mark.parametrize("name", LOSSLESS)
def test_lossless_builtins_pass(name):
    report = conform(load_sampler(name), samples=3000)
    assert report.exit_code == 0, [c.violations for c in report.cases]
    assert report.verdict == "no violation detected"


def test_the_broken_sampler_is_caught_at_the_default_sample_size():
    report = conform(sampler(resample_from_target, "broken"))
    assert report.samples == DEFAULT_SAMPLES
    assert report.exit_code == 1 and report.verdict == "LOSSY"
    lossy = [c for c in report.cases if c.lossy]
    # Every lossy pair names the law test, and the observed law is far beyond its noise.
    assert lossy and all(any("law of the first" in v for v in c.violations) for c in lossy)
    assert max(c.observed_tv for c in lossy) > 5 * max(c.noise_tv for c in lossy)
    # The identical pair accepts everything, so the broken correction never shows there.
    assert not next(c for c in report.cases if c.kind == "identical").lossy


def wrong_block(draft_token_ids, draft_probs, target_probs, generator=None):
    """The known wrong block verifier of THEORY.md §3 (products of uniforms, TV's residual)."""
    from specbatch.theory.verify.reference import _verify_block_wrong

    uniforms = torch.rand(draft_token_ids.shape, generator=generator, dtype=torch.float64)
    tau, extra = _verify_block_wrong(draft_token_ids.numpy(), draft_probs.numpy(),
                                     target_probs.numpy(), uniforms.numpy(),
                                     np.random.default_rng(0))
    return emit_tokens(draft_token_ids, torch.from_numpy(tau), torch.from_numpy(extra))


def test_the_known_wrong_block_verifier_is_caught():
    report = conform(sampler(wrong_block, "wrong-block"))
    assert report.exit_code == 1
    assert any(any("law of the first" in v for v in c.violations) for c in report.cases)


def test_accepting_everything_breaks_the_exact_checks():
    report = conform(sampler(accept_everything), samples=2000)
    zero = [c for c in report.cases if c.kind == "zero"]
    assert all(any("target probability 0" in v for v in c.violations) for c in zero)
    paper = next(c for c in report.cases if c.kind == "paper")
    assert any("exceeds the best valid verifier" in v for v in paper.violations)
    assert report.exit_code == 1


def test_accepted_tokens_must_be_the_drafted_ones():
    def relabel(draft_token_ids, draft_probs, target_probs, generator=None):
        out = conform_vllm.vllm_standard(draft_token_ids, draft_probs, target_probs, generator)
        first = out[:, :1]
        accepted = (out[:, 1:2] != -1)
        out[:, :1] = torch.where(accepted, (first + 1) % target_probs.shape[-1], first)
        return out

    report = conform(sampler(relabel), samples=1000, kinds=("identical",))
    assert any("differ from the draft" in v for v in report.cases[0].violations)


@pytest.mark.parametrize("draft", ["probabilistic", "greedy"])
def test_synthetic_is_lossy_by_design_and_reports_its_distance(draft):
    report = conform(load_sampler("vllm-synthetic", draft), samples=3000,
                     kinds=("paper", "markov", "identical"))
    assert report.verdict == "lossy (by design)" and report.exit_code == 1
    out = report.to_json()
    assert out["max_observed_tv"] > 0.1
    for case in report.cases:  # the exact distance, and the samples agree with it
        if case.kind != "identical":
            assert case.exact_tv > 0.05
        assert abs(case.observed_tv - case.exact_tv) < 3 * case.noise_tv + 0.01
    assert all("observed_law" in c and "exact_law" in c for c in out["cases"] if c["lossy"])


@pytest.mark.parametrize("bad, message", [
    (lambda d, q, t, g: emit_tokens(d, torch.zeros(len(d), dtype=torch.long),
                                    d[:, 0]).int(), "torch.int32"),
    (lambda d, q, t, g: torch.zeros((len(d), 1), dtype=torch.long), "shape"),
    (lambda d, q, t, g: torch.full((len(d), d.shape[1] + 1), -1), "followed only by -1"),
    (lambda d, q, t, g: torch.full((len(d), d.shape[1] + 1), 99), "token ids outside"),
    (lambda d, q, t, g: d.numpy(), "expected a torch.int64 tensor"),
    (lambda d, q: d, "raised TypeError"),
])
def test_outputs_breaking_the_engine_contract_are_bad_input(bad, message):
    with pytest.raises(SpecbatchError, match=message):
        conform(sampler(bad), samples=100, kinds=("paper",))


def test_vllm_block_has_the_thresholds_of_theory():
    """vLLM's block mode, rebuilt from its kernels, has BV's p_i and h_i (THEORY.md §3)."""
    from specbatch.theory.verify.reference import block_path
    from tests.theory.verify.test_torch_batched import make_paths

    for kind in ("dirichlet", "peaked", "one_hot_draft"):
        _, tokens, dr, tr, _ = make_paths(kind, 11, b=200, k=4, v=9)
        p, h = conform_vllm._block_thresholds(torch.as_tensor(tokens), torch.as_tensor(dr),
                                              torch.as_tensor(tr))
        p_ref, h_ref = block_path(tokens, dr, tr)
        assert np.allclose(p[:, 1:].numpy(), p_ref, atol=1e-12)
        assert np.allclose(h.numpy(), h_ref, atol=1e-12)
        if kind == "one_hot_draft":  # no draft probabilities: Z = p_i (1 − Mb(X_{i+1}))
            _, h_none = conform_vllm._block_thresholds(torch.as_tensor(tokens), None,
                                                       torch.as_tensor(tr))
            assert np.allclose(h_none.numpy(), h_ref, atol=1e-12)


def test_loading_samplers():
    assert load_sampler("vllm-greedy").draft == "greedy"
    assert load_sampler("vllm-block", "greedy").draft == "greedy"
    found = load_sampler("tests.theory.conform.test_check:resample_from_target")
    assert found.fn is resample_from_target and found.draft == "probabilistic"
    for spec, message in [("nosuch", "built-in"), ("no_such_module_x:f", "cannot import"),
                          ("tests.theory.conform.test_check:nothing", "no attribute"),
                          ("tests.theory.conform.test_check:DEFAULT_SAMPLES", "not callable")]:
        with pytest.raises(SpecbatchError, match=message):
            load_sampler(spec)
    with pytest.raises(SpecbatchError, match="--draft"):
        load_sampler("vllm-block", "beam")


def test_pairs_cover_every_class_and_the_paper_values():
    cases = draw_cases(0)
    assert [c.kind for c in cases] == [k for k, (n, _, _) in CLASSES.items() for _ in range(n)]
    pair = paper_pair()
    assert expected_tau_formula(pair, 2, "token") == Fraction(10, 9)
    assert expected_tau_formula(pair, 2, "block") == Fraction(11, 9)
    for case in cases:
        tables = pair_tables(case)
        assert tables.target_law.sum() == pytest.approx(1.0)
        assert tables.draft_prob.sum() == pytest.approx(1.0)
    zero = [pair_tables(c) for c in cases if c.kind == "zero"]
    assert all((t.target_law == 0).any() for t in zero)
    greedy = draw_cases(0, "greedy")
    for case in greedy:  # greedy drafting: one-hot draft rows
        rows = pair_tables(case).draft_rows
        assert set(np.unique(rows)) <= {0.0, 1.0}


def test_same_seed_same_report():
    a = conform(load_sampler("vllm-block"), samples=500, seed=4, kinds=("markov",))
    b = conform(load_sampler("vllm-block"), samples=500, seed=4, kinds=("markov",))
    assert json.dumps(a.to_json()) == json.dumps(b.to_json())


def always_reject(draft_token_ids, draft_probs, target_probs, generator=None):
    """Lossless but useless: τ = 0 always, the token drawn from the target row."""
    extra = torch.multinomial(target_probs[:, 0].double(), 1, generator=generator).squeeze(1)
    return emit_tokens(draft_token_ids, torch.zeros(len(draft_token_ids), dtype=torch.long),
                       extra)


def test_a_lossless_sampler_that_always_rejects_passes_with_a_note():
    """Issue 31: rejecting everything loses nothing; Ms = Mb then only earns a note."""
    report = conform(sampler(always_reject, "reject"), samples=2000)
    assert report.verdict == "no violation detected", [c.violations for c in report.cases]
    identical = next(c for c in report.cases if c.kind == "identical")
    assert identical.notes and "not fully accepted" in identical.notes[0]


def test_issue_31_reproduction_all_accepted_drafts_are_not_a_loss():
    """``conform tv-numpy --samples 50 --seed 1``: a pair whose drafts were all accepted (SE 0)
    used to "exceed LP B by 3.5e10 SE"."""
    report = conform(load_sampler("tv-numpy"), samples=50, seed=1)
    assert report.exit_code == 0, [c.violations for c in report.cases]
    iid = next(c for c in report.cases if c.label == "iid#1")
    assert iid.mean_tau > iid.lp_b  # the sample mean is above LP B, and that is no evidence


@pytest.mark.slow
def test_false_alarm_rate_holds_at_tiny_sample_sizes_over_many_seeds():
    """Issue 31: at 2-20 samples a lossless sampler is flagged at most at the stated rate.
    With α = 0.2 the family-wise rate is measurable: over 120 seeds the flagged share stays
    below 0.2 + 3 binomial standard errors (≈ 0.31)."""
    flagged, runs = 0, 0
    for seed in range(40):
        for n in (2, 5, 20):
            report = conform(load_sampler("vllm-standard"), samples=n, seed=seed, alpha=0.2,
                             kinds=("paper", "identical"))
            flagged += report.lossy
            runs += 1
    assert flagged / runs <= 0.2 + 3 * (0.2 * 0.8 / runs) ** 0.5


def test_power_is_reported_and_detect_chooses_the_draws():
    report = conform(load_sampler("vllm-block"), detect=0.2, kinds=("paper",))
    power = report.to_json()["power"]
    assert power["draws"] == report.samples and power["false_alarm"] == report.alpha
    assert power["detectable_tv"] <= 0.2
    smaller = conform(load_sampler("vllm-block"), samples=report.samples // 2, kinds=("paper",))
    assert smaller.detectable_tv > 0.2  # the chosen draws are (close to) the fewest


@pytest.mark.parametrize("kwargs, message", [
    ({"samples": 1}, "--samples"), ({"samples": 10**13}, "exceeds the limit"),
    ({"samples": 2.5}, "--samples"), ({"alpha": 1.5}, "--alpha"), ({"detect": 0.0}, "--detect"),
    ({"detect": 1e-6}, "--detect"), ({"batch": 0}, "batch"),
])
def test_bad_settings_are_refused_naming_the_argument(kwargs, message):
    with pytest.raises(SpecbatchError, match=message):
        conform(load_sampler("vllm-block"), **kwargs)


def test_the_largest_seed_runs():
    report = conform(load_sampler("vllm-block"), samples=20, seed=2**63 - 1, kinds=("paper",))
    assert report.seed == 2**63 - 1


def exits(draft_token_ids, draft_probs, target_probs, generator=None):
    raise SystemExit(0)


def test_sys_exit_in_a_sampler_is_bad_input():
    with pytest.raises(SpecbatchError, match="raised SystemExit"):
        conform(sampler(exits), samples=10, kinds=("paper",))


def test_triton_on_cpu_is_refused_without_the_interpreter(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SpecbatchError, match="TRITON_INTERPRET=1"):
        load_sampler("tv-triton")


def test_long_runs_report_progress(monkeypatch):
    from specbatch.theory.conform import harness as conform_harness
    clock = iter(range(0, 10**6, 10))  # every batch "takes" 10 s
    monkeypatch.setattr(conform_harness.time, "monotonic", lambda: next(clock))
    told = []
    conform(load_sampler("vllm-block"), samples=40, batch=10, kinds=("paper",),
            progress=told.append)
    assert told and told[0].startswith("pair 1/1 (paper#1): ") and "/40 samples" in told[0]


def test_detect_is_refused_for_a_greedy_target():
    with pytest.raises(SpecbatchError, match="--detect: a greedy target"):
        conform(load_sampler("vllm-v1-greedy"), detect=0.1)
