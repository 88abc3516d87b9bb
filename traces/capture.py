"""Capture a trace from a live draft/target pair of Hugging Face causal LMs.

For each prompt ``c`` (THEORY.md §1 notation: draft ``Ms``, target ``Mb``):

1. the target's reference output ``y`` is sampled at temperature T (greedy at T = 0) with the
   request's own random numbers;
2. for every output position t the draft proposes ``X_1..X_K`` from ``c + y_<t`` (sampled at
   T from ``Ms``) and the target scores the K + 1 positions ``Mb(·|c, y_<t, X^i)``, i = 0..K;
3. the row of position t records ``q = Ms(X_i|·)``, ``pt = Mb(X_i|·)``, ``z[:, j] = Z_{j+1}``
   (THEORY.md §3, exactly :func:`theory.stats.position_stats` on the temperature-T rows) and
   the draft-side signals ``draft_conf``, ``entropy``, ``top1`` of the draft's temperature-1
   softmax. At T = 0 the rows are one-hot at the argmax (the format's temperature-0 rule:
   ``q = 1``, ``pt = 1[target argmax = X_i]``).

Speed (the fast path): the prefix ``c + y`` is run once per model; its KV cache is shared by
all positions of the request. A batch of P positions drafts its K tokens as one batched decode
over that shared cache (each row masks the cache entries past its own context ``c + y_<t``,
and its position ids continue at ``|c| + t``), and the target scores the P drafted paths in
one pass of K query tokens. The rows ``i = 0`` of both models come from the prefix pass itself.
:func:`capture_request_naive` is the reference twin that recomputes every prefix.

Random numbers: request ``n`` draws all its uniforms from
``numpy.random.default_rng([seed, n])`` (inverse-CDF sampling in float64), never from a global
stream, so a request's content does not depend on the batch size, on the other requests or
on whether the run was resumed.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from specbatch.theory.stats_torch import path_stats_torch, probs_at, sample_inverse_cdf
from specbatch.traces.prompts import Prompt

from specbatch.errors import SpecbatchError, require

STATUS_DONE, STATUS_PENDING = "done", "pending"


@dataclass(frozen=True)
class CaptureConfig:
    """Everything that determines a capture's content (recorded in meta.json)."""

    max_new_tokens: int = 128
    depth: int = 8                 # K drafted tokens per position
    temperature: float = 1.0
    seed: int = 0
    batch_size: int = 32           # positions per batched draft/target pass
    max_prompt_tokens: int = 512   # longer prompts keep their last tokens
    stop_at_eos: bool = True       # the reference output ends after the target's EOS
    chunk_requests: int = 8        # requests per positions file (the unit of --resume)
    store_dtype: str = "float64"   # float columns on disk: float64 or float32 (half the size)

    def content_key(self) -> dict:
        """Fields that change the captured numbers (batch size and chunking do not)."""
        d = asdict(self)
        for k in ("batch_size", "chunk_requests"):
            d.pop(k)
        return d


# ----------------------------------------------------------------------------- loading
def load_pair(draft_path: str, target_path: str, device: str = "cpu", dtype: str = "float32"):
    """Load tokenizer, draft and target from local HF model directories (no network).

    Raises a one-line :class:`SpecbatchError` for a path that is not a model directory, or a
    draft and target whose vocabularies differ.
    """
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    dtypes = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
    require(dtype in dtypes, f"--dtype: expected one of {', '.join(dtypes)}, got {dtype!r}")
    if device.startswith("cuda"):
        require(torch.cuda.is_available(), f"--device {device}: expected a CUDA device, got none")
    loaded = {}
    for role, path in (("draft", draft_path), ("target", target_path)):
        p = Path(path)
        require(p.is_dir() and (p / "config.json").is_file(),
                f"{role} model {path}: expected a local Hugging Face model directory "
                "(with config.json), got " + ("a directory without config.json" if p.is_dir()
                                              else "no such directory"))
        try:
            model = AutoModelForCausalLM.from_pretrained(p, local_files_only=True,
                                                         dtype=dtypes[dtype])
            tok = AutoTokenizer.from_pretrained(p, local_files_only=True)
        except (OSError, ValueError, KeyError) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise SpecbatchError(f"{role} model {path}: expected a loadable causal LM with a "
                                 f"tokenizer, got {first[:160]}") from None
        loaded[role] = (model.to(device).eval(), tok)
    (draft, dtok), (target, ttok) = loaded["draft"], loaded["target"]
    dv, tv = draft.get_output_embeddings().weight.shape[0], target.get_output_embeddings().weight.shape[0]
    require(dv == tv, f"models {draft_path} and {target_path}: expected the same vocabulary, "
            f"got {dv} and {tv} output logits")
    require(dtok.get_vocab() == ttok.get_vocab(),
            f"models {draft_path} and {target_path}: expected the same tokenizer vocabulary, "
            f"got {len(dtok)} and {len(ttok)} different tokens")
    return dtok, draft, target


