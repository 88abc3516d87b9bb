"""live/serving.py without HTTP: the counters follow vLLM's spec-decode metrics, per-row
temperatures, the sampler's output contract, and the engine loop itself on the tiny pair."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from specbatch.errors import SpecbatchError
from specbatch.live.serving import Counters, GenRequest, ServeConfig, parse_speculate

torch = pytest.importorskip("torch")


def test_counters_follow_vllms_spec_decode_stats():
    """vllm/v1/spec_decode/metrics.py (SpecDecodingStats.observe_draft): per request-step one
    draft, K draft tokens, τ accepted, and position j counted when τ > j."""
    c = Counters(3)
    c.count_step(3, np.array([0, 2, 3]))
    c.count_step(3, np.array([1]))
    snap = c.snapshot()
    assert (snap["drafts"], snap["draft_tokens"], snap["accepted"]) == (4, 12, 6)
    assert snap["per_pos"] == [3, 2, 1]  # sums to A; non-increasing


def test_speculate_and_settings_are_checked_naming_the_flag():
    assert parse_speculate("off") == 0 and parse_speculate("fixed:5") == 5
    for bad in ("fixed", "fixed:0", "fixed:65", "tetris:3", "on"):
        with pytest.raises(SpecbatchError, match="--speculate"):
            parse_speculate(bad)
    with pytest.raises(SpecbatchError, match="--verify: expected a chain rule"):
        ServeConfig(verify="specinfer").check()
    with pytest.raises(SpecbatchError, match="--draft-sample"):
        ServeConfig(draft_sample="top1").check()
    assert ServeConfig(verify="block").sampler_spec == "bv-torch"
    assert ServeConfig(sampler="bug-dflash-74").sampler_spec == "bug-dflash-74"


def test_row_probs_apply_each_rows_temperature():
    from specbatch.live.serving import row_probs

    logits = torch.tensor([[2.0, 1.0, 0.0], [2.0, 1.0, 0.0], [0.0, 3.0, 1.0]])
    p = row_probs(logits, [1.0, 0.5, 0.0])
    assert torch.allclose(p[0], torch.softmax(logits[0].double(), -1))
    assert torch.allclose(p[1], torch.softmax(logits[1].double() / 0.5, -1))
    assert p[2].tolist() == [0.0, 1.0, 0.0]


def test_the_samplers_output_contract():
    from specbatch.live.serving import _checked

    good = torch.tensor([[4, 5, -1, -1], [7, -1, -1, -1]])
    assert _checked(good, 2, 3, 10).tolist() == good.tolist()
    for bad, what in ((torch.zeros(2, 3, dtype=torch.long), "shape"),
                      (torch.tensor([[4, -1, 5, -1], [1, -1, -1, -1]]), "placeholders"),
                      (torch.tensor([[-1, -1, -1, -1], [1, -1, -1, -1]]), "placeholders"),
                      (torch.tensor([[10, -1, -1, -1], [1, -1, -1, -1]]), "placeholders")):
        with pytest.raises(SpecbatchError, match=what):
            _checked(bad, 2, 3, 10)


def run_all(engine, reqs, timeout=60.0):
    done = threading.Semaphore(0)
    for r in reqs:
        r.on_done = lambda _req: done.release()
        engine.submit(r)
    for _ in reqs:
        assert done.acquire(timeout=timeout)
    return reqs


@pytest.fixture(scope="module")
def models(pair):
    from tests.live.helpers import load_saved_pair

    return load_saved_pair(pair)


def test_greedy_speculative_output_equals_the_targets_greedy_decoding(models):
    """Five requests of different prompt lengths, more than the slots (they queue and join):
    with speculation and TV, and with it off, every output is the target's greedy decoding."""
    from specbatch.live.serving import ServeEngine
    from tests.live.helpers import IDS, greedy_decode

    draft, target = models
    want = [greedy_decode(target, ids, 7) for ids in IDS]
    for speculate in ("fixed:3", "off"):
        engine = ServeEngine(draft, target, ServeConfig(speculate=speculate, max_num_seqs=3))
        engine.start()
        try:
            reqs = run_all(engine, [GenRequest(prompt_ids=ids, max_tokens=7, temperature=0.0)
                                    for ids in IDS])
        finally:
            engine.stop()
        assert [r.tokens for r in reqs] == want, speculate
        assert all(r.finish_reason == "length" and r.error is None for r in reqs)
        snap = engine.counters.snapshot()
        assert snap["finished"] == {"length": 5} and snap["generation_tokens"] == 35
        assert (snap["drafts"] > 0) == (speculate != "off")


