"""Capture with the n-gram drafter (``--draft ngram``): one-hot draft rows whose recorded
statistics are the target's probabilities of the drafted tokens, the batched fast path equals
the per-position naive twin (which drafts with the reference proposer), positions that propose
fewer than K tokens carry the lossless filler, and resume/fingerprint/meta work as for a
draft model."""

from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from specbatch.errors import SpecbatchError  # noqa: E402
from specbatch.theory.verify.torch_path_stats import probs_at  # noqa: E402
from specbatch.traces.capture.chain import (  # noqa: E402
    CaptureConfig,
    capture,
    capture_request,
    capture_request_naive,
    encode_prompt,
    load_target,
)
from specbatch.traces.capture.ngram import NGRAM, NgramDrafter, propose_ngram  # noqa: E402
from specbatch.traces.format.files import read_trace  # noqa: E402
from specbatch.traces.format.trace import LIST_COLUMNS  # noqa: E402
from tests.traces.capture.test_chain import PROMPTS, _save_pair  # noqa: E402


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    return _save_pair(tmp_path_factory.mktemp("ngram-pair"))


@pytest.fixture(scope="module")
def target(pair):
    return load_target(pair[1])


def _run(target, fn, prompt: str, temperature: float, n_min=1, n_max=3, depth=4, new=14,
         index=0):
    tok, model = target
    cfg = CaptureConfig(max_new_tokens=new, depth=depth, temperature=temperature, batch_size=5,
                        stop_at_eos=False, ngram_min=n_min, ngram_max=n_max)
    drafter = NgramDrafter(n_min, n_max, model.get_output_embeddings().weight.shape[0])
    ids = encode_prompt(tok, prompt, 64)
    return ids, fn(tok, drafter, model, ids, index, cfg, return_rows=True)


@pytest.mark.parametrize("temperature", [1.0, 0.7, 0.0])
def test_fast_path_equals_the_naive_twin_with_the_reference_proposer(target, temperature):
    prompt = "def add(a, b):\n    return a + b\n\ndef add(a, b):\n"
    _, fast = _run(target, capture_request, prompt, temperature, index=3)
    _, naive = _run(target, capture_request_naive, prompt, temperature, index=3)
    np.testing.assert_array_equal(fast["y"], naive["y"])
    np.testing.assert_array_equal(fast["proposed"], naive["proposed"])
    np.testing.assert_array_equal(fast["draft_token"], naive["draft_token"])
    assert 0 < (fast["proposed"] > 0).mean() and (fast["proposed"] < 4).any()  # both kinds
    for name in ("q", "pt", "z", "draft_conf", "entropy", "top1"):
        np.testing.assert_allclose(fast[name], naive[name], atol=1e-5, err_msg=name)


@pytest.mark.parametrize("temperature", [1.0, 0.7, 0.0])
def test_recorded_rows_are_one_hot_drafts_scored_by_the_target(target, temperature):
    prompt = "        self.x = x\n        self.y = y\n        self."  # ends in a repeat
    ids, res = _run(target, capture_request, prompt, temperature)
    assert res["proposed"][0] > 0
    vocab = target[1].get_output_embeddings().weight.shape[0]
    k = res["draft_token"].shape[1]
    m = res["proposed"]
    real = np.arange(k)[None, :] < m[:, None]  # [n, K]
    # the proposal is the proposer's over prompt + y_<t; fillers are the virtual id V
    for t in range(len(res["y"])):
        ctx = ids + res["y"][:t].tolist()
        assert res["draft_token"][t, :m[t]].tolist() == propose_ngram(ctx, k, 1, 3).tolist()
    assert (res["draft_token"][~real] == vocab).all()
    # q = 1; pt = Mb(x_i | c, y_<t, X^{i-1}) on proposed tokens, 0 on fillers
    assert (res["q"] == 1).all()
    rows = res["target_rows"][:, :k]  # [n, K, V+1]
    want = np.take_along_axis(rows, res["draft_token"][..., None].astype(np.int64), -1)[..., 0]
    np.testing.assert_allclose(res["pt"], want, rtol=0, atol=1e-12)
    assert (res["pt"][~real] == 0).all() and (rows[..., vocab] == 0).all()
    # THEORY.md §3 for a one-hot draft: p_i = Π_{j≤i} pt_j, Z_{i+1} = p_i (1 − pt_{i+1})
    p_prev = np.concatenate([np.ones((len(m), 1)), np.cumprod(res["pt"], 1)[:, :-1]], 1)
    np.testing.assert_allclose(res["z"], p_prev * (1 - res["pt"]), atol=1e-12)
    # draft signals: one-hot (1, 1, 0) on proposed tokens, 0 on fillers
    assert (res["draft_conf"][real] == 1).all() and (res["top1"][real] == 1).all()
    assert (res["draft_conf"][~real] == 0).all() and (res["top1"][~real] == 0).all()
    assert (res["entropy"] == 0).all()
    # the pt of a proposed token is the target's own row, recomputed from scratch
    t = int(np.flatnonzero(m > 0)[0])
    ctx = ids + res["y"][:t].tolist()
    with torch.inference_mode():
        logits = target[1](input_ids=torch.tensor([ctx])).logits[0, -1]
    want = probs_at(logits, temperature)[int(res["draft_token"][t, 0])].item()
    assert res["pt"][t, 0] == pytest.approx(want, abs=1e-6)


