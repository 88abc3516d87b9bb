"""The live n-gram (prompt-lookup) drafter: no draft model, exact at T = 0 (the target's greedy
decoding), one-hot rows at T = 1 (q = 1, pt = the target's probability of each proposed token
that was verified, fillers past the proposal), every policy capped at the proposed count, a
request with nothing proposed takes a one-token target step, the draft time is the proposer's,
and the recorded trace validates and replays through the simulator step for step."""

from __future__ import annotations

import copy

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from specbatch.live.config import LiveConfig  # noqa: E402
from specbatch.live.loop import run_live  # noqa: E402
from specbatch.live.record import TRACE_FIELDS, build_trace  # noqa: E402
from specbatch.simulator.run import simulate  # noqa: E402
from specbatch.traces.capture.ngram import propose_ngram_reference  # noqa: E402
from specbatch.traces.format.files import read_trace, write_trace  # noqa: E402
from tests.live.helpers import IDS, MeasuredSteps, greedy_decode  # noqa: E402

NGRAM = dict(draft="ngram", ngram_min=1, ngram_max=3)
FIELD = {name: i for i, name in enumerate(TRACE_FIELDS)}


@pytest.fixture(scope="module")
def target(models):
    return models[1]


@pytest.fixture(scope="module")
def peaked(target):
    """The tiny target with sharper rows, so that at T = 1 its samples follow its own loops
    and proposals from the context are accepted often enough (and rejected too)."""
    model = copy.deepcopy(target)
    with torch.no_grad():
        model.get_output_embeddings().weight.mul_(3.0)
    return model


@pytest.fixture(scope="module")
def looping(peaked):
    """Prompts followed by the peaked target's greedy continuation (repeated n-grams)."""
    return [ids + greedy_decode(peaked, ids, 12) for ids in IDS]


@pytest.mark.parametrize("policy,k,extra,rule,slots,arrival", [
    ("fixed", 3, 0, "token", None, "burst"),
    ("tetris", 2, 1, "block", 2, "poisson"),
])
def test_temperature_zero_output_equals_target_greedy(target, policy, k, extra, rule, slots,
                                                      arrival):
    cfg = LiveConfig(max_new_tokens=12, policy=policy, k=k, extra=extra, verify=rule,
                     max_num_seqs=slots, arrival=arrival, rate=40.0, **NGRAM)
    result = run_live(None, target, IDS, cfg)
    assert result.outputs == [greedy_decode(target, ids, 12) for ids in IDS]
    assert result.summary["accepted"] > 0  # the greedy outputs loop: proposals are accepted
    assert result.summary["accepted"] <= result.summary["verified"]


def _path_probs(model, context: list[int], path: list[int]) -> np.ndarray:
    """Mb(path_j | context + path_<j) at T = 1, recomputed from scratch.  # [len(path)]"""
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([context + path])).logits[0].double()
    probs = torch.softmax(logits[len(context) - 1:-1], dim=-1)
    return probs[torch.arange(len(path)), torch.tensor(path)].numpy()


def test_temperature_one_rows_are_one_hot_with_the_target_probability_of_the_proposal(
        peaked, looping):
    cfg = LiveConfig(max_new_tokens=16, policy="tetris", k=2, extra=1, temperature=1.0,
                     seed=1, **NGRAM)
    result = run_live(None, peaked, looping, cfg)
    vocab, depth = peaked.get_output_embeddings().weight.shape[0], cfg.depth
    accepted = 0
    for uid, rows in result.trace_rows.items():
        out, prompt = result.outputs[uid], looping[uid]
        expect_t = 1  # output position 0 is the prefill step's token
        for t in sorted(rows):
            assert t == expect_t  # positions visited one after another: t + τ + 1
            row = rows[t]
            context = prompt + out[:t]
            proposal = propose_ngram_reference(context, depth, 1, 3)  # the reference twin
            m = len(proposal)
            assert row[-1] == m
            assert row[FIELD["draft_token"]].tolist() == proposal + [vocab] * (depth - m)
            assert (row[FIELD["q"]] == 1).all()
            assert row[FIELD["draft_conf"]].tolist() == [1.0] * m + [0.0] * (depth - m)
            pt = row[FIELD["pt"]]
            scored = int((pt > 0).sum())  # the verified prefix (pt > 0 at T = 1)
            assert scored <= m and (pt[scored:] == 0).all()
            if scored:
                assert np.allclose(pt[:scored], _path_probs(peaked, context, proposal[:scored]),
                                   atol=1e-5)
            tau = 0  # accepted tokens are the proposal's; a correction differs from it
            while tau < scored and t + tau < len(out) and out[t + tau] == proposal[tau]:
                tau += 1
            accepted += tau
            expect_t = t + tau + 1
        assert expect_t >= len(out)
    assert accepted == result.summary["accepted"] > 0
    assert result.summary["accepted"] < result.summary["verified"]


