"""Specification of host-side drafters in the cost model (simulator/cost/features/free_draft.py):
with ``draft = "ngram"`` every draft pass costs 0 s, the target's passes and overhead are the
wrapped model's, and the KV memory holds the target alone."""

from __future__ import annotations

import numpy as np
import pytest

from specbatch.simulator.config.sim_config import load_config
from specbatch.simulator.cost.analytic.memory import kv_capacity_tokens, memory_kv_tokens
from specbatch.simulator.cost.gpus.hardware import get_hardware
from specbatch.simulator.cost.interface import SumsCostModel, batch_sums
from specbatch.simulator.cost.registry import build_cost_model
from specbatch.simulator.run import simulate
from specbatch.traces.models.shapes import get_shape
from tests.simulator.cost.measured.test_profiled import synthetic_profile


def test_ngram_draft_is_free_and_the_target_is_the_roofline(h100):
    free = build_cost_model(draft="ngram")
    assert isinstance(free, SumsCostModel)
    rng = np.random.default_rng(0)
    for _ in range(10):
        n = int(rng.integers(1, 64))
        q, c = rng.integers(1, 9, n), rng.integers(0, 2000, n)
        assert free.step_time("draft", q, c) == 0.0
        assert free.time_from_sums("draft", *batch_sums(q, c)) == 0.0
        assert free.step_time("target", q, c) == h100.step_time("target", q, c)
        assert free.time_from_sums("target", *batch_sums(q, c)) == h100.step_time("target", q, c)
    assert free.overhead == h100.overhead


def test_ngram_draft_leaves_the_whole_memory_to_the_target():
    free = build_cost_model(draft="ngram")
    alone = memory_kv_tokens(get_hardware("h100"), get_shape("vicuna-33b"), None, 1, 0.9)
    assert free.kv_capacity_tokens(0.9) == alone > kv_capacity_tokens("h100", "vicuna-33b",
                                                                      "vicuna-68m", 1, 0.9)


def test_profiled_target_with_ngram_draft_fits_the_target_rows_only(tmp_path):
    path = tmp_path / "target-only.csv"
    df = synthetic_profile()
    df[df.role == "target"].to_csv(path, index=False)
    free = build_cost_model("profiled", target="vicuna-33b", draft="ngram", profile=str(path))
    assert set(free.fits) == {"target"}
    assert free.step_time("draft", np.ones(4), np.zeros(4)) == 0.0
    assert free.step_time("target", np.ones(4), np.zeros(4)) > 0.0


def test_a_simulation_with_free_drafts_charges_no_draft_time(synth_trace_natural):
    """Under a burst and policy fixed the schedule does not depend on step times, so the free
    draft's run takes the same steps with the same target time and zero draft time (both
    synchronous: vLLM's default runs the n-gram drafter so, a model drafter async)."""
    base = load_config(None, trace="synth", requests=48, max_num_seqs=16, policy="fixed", k=3,
                       host="fixed",  # no n-gram CPU time (simulator.cost.features.host)
                       async_scheduling=False)
    model = simulate(base, synth_trace_natural)
    free = simulate(base.replace(draft="ngram"), synth_trace_natural)
    assert free.summary["draft_time"] == 0.0 < model.summary["draft_time"]
    assert (free.steps["draft_time"] == 0.0).all()
    np.testing.assert_array_equal(free.steps["target_time"], model.steps["target_time"])
    np.testing.assert_array_equal(free.requests["accepted"], model.requests["accepted"])
    assert free.summary["makespan"] < model.summary["makespan"]


def test_with_vllm_host_terms_ngram_costs_its_cpu_time_once_per_step(synth_trace_natural):
    """host = vllm: each speculative step carries the n-gram proposer's CPU seconds
    (simulator.cost.features.host.ngram_seconds: c0 + c1·n + c2·Σ context + c3·n²), within the
    bounds of 1-16 requests of at most 4096 tokens each."""
    from specbatch.simulator.cost.features import host

    base = load_config(None, trace="synth", requests=48, max_num_seqs=16, policy="fixed", k=3,
                       draft="ngram")
    vllm = simulate(base, synth_trace_natural)
    fixed = simulate(base.replace(host="fixed"), synth_trace_natural)
    drafts = vllm.steps["draft_time"].to_numpy()  # [steps]
    low = host.NGRAM_CALL_S + host.NGRAM_REQUEST_S + host.NGRAM_PAIR_S
    high = (host.NGRAM_CALL_S + 16 * host.NGRAM_REQUEST_S + 16 * 4096 * host.NGRAM_TOKEN_S
            + 256 * host.NGRAM_PAIR_S)
    assert (drafts >= low).all() and (drafts < high).all()
    assert fixed.summary["draft_time"] == 0.0


@pytest.mark.parametrize("draft, noted", [("vicuna-68m", True), ("ngram", False)])
def test_an_ngram_trace_priced_with_a_draft_model_says_so(draft, noted):
    config = load_config(None, trace="smollm2-ngram", requests=8, draft=draft)
    notes = simulate(config).notes
    assert any("drafted by ngram" in n for n in notes) == noted
