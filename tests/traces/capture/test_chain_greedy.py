"""Greedy drafting in capture (``--draft-sample greedy``, vLLM's default draft_sample_method):
the draft proposes its argmax chain, the trace records it as a one-hot draft (q = 1, pt the
target's probability of the argmax token at T, Z_{i+1} = p_i (1 − pt_{i+1})), and the draft-side
signals stay those of the draft model's real temperature-1 distribution.

That one-hot drafts verified this way are lossless is checked by exact enumeration in
tests/theory/test_ngram_drafts.py.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from specbatch.traces.capture.chain import (  # noqa: E402
    CaptureConfig,
    capture,
    capture_request,
    capture_request_naive,
    encode_prompt,
    load_pair,
)
from specbatch.traces.capture.drafters import ModelDrafter  # noqa: E402
from specbatch.traces.format.files import read_trace  # noqa: E402
from tests.traces.capture.test_chain import PROMPTS, ROOT, _save_pair  # noqa: E402

PROMPT = "def add(a, b):"


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    return _save_pair(tmp_path_factory.mktemp("pair"))


@pytest.fixture(scope="module")
def loaded(pair):
    return load_pair(*pair)


def _cfg(temperature: float, **kw) -> CaptureConfig:
    return CaptureConfig(**{"max_new_tokens": 10, "depth": 4, "temperature": temperature,
                            "batch_size": 4, "stop_at_eos": False, **kw})


def _greedy(tok, draft, target, cfg, index: int = 0, **kw) -> dict:
    ids = encode_prompt(tok, PROMPT, 64)
    return capture_request(tok, ModelDrafter(draft, greedy=True), target, ids, index, cfg, **kw)


def _naive_chain(model, ctx: list[int], k: int) -> tuple[list[int], np.ndarray]:
    """The draft's argmax chain of k tokens from ``ctx`` with no cache, and its logits # [k, V]."""
    toks, rows = [], []
    for _ in range(k):
        logits = model(input_ids=torch.tensor([ctx + toks])).logits[0, -1].double()
        rows.append(logits.numpy())
        toks.append(int(logits.argmax()))
    return toks, np.stack(rows)


def _softmax(logits: np.ndarray, temperature: float = 1.0) -> np.ndarray:
    x = logits / temperature
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _one_hot_z(pt: np.ndarray) -> np.ndarray:
    """Z_{i+1} = p_i (1 − pt_{i+1}) with p_i = Π_{j ≤ i} pt_j (q = 1)."""
    p_prev = np.concatenate([np.ones((len(pt), 1)), np.cumprod(pt, 1)[:, :-1]], 1)
    return p_prev * (1 - pt)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_greedy_rows_are_one_hot_at_the_drafts_argmax_chain(loaded, temperature):
    tok, draft, target = loaded
    cfg = _cfg(temperature)
    res = _greedy(tok, draft, target, cfg)
    assert (res["q"] == 1).all()
    prompt = encode_prompt(tok, PROMPT, 64)
    with torch.inference_mode():
        for t in range(len(res["y"])):
            ctx = prompt + res["y"][:t].tolist()
            chain, d_logits = _naive_chain(draft, ctx, cfg.depth)
            assert res["draft_token"][t].tolist() == chain
            t_logits = target(input_ids=torch.tensor([ctx + chain])).logits[0, len(ctx) - 1:-1]
            mb = _softmax(t_logits.double().numpy(), temperature)
            np.testing.assert_allclose(res["pt"][t], mb[np.arange(cfg.depth), chain], atol=1e-6)
            # the signals are the draft model's real temperature-1 ones, not the one-hot's
            ms1 = _softmax(d_logits)
            np.testing.assert_allclose(res["top1"][t], ms1.max(-1), atol=1e-6)
            entropy = -(ms1 * np.log(np.maximum(ms1, 1e-300))).sum(-1)
            np.testing.assert_allclose(res["entropy"][t], entropy, atol=1e-5)
    np.testing.assert_array_equal(res["draft_conf"], res["top1"])  # the drafted token is the argmax
    assert (res["top1"] < 1).all() and (res["entropy"] > 0.01).all()
    np.testing.assert_allclose(res["z"], _one_hot_z(res["pt"]), rtol=0, atol=1e-12)


def test_greedy_fast_path_equals_naive_recomputation(loaded):
    tok, draft, target = loaded
    cfg = _cfg(1.0)
    ids = encode_prompt(tok, "class Point:\n", 64)
    drafter = ModelDrafter(draft, greedy=True)
    fast = capture_request(tok, drafter, target, ids, 3, cfg, return_rows=True)
    naive = capture_request_naive(tok, drafter, target, ids, 3, cfg, return_rows=True)
    np.testing.assert_array_equal(fast["draft_token"], naive["draft_token"])
    for name in ("draft_rows", "target_rows", "q", "pt", "z", "draft_conf", "entropy", "top1"):
        np.testing.assert_allclose(fast[name], naive[name], atol=1e-5, err_msg=name)
    assert set(np.unique(fast["draft_rows"])) == {0.0, 1.0}  # the recorded Ms is one-hot


