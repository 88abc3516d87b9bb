"""Capture from live models (traces/capture/chain.py): the fast path equals the naive twin, the
recorded statistics equal THEORY.md §3 on the full rows, resume reproduces an uninterrupted
run, and bad models are one-line errors."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from specbatch.errors import SpecbatchError  # noqa: E402
from specbatch.theory.verify.path_stats import position_stats  # noqa: E402
from specbatch.traces.capture.chain import (  # noqa: E402
    CaptureConfig,
    capture,
    capture_request,
    capture_request_naive,
    encode_prompt,
    load_pair,
)
from specbatch.traces.capture.prompts import Prompt  # noqa: E402
from specbatch.traces.format.files import read_trace  # noqa: E402
from specbatch.traces.format.trace import LIST_COLUMNS  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]
TEXT = ("def add(a, b):\n    return a + b\n\nThe quick brown fox jumps over the lazy dog. "
        "class Point:\n    def __init__(self, x, y):\n        self.x = x\n        self.y = y\n") * 8


def _save_pair(out: Path, vocab: int = 300, seed: int = 0,
               target_hidden: int = 48) -> tuple[str, str]:
    from specbatch.traces.models.zoo import ModelSize, make_model, train_tokenizer

    tok = train_tokenizer([TEXT], vocab)
    torch.manual_seed(seed)
    paths = []
    for role, shape in (("draft", ModelSize(1, 16, 2, 32)),
                        ("target", ModelSize(2, target_hidden, 4, 96))):
        model = make_model(shape, len(tok), 64, tok.eos_token_id)
        # random weights of this scale give rows far from uniform: a real test of the stats
        with torch.no_grad():
            model.get_output_embeddings().weight.mul_(20.0)
        model.save_pretrained(out / role)
        tok.save_pretrained(out / role)
        paths.append(str(out / role))
    return paths[0], paths[1]


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    return _save_pair(tmp_path_factory.mktemp("pair"))


@pytest.fixture(scope="module")
def loaded(pair):
    return load_pair(*pair)


PROMPTS = [Prompt("def add(a, b):", "code"), Prompt("The quick brown fox", "prose"),
           Prompt("class Point:\n", "code"), Prompt("jumps over the", "prose"),
           Prompt("return a", "code")]


def _naive_stats(tokens, draft_rows, target_rows):
    """THEORY.md §3 written out with explicit loops (the specification)."""
    rows, k = tokens.shape
    q = np.zeros((rows, k))
    pt = np.zeros((rows, k))
    z = np.zeros((rows, k))
    for b in range(rows):
        p_prev = 1.0
        for i in range(k):
            x = tokens[b, i]
            q[b, i] = draft_rows[b, i, x]
            pt[b, i] = target_rows[b, i, x]
            z[b, i] = sum(max(p_prev * target_rows[b, i, v] - draft_rows[b, i, v], 0.0)
                          for v in range(draft_rows.shape[2]))
            p_prev = min(p_prev * pt[b, i] / q[b, i], 1.0)
    return q, pt, z


def draft_logits_t1(draft, tok, res):
    """The draft's logits along each recorded path, recomputed from scratch.  # [n, K, V]"""
    prompt = encode_prompt(tok, "def add(a, b):", 64)
    out = []
    with torch.inference_mode():
        for t in range(len(res["y"])):
            ctx = prompt + res["y"][:t].tolist() + res["draft_token"][t, :-1].tolist()
            logits = draft(input_ids=torch.tensor([ctx])).logits[0, -res["draft_token"].shape[1]:]
            out.append(logits.double().numpy())
    return np.stack(out)


