"""Capture the position rows of one request from a live draft/target pair (THEORY.md §1, §3).

For a prompt ``c`` (draft ``Ms``, target ``Mb``):

1. the target's reference output ``y`` is sampled at temperature T (greedy at T = 0) with the
   request's own random numbers;
2. for every output position t the draft proposes ``X_1..X_K`` from ``c + y_<t`` (sampled at
   T from ``Ms``) and the target scores the K + 1 positions ``Mb(·|c, y_<t, X^i)``, i = 0..K;
3. the row of position t records ``q = Ms(X_i|·)``, ``pt = Mb(X_i|·)``, ``z[:, j] = Z_{j+1}``
   and the draft-side signals ``draft_conf``, ``entropy``, ``top1`` of the draft's temperature-1
   softmax, all from :func:`specbatch.theory.verify.torch_path_stats.path_stats_torch` (the torch
   tier of :func:`specbatch.theory.verify.path_stats.position_stats`). At T = 0 the rows are one-hot
   at the argmax (the format's temperature-0 rule: ``q = 1``, ``pt = 1[target argmax = X_i]``).

Speed (the fast path): the prefix ``c + y`` is run once per model; its KV cache is shared by
all positions of the request. A batch of P positions drafts its K tokens as one batched decode
over that shared cache (each row masks the cache entries past its own context ``c + y_<t``,
and its position ids continue at ``|c| + t``), and the target scores the P drafted paths in
one pass of K query tokens. The rows ``i = 0`` of both models come from the prefix pass itself.
:func:`capture_request_naive` is the reference twin that recomputes every prefix.

Drafting (:mod:`specbatch.traces.capture.drafters`): a :class:`Drafter` proposes each batch's K
tokens (a draft model, or the n-gram drafter of :mod:`specbatch.traces.capture.ngram`, whose one-hot
rows may end in virtual filler tokens, recorded with the row's ``proposed`` count); the target's
scoring pass (:func:`score_paths`) and the statistics are the same for every drafter.

Random numbers: request ``n`` draws all its uniforms from
``numpy.random.default_rng([seed, n])`` (inverse-CDF sampling in float64), never from a global
stream, so a request's content does not depend on the batch size, on the other requests or
on whether the run was resumed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from specbatch.theory.verify.torch_path_stats import (
    block_weights_torch,
    draft_signals_torch,
    path_stats_torch,
    probs_at,
    sample_inverse_cdf,
)
from specbatch.traces.capture.cache_api import cache_kwargs, last_logits, returned_cache
from specbatch.traces.capture.drafters import (
    Layout,
    as_drafter,
    full_cache,
    one_hot_logits,
    shared_cache,
    widen,
)

if TYPE_CHECKING:
    from specbatch.traces.capture.chain import CaptureConfig


def request_uniforms(seed: int, index: int, max_new: int, depth: int):
    """(reference-output uniforms # [max_new], draft uniforms # [max_new, K]) of request n."""
    rng = np.random.default_rng([seed, index])
    return rng.random(max_new), rng.random((max_new, depth))


def encode_prompt(tokenizer, text: str, max_prompt_tokens: int, chat: bool = False) -> list[int]:
    """Token ids of a prompt (its last ``max_prompt_tokens``).

    ``chat``: the prompt becomes one user turn of the tokenizer's chat template followed by
    the assistant's turn opening, as an instruction-tuned model is served; a tokenizer
    without a template is an error.
    """
    from specbatch.errors import require

    if chat:
        require(getattr(tokenizer, "chat_template", None) is not None,
                "--chat-template: the target's tokenizer has no chat template")
        text = tokenizer.apply_chat_template([{"role": "user", "content": text}],
                                             add_generation_prompt=True, tokenize=False)
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    if not ids:
        ids = [tokenizer.eos_token_id if tokenizer.eos_token_id is not None else 0]
    return ids[-max_prompt_tokens:]


def generate_reference(target, prompt_ids: list[int], uniforms: np.ndarray, cfg: CaptureConfig,
                       eos_id: int | None, native_cache: bool = False):
    """Target's reference output y and its logits at every output position.

    ``native_cache``: let the model make its own cache (which may drop keys outside a sliding
    window) instead of :func:`full_cache`; the naive twin uses it.

    returns (y # [n] int64 on device, logits # [n, V] (row t = Mb logits after c + y_<t),
             cache of c + y_<n-1 as DynamicCache)
    """
    import torch

    device = next(target.parameters()).device
    u = torch.from_numpy(uniforms).to(device)
    ids = torch.tensor([prompt_ids], device=device)
    out = target(input_ids=ids, **cache_kwargs(target, None if native_cache else full_cache()),
                 use_cache=True, **last_logits(target, 1))
    cache = returned_cache(out)
    logits = out.logits[0, -1]
    tokens, rows = [], []
    for t in range(cfg.max_new_tokens):
        rows.append(logits)
        tok = sample_inverse_cdf(probs_at(logits, cfg.temperature), u[t])
        tokens.append(tok)
        if (cfg.stop_at_eos and eos_id is not None and int(tok) == eos_id) or \
                t == cfg.max_new_tokens - 1:
            break
        out = target(input_ids=tok.view(1, 1), **cache_kwargs(target, cache), use_cache=True)
        cache, logits = returned_cache(out), out.logits[0, -1]
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
    # left padding shifts a row's slots and positions alike, so slot distances are real ones
    out = target(input_ids=ids, attention_mask=mask, position_ids=pos,
                 **cache_kwargs(target, full_cache()), use_cache=True, **last_logits(target, 1))
    cache, logits = returned_cache(out), out.logits[:, -1]
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
                     position_ids=(lens + t).view(b, 1), **cache_kwargs(target, cache),
                     use_cache=True)
        cache, logits = returned_cache(out), out.logits[:, -1]
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