def model_identity(model, path: str) -> dict:
    c = model.config
    return {
        "path": str(Path(path).resolve()), "name": Path(path).name,
        "architecture": type(model).__name__,
        "params": int(sum(p.numel() for p in model.parameters())),
        "shape": {"layers": c.num_hidden_layers, "hidden": c.hidden_size,
                  "heads": c.num_attention_heads,
                  "kv_heads": getattr(c, "num_key_value_heads", c.num_attention_heads),
                  "intermediate": getattr(c, "intermediate_size", None),
                  "vocab": c.vocab_size},
        "dtype": str(next(model.parameters()).dtype).replace("torch.", ""),
    }


# ----------------------------------------------------------------------------- statistics
# ----------------------------------------------------------------------------- one request
def request_uniforms(seed: int, index: int, max_new: int, depth: int):
    """(reference-output uniforms # [max_new], draft uniforms # [max_new, K]) of request n."""
    rng = np.random.default_rng([seed, index])
    return rng.random(max_new), rng.random((max_new, depth))


def encode_prompt(tokenizer, text: str, max_prompt_tokens: int) -> list[int]:
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    if not ids:
        ids = [tokenizer.eos_token_id if tokenizer.eos_token_id is not None else 0]
    return ids[-max_prompt_tokens:]


def generate_reference(target, prompt_ids: list[int], uniforms: np.ndarray, cfg: CaptureConfig,
                       eos_id: int | None):
    """Target's reference output y and its logits at every output position.

    returns (y # [n] int64 on device, logits # [n, V] (row t = Mb logits after c + y_<t),
             cache of c + y_<n-1 as DynamicCache)
    """
    import torch

    device = next(target.parameters()).device
    u = torch.from_numpy(uniforms).to(device)
    ids = torch.tensor([prompt_ids], device=device)
    out = target(input_ids=ids, use_cache=True)
    cache = out.past_key_values
    logits = out.logits[0, -1]
    tokens, rows = [], []
    for t in range(cfg.max_new_tokens):
        rows.append(logits)
        tok = sample_inverse_cdf(probs_at(logits, cfg.temperature), u[t])
        tokens.append(tok)
        if (cfg.stop_at_eos and eos_id is not None and int(tok) == eos_id) or \
                t == cfg.max_new_tokens - 1:
            break
        out = target(input_ids=tok.view(1, 1), past_key_values=cache, use_cache=True)
        cache, logits = out.past_key_values, out.logits[0, -1]
    return torch.stack(tokens), torch.stack(rows), cache


def generate_reference_batch(target, prompts_ids: list[list[int]], uniforms: list[np.ndarray],
                             cfg: CaptureConfig, eos_id: int | None) -> list[tuple]:
    """:func:`generate_reference` for several requests at once (left-padded, one decode loop).

    Row r keeps its own uniforms, positions ``0..|c_r|-1`` for its prompt and a padding mask,
    so each request's output is the one :func:`generate_reference` gives (up to float
    round-off of the batched matmuls). Returns, per request, ``(y, logits, cache)`` with the
    cache cut to that request's own ``c + y_<n-1`` (no padding).
    """
    import torch
    from transformers import DynamicCache

    device = next(target.parameters()).device
    b = len(prompts_ids)
    lens = torch.tensor([len(p) for p in prompts_ids], device=device)
    width = int(lens.max())
    pad = width - lens                                            # [b] left padding
    ids = torch.zeros(b, width, dtype=torch.long, device=device)
    for r, p in enumerate(prompts_ids):
        ids[r, width - len(p):] = torch.tensor(p, device=device)
    col = torch.arange(width, device=device)[None, :]
    mask = (col >= pad[:, None]).long()                           # [b, width]
    pos = (col - pad[:, None]).clamp(min=0)
    u = torch.from_numpy(np.stack(uniforms)).to(device)           # [b, max_new]
    out = target(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True)
    cache, logits = out.past_key_values, out.logits[:, -1]
    tokens, rows = [], []
    done = torch.zeros(b, dtype=torch.bool, device=device)
    length = torch.full((b,), cfg.max_new_tokens, device=device)
    for t in range(cfg.max_new_tokens):
        rows.append(logits)
        tok = sample_inverse_cdf(probs_at(logits, cfg.temperature), u[:, t])
        tokens.append(tok)
        if cfg.stop_at_eos and eos_id is not None:
            stop = (tok == eos_id) & ~done
            length = torch.where(stop, torch.full_like(length, t + 1), length)
            done |= stop
        if bool(done.all()) or t == cfg.max_new_tokens - 1:
            break
        mask = torch.cat([mask, torch.ones(b, 1, dtype=torch.long, device=device)], dim=1)
        out = target(input_ids=tok.view(b, 1), attention_mask=mask,
                     position_ids=(lens + t).view(b, 1), past_key_values=cache, use_cache=True)
        cache, logits = out.past_key_values, out.logits[:, -1]
    y_all = torch.stack(tokens, dim=1)                            # [b, steps]
    logit_all = torch.stack(rows, dim=1)                          # [b, steps, V]
    result = []
    for r in range(b):
        n = int(length[r])
        start, stop = int(pad[r]), width + n - 1
        data = [(layer.keys[r:r + 1, :, start:stop], layer.values[r:r + 1, :, start:stop])
                for layer in cache.layers]
        result.append((y_all[r, :n], logit_all[r, :n], DynamicCache(data)))
    return result