@pytest.mark.parametrize("temperature", [1.0, 0.7, 0.0])
def test_recorded_statistics_equal_theory_on_the_full_rows(loaded, temperature):
    tok, draft, target = loaded
    cfg = CaptureConfig(max_new_tokens=12, depth=4, temperature=temperature, batch_size=5,
                        stop_at_eos=False)
    res = capture_request(tok, draft, target, encode_prompt(tok, "def add(a, b):", 64), 0, cfg,
                          return_rows=True)
    ref = position_stats(res["draft_token"], res["draft_rows"], res["target_rows"])
    for name in ("q", "pt", "z"):
        np.testing.assert_allclose(res[name], ref[name], rtol=0, atol=1e-12)
    q, pt, z = _naive_stats(res["draft_token"][:4], res["draft_rows"][:4], res["target_rows"][:4])
    np.testing.assert_allclose(res["q"][:4], q, atol=1e-12)
    np.testing.assert_allclose(res["pt"][:4], pt, atol=1e-12)
    np.testing.assert_allclose(res["z"][:4], z, atol=1e-12)
    assert (res["q"] > 0).all() and (res["z"] >= 0).all() and (res["z"] <= 1 + 1e-9).all()
    # draft signals from the temperature-1 softmax of the draft
    assert (res["top1"] >= res["draft_conf"] - 1e-12).all()
    d_logits = draft_logits_t1(draft, tok, res)
    soft = np.exp(d_logits - d_logits.max(-1, keepdims=True))
    soft /= soft.sum(-1, keepdims=True)
    np.testing.assert_allclose(res["top1"], soft.max(-1), atol=1e-5)
    np.testing.assert_allclose(
        res["draft_conf"], np.take_along_axis(soft, res["draft_token"][..., None], -1)[..., 0],
        atol=1e-5)
    entropy = -(soft * np.log(np.maximum(soft, 1e-300))).sum(-1)
    np.testing.assert_allclose(res["entropy"], entropy, atol=1e-4)
    assert (res["entropy"] > 0.01).all()
    if temperature == 0:
        assert (res["q"] == 1).all() and set(np.unique(res["pt"])) <= {0.0, 1.0}
        # one-hot draft: Z_{i+1} = p_i (1 - pt_{i+1}) (THEORY.md §3)
        p = np.concatenate([np.ones((len(res["pt"]), 1)), np.cumprod(res["pt"], 1)[:, :-1]], 1)
        np.testing.assert_allclose(res["z"], p * (1 - res["pt"]), atol=1e-12)


@pytest.mark.parametrize("temperature", [1.0, 0.0])
def test_shared_prefix_fast_path_equals_naive_recomputation(loaded, temperature):
    tok, draft, target = loaded
    cfg = CaptureConfig(max_new_tokens=10, depth=3, temperature=temperature, batch_size=4,
                        stop_at_eos=False)
    ids = encode_prompt(tok, "class Point:\n", 64)
    fast = capture_request(tok, draft, target, ids, 7, cfg, return_rows=True)
    naive = capture_request_naive(tok, draft, target, ids, 7, cfg, return_rows=True)
    np.testing.assert_array_equal(fast["y"], naive["y"])
    np.testing.assert_array_equal(fast["draft_token"], naive["draft_token"])
    for name in ("draft_rows", "target_rows", "q", "pt", "z", "draft_conf", "entropy", "top1"):
        np.testing.assert_allclose(fast[name], naive[name], atol=1e-5, err_msg=name)


@pytest.fixture(scope="module")
def sliding_pair(tmp_path_factory):
    """Tiny Gemma-3-style pair: window 6, sliding and full layers interleaved."""
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    from specbatch.traces.models.zoo import train_tokenizer

    tok = train_tokenizer([TEXT], 300)
    out = tmp_path_factory.mktemp("sliding")
    torch.manual_seed(1)
    for role, layers in (("draft", 2), ("target", 3)):
        config = Gemma3TextConfig(
            vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=layers,
            num_attention_heads=2, num_key_value_heads=1, head_dim=16, sliding_window=6,
            layer_types=["sliding_attention", "full_attention", "sliding_attention"][:layers],
            max_position_embeddings=128, eos_token_id=tok.eos_token_id, pad_token_id=0)
        model = Gemma3ForCausalLM(config)
        with torch.no_grad():
            model.get_output_embeddings().weight.mul_(20.0)
        model.save_pretrained(out / role)
        tok.save_pretrained(out / role)
    return load_pair(str(out / "draft"), str(out / "target"))


@pytest.mark.parametrize("temperature", [1.0, 0.0])
def test_sliding_window_capture_past_the_window_equals_naive(sliding_pair, temperature):
    """Prompt + output + K far past the window (6): the fast path's shared cache keeps every
    key and masks by real positions, so it matches the model's own per-position computation."""
    tok, draft, target = sliding_pair
    cfg = CaptureConfig(max_new_tokens=14, depth=3, temperature=temperature, batch_size=5,
                        stop_at_eos=False)
    ids = encode_prompt(tok, "class Point:\n    def __init__(self, x, y):", 64)
    assert len(ids) + cfg.max_new_tokens + cfg.depth > 3 * 6
    fast = capture_request(tok, draft, target, ids, 2, cfg, return_rows=True)
    naive = capture_request_naive(tok, draft, target, ids, 2, cfg, return_rows=True)
    np.testing.assert_array_equal(fast["y"], naive["y"])
    np.testing.assert_array_equal(fast["draft_token"], naive["draft_token"])
    for name in ("draft_rows", "target_rows", "q", "pt", "z"):
        np.testing.assert_allclose(fast[name], naive[name], atol=1e-5, err_msg=name)