def score_paths(target, target_cache, target_row0, n_prompt: int, ts, x, width: int):
    """The target's rows ``Mb(·|c, y_<t, X^i)``, i = 0..K, for P drafted paths in one pass.

    target_row0: # [P, V] logits at c + y_<t;  ts: # [P] positions;  x: # [P, K] drafted
    tokens, ids ≥ V being virtual fillers (fed as token 0: only rows past the first filler
    depend on them, and those rows carry p = 0, so nothing recorded reads them);
    width: V' ≥ V, columns past V get logit −inf (target probability 0 for fillers).
    returns # [P, K+1, V']
    """
    import torch

    p, k = x.shape
    layout = Layout(n_prompt, ts, k)
    vocab = target_row0.shape[-1]
    cache = shared_cache(target_cache, layout.prefix, p, keep=False)  # one pass, not reread
    out = target(input_ids=torch.where(x < vocab, x, 0), **cache_kwargs(target, cache),
                 use_cache=True,
                 attention_mask=layout.masks(target, layout.mask(k), k),
                 position_ids=layout.new_pos)
    logits = torch.cat([target_row0[:, None], out.logits], dim=1)  # [P, K+1, V]
    return widen(logits, width)


def capture_request(tokenizer, draft, target, prompt_ids: list[int], index: int,
                    cfg: CaptureConfig, return_rows: bool = False) -> dict:
    """Capture one request (fast path). Returns its position columns # [n, K] and ``y``
    (and ``proposed`` # [n] for a drafter that may propose fewer than K tokens).

    draft: a :class:`Drafter` or a draft model. With ``return_rows`` the full temperature-T
    rows are returned too (tests): ``draft_rows`` # [n, K, V'], ``target_rows`` # [n, K+1, V'].
    """
    import torch

    u_ref, _ = request_uniforms(cfg.seed, index, cfg.max_new_tokens, cfg.depth)
    with torch.inference_mode():
        ref = generate_reference(target, prompt_ids, u_ref, cfg, tokenizer.eos_token_id)
    return capture_positions(draft, target, prompt_ids, index, cfg, ref, return_rows)