def _shared_cache(cache, length: int, rows: int):
    """A DynamicCache holding the first ``length`` entries of a batch-1 cache, for ``rows`` rows."""
    from transformers import DynamicCache

    data = []
    for layer in cache.layers:
        k = layer.keys[:, :, :length].expand(rows, -1, -1, -1)
        v = layer.values[:, :, :length].expand(rows, -1, -1, -1)
        data.append((k, v))
    return DynamicCache(data)


def _batched_positions(draft, target, draft_cache, target_cache, draft_row0, target_row0,
                       n_prompt: int, ts, uniforms, cfg: CaptureConfig):
    """Draft K tokens and score them with the target for the positions ``ts`` at once.

    draft_row0/target_row0: # [P, V] logits at c + y_<t for each t in ts
    ts:                     # [P] int64 output positions (ascending)
    uniforms:               # [P, K] float64 draft uniforms
    returns (tokens # [P, K], draft_logits # [P, K, V], target_logits # [P, K+1, V])
    """
    import torch

    device = draft_row0.device
    p, k = len(ts), cfg.depth
    ctx = n_prompt + ts                                   # [P] context lengths |c| + t
    prefix = int(ctx.max())
    keep = torch.arange(prefix, device=device)[None, :] < ctx[:, None]  # [P, prefix]
    u = uniforms.to(device)
    tokens = [sample_inverse_cdf(probs_at(draft_row0, cfg.temperature), u[:, 0])]
    d_logits = [draft_row0]
    if k > 1:
        cache = _shared_cache(draft_cache, prefix, p)
        for j in range(1, k):
            mask = torch.cat([keep, torch.ones(p, j, dtype=torch.bool, device=device)], dim=1)
            out = draft(input_ids=tokens[-1].view(p, 1), past_key_values=cache, use_cache=True,
                        attention_mask=mask.long(), position_ids=(ctx + j - 1).view(p, 1))
            cache = out.past_key_values
            d_logits.append(out.logits[:, -1])
            tokens.append(sample_inverse_cdf(probs_at(d_logits[-1], cfg.temperature), u[:, j]))
    x = torch.stack(tokens, dim=1)                        # [P, K]
    cache = _shared_cache(target_cache, prefix, p)
    mask = torch.cat([keep, torch.ones(p, k, dtype=torch.bool, device=device)], dim=1)
    pos = ctx[:, None] + torch.arange(k, device=device)[None, :]
    out = target(input_ids=x, past_key_values=cache, use_cache=True,
                 attention_mask=mask.long(), position_ids=pos)
    t_logits = torch.cat([target_row0[:, None], out.logits], dim=1)  # [P, K+1, V]
    return x, torch.stack(d_logits, dim=1), t_logits