def test_signals_agree_with_probabilistic_capture_where_the_paths_agree(loaded):
    """Both captures share the reference output (same request uniforms), so at every position
    the first drafted token's signals are the draft's on the same context, and at every later
    slot whose drafted prefix coincides, on the same path."""
    tok, draft, target = loaded
    cfg = _cfg(1.0)
    greedy = _greedy(tok, draft, target, cfg)
    prob = capture_request(tok, draft, target, encode_prompt(tok, PROMPT, 64), 0, cfg)
    np.testing.assert_array_equal(greedy["y"], prob["y"])
    for name in ("top1", "entropy"):
        np.testing.assert_allclose(greedy[name][:, 0], prob[name][:, 0], rtol=0, atol=1e-9)
    same = np.cumprod(greedy["draft_token"] == prob["draft_token"], axis=1).astype(bool)
    # slot j's signals read X^j, the drafted tokens before it
    prefix = np.concatenate([np.ones((len(same), 1), bool), same[:, :-1]], axis=1)
    assert same.any() and prefix[:, 1:].any()
    for name in ("draft_conf", "top1", "entropy"):
        np.testing.assert_allclose(greedy[name][same], prob[name][same], rtol=0, atol=1e-9)
    for name in ("top1", "entropy"):
        np.testing.assert_allclose(greedy[name][prefix], prob[name][prefix], rtol=0, atol=1e-9)


def test_greedy_at_temperature_zero_equals_probabilistic_at_zero(loaded):
    """At T = 0 a probabilistic draft is the argmax chain already, recorded one-hot."""
    tok, draft, target = loaded
    cfg = _cfg(0.0)
    greedy = _greedy(tok, draft, target, cfg)
    prob = capture_request(tok, draft, target, encode_prompt(tok, PROMPT, 64), 0, cfg)
    for name in ("draft_token", "q", "pt", "z", "draft_conf", "entropy", "top1"):
        np.testing.assert_array_equal(greedy[name], prob[name], err_msg=name)


def test_greedy_trace_is_valid_records_its_method_and_simulates(pair, tmp_path):
    from specbatch.simulator import SimConfig, simulate

    cfg = _cfg(1.0, max_new_tokens=6, depth=3, chunk_requests=2, draft_sample_method="greedy")
    meta = capture(*pair, PROMPTS, tmp_path / "g", cfg, progress=False, command="test")
    plain = capture(*pair, PROMPTS, tmp_path / "p", _cfg(1.0, max_new_tokens=6, depth=3,
                                                          chunk_requests=2),
                    progress=False, command="test")
    assert meta["draft_sample_method"] == meta["capture"]["draft_sample_method"] == "greedy"
    assert plain["draft_sample_method"] == "probabilistic"
    assert meta["completion"]["fingerprint"] != plain["completion"]["fingerprint"]
    trace = read_trace(tmp_path / "g")  # every row-bound check of the reader
    assert trace.n_rows == 30 and (trace.q == 1).all()
    result = simulate(SimConfig(trace=str(tmp_path / "g"), requests=5, policy="fixed",
                                num_speculative_tokens=2))
    assert result.summary["requests"] == 5 and result.summary["tokens"] == 30
    assert 1 <= result.summary["mal"] <= 3


def test_greedy_with_the_ngram_drafter_is_a_one_line_error(pair, tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "specbatch", "capture", "--draft", "ngram", "--target", pair[1],
         "--prompts", "default:1", "--out", str(tmp_path / "t"), "--draft-sample", "greedy",
         "--no-progress", "--json"], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.startswith("specbatch: error: --draft-sample greedy")
    assert len(proc.stderr.strip().splitlines()) == 1 and not (tmp_path / "t").exists()


def test_probabilistic_drafting_leaves_the_content_key_as_before():
    """Existing captures keep their fingerprint (and so stay resumable): the default method is
    not in the key, greedy is."""
    assert "draft_sample_method" not in CaptureConfig().content_key()
    assert CaptureConfig(draft_sample_method="greedy").content_key()["draft_sample_method"] == \
        "greedy"


def test_the_bundled_greedy_trace_shares_the_drop2_traces_outputs_and_signals():
    """smollm2-drop2-greedy: the first requests of smollm2-drop2 (same prompts, seed and
    reference outputs) drafted greedily; at each position the first draft token's context is
    the same in both, so its signals are equal, and so is pt where both drafted the same token."""
    from specbatch.traces.format.files import resolve_trace

    greedy = read_trace(resolve_trace("smollm2-drop2-greedy"))
    prob = read_trace(resolve_trace("smollm2-drop2"))
    assert greedy.K == 8 and greedy.status == "complete" and greedy.temperature == 1.0
    assert greedy.meta["draft_sample_method"] == "greedy"
    assert greedy.meta["capture"]["chat_template"] is True
    assert greedy.meta["models"]["draft"]["derived"]["dropped"] == \
        prob.meta["models"]["draft"]["derived"]["dropped"] == [13, 14]
    assert (greedy.q == 1).all() and np.array_equal(greedy.draft_conf, greedy.top1)
    same_prompts = prob.subset(np.arange(greedy.n_requests))
    np.testing.assert_array_equal(greedy.output_len, same_prompts.output_len)
    for name in ("top1", "entropy"):
        np.testing.assert_array_equal(
            getattr(greedy, name)[:, 0], getattr(same_prompts, name)[:, 0]
        )
    same = greedy.draft_token[:, 0] == same_prompts.draft_token[:, 0]
    assert 0 < same.mean() < 1
    np.testing.assert_array_equal(greedy.pt[same, 0], same_prompts.pt[same, 0])
