"""The live loop is exact: TV and BV at temperature 0 reproduce the target's own greedy decoding,
whatever the policy, arrivals and number of running slots; the policy is the simulator's (TETRIS
verifies exactly its budget); the torch verifier and the replay path agree."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from specbatch.live.config import LiveConfig  # noqa: E402
from specbatch.live.loop import run_live  # noqa: E402
from tests.live.helpers import IDS, greedy_decode  # noqa: E402


@pytest.fixture(scope="module")
def greedy(models):
    return [greedy_decode(models[1], ids, 12) for ids in IDS]


@pytest.mark.parametrize("policy,k,extra,rule,slots,arrival", [
    ("fixed", 3, 0, "token", None, "burst"),     # one static batch
    ("tetris", 2, 2, "token", 2, "burst"),       # joins as others leave
    ("tetris", 2, 1, "block", 3, "poisson"),     # joins mid-run, idle gaps
    ("fixed", 4, 0, "block", 1, "gamma"),        # one request at a time
])
def test_temperature_zero_output_equals_target_greedy(models, greedy, policy, k, extra, rule,
                                                      slots, arrival):
    cfg = LiveConfig(max_new_tokens=12, policy=policy, k=k, extra=extra, verify=rule,
                     max_num_seqs=slots, arrival=arrival, rate=40.0, cv=2.0)
    result = run_live(*models, IDS, cfg)
    assert result.outputs == greedy
    # the draft agrees often enough that accepted tokens (and KV holes) are exercised
    assert 1.3 < result.summary["mal"] < k + extra + 1
    assert result.summary["accepted"] < result.summary["verified"]


def test_tetris_verifies_exactly_the_budget_and_fixed_verifies_k(models):
    tet = run_live(*models, IDS, LiveConfig(max_new_tokens=8, policy="tetris", k=2, extra=2))
    dec = tet.steps[tet.steps["batch"] > 0]
    assert (dec["verified"] == 2 * dec["batch"]).all()
    assert (dec["drafted"] == 4 * dec["batch"]).all()
    fix = run_live(*models, IDS, LiveConfig(max_new_tokens=8, policy="fixed", k=3, extra=5))
    dec = fix.steps[fix.steps["batch"] > 0]
    assert (dec["verified"] == 3 * dec["batch"]).all() and (dec["depth"] == 3).all()


@pytest.mark.parametrize("rule", ["token", "block"])
def test_theory_torch_verifier_and_local_replay_path_agree_at_temperature_one(models, rule):
    runs = [run_live(*models, IDS, LiveConfig(max_new_tokens=10, policy="tetris", k=2, extra=1,
                                               verify=rule, temperature=1.0, seed=3,
                                               verifier=verifier))
            for verifier in ("theory", "local")]
    assert runs[0].summary["verifier"] == "specbatch.theory.verify.torch_batched"
    assert runs[0].outputs == runs[1].outputs
    assert (runs[0].steps["accepted"] == runs[1].steps["accepted"]).all()


def test_tetris_allocation_is_the_simulator_policy_on_the_recorded_confidence(models):
    """At every decode step each request verified the prefix simulator.policies.registry.Tetris
    assigns it from the recorded draft confidence of that step's rows (no live copy of the
    policy). The target scored exactly the verified prefix, so pt > 0 there and 0 after."""
    from specbatch.simulator.policies.registry import make_policy
    from specbatch.simulator.policies.view import StepView

    cfg = LiveConfig(max_new_tokens=10, policy="tetris", k=2, extra=2, verify="block",
                     temperature=1.0, seed=5)
    result = run_live(*models, IDS, cfg)
    policy = make_policy(cfg.sim_config(len(IDS)), cfg.depth)
    by_step: dict[int, list] = {}  # one static batch: a request's j-th position is step j
    for rows in result.trace_rows.values():  # uids in batch order
        for step, t in enumerate(sorted(rows)):
            by_step.setdefault(step, []).append(rows[t])
    decode = result.steps[result.steps["batch"] > 0]
    assert len(by_step) == len(decode)
    for step, rows in by_step.items():
        conf = np.stack([r[4] for r in rows])  # TRACE_FIELDS: draft_conf
        _, s = policy.decide(StepView.from_signals(np.zeros(len(rows), dtype=np.int64),
                                                   cfg.k * len(rows), cfg.depth, conf=conf))
        scored = np.stack([r[2] for r in rows]) > 0  # pt
        assert np.array_equal(scored, np.arange(cfg.depth)[None, :] < s[:, None]), step
        assert int(decode["verified"].iloc[step]) == int(s.sum())