def capture_request(tokenizer, draft, target, prompt_ids: list[int], index: int,
                    cfg: CaptureConfig, return_rows: bool = False) -> dict:
    """Capture one request (fast path). Returns its position columns # [n, K] and ``y``.

    With ``return_rows`` the full temperature-T rows are returned too (tests):
    ``draft_rows`` # [n, K, V], ``target_rows`` # [n, K+1, V].
    """
    import torch

    u_ref, _ = request_uniforms(cfg.seed, index, cfg.max_new_tokens, cfg.depth)
    with torch.inference_mode():
        ref = generate_reference(target, prompt_ids, u_ref, cfg, tokenizer.eos_token_id)
    return capture_positions(draft, target, prompt_ids, index, cfg, ref, return_rows)


def capture_positions(draft, target, prompt_ids: list[int], index: int, cfg: CaptureConfig,
                      reference: tuple, return_rows: bool = False) -> dict:
    """All output positions of one request, given its reference ``(y, logits, cache)``."""
    import torch

    _, u_draft = request_uniforms(cfg.seed, index, cfg.max_new_tokens, cfg.depth)
    y, t_row0, t_cache = reference
    with torch.inference_mode():
        n = len(y)
        device = y.device
        full = torch.cat([torch.tensor(prompt_ids, device=device), y[:-1]])[None]
        d_out = draft(input_ids=full, use_cache=True)
        n_prompt = len(prompt_ids)
        d_row0 = d_out.logits[0, n_prompt - 1:]                    # [n, V]
        parts: dict[str, list] = {}
        for a in range(0, n, cfg.batch_size):
            ts = torch.arange(a, min(n, a + cfg.batch_size), device=device)
            x, dl, tl = _batched_positions(
                draft, target, d_out.past_key_values, t_cache, d_row0[ts], t_row0[ts],
                n_prompt, ts, torch.from_numpy(u_draft[a:a + len(ts)]), cfg)
            append_path_stats(parts, x, dl, tl, cfg.temperature, return_rows)
    result = {name: np.concatenate(v) for name, v in parts.items()}
    result["y"] = y.cpu().numpy()
    return result


def append_path_stats(parts: dict, x, dl, tl, temperature: float, return_rows: bool) -> None:
    """Append one batch of drafted paths' statistics (and optionally full rows) to ``parts``.

    x: # [P, K] drafted tokens;  dl: # [P, K, V] draft logits;  tl: # [P, K+1, V] target logits
    """
    stats = path_stats_torch(x, dl, tl, temperature)
    stats["draft_token"] = x.cpu().numpy().astype(np.int32)
    if return_rows:
        stats["draft_rows"] = probs_at(dl, temperature).cpu().numpy()
        stats["target_rows"] = probs_at(tl, temperature).cpu().numpy()
    for name, v in stats.items():
        parts.setdefault(name, []).append(v)


def capture_request_naive(tokenizer, draft, target, prompt_ids: list[int], index: int,
                          cfg: CaptureConfig, return_rows: bool = False) -> dict:
    """Reference twin of :func:`capture_request`: every position recomputes its prefix.

    Same random numbers, same reference output; per position t the draft runs on
    ``c + y_<t`` from scratch (then K − 1 cached steps) and the target on ``c + y_<t + X^K``.
    """
    import torch

    u_ref, u_draft = request_uniforms(cfg.seed, index, cfg.max_new_tokens, cfg.depth)
    parts: dict[str, list] = {}
    with torch.inference_mode():
        y, _, _ = generate_reference(target, prompt_ids, u_ref, cfg, tokenizer.eos_token_id)
        device = y.device
        prompt = torch.tensor(prompt_ids, device=device)
        u = torch.from_numpy(u_draft).to(device)
        for t in range(len(y)):
            ctx = torch.cat([prompt, y[:t]])[None]
            out = draft(input_ids=ctx, use_cache=True)
            rows, toks = [out.logits[0, -1]], []
            for j in range(cfg.depth):
                toks.append(sample_inverse_cdf(probs_at(rows[-1], cfg.temperature), u[t, j]))
                if j == cfg.depth - 1:
                    break
                out = draft(input_ids=toks[-1].view(1, 1), past_key_values=out.past_key_values,
                            use_cache=True)
                rows.append(out.logits[0, -1])
            x = torch.stack(toks)[None]
            dl = torch.stack(rows)[None]
            tl = target(input_ids=torch.cat([ctx, x], dim=1)).logits[:, ctx.shape[1] - 1:]
            append_path_stats(parts, x, dl, tl, cfg.temperature, return_rows)
    result = {name: np.concatenate(v) for name, v in parts.items()}
    result["y"] = y.cpu().numpy()
    return result