def capture_positions(draft, target, prompt_ids: list[int], index: int, cfg: CaptureConfig,
                      reference: tuple, return_rows: bool = False) -> dict:
    """All output positions of one request, given its reference ``(y, logits, cache)``.

    A one-hot drafter (``draft_logits`` None) takes :func:`append_one_hot_stats`: only the
    target's probabilities of the proposed tokens are needed, and positions that propose
    nothing skip the target pass.
    """
    import torch

    drafter = as_drafter(draft)
    _, u_draft = request_uniforms(cfg.seed, index, cfg.max_new_tokens, cfg.depth)
    y, t_row0, t_cache = reference
    with torch.inference_mode():
        n, n_prompt = len(y), len(prompt_ids)
        state = drafter.start(prompt_ids, y)
        parts: dict[str, list] = {}
        for a in range(0, n, cfg.batch_size):
            ts = torch.arange(a, min(n, a + cfg.batch_size), device=y.device)
            x, dl, proposed = drafter.draft(state, n_prompt, ts,
                                            torch.from_numpy(u_draft[a:a + len(ts)]), cfg)
            if dl is None:
                append_one_hot_stats(parts, target, (t_cache, t_row0[ts], n_prompt, ts), x,
                                     proposed, cfg.temperature, return_rows)
                continue
            tl = score_paths(target, t_cache, t_row0[ts], n_prompt, ts, x, dl.shape[-1])
            dl, signal = drafter.recorded_logits(x, dl)
            append_path_stats(parts, x, dl, tl, cfg.temperature, return_rows, proposed, signal)
    result = {name: np.concatenate(v) for name, v in parts.items()}
    result["y"] = y.cpu().numpy()
    return result


def append_one_hot_stats(parts: dict, target, scoring: tuple, x, proposed: np.ndarray,
                         temperature: float, return_rows: bool) -> None:
    """:func:`append_path_stats` for one-hot drafts, from the drafted tokens' target
    probabilities alone (THEORY.md §3): ``q = 1``, ``pt_i = Mb(x_i|X^{i-1})`` (0 on fillers),
    ``p_i = min(p_{i-1} pt_i, 1)``, ``Z_{i+1} = p_i (1 − pt_{i+1})``; draft signals 1 on
    proposed tokens (``draft_conf = top1 = 1``, ``entropy = 0``) and 0 on fillers. Only rows
    with ``proposed > 0`` go through :func:`score_paths`. The naive twin computes the same
    numbers with :func:`path_stats_torch` on explicit one-hot rows (parity test).

    scoring: ``(target_cache, target_row0 # [P, V], n_prompt, ts # [P])``;  x: # [P, K]
    tokens (fillers = V);  proposed: # [P]
    """
    import torch

    cache, row0, n_prompt, ts = scoring
    (p_count, k), vocab = x.shape, row0.shape[-1]
    real = (
        torch.arange(k, device=x.device)[None, :] < torch.from_numpy(proposed).to(x.device)[:, None]
    )
    pt = torch.zeros(p_count, k, dtype=torch.float64, device=x.device)
    scored = torch.from_numpy(np.flatnonzero(proposed > 0)).to(x.device)
    tl = widen(row0, vocab + 1)[:, None].repeat(1, k + 1, 1) if return_rows else None
    if len(scored):
        rows = score_paths(target, cache, row0[scored], n_prompt, ts[scored], x[scored], vocab)
        probs = probs_at(rows[:, :k], temperature)  # [S, K, V]
        pt[scored] = probs.gather(-1, x[scored].clamp(max=vocab - 1).unsqueeze(-1)).squeeze(-1)
        if tl is not None:
            tl[scored] = widen(rows, vocab + 1)
    pt = torch.where(real, pt, 0.0)
    p = block_weights_torch(torch.ones_like(pt), pt)
    p_prev = torch.cat([torch.ones_like(p[:, :1]), p[:, :-1]], dim=1)
    signal = real.double()
    stats = {"q": np.ones((p_count, k)), "pt": pt, "p": p, "z": p_prev * (1 - pt),
             "draft_conf": signal, "entropy": torch.zeros_like(pt), "top1": signal}
    stats = {name: v if isinstance(v, np.ndarray) else v.cpu().numpy() for name, v in stats.items()}
    stats["draft_token"] = x.cpu().numpy().astype(np.int32)
    stats["proposed"] = np.asarray(proposed, dtype=np.int64)
    if return_rows:
        stats["draft_rows"] = probs_at(one_hot_logits(x, vocab + 1), temperature).cpu().numpy()
        stats["target_rows"] = probs_at(tl, temperature).cpu().numpy()
    for name, v in stats.items():
        parts.setdefault(name, []).append(v)


