"""A real draft/target pair without downloads: train both on the local standard library.

No pretrained weights can be downloaded here, and a trace captured from random weights says
nothing about speculative decoding. :func:`train_zoo` trains

- a byte-level BPE tokenizer (``tokenizers``) on the corpus, and
- two Hugging Face ``LlamaForCausalLM`` models that share it: a draft ``Ms`` and a target
  ``Mb`` with roughly 10x the draft's parameters,

(the draft trains on the first ``draft_fraction`` of the target's batches, a cheaper model as
deployed drafts are) on text every machine has: the Python standard library's source (``code``) and
its bundled English prose (help topics, licence, docstrings; see :mod:`traces.capture.prompts`) plus
optional ``--corpus`` files. Both models see the same batches in the same order. Held-out loss
(nats/token on the held-out stdlib files) of both is reported. Output: ``OUT/draft`` and
``OUT/target`` are ordinary HF model directories (``save_pretrained`` plus a
``PreTrainedTokenizerFast``) that ``specbatch capture`` loads; ``OUT/zoo.json`` records the sizes,
losses, seed and timings.

Deterministic for a seed on one machine: ``torch.manual_seed``, a fixed thread count, a sorted
file list and a seeded batch order. A wall-clock budget (``--max-seconds``) makes the number of
steps machine-dependent; ``zoo.json`` records the schedule (``steps``), ``steps_done`` and a
``reproduce`` string of options that replay the same weights without the budget.

This module is the training; the sizes, corpus, tokenizer and model builders it trains live
in :mod:`traces.models.zoo_parts` (re-exported here).
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np

from specbatch.errors import SpecbatchError, require
from specbatch.io import prepare_output_dir, write_json
from specbatch.traces.models.zoo_parts import (  # noqa: F401 - importable from here too
    EOS,
    ZOO_SIZES,
    ModelSize,
    ZooSize,
    build_corpus,
    encode_stream,
    get_zoo_size,
    make_model,
    train_tokenizer,
)


def _lr(step: int, steps: int, lr: float) -> float:
    warm = max(1, steps // 20)
    if step < warm:
        return lr * (step + 1) / warm
    return lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * (step - warm) / max(1, steps - warm))))


def heldout_loss(model, stream: np.ndarray, seq_len: int, windows: int) -> float:
    """Mean next-token cross-entropy (nats/token) over consecutive held-out windows."""
    import torch

    n = min(windows, max(1, (len(stream) - 1) // seq_len))
    x = torch.from_numpy(stream[: n * seq_len + 1])
    inputs = x[:-1].view(n, seq_len).to(next(model.parameters()).device)
    model.eval()
    total = 0.0
    with torch.no_grad():
        for i in range(0, n, 16):
            out = model(input_ids=inputs[i:i + 16], labels=inputs[i:i + 16])
            total += float(out.loss) * len(inputs[i:i + 16])
    model.train()
    return total / n


TRAIN_DTYPES = ("float32", "bfloat16")


def _train_step(model, opt, batch, lr: float, autocast) -> float:
    """One AdamW step (gradient norm clipped to 1) on ``batch`` # [batch, seq_len]; the loss."""
    import torch

    for group in opt.param_groups:
        group["lr"] = lr
    with autocast():
        loss = model(input_ids=batch, labels=batch).loss
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    return float(loss.detach())