# ----------------------------------------------------------------------------- whole capture
def _fingerprint(prompts: list[Prompt], cfg: CaptureConfig, draft: str, target: str) -> str:
    h = hashlib.sha256()
    h.update(json.dumps(cfg.content_key(), sort_keys=True).encode())
    h.update(json.dumps([str(Path(draft).resolve()), str(Path(target).resolve())]).encode())
    for p in prompts:
        h.update(json.dumps([p.text, p.category]).encode())
    return h.hexdigest()[:16]


def _zoo_provenance(draft_path: str, target_path: str) -> dict | None:
    """The zoo report (``zoo.json``) when both models come from one ``specbatch zoo train``."""
    parent = Path(draft_path).resolve().parent
    report = parent / "zoo.json"
    if Path(target_path).resolve().parent != parent or not report.is_file():
        return None
    try:
        z = json.loads(report.read_text())
    except (json.JSONDecodeError, OSError):
        return None
    extra = "".join(f" --corpus {c}" for c in z.get("corpus", [])[2:])
    return {
        "size": z.get("size"), "seed": z.get("seed"), "steps": z.get("steps"),
        "vocab": z.get("vocab"), "threads": z.get("threads"),
        "draft_heldout_loss": z.get("draft", {}).get("heldout_loss"),
        "target_heldout_loss": z.get("target", {}).get("heldout_loss"),
        "draft_params": z.get("draft", {}).get("params"),
        "target_params": z.get("target", {}).get("params"),
        # zoo.json's ``reproduce`` holds the options that replay the same weights (schedule
        # length, --max-steps of a time-budgeted run, dtype, tf32); older reports lack it.
        "command": f"specbatch zoo train --out {parent} --size {z.get('size')} "
                   + (z.get("reproduce") or f"--seed {z.get('seed')} --steps {z.get('steps')}")
                   + (f" --threads {z['threads']}" if z.get("threads") else "") + extra,
    }


def _library_versions() -> dict:
    import pyarrow
    import tokenizers
    import torch
    import transformers

    return {"python": platform.python_version(), "numpy": np.__version__,
            "torch": torch.__version__, "transformers": transformers.__version__,
            "tokenizers": tokenizers.__version__, "pyarrow": pyarrow.__version__}