def test_content_does_not_depend_on_batch_size(loaded):
    tok, draft, target = loaded
    ids = encode_prompt(tok, "The quick", 64)
    a = capture_request(tok, draft, target, ids, 3, CaptureConfig(max_new_tokens=9, depth=3,
                        batch_size=2, stop_at_eos=False))
    b = capture_request(tok, draft, target, ids, 3, CaptureConfig(max_new_tokens=9, depth=3,
                        batch_size=64, stop_at_eos=False))
    np.testing.assert_array_equal(a["draft_token"], b["draft_token"])
    np.testing.assert_allclose(a["z"], b["z"], atol=1e-6)


def _cfg(**kw):
    return CaptureConfig(**{"max_new_tokens": 6, "depth": 3, "batch_size": 4,
                            "chunk_requests": 2, "stop_at_eos": False, **kw})


def _same_trace(a, b):
    for name in ("request_id", "prompt_len", "output_len", "offsets"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
    assert list(a.category) == list(b.category)
    for name in LIST_COLUMNS:
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)


def test_capture_writes_a_valid_trace_with_provenance(pair, tmp_path):
    meta = capture(*pair, PROMPTS, tmp_path / "t", _cfg(), progress=False, command="test")
    trace = read_trace(tmp_path / "t")
    assert trace.n_requests == 5 and trace.K == 3 and trace.temperature == 1.0
    assert (trace.output_len == 6).all() and trace.n_rows == 30
    assert list(trace.category) == ["code", "prose", "code", "prose", "code"]
    assert meta["completion"]["status"] == "complete"
    assert meta["models"]["target"]["params"] > meta["models"]["draft"]["params"]
    assert meta["library_versions"]["torch"] == torch.__version__
    assert len(list((tmp_path / "t").glob("positions-*.parquet"))) == 3  # one per chunk


def test_resume_after_interruption_equals_an_uninterrupted_run(pair, tmp_path):
    full = tmp_path / "full"
    capture(*pair, PROMPTS, full, _cfg(), progress=False)
    part = tmp_path / "part"
    capture(*pair, PROMPTS, part, _cfg(), progress=False, stop_after_chunks=1)
    meta = json.loads((part / "meta.json").read_text())
    assert meta["completion"]["status"] == "partial"
    assert meta["completion"]["requests"] == ["done", "done", "pending", "pending", "pending"]
    assert read_trace(part).n_requests == 2  # a partial capture is a valid trace of what is done
    assert read_trace(part).status == "partial" and read_trace(full).status == "complete"
    with pytest.raises(SpecbatchError, match="--resume"):
        capture(*pair, PROMPTS, part, _cfg(), progress=False)
    capture(*pair, PROMPTS, part, _cfg(batch_size=1), progress=False, resume=True)
    _same_trace(read_trace(full), read_trace(part))


def test_resume_needs_a_capture_to_resume(pair, tmp_path):
    with pytest.raises(SpecbatchError, match="--resume: .* holds no capture to resume"):
        capture(*pair, PROMPTS, tmp_path / "missing", _cfg(), progress=False, resume=True)
    (tmp_path / "file").write_text("x")
    with pytest.raises(SpecbatchError, match="exists and is not a directory"):
        capture(*pair, PROMPTS, tmp_path / "file", _cfg(), progress=False)


def test_resume_refuses_different_content_options(pair, tmp_path):
    capture(*pair, PROMPTS, tmp_path / "t", _cfg(), progress=False, stop_after_chunks=1)
    with pytest.raises(SpecbatchError, match="fingerprint"):
        capture(*pair, PROMPTS, tmp_path / "t", _cfg(depth=2), progress=False, resume=True)