def test_a_seeded_request_draws_the_same_tokens_alone_or_in_a_crowd(models):
    from specbatch.live.serving import ServeEngine
    from tests.live.helpers import IDS

    draft, target = models
    engine = ServeEngine(draft, target, ServeConfig(max_num_seqs=8))
    engine.start()
    try:
        alone = run_all(engine, [GenRequest(prompt_ids=IDS[1], max_tokens=9, seed=7)])[0]
        crowd = [GenRequest(prompt_ids=IDS[i % 5], max_tokens=9) for i in range(6)]
        seeded = GenRequest(prompt_ids=IDS[1], max_tokens=9, seed=7)
        run_all(engine, [*crowd[:3], seeded, *crowd[3:]])
    finally:
        engine.stop()
    assert seeded.tokens == alone.tokens and len(alone.tokens) == 9


@pytest.fixture(scope="module")
def peaked(tmp_path_factory):
    """The pair the endpoint tests serve: peaked target rows, a 10 %-noise draft."""
    from tests.live.helpers import load_saved_pair, save_pair

    return load_saved_pair(save_pair(tmp_path_factory.mktemp("peaked"), scale=30.0,
                                     noise=0.1))


def engine_caught(models, sampler, draft_sample="probabilistic", n=120) -> bool:
    """Serve ``sampler`` in-process; is the law of the first 3 tokens at T = 1 (or greedy
    output) of 4 concurrent-running prompts shown to differ from the target's at α = 0.001?"""
    from specbatch.analysis.endpoint.target_law import cell_counts, greedy_tokens, prefix_laws
    from specbatch.live.serving import ServeEngine
    from specbatch.theory.conform.power import holm, holm_threshold, law_test
    from tests.live.helpers import IDS

    draft, target = models
    engine = ServeEngine(draft, target, ServeConfig(sampler=sampler, max_num_seqs=16,
                                                    draft_sample=draft_sample))
    engine.start()
    try:
        sampled = run_all(engine, [GenRequest(prompt_ids=IDS[i % 4], max_tokens=3)
                                   for i in range(4 * n)])
        greedy = run_all(engine, [GenRequest(prompt_ids=ids, max_tokens=6, temperature=0.0)
                                  for ids in IDS[:4]])
    finally:
        engine.stop()
    if any(r.tokens != greedy_tokens(target, r.prompt_ids, 6) for r in greedy):
        return True
    level, rng, p = holm_threshold(12, 1e-3), np.random.default_rng(0), []
    for ids in IDS[:4]:
        got = [tuple(r.tokens) for r in sampled if r.prompt_ids == ids]
        laws = prefix_laws(target, ids, 1.0, 3)
        p += [law_test(*cell_counts(got, laws[m - 1], m), level, rng).p_value
              for m in (1, 2, 3)]
    return bool(holm(p, 1e-3).any())


@pytest.mark.parametrize("sampler,draft_sample,caught", [
    (None, "probabilistic", False),
    ("bv-torch", "probabilistic", False),
    (None, "greedy", False),
    ("bug-1cat-656", "probabilistic", True),
    ("bug-ascend-7839", "greedy", True),
    ("bug-vllm-32852", "probabilistic", True),
    ("bug-vllm-27077", "probabilistic", True),
    ("bug-openvino-4190", "probabilistic", True),
    ("bug-mlx-swift-459", "probabilistic", False),
], ids=lambda v: str(v))
def test_the_engine_serving_a_sampler_keeps_or_breaks_the_target_law(peaked, sampler,
                                                                     draft_sample, caught):
    """The engine's own code path (drafts at T, one target pass, the served sampler on the
    running batch) in-process: correct verifiers keep the law, the 2026 bugs break it."""
    assert engine_caught(peaked, sampler, draft_sample) == caught