def _cfg(**kw):
    return CaptureConfig(**{"max_new_tokens": 6, "depth": 3, "batch_size": 4,
                            "chunk_requests": 2, "stop_at_eos": False, "ngram_min": 1,
                            "ngram_max": 2, **kw})


def test_capture_writes_a_valid_trace_with_the_drafter_in_meta(pair, tmp_path):
    meta = capture(NGRAM, pair[1], PROMPTS, tmp_path / "t", _cfg(), progress=False)
    trace = read_trace(tmp_path / "t")
    assert trace.n_requests == 5 and trace.K == 3 and trace.proposed is not None
    assert trace.proposed.shape == (trace.n_rows,) and (trace.proposed <= 3).all()
    draft = meta["models"]["draft"]
    assert (draft["drafter"], draft["n_min"], draft["n_max"]) == ("ngram", 1, 2)
    assert meta["capture"]["ngram_min"] == 1 and "zoo" not in meta
    # the subset and the extended-columns view keep the column
    sub = trace.subset(np.array([2, 0]))
    np.testing.assert_array_equal(sub.proposed[: trace.output_len[2]],
                                  trace.proposed[trace.rows(2)])


def test_vllm_defaults_apply_when_no_bound_is_given(pair, tmp_path):
    meta = capture(NGRAM, pair[1], PROMPTS[:1], tmp_path / "t",
                   _cfg(ngram_min=None, ngram_max=None), progress=False)
    assert (meta["models"]["draft"]["n_min"], meta["models"]["draft"]["n_max"]) == (5, 5)


def test_resume_equals_an_uninterrupted_run_and_the_fingerprint_has_the_bounds(pair, tmp_path):
    full, part = tmp_path / "full", tmp_path / "part"
    capture(NGRAM, pair[1], PROMPTS, full, _cfg(), progress=False)
    capture(NGRAM, pair[1], PROMPTS, part, _cfg(), progress=False, stop_after_chunks=1)
    assert read_trace(part).status == "partial"
    with pytest.raises(SpecbatchError, match="fingerprint"):
        capture(NGRAM, pair[1], PROMPTS, part, _cfg(ngram_max=3), progress=False, resume=True)
    capture(NGRAM, pair[1], PROMPTS, part, _cfg(batch_size=1), progress=False, resume=True)
    a, b = read_trace(full), read_trace(part)
    for name in (*LIST_COLUMNS, "proposed", "output_len"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)


def test_ngram_options_need_the_ngram_drafter(pair, tmp_path):
    with pytest.raises(SpecbatchError, match="--ngram-min/--ngram-max: expected only with"):
        capture(*pair, PROMPTS, tmp_path / "t", _cfg(), progress=False)
    with pytest.raises(SpecbatchError, match="--ngram-max: expected >= --ngram-min"):
        capture(NGRAM, pair[1], PROMPTS, tmp_path / "u", _cfg(ngram_min=3), progress=False)


def test_cli_captures_with_ngram_and_rejects_bad_bounds(pair, tmp_path, capsys):
    from specbatch.cli import main

    args = ["capture", "--draft", "ngram", "--target", pair[1], "--prompts", "default:2",
            "--max-new-tokens", "3", "--depth", "2", "--no-progress", "--json"]
    assert main([*args, "--ngram-min", "2", "--out", str(tmp_path / "t")]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["positions"] == 6
    meta = read_trace(tmp_path / "t").meta
    assert (meta["models"]["draft"]["n_min"], meta["models"]["draft"]["n_max"]) == (2, 2)
    assert main([*args, "--ngram-min", "0", "--out", str(tmp_path / "u")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--ngram-min: expected an integer >= 1" in err


@pytest.mark.parametrize("name, temperature", [("smollm2-ngram", 1.0),
                                               ("smollm2-ngram-t0", 0.0)])
def test_the_bundled_ngram_traces_are_the_real_target_with_vllm_defaults(name, temperature):
    from pathlib import Path

    from specbatch.traces.format.files import resolve_trace

    path = Path(resolve_trace(name))
    trace = read_trace(path)
    assert trace.K == 8 and trace.status == "complete" and trace.n_rows >= 10_000
    assert trace.temperature == temperature
    assert set(trace.category) == {"code", "prose"}
    draft = trace.meta["models"]["draft"]
    assert (draft["drafter"], draft["n_min"], draft["n_max"]) == ("ngram", 5, 5)
    assert trace.meta["models"]["target"]["shape"]["vocab"] == 49152
    assert trace.meta["capture"]["chat_template"] is True
    assert trace.proposed is not None and 0 < (trace.proposed > 0).mean() < 1
    assert (trace.q == 1).all() and sum(f.stat().st_size for f in path.iterdir()) <= 6 * 2**20