@pytest.mark.parametrize("damage", [
    {"requests": "done"}, {"requests": ["done"]}, {"chunk_requests": "two"},
    {"chunk_requests": 0}, {"request_rows": [1, 2]},
])
def test_resume_refuses_a_damaged_completion_state_in_one_line(pair, tmp_path, damage):
    capture(*pair, PROMPTS, tmp_path / "t", _cfg(), progress=False, stop_after_chunks=1)
    meta = json.loads((tmp_path / "t" / "meta.json").read_text())
    meta["completion"].update(damage)
    (tmp_path / "t" / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(SpecbatchError, match=r"meta\.json: field completion: expected") as exc:
        capture(*pair, PROMPTS, tmp_path / "t", _cfg(), progress=False, resume=True)
    assert "\n" not in str(exc.value)


def _cli(*args, **kw):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-m", "specbatch", *args], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


@pytest.mark.slow
def test_kill_9_mid_capture_then_resume(pair, tmp_path):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": p.text}) + "\n" for p in PROMPTS * 4))
    args = ["capture", "--draft", pair[0], "--target", pair[1], "--prompts", str(prompts),
            "--max-new-tokens", "24", "--depth", "3", "--chunk-requests", "1", "--no-progress",
            "--threads", "1"]
    ref = _cli(*args, "--out", str(tmp_path / "ref"))
    assert ref.wait(timeout=300) == 0, ref.stderr.read()
    proc = _cli(*args, "--out", str(tmp_path / "cut"))
    deadline = time.time() + 120
    while time.time() < deadline and len(list((tmp_path / "cut").glob("positions-*"))) < 3:
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    done = json.loads((tmp_path / "cut" / "meta.json").read_text())["completion"]["done"]
    assert 0 < done < 20
    again = _cli(*args, "--out", str(tmp_path / "cut"), "--resume")
    assert again.wait(timeout=300) == 0, again.stderr.read()
    _same_trace(read_trace(tmp_path / "ref"), read_trace(tmp_path / "cut"))


def test_bad_model_path_is_a_one_line_error(pair, tmp_path):
    with pytest.raises(SpecbatchError, match="draft model .*expected a local Hugging Face model"):
        load_pair(str(tmp_path / "missing"), pair[1])
    (tmp_path / "empty").mkdir()
    with pytest.raises(SpecbatchError, match="target model .*without config.json"):
        load_pair(pair[0], str(tmp_path / "empty"))


def test_vocabulary_mismatch_is_a_one_line_error(pair, tmp_path):
    from specbatch.traces.models.zoo import ModelSize, make_model, train_tokenizer

    tok = train_tokenizer([TEXT + " different words entirely"], 280)
    model = make_model(ModelSize(1, 16, 2, 32), len(tok), 64, tok.eos_token_id)
    model.save_pretrained(tmp_path / "other")
    tok.save_pretrained(tmp_path / "other")
    with pytest.raises(SpecbatchError, match="expected the same vocabulary"):
        load_pair(pair[0], str(tmp_path / "other"))


def test_cli_errors_are_one_line_with_exit_2(pair, tmp_path):
    from specbatch.cli import main

    prompts = tmp_path / "p.txt"
    prompts.write_text("hello\n")
    proc = _cli("capture", "--draft", str(tmp_path / "nope"), "--target", pair[1],
                "--prompts", str(prompts), "--out", str(tmp_path / "o"))
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 2
    assert err.strip().count("\n") == 0 and err.startswith("specbatch: error: draft model")
    assert main(["capture", "--draft", pair[0], "--target", pair[1], "--prompts",
                 str(tmp_path / "missing.jsonl"), "--out", str(tmp_path / "o")]) == 2


@pytest.mark.parametrize("temperature", [1.0, 0.0])
def test_batched_reference_generation_equals_one_request_at_a_time(loaded, temperature):
    from specbatch.traces.capture.chain import (
        generate_reference,
        generate_reference_batch,
        request_uniforms,
    )

    tok, _, target = loaded
    cfg = CaptureConfig(max_new_tokens=10, depth=2, temperature=temperature)
    prompts = [encode_prompt(tok, p.text, 64) for p in PROMPTS]
    uniforms = [request_uniforms(0, i, 10, 2)[0] for i in range(len(prompts))]
    with torch.inference_mode():
        batch = generate_reference_batch(target, prompts, uniforms, cfg, tok.eos_token_id)
        for ids, u, (y, logits, cache) in zip(prompts, uniforms, batch):
            y1, logits1, cache1 = generate_reference(target, ids, u, cfg, tok.eos_token_id)
            np.testing.assert_array_equal(y.numpy(), y1.numpy())
            np.testing.assert_allclose(logits.numpy(), logits1.numpy(), atol=1e-4)
            for a, b in zip(cache.layers, cache1.layers):
                assert a.keys.shape == b.keys.shape == (1, a.keys.shape[1], len(ids) + len(y) - 1,
                                                        a.keys.shape[3])
                np.testing.assert_allclose(a.values.numpy(), b.values.numpy(), atol=1e-4)


def test_bundled_traces_are_valid_and_record_how_they_were_made():
    from specbatch.traces.format.files import resolve_trace

    for name, temperature in (("tiny", 1.0), ("tiny-t0", 0.0)):
        path = Path(resolve_trace(name))
        trace = read_trace(path)
        assert trace.n_requests >= 200 and trace.K == 8 and trace.temperature == temperature
        assert set(trace.category) == {"code", "prose"}
        assert sum(f.stat().st_size for f in path.iterdir()) <= 10 * 2**20
        meta = trace.meta
        assert meta["completion"]["status"] == "complete"
        assert meta["remake"][0].startswith("specbatch zoo train --out ")
        assert meta["remake"][1] == meta["command"] and "specbatch capture" in meta["command"]
        assert meta["zoo"]["target_heldout_loss"] < meta["zoo"]["draft_heldout_loss"]
        assert meta["models"]["target"]["params"] > 5 * meta["models"]["draft"]["params"]


def test_the_default_trace_is_the_real_smollm2_pair():
    from specbatch.traces.format.files import resolve_trace

    path = Path(resolve_trace("default"))
    assert path.name == "smollm2"
    trace = read_trace(path)
    assert trace.n_rows >= 20_000 and trace.K == 8 and trace.status == "complete"
    assert trace.meta["models"]["target"]["shape"] == {
        "layers": 30, "hidden": 576, "heads": 9, "kv_heads": 3, "intermediate": 1536,
        "vocab": 49152}
    assert sum(f.stat().st_size for f in path.iterdir()) <= 20 * 2**20


def test_chat_template_wraps_the_prompt_as_a_user_turn(loaded):
    from specbatch.errors import SpecbatchError

    tok = loaded[0]
    with pytest.raises(SpecbatchError, match="no chat template"):
        encode_prompt(tok, "def add(a, b):", 64, chat=True)
    tok.chat_template = ("{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}{% endfor %}"
                         "{% if add_generation_prompt %}<assistant>{% endif %}")
    try:
        ids = encode_prompt(tok, "def add(a, b):", 64, chat=True)
        assert tok.decode(ids) == "<user>def add(a, b):<assistant>"
        assert CaptureConfig().content_key() == CaptureConfig(chat_template=False).content_key()
        assert CaptureConfig(chat_template=True).content_key()["chat_template"] is True
    finally:
        tok.chat_template = None


def test_meta_records_the_torch_thread_count(pair, tmp_path):
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        meta = capture(*pair, PROMPTS[:1], tmp_path / "t", _cfg(), progress=False)
    finally:
        torch.set_num_threads(before)
    assert meta["capture"]["threads"] == 1
    assert json.loads((tmp_path / "t" / "meta.json").read_text())["capture"]["threads"] == 1


def test_cli_defaults_to_one_thread_and_refuses_random_prompts(pair, tmp_path, capsys):
    from specbatch.cli import main

    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        assert main(["capture", "--draft", pair[0], "--target", pair[1], "--prompts",
                     "default:1", "--max-new-tokens", "2", "--depth", "2", "--no-progress",
                     "--out", str(tmp_path / "t")]) == 0
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
    assert read_trace(tmp_path / "t").meta["capture"]["threads"] == 1
    capsys.readouterr()
    assert main(["capture", "--draft", pair[0], "--target", pair[1], "--prompts", "random:2:4",
                 "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "random token ids are for `specbatch live`" in err


def test_meta_names_models_by_identity_without_local_paths(pair, tmp_path):
    from specbatch.traces.format.identity import local_paths

    meta = capture(*pair, PROMPTS[:1], tmp_path / "t", _cfg(), progress=False,
                   command=f"specbatch capture --draft {pair[0]} --target {pair[1]} --out "
                           f"{tmp_path}")
    assert local_paths(json.loads((tmp_path / "t" / "meta.json").read_text())) == []
    for role, path in zip(("draft", "target"), pair):
        model = meta["models"][role]
        assert model["folder"] == Path(path).name and "path" not in model
        digest = hashlib.sha256((Path(path) / "model.safetensors").read_bytes()).hexdigest()
        assert model["weights_sha256"] == {"model.safetensors": digest}
    assert meta["tokenizer"]["from"] == "target"