def test_theory_and_local_verifiers_agree_on_ngram_drafts(peaked, looping):
    runs = [run_live(None, peaked, looping, LiveConfig(max_new_tokens=10, k=3, temperature=1.0,
                                                       seed=2, verifier=v, **NGRAM))
            for v in ("theory", "local")]
    assert runs[0].outputs == runs[1].outputs
    assert (runs[0].steps["accepted"] == runs[1].steps["accepted"]).all()


def test_nothing_proposed_is_an_ordinary_one_token_target_step(target):
    """No 5-gram repeats in 5 tokens: every decode step drafts, verifies and accepts nothing,
    each request emits the target's own token, and no target pass scores a draft slot."""
    prompts = [[5, 6, 7], [8, 9, 10, 11, 12, 13, 14], [30, 31, 32, 33]]
    cfg = LiveConfig(max_new_tokens=5, policy="fixed", k=4, draft="ngram")
    result = run_live(None, target, prompts, cfg)
    assert result.outputs == [greedy_decode(target, ids, 5) for ids in prompts]
    decode = result.steps[result.steps["batch"] > 0]
    assert (decode[["drafted", "verified", "accepted", "depth"]] == 0).all().all()
    assert (decode["emitted"] == decode["batch"]).all()
    target_passes = result.passes[result.passes["role"] == "target"]
    assert (target_passes["query_tokens"].iloc[1:] == 1).all()  # after the prefill pass


def test_draft_time_is_the_proposers_and_there_is_no_draft_model_pass(peaked, looping):
    cfg = LiveConfig(max_new_tokens=8, k=3, temperature=1.0, **NGRAM)
    result = run_live(None, peaked, looping, cfg)
    steps, passes = result.steps, result.passes
    draft = passes[passes["role"] == "draft"]
    decode = steps[steps["batch"] > 0]
    assert len(draft) == len(decode)  # one proposer call per decode step, no draft prefill
    assert (steps.loc[steps["batch"] == 0, "draft_time"] == 0).all()
    assert np.allclose(decode["draft_time"].to_numpy(), draft["latency_s"].to_numpy())
    assert (decode["draft_time"] > 0).all()
    assert (result.requests["drafted"] < cfg.depth * result.requests["steps"]).any()


@pytest.mark.parametrize("scheduler", ["vllm-v1", "vllm-v0"])
def test_recorded_trace_has_proposed_column_validates_and_replays(peaked, looping, tmp_path,
                                                                   scheduler):
    """The n-gram twin of test_engine's replay test: the simulator, on the run's trace and
    its measured step times, draws the same τ and makes the same schedule."""
    cfg = LiveConfig(max_new_tokens=8, policy="tetris", k=2, extra=1, verify="block",
                     temperature=1.0, seed=3, max_num_seqs=3, arrival="poisson", rate=30.0,
                     scheduler=scheduler, **NGRAM)
    live = run_live(None, peaked, looping, cfg)
    trace = build_trace(live)
    write_trace(trace, tmp_path / "trace")
    again = read_trace(tmp_path / "trace")  # every check of the reader, the proposed column's
    assert np.array_equal(again.proposed, trace.proposed) and trace.proposed.max() > 0
    steps = live.steps
    # the live loop composes V0-style steps (prefill-only, then decode)
    sim = simulate(cfg.sim_config(len(looping)).replace(trace="synth"),
                   trace=again, cost_model=MeasuredSteps((steps["end"] - steps["time"]).to_numpy()))
    for col in ("time", "end", "batch", "prefill_tokens", "drafted", "verified", "accepted",
                "emitted", "depth"):
        assert np.array_equal(sim.steps[col].to_numpy(), steps[col].to_numpy()), col
    for col in ("arrival", "first_token", "finish", "tokens", "steps", "drafted", "verified",
                "accepted"):
        assert np.array_equal(sim.requests[col].to_numpy(), live.requests[col].to_numpy()), col
    assert live.summary["accepted"] > 0
