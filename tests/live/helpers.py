"""A tiny draft/target pair for live tests: a random Llama target and a noisy copy as draft."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

import numpy as np

TEXT = ("def add(a, b):\n    return a + b\n\nThe quick brown fox jumps over the lazy dog. "
        "class Point:\n    def __init__(self, x, y):\n        self.x = x\n") * 4
PROMPTS = ["def add(a, b):", "The quick brown fox", "class Point:\n",
           "jumps over the lazy dog and the", "return a"]
# token ids of different lengths (padding holes are exercised)
IDS = [[5, 6, 7], [8, 9, 10, 11, 12, 13, 14], [20], [30, 31, 32, 33], [40, 41]]


def save_pair(out: Path, scale: float = 8.0, noise: float = 0.02) -> tuple[str, str]:
    """Tiny random Llama target (2 layers, hidden 64) and a draft = the target with noise on
    every weight, so the draft agrees with the target often but not always. ``scale``
    multiplies the target's output rows (larger: peaked rows), ``noise`` the draft's relative
    perturbation (larger: lower acceptance)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from specbatch.traces.models.zoo import train_tokenizer

    tok = train_tokenizer([TEXT], 300)
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(tok), hidden_size=64, intermediate_size=128,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=512, tie_word_embeddings=False,
                         bos_token_id=tok.eos_token_id, eos_token_id=tok.eos_token_id,
                         pad_token_id=tok.eos_token_id)
    target = LlamaForCausalLM(config)
    with torch.no_grad():
        target.get_output_embeddings().weight.mul_(scale)  # peaked rows
    draft = LlamaForCausalLM(config)
    draft.load_state_dict(target.state_dict())
    with torch.no_grad():
        for p in draft.parameters():
            p.add_(noise * torch.randn_like(p) * p.abs().mean())
    paths = []
    for role, model in (("draft", draft), ("target", target)):
        model.save_pretrained(out / role)
        tok.save_pretrained(out / role)
        paths.append(str(out / role))
    return paths[0], paths[1]


def load_saved_pair(paths: tuple[str, str]):
    """(draft, target) models of :func:`save_pair`'s directories."""
    from specbatch.traces.capture.chain import load_pair

    _, draft, target = load_pair(*paths)
    return draft, target


@contextmanager
def one_torch_thread():
    """One torch thread: tiny models gain nothing from more, and the machine is shared."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def run_cli(capsys, *args) -> tuple[int, str, str]:
    """``specbatch ARGS``: (exit code, stdout, stderr)."""
    from specbatch.cli import main

    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def greedy_decode(target, ids: list[int], n: int) -> list[int]:
    """The target's own greedy decoding, one request at a time, recomputing every prefix."""
    import torch

    ids, out = list(ids), []
    with torch.no_grad():
        for _ in range(n):
            nxt = int(target(input_ids=torch.tensor([ids])).logits[0, -1].argmax())
            out.append(nxt)
            ids.append(nxt)
    return out


class MeasuredSteps:
    """A cost model that prices step i as the live run's measured duration of step i (all on
    the target's one call per step; draft passes and overhead cost 0)."""

    overhead = 0.0

    def __init__(self, durations: np.ndarray) -> None:
        self.durations, self.i = list(durations), 0

    def step_time(self, role: str, query, kv) -> float:
        if role == "draft":
            return 0.0
        self.i += 1
        return float(self.durations[self.i - 1])


def free_port() -> int:
    """A TCP port on 127.0.0.1 nobody listens on (bound and released)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def served(*flags: str, wait: float = 90.0):
    """``specbatch live serve FLAGS --port P`` on 127.0.0.1 in a subprocess: yields
    ``(url, process)`` once ``/health`` answers; always terminated (then killed) on exit."""
    import os
    import subprocess
    import sys
    import tempfile
    import time
    import urllib.request

    port = free_port()
    log = tempfile.TemporaryFile()
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen([sys.executable, "-m", "specbatch", "live", "serve", *flags,
                             "--port", str(port)], stdout=log, stderr=subprocess.STDOUT,
                            env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + wait
        while True:
            try:
                urllib.request.urlopen(url + "/health", timeout=2).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    log.seek(0)
                    raise RuntimeError(f"server did not start: {log.read()[-2000:]!r}") from None
                time.sleep(0.2)
        proc.log = log
        yield url, proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def server_output(proc) -> str:
    """What a :func:`served` process printed so far."""
    proc.log.seek(0)
    return proc.log.read().decode(errors="replace")


def post(url: str, path: str, body, key: str | None = None, raw: bytes | None = None):
    """(status, parsed JSON or text) of a POST (``raw``: the body's bytes as given)."""
    import json
    import urllib.error
    import urllib.request

    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    data = raw if raw is not None else json.dumps(body).encode()
    req = urllib.request.Request(url + path, data=data, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=60) as answer:
            status, text = answer.status, answer.read().decode()
    except urllib.error.HTTPError as exc:
        status, text = exc.code, exc.read().decode()
    try:
        return status, json.loads(text)
    except ValueError:
        return status, text
