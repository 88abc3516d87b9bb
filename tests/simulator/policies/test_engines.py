"""The engines' batch-K policies on hand-computed cases: vLLM's goodput choice, the batch-size
tables, SGLang's EMA slots."""

from __future__ import annotations

import numpy as np
import pytest

from specbatch.simulator.config.sim_config import load_config
from specbatch.simulator.policies.engines import AdaptiveSlot, EmaAdaptive
from specbatch.simulator.policies.registry import make_policy
from specbatch.simulator.policies.schedules import SGLANG_SLOT_DEFAULTS
from specbatch.simulator.policies.view import StepView
from specbatch.simulator.run import attach_verify_cost, simulate
from tests.simulator.helpers import LinearCost, const_trace

COST = LinearCost()  # step = 0.5 + 0.25 Σq (target) + 0.125 Σq per draft pass


def view(n: int) -> StepView:
    return StepView.from_signals(np.zeros(n, dtype=np.int64), 0, 4, cost=COST)


def test_vllm_dynamic_picks_the_goodput_argmax_per_batch_size():
    """α = 0.8 everywhere: a_j = 0.8^j, accepted length AL(K) = 1, 1.8, 2.44, 2.952, 3.3616.
    ITL(n, K) = 0.5 + 0.25 n (K + 1) + 0.125 n K. n = 1: ITL = 0.75, 1.125, 1.5, 1.875, 2.25,
    goodput 1.333, 1.6, 1.627, 1.574, 1.494 -> K = 2. n = 4: ITL = 1.5, 3, 4.5, ... goodput
    0.667, 0.6, 0.542, ... -> K = 0."""
    policy = make_policy(load_config(None, policy="vllm-dynamic", k=4, calibration_split=0.5,
                                     verify_cost="none"), 4)
    policy.calibrate(const_trace(alpha=0.8, depth=4))
    np.testing.assert_allclose(policy.rates, [0.8, 0.64, 0.512, 0.4096])
    assert policy.decide(view(1))[1].tolist() == [2]
    assert policy.decide(view(4))[1].tolist() == [0] * 4
    assert policy.table == {1: 2, 4: 0}  # one entry per batch size, computed once


def test_vllm_dynamic_prints_its_choices_as_vllms_batch_size_table():
    """Same α = 0.8 case: n = 2 has ITL = 1 + 0.75 K, goodput 1, 1.029, 0.976 -> K = 1;
    n = 3 has ITL = 1.25 + 1.125 K, goodput 0.8, 0.758 -> K = 0 (and n = 4 too)."""
    config = load_config(None, policy="vllm-dynamic", k=4, calibration_split=0.5, max_num_seqs=4,
                         verify_cost="none")
    policy = make_policy(config, 4)
    policy.calibrate(const_trace(alpha=0.8, depth=4))
    assert policy.schedule(4, COST) == "1-1:2,2-2:1,3-4:0"
    note = policy.run_notes(config, COST)[0]
    assert note.endswith('num_speculative_tokens_per_batch_size = "1-1:2,2-2:1,3-4:0"')


def test_vllm_dynamic_breaks_a_goodput_tie_toward_the_smaller_k():
    """α = 0.5, n = 1: goodput(0) = 1 / 0.75 = 4/3 = 1.5 / 1.125 = goodput(1) exactly."""
    policy = make_policy(load_config(None, policy="vllm-dynamic", k=2, calibration_split=0.5,
                                     verify_cost="none"), 4)
    policy.calibrate(const_trace(alpha=0.5, depth=4))
    assert policy.best_k(1, COST) == 0


def test_vllm_dynamic_prices_the_rejection_sampler_like_vllms_measured_itl():
    """With a sampler preset, ITL = the cost model's step + the sampler's seconds."""
    config = load_config(None, policy="vllm-dynamic", k=2, calibration_split=0.5,
                         verify_cost="fused")
    policy = make_policy(config, 4)
    trace = const_trace(alpha=0.5, depth=4)
    policy.calibrate(trace)
    attach_verify_cost(policy, config, trace)  # what simulate does before the run
    sampler = policy.sampler.seconds(3, 6, np.full(3, 2))
    assert sampler > 0
    assert policy.itl(3, 2, COST) == pytest.approx(0.5 + 0.25 * 9 + 2 * 0.125 * 3 + sampler)


def test_vllm_dynamic_calibrates_on_held_out_requests_only():
    """The replayed requests and the calibration requests are disjoint; the rates are the
    calibration requests' mean P(τ ≥ j)."""
    trace = const_trace(n_requests=8, alpha=0.6, depth=4)
    config = load_config(None, trace="synth", policy="vllm-dynamic", k=3, requests=6,
                         calibration_split=0.25, seed=3)
    result = simulate(config, trace, cost_model=COST)
    replayed = set(result.requests["trace_index"])
    assert len(replayed) == 6 and replayed <= set(range(8))
    # no split given: the documented default holds a quarter of the trace out, and says so
    default = simulate(load_config(None, trace="synth", policy="vllm-dynamic", k=3, requests=6,
                                   seed=3), trace, cost_model=COST)
    assert (default.summary["calibration_split"], default.summary["held_out_requests"]) == (0.25, 2)
    assert any("2 of the trace's 8 requests (calibration_split 0.25, the default for policy "
               "vllm-dynamic) are held out" in note for note in default.notes)
    assert default.summary["throughput"] == result.summary["throughput"]  # = split 0.25
    assert "held_out_requests" not in result.summary  # a split the user chose: as before