def _sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def plan_steps(models: dict, cfg: ZooSize, batch, steps: int, seconds: float, autocast,
               device: str) -> tuple[int, dict]:
    """The schedule length that fits ``seconds`` of training, from a probe on copies.

    Two training steps per model (one warm-up, one timed) on deep copies of the models with
    fresh optimizers: the real models, optimizers and batch generator are untouched, so the
    run stays a function of (seed, schedule length). With per-step times t_d, t_t and draft
    fraction f, n steps take n (t_t + f t_d); the plan is
    ``min(steps, floor(remaining / (t_t + f t_d)))``, at least 1.
    """
    import copy

    import torch

    t0 = time.perf_counter()
    per = {}
    for name, model in models.items():
        probe = copy.deepcopy(model)
        opt = torch.optim.AdamW(probe.parameters(), lr=0.0)
        for _ in range(2):
            _sync(device)
            t = time.perf_counter()
            _train_step(probe, opt, batch, 0.0, autocast)
            _sync(device)
            per[name] = time.perf_counter() - t
        del probe, opt
    per_step = per["target"] + cfg.draft_fraction * per["draft"]
    remaining = seconds - (time.perf_counter() - t0)
    planned = max(1, min(steps, int(remaining / per_step)))
    return planned, {
        "draft_step_s": round(per["draft"], 5),
        "target_step_s": round(per["target"], 5),
        "probe_s": round(time.perf_counter() - t0, 3),
        "planned_steps": planned,
    }


def train_zoo(out: str | Path, size: str = "tiny", seed: int = 0, corpus: list[str] | None = None,
              steps: int | None = None, threads: int | None = None,
              log=None, device: str = "cpu", max_seconds: float | None = None,
              max_steps: int | None = None, dtype: str = "float32", tf32: bool = False) -> dict:
    """Train the tokenizer and the draft/target pair; save them under ``out``; return a report.

    The report (also ``out/zoo.json``) holds sizes, parameter counts, held-out loss of both
    models (nats/token) and the wall time of each stage (tokenizer, train, eval, total).

    ``steps`` is the schedule length: the cosine learning rate decays over ``steps`` and the
    draft trains on the first ``draft_fraction * steps``. ``max_seconds`` is a wall-clock budget
    for the training loop: a probe (:func:`plan_steps`) first shortens the schedule to what fits,
    then the loop also stops between optimizer steps once the budget is spent; held-out loss is
    still evaluated and both models saved. ``max_steps`` stops after that many steps without
    changing the schedule. Determinism: the weights are a function of (seed, schedule ``steps``,
    ``steps_done``, dtype, tf32) on one machine; with a time budget the planned schedule and
    ``steps_done`` depend on the machine's speed, so ``zoo.json`` records both and ``--steps STEPS
    --max-steps STEPS_DONE`` (without ``--max-seconds``) replays the run (just ``--steps STEPS``
    when the loop ran the whole planned schedule; the report's ``reproduce`` field holds these
    options). ``stopped_early`` is true when fewer than the requested steps ran (the probe shortened
    the schedule or the loop hit the budget). ``dtype="bfloat16"`` trains under ``torch.autocast``
    (CUDA only; float32 master weights, float32 held-out loss); ``tf32`` allows TF32 matmuls on CUDA
    during training (no effect on CPU).
    """
    import torch

    cfg = get_zoo_size(size)
    steps = cfg.steps if steps is None else steps
    _check_train_args(steps, max_seconds, max_steps, dtype, device)
    out = prepare_output_dir(out, allow_existing=True)  # the CLI refuses non-empty ones
    torch.manual_seed(seed)
    torch.set_num_threads(threads or 1)
    say = log or (lambda msg: None)
    t0 = time.perf_counter()
    data = _prepare_data(cfg, corpus, say)
    torch.manual_seed(seed)
    models, opts = _build_models(cfg, data["tokenizer"], device)
    tf32_before = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = bool(tf32)
    t1 = time.perf_counter()
    try:
        run = _train_loop(models, opts, cfg, data["stream"], _autocast(dtype), device,
                          seed=seed, steps=steps, max_seconds=max_seconds, max_steps=max_steps,
                          say=say)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32_before
    t_train = time.perf_counter() - t1
    report = _report(cfg, data, run, size=size, seed=seed, requested=steps, max_seconds=max_seconds,
                     max_steps=max_steps, dtype=dtype, tf32=tf32, device=device, corpus=corpus)
    report["seconds"] = {"tokenizer": round(data["seconds"], 2), "train": round(t_train, 2)}
    report["seconds"]["eval"] = round(_evaluate_and_save(models, data, cfg, out, run, report), 2)
    report["param_ratio"] = round(report["target"]["params"] / report["draft"]["params"], 2)
    report["seconds"]["total"] = round(time.perf_counter() - t0, 2)
    write_json(out / "zoo.json", report)
    return report