def capture(draft_path: str, target_path: str, prompts: list[Prompt], out: str | Path,
            cfg: CaptureConfig, device: str = "cpu", dtype: str = "float32",
            resume: bool = False, progress: bool = True, prompt_source: str | None = None,
            command: str | None = None, extra_meta: dict | None = None,
            stop_after_chunks: int | None = None) -> dict:
    """Capture a trace directory ``out`` (one positions file per chunk of requests).

    After each chunk ``positions-<chunk>.parquet``, ``requests.parquet`` (completed requests)
    and ``meta.json`` (``completion``: per-request ``done``/``pending``) are rewritten
    atomically, so at every instant ``out`` is a valid trace of the completed requests.
    ``resume`` keeps the chunks meta.json marks done (same content key required) and
    captures the rest; the result equals an uninterrupted run. Returns the final meta.
    """
    import torch
    from specbatch.traces.format import (
        default_meta,
        read_trace,
        write_meta,
        write_positions,
        write_requests,
    )
    from tqdm import tqdm

    require(cfg.depth >= 1, f"--depth: expected K >= 1, got {cfg.depth}")
    require(cfg.max_new_tokens >= 1, f"--max-new-tokens: expected >= 1, got {cfg.max_new_tokens}")
    require(cfg.temperature >= 0, f"--temperature: expected >= 0, got {cfg.temperature}")
    require(cfg.batch_size >= 1, f"--batch-size: expected >= 1, got {cfg.batch_size}")
    require(bool(prompts), "prompts: expected at least one prompt, got none")
    out = Path(out)
    fingerprint = _fingerprint(prompts, cfg, draft_path, target_path)
    n_req = len(prompts)
    status = [STATUS_PENDING] * n_req
    store: dict[int, dict] = {}   # request index -> request row (prompt_len, output_len, ...)
    if out.exists() and any(out.iterdir()):
        require(resume, f"--out {out}: expected a new or empty directory (or --resume), "
                "got an existing non-empty directory")
        meta_path = out / "meta.json"
        require(meta_path.is_file(), f"file {meta_path}: expected a capture's meta.json to "
                "resume from, got no such file")
        old = json.loads(meta_path.read_text())
        comp = old.get("completion") or {}
        require(comp.get("fingerprint") == fingerprint,
                f"file {meta_path}: field completion.fingerprint: expected {fingerprint} (same "
                f"models, prompts and content options), got {comp.get('fingerprint')}")
        status = list(comp.get("requests", status))
        store = {int(k): v for k, v in comp.get("request_rows", {}).items()}
        # same chunking and batch size as the interrupted run: bit-identical float results
        cfg = CaptureConfig(**{**asdict(cfg), "chunk_requests": int(comp["chunk_requests"]),
                               "batch_size": int(comp.get("batch_size", cfg.batch_size))})
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(cfg.seed)
    tokenizer, draft, target = load_pair(draft_path, target_path, device, dtype)
    chunks = [list(range(a, min(n_req, a + cfg.chunk_requests)))
              for a in range(0, n_req, cfg.chunk_requests)]
    zoo = _zoo_provenance(draft_path, target_path)
    command = command or " ".join(sys.argv)
    if zoo is not None:
        extra_meta = {"zoo": zoo, "remake": [zoo["command"], command], **(extra_meta or {})}
    meta = default_meta(
        cfg.temperature, cfg.depth,
        models={"draft": model_identity(draft, draft_path),
                "target": model_identity(target, target_path)},
        tokenizer={"class": type(tokenizer).__name__, "vocab": len(tokenizer),
                   "eos_token_id": tokenizer.eos_token_id, "path": str(Path(target_path).resolve())},
        prompt_source=prompt_source, seeds={"seed": cfg.seed,
                                            "request_rng": "numpy.random.default_rng([seed, request_index])"},
        device=device, library_versions=_library_versions(),
        command=command, capture=asdict(cfg) | {"dtype": dtype},
        **(extra_meta or {}))

    def flush() -> None:
        idx = sorted(store)
        rows = [store[i] for i in idx]
        requests = {"request_id": np.array(idx, dtype=np.int64),
                    "prompt_len": np.array([r["prompt_len"] for r in rows], dtype=np.int64),
                    "output_len": np.array([r["output_len"] for r in rows], dtype=np.int64),
                    "category": np.array([r["category"] for r in rows], dtype=object)}
        meta["completion"] = {
            "status": "complete" if all(s == STATUS_DONE for s in status) else "partial",
            "fingerprint": fingerprint, "chunk_requests": cfg.chunk_requests,
            "batch_size": cfg.batch_size,
            "done": int(sum(s == STATUS_DONE for s in status)), "total": n_req,
            "requests": status, "request_rows": {str(i): store[i] for i in idx},
        }
        meta["capture_time"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        write_requests(out, requests)
        write_meta(out, meta)

    flush()  # meta.json exists before any positions file: every later state is resumable
    bar = tqdm(total=n_req, disable=not progress, file=sys.stderr, unit="req",
               desc="capture", initial=sum(s == STATUS_DONE for s in status))
    written = 0
    for c, members in enumerate(chunks):
        if all(status[i] == STATUS_DONE for i in members) and (out / f"positions-{c:05d}.parquet").is_file():
            continue
        if stop_after_chunks is not None and written >= stop_after_chunks:
            break
        cols: dict[str, list] = {}
        rid, pos = [], []
        ids_of = {i: encode_prompt(tokenizer, prompts[i].text, cfg.max_prompt_tokens)
                  for i in members}
        with torch.inference_mode():
            refs = generate_reference_batch(
                target, [ids_of[i] for i in members],
                [request_uniforms(cfg.seed, i, cfg.max_new_tokens, cfg.depth)[0] for i in members],
                cfg, tokenizer.eos_token_id)
        for i, ref in zip(members, refs):
            prompt, ids = prompts[i], ids_of[i]
            res = capture_positions(draft, target, ids, i, cfg, ref)
            n = len(res["y"])
            rid.append(np.full(n, i, dtype=np.int64))
            pos.append(np.arange(n, dtype=np.int64))
            for name in ("draft_token", "q", "pt", "z", "draft_conf", "entropy", "top1"):
                cols.setdefault(name, []).append(res[name])
            store[i] = {"prompt_len": len(ids), "output_len": n, "category": prompt.category}
            bar.update(1)
        write_positions(out, c, np.concatenate(rid), np.concatenate(pos),
                        {k: np.concatenate(v) for k, v in cols.items()}, cfg.store_dtype)
        for i in members:
            status[i] = STATUS_DONE
        flush()
        written += 1
    bar.close()
    if all(s == STATUS_DONE for s in status):
        read_trace(out)  # the whole trace passes every check of the reader
    return meta
