"""An acceptance profile replayed position by position (simulator.replay.profile_replay)."""

from __future__ import annotations

import numpy as np
import pytest

from specbatch.errors import SpecbatchError
from specbatch.simulator.config.sim_config import make_config
from specbatch.simulator.replay.profile_replay import accept_lengths, profile_columns
from specbatch.simulator.run import simulate
from specbatch.traces.acceptance.library import load_bundled
from specbatch.traces.acceptance.profile import AcceptanceProfile, mean_accepted_length
from specbatch.traces.acceptance.vllm_metrics import read_metrics

COUNTERS = """# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="llama"} 1000.0
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="llama"} 3000.0
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="llama"} 1752.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="llama",position="0"} 800.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="llama",position="1"} 560.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="llama",position="2"} 392.0
"""


def run(profile: str, **fields):
    return simulate(make_config({"acceptance_profile": profile, "requests": 256,
                                 "policy": "fixed", **fields}))


def test_prometheus_counters_become_a_profile_whose_mal_the_simulator_reproduces(tmp_path):
    from specbatch.traces.acceptance.profile import write_profile

    scrape = tmp_path / "metrics.prom"
    scrape.write_text(COUNTERS)
    path = write_profile(read_metrics(scrape), tmp_path / "p.json")
    result = run(str(path), num_speculative_tokens=3)
    assert result.summary["mal"] == pytest.approx(2.752, rel=0.01)
    assert any("acceptance from profile" in n for n in result.notes)


def test_a_bimodal_histogram_replays_bimodal_and_keeps_its_mal():
    p = load_bundled("ngram-llama3.1-8b-code-edit")
    result = run("ngram-llama3.1-8b-code-edit", num_speculative_tokens=5)
    assert result.summary["mal"] == pytest.approx(mean_accepted_length(p), rel=0.01)
    cols = profile_columns(p, 20000, seed=0)
    accepted = cols["pt"].sum(axis=1)  # [rows]: each row's L
    counts = np.bincount(accepted.astype(int), minlength=6) / accepted.size
    assert counts == pytest.approx(np.asarray(p.histogram), abs=0.015)
    # the chain of the same rates spreads the law: P(tau = 5) far below the histogram's
    chain = AcceptanceProfile(rates=p.rates)
    assert np.prod(chain.rates) == pytest.approx(p.histogram[-1])  # same survival ...
    assert mean_accepted_length(chain) == pytest.approx(mean_accepted_length(p))


def test_accept_lengths_are_common_random_numbers():
    h = np.array([0.5, 0.2, 0.3])
    a, b = accept_lengths(h, 1000, 7), accept_lengths(h, 1000, 7)
    assert np.array_equal(a, b) and not np.array_equal(a, accept_lengths(h, 1000, 8))
    assert a.min() >= 0 and a.max() <= 2


def test_settings_on_a_profile_see_the_same_outcomes():
    # k = 3 and k = 5 on the same rows: a row accepting L tokens accepts min(L, k)
    p = load_bundled("ngram-llama3.1-8b-code-edit")
    cols = profile_columns(p, 500, seed=1)
    assert np.array_equal(cols["pt"][:, :3], profile_columns(p, 500, seed=1)["pt"][:, :3])


def test_block_equals_token_verification_on_a_profile_and_says_so():
    tv = run("eagle3-llama3.1-8b-mtbench-t0", num_speculative_tokens=4)
    bv = run("eagle3-llama3.1-8b-mtbench-t0", num_speculative_tokens=4, verify="block")
    # the same law (THEORY.md §3, one-hot draft), drawn from BV's own uniforms
    assert bv.summary["mal"] == pytest.approx(tv.summary["mal"], rel=0.01)
    assert any("block verification has the law of token" in n for n in bv.notes)


def test_signal_policies_are_told_they_lose_their_signal():
    result = run("eagle3-llama3.1-8b-mtbench-t0", policy="tetris", num_speculative_tokens=3,
                 extra=1)
    assert any("tetris reads per-token draft confidences" in n for n in result.notes)


def test_deeper_than_the_profile_is_refused():
    with pytest.raises(SpecbatchError, match="the profile.s K = 1"):
        run("mtp-deepseek-v3-k1", num_speculative_tokens=2)
    with pytest.raises(SpecbatchError, match="acceptance = trace"):
        run("mtp-deepseek-v3-k1", num_speculative_tokens=1, acceptance="constant")


def test_same_seed_same_run():
    a = run("ngram-llama3.1-8b-code-edit", num_speculative_tokens=5, requests=64)
    b = run("ngram-llama3.1-8b-code-edit", num_speculative_tokens=5, requests=64)
    assert a.summary == b.summary


def test_the_source_says_whose_pair_it_is():
    from specbatch.simulator.replay.acceptance_source import acceptance_source, canonical

    assert canonical("meta-llama/Meta-Llama-3.1-8B-Instruct") == "llama-3.1-8b"
    mine = acceptance_source(make_config({
        "target": "llama-3.1-8b", "draft": "eagle3",
        "acceptance_profile": "eagle3-llama3.1-8b-mtbench-t0"}))
    assert mine["pair_matches"] is True and mine["kind"] == "profile"
    borrowed = acceptance_source(make_config({"target": "llama-3.1-70b", "draft": "llama-3.2-1b"}))
    assert borrowed["pair_matches"] is False and "smollm2" in borrowed["source"]
    other_head = acceptance_source(make_config({
        "target": "llama-3.1-8b", "draft": "eagle",
        "acceptance_profile": "eagle3-llama3.1-8b-mtbench-t0"}))
    assert other_head["pair_matches"] is False
    assumed = acceptance_source(make_config({"trace": "synth", "synth_alpha": 0.8}))
    assert assumed["pair_matches"] is None