def append_path_stats(parts: dict, x, dl, tl, temperature: float, return_rows: bool,
                      proposed=None, signal_logits=None) -> None:
    """Append one batch of drafted paths' statistics (and optionally full rows) to ``parts``.

    x: # [P, K] drafted tokens;  dl: # [P, K, V'] draft logits;  tl: # [P, K+1, V'] target
    logits;  proposed: # [P] real draft tokens per row, or None (all K). Filler slots
    (``j ≥ proposed``) get draft signals 0: the drafter proposed nothing there.
    signal_logits: # [P, K, V'] logits of the draft-side signals when they are not ``dl``'s
    (a greedy draft records a one-hot ``Ms`` but keeps its model's real confidence).
    """
    stats = by_rows(lambda r: path_stats_torch(x[r], dl[r], tl[r], temperature), x, tl)
    if signal_logits is not None:
        stats |= by_rows(lambda r: {k: v.cpu().numpy() for k, v in
                                    draft_signals_torch(x[r], signal_logits[r]).items()},
                         x, signal_logits)
    stats["draft_token"] = x.cpu().numpy().astype(np.int32)
    if proposed is not None:
        proposed = np.asarray(proposed, dtype=np.int64)
        filler = np.arange(x.shape[1])[None, :] >= proposed[:, None]  # [P, K]
        for name in ("draft_conf", "top1", "entropy"):
            stats[name][filler] = 0.0
        stats["proposed"] = proposed
    if return_rows:
        stats["draft_rows"] = probs_at(dl, temperature).cpu().numpy()
        stats["target_rows"] = probs_at(tl, temperature).cpu().numpy()
    for name, v in stats.items():
        parts.setdefault(name, []).append(v)


#: Bytes of one float64 ``[rows, K+1, V']`` table the path statistics may build at a time:
#: they hold several (Ms, Mb, their residual and entropy terms), 0.6 GB at once for 32 rows
#: of SmolLM2's V = 49,152 before rows were split.
STATS_BYTES = 1 << 26


def by_rows(stats_of, x, rows) -> dict:
    """``stats_of(slice)`` over slices of the P rows of ``x`` # [P, K] small enough that a
    float64 copy of ``rows`` # [P, ., V'] stays under :data:`STATS_BYTES`, concatenated. Every
    statistic is a function of its own row, so the numbers are those of one call on all rows
    (bit for bit: tests/traces/capture/test_memory.py)."""
    p = x.shape[0]
    per_row = 8 * max(1, rows[0].numel() if p else 1)
    step = max(1, STATS_BYTES // per_row)
    if step >= p:
        return stats_of(slice(None))
    parts = [stats_of(slice(a, a + step)) for a in range(0, p, step)]
    return {name: np.concatenate([part[name] for part in parts]) for name in parts[0]}


def capture_request_naive(tokenizer, draft, target, prompt_ids: list[int], index: int,
                          cfg: CaptureConfig, return_rows: bool = False) -> dict:
    """Reference twin of :func:`capture_request`: every position recomputes its prefix.

    Same random numbers, same reference output; per position t the drafter runs on
    ``c + y_<t`` from scratch (:meth:`Drafter.draft_one`) and the target on
    ``c + y_<t + X^K`` (fillers fed as token 0), each with the model's own caches and masks
    (sliding windows as the model implements them), at every position.
    """
    import torch

    drafter = as_drafter(draft)
    u_ref, u_draft = request_uniforms(cfg.seed, index, cfg.max_new_tokens, cfg.depth)
    parts: dict[str, list] = {}
    with torch.inference_mode():
        y, _, _ = generate_reference(target, prompt_ids, u_ref, cfg, tokenizer.eos_token_id,
                                     native_cache=True)
        device = y.device
        prompt = torch.tensor(prompt_ids, device=device)
        u = torch.from_numpy(u_draft).to(device)
        for t in range(len(y)):
            ctx = torch.cat([prompt, y[:t]])[None]
            x, dl, proposed = drafter.draft_one(ctx, u[t], cfg)
            vocab = target.get_output_embeddings().weight.shape[0]
            ids = torch.cat([ctx, torch.where(x < vocab, x, 0)], dim=1)
            tl = widen(target(input_ids=ids).logits[:, ctx.shape[1] - 1:], dl.shape[-1])
            dl, signal = drafter.recorded_logits(x, dl)
            append_path_stats(parts, x, dl, tl, cfg.temperature, return_rows, proposed, signal)
    result = {name: np.concatenate(v) for name, v in parts.items()}
    result["y"] = y.cpu().numpy()
    return result