def test_vllm_table_sets_k_by_batch_size():
    config = load_config(None, policy="batch-schedule", k=3, max_num_seqs=8,
                         num_speculative_tokens_per_batch_size="1-2:3,5-8:1")
    policy = make_policy(config, 4)
    assert [policy.decide(view(n))[0][0] for n in (1, 2, 3, 4, 5, 8)] == [3, 3, 3, 3, 1, 1]


def test_trt_schedule_sets_k_by_batch_size_and_turns_speculation_off_past_it():
    policy = make_policy(load_config(None, policy="batch-schedule", k=3,
                                     draft_len_schedule="2:3,4:1"), 4)
    got = [int(policy.decide(view(n))[1][0]) for n in (1, 2, 3, 4, 5)]
    assert got == [3, 3, 1, 1, 0]
    plain = make_policy(load_config(None, policy="batch-schedule", k=2), 4)
    assert plain.decide(view(50))[0].tolist() == [2] * 50  # no table: K = k always


def slot(candidates, initial, **kw) -> AdaptiveSlot:
    return AdaptiveSlot(initial, {**SGLANG_SLOT_DEFAULTS, "candidate_steps": candidates, **kw})


def test_sglang_slot_steps_up_after_warmup_then_down():
    """EMA from 2.0 fed 5 every batch: ema_n = 5 − 3·0.8^n. The first re-plan is batch 15
    (warmup 10, interval 5): ema = 4.894 > 2.5 and > 4.5, so 3 -> 7. Fed 0 for five batches:
    ema = 4.894·0.8^5 = 1.604 <= 4.5 − 0.25 (down to 5) and <= 2.5 − 0.25 (down to 3) but
    > 0.5 − 0.25 (not down to 1), so 7 -> 3."""
    s = slot([1, 3, 5, 7], 3)
    for _ in range(14):
        s.update(np.array([5, 5]))
    assert s.steps == 3
    s.update(np.array([5, 5]))
    assert s.steps == 7 and s.ema == pytest.approx(5 - 3 * 0.8 ** 15)
    for _ in range(5):
        s.update(np.array([0]))
    assert s.steps == 3 and s.ema == pytest.approx((5 - 3 * 0.8 ** 15) * 0.8 ** 5)


def test_sglang_slot_turns_speculation_off_then_probes_the_next_candidate():
    """Candidates [0, 1, 3] from 1: EMA 0 <= 0.5 − 0.25 drops to 0 at batch 15; at 0 steps the
    EMA is frozen and the next re-plan (batch 20) probes 1."""
    s = slot([0, 1, 3], 1)
    for _ in range(15):
        s.update(np.array([0, 0]))
    assert s.steps == 0
    for _ in range(4):
        s.update(np.array([0, 0]))
    assert s.steps == 0
    s.update(np.array([0, 0]))
    assert s.steps == 1


def test_ema_adaptive_routes_a_batch_to_the_largest_slot_key_below_it():
    """SGLang's default config: keys 1, 8, 32, 64; initial steps 3 is a candidate of slot 1
    ([1, 3, 5, 7]) and slot 8 ([0, 1, 3]); slot 32 starts at its middle candidate 1; slot 64
    ([0]) never speculates."""
    policy = make_policy(load_config(None, policy="ema-adaptive", k=3), 8)
    assert isinstance(policy, EmaAdaptive) and policy.depth == 7
    got = {n: int(policy.decide(view(n))[0][0]) for n in (1, 7, 8, 31, 32, 64, 200)}
    assert got == {1: 3, 7: 3, 8: 3, 31: 3, 32: 1, 64: 0, 200: 0}


def test_ema_adaptive_feeds_the_slot_it_decided_with():
    policy = make_policy(load_config(None, policy="ema-adaptive", k=1, speculative_adaptive_config=
                                     '{"1": {"candidate_steps": [1, 2], "warmup_batches": 0, '
                                     '"update_interval": 1}}'), 4)
    policy.decide(view(3))
    policy.observe(np.array([1, 1, 1]), np.array([1, 1, 1]))  # ema 0 -> 0.2: stays at 1
    assert policy.current.steps == 1
    for _ in range(10):
        policy.decide(view(3))
        policy.observe(np.array([1, 1, 1]), np.array([1, 1, 1]))
    assert policy.decide(view(3))[0].tolist() == [2, 2, 2]  # ema 0.91 > 1 − 0.5