def _check_train_args(steps: int, max_seconds, max_steps, dtype: str, device: str) -> None:
    import torch

    require(steps >= 1, f"--steps: expected a positive integer, got {steps}")
    require(max_seconds is None or (math.isfinite(max_seconds) and max_seconds > 0),
            f"--max-seconds: expected a positive number of seconds, got {max_seconds}")
    require(max_steps is None or max_steps >= 1,
            f"--max-steps: expected a positive integer, got {max_steps}")
    require(dtype in TRAIN_DTYPES, f"--dtype: expected one of {', '.join(TRAIN_DTYPES)}, "
            f"got {dtype!r}")
    cuda = device.startswith("cuda")
    require(dtype == "float32" or cuda,
            f"--dtype {dtype}: expected --device cuda (bfloat16 autocast trains on CUDA only), "
            f"got --device {device}")
    if cuda and not torch.cuda.is_available():
        raise SpecbatchError(f"--device {device}: expected a CUDA device, got none")


def _prepare_data(cfg: ZooSize, corpus: list[str] | None, say) -> dict:
    """Corpus, tokenizer and token streams: ``train_docs``, ``tokenizer``, ``stream`` # [tokens],
    ``heldout`` # [tokens] and the ``seconds`` it took."""
    t0 = time.perf_counter()
    train_docs, heldout_docs = build_corpus(cfg, corpus)
    tokenizer = train_tokenizer(train_docs, cfg.vocab)
    stream = encode_stream(tokenizer, train_docs)
    heldout = encode_stream(tokenizer, heldout_docs)
    seconds = time.perf_counter() - t0
    say(f"corpus: {sum(map(len, train_docs))} chars, {len(stream)} tokens "
        f"(held-out {len(heldout)}); tokenizer {seconds:.1f}s")
    return {"train_docs": train_docs, "tokenizer": tokenizer, "stream": stream,
            "heldout": heldout, "seconds": seconds}


def _build_models(cfg: ZooSize, tokenizer, device: str) -> tuple[dict, dict]:
    """The draft and target models (in that order, from the current torch seed) and their
    AdamW optimizers."""
    import torch

    eos_id = tokenizer.convert_tokens_to_ids(EOS)
    vocab = len(tokenizer)
    draft = make_model(cfg.draft, vocab, cfg.seq_len, eos_id).to(device)
    target = make_model(cfg.target, vocab, cfg.seq_len, eos_id).to(device)
    models = {"draft": draft, "target": target}
    opts = {k: torch.optim.AdamW(m.parameters(), lr=cfg.lr, weight_decay=0.01,
                                 betas=(0.9, 0.95)) for k, m in models.items()}
    return models, opts


def _autocast(dtype: str):
    """A context-manager factory: bfloat16 autocast on CUDA, or nothing for float32."""
    import contextlib

    import torch

    if dtype == "float32":
        return contextlib.nullcontext
    return lambda: torch.autocast("cuda", dtype=torch.bfloat16)


def _train_loop(models: dict, opts: dict, cfg: ZooSize, stream: np.ndarray, autocast,
                device: str, *, seed: int, steps: int, max_seconds, max_steps, say) -> dict:
    """Train both models on the same seeded batches; the draft stops after its budget.

    returns dict: ``steps`` (schedule, after a time-budget probe), ``done``, ``budget``
    (per-model schedule), ``losses`` (last training loss per model), ``probe``
    """
    import torch

    gen = torch.Generator().manual_seed(seed + 1)
    data = torch.from_numpy(stream)
    t1 = time.perf_counter()
    probe = None
    if max_seconds is not None:
        first = torch.from_numpy(stream[: cfg.batch * cfg.seq_len].copy()).view(
            cfg.batch, cfg.seq_len).to(device)
        steps, probe = plan_steps(models, cfg, first, steps, max_seconds, autocast, device)
        say(f"time budget {max_seconds:g}s: schedule of {steps} steps (probe {probe})")
    losses = {k: float("nan") for k in models}
    budget = {"draft": max(1, round(steps * cfg.draft_fraction)), "target": steps}
    stop = steps if max_steps is None else min(steps, max_steps)
    done = 0
    for step in range(stop):
        if step and max_seconds is not None and time.perf_counter() - t1 >= max_seconds:
            break
        starts = torch.randint(0, len(stream) - cfg.seq_len - 1, (cfg.batch,), generator=gen)
        batch = torch.stack([data[s: s + cfg.seq_len] for s in starts.tolist()]).to(device)
        for name, model in models.items():
            if step < budget[name]:
                losses[name] = _train_step(model, opts[name], batch,
                                           _lr(step, budget[name], cfg.lr), autocast)
        done = step + 1
        if step % 10 == 0 or step == stop - 1:
            say(f"step {step + 1}/{steps}: draft {losses['draft']:.3f} target "
                f"{losses['target']:.3f} ({time.perf_counter() - t1:.0f}s)")
    _sync(device)
    return {"steps": steps, "done": done, "budget": budget, "losses": losses, "probe": probe}


def _report(cfg: ZooSize, data: dict, run: dict, *, size: str, seed: int, requested: int,
            max_seconds, max_steps, dtype: str, tf32: bool, device: str, corpus) -> dict:
    """zoo.json without the per-model entries and timings (see :func:`train_zoo`)."""
    import torch

    steps, done, budget = run["steps"], run["done"], run["budget"]
    done_by = {k: min(done, v) for k, v in budget.items()}
    return {
        "size": size, "seed": seed, "steps": steps, "draft_steps": budget["draft"],
        "steps_requested": requested, "steps_done": done, "draft_steps_done": done_by["draft"],
        "stopped_early": done < requested, "max_seconds": max_seconds, "max_steps": max_steps,
        "plan": run["probe"], "dtype": dtype, "tf32": bool(tf32),
        "reproduce": f"--seed {seed} --steps {steps}"
                     + (f" --max-steps {done}" if done < steps else "")
                     + (f" --dtype {dtype}" if dtype != "float32" else "")
                     + (" --tf32" if tf32 else ""),
        "vocab": len(data["tokenizer"]),
        "threads": torch.get_num_threads(), "device": device,
        "config": asdict(cfg),
        "train_chars": sum(map(len, data["train_docs"])), "train_tokens": int(len(data["stream"])),
        "heldout_tokens": int(len(data["heldout"])),
        "tokens_seen": {k: v * cfg.batch * cfg.seq_len for k, v in done_by.items()},
        "corpus": ["stdlib:code", "stdlib:prose", *(corpus or [])],
    }


def _evaluate_and_save(models: dict, data: dict, cfg: ZooSize, out: Path, run: dict,
                       report: dict) -> float:
    """Held-out loss of each model into ``report[name]``, then save model and tokenizer under
    ``out/name``; returns the evaluation seconds."""
    t_eval = 0.0
    for name, model in models.items():
        t = time.perf_counter()
        loss = heldout_loss(model, data["heldout"], cfg.seq_len, cfg.eval_windows)
        t_eval += time.perf_counter() - t
        report[name] = {
            "params": int(sum(p.numel() for p in model.parameters())),
            "heldout_loss": round(loss, 4),
            "train_loss_last": round(run["losses"][name], 4),
            "dir": str(out / name),
        }
        model.eval()
        model.to("cpu").save_pretrained(out / name)
        data["tokenizer"].save_pretrained(out / name)
    return t_eval
