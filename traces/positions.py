"""Capture the position rows of one request from a live draft/target pair (THEORY.md §1, §3).

For a prompt ``c`` (draft ``Ms``, target ``Mb``):

1. the target's reference output ``y`` is sampled at temperature T (greedy at T = 0) with the
   request's own random numbers;
2. for every output position t the draft proposes ``X_1..X_K`` from ``c + y_<t`` (sampled at
   T from ``Ms``) and the target scores the K + 1 positions ``Mb(·|c, y_<t, X^i)``, i = 0..K;
3. the row of position t records ``q = Ms(X_i|·)``, ``pt = Mb(X_i|·)``, ``z[:, j] = Z_{j+1}``
   and the draft-side signals ``draft_conf``, ``entropy``, ``top1`` of the draft's
   temperature-1 softmax, all from :func:`specbatch.theory.stats_torch.path_stats_torch` (the
   torch tier of :func:`specbatch.theory.stats.position_stats`). At T = 0 the rows are one-hot
   at the argmax (the format's temperature-0 rule: ``q = 1``, ``pt = 1[target argmax = X_i]``).

Speed (the fast path): the prefix ``c + y`` is run once per model; its KV cache is shared by
all positions of the request. A batch of P positions drafts its K tokens as one batched decode
over that shared cache (each row masks the cache entries past its own context ``c + y_<t``,
and its position ids continue at ``|c| + t``), and the target scores the P drafted paths in
one pass of K query tokens. The rows ``i = 0`` of both models come from the prefix pass itself.
:func:`capture_request_naive` is the reference twin that recomputes every prefix.

Sliding-window attention (Gemma 2/3, Mistral): a model's own cache keeps only the last window
of a sliding layer, and its masks measure distance in cache slots. Capture therefore gives
every model a cache that keeps all keys (:func:`full_cache`), and where cache slots and real
positions differ (the shared prefix with per-row holes) passes masks built from real positions
(:func:`window_masks`): key at position ``j`` is visible to a query at ``i`` iff ``j ≤ i`` and,
on a sliding layer of window ``W``, ``i − j < W``. Models without sliding layers take the
plain 2D masks as before.

Random numbers: request ``n`` draws all its uniforms from
``numpy.random.default_rng([seed, n])`` (inverse-CDF sampling in float64), never from a global
stream, so a request's content does not depend on the batch size, on the other requests or
on whether the run was resumed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from specbatch.theory.stats_torch import path_stats_torch, probs_at, sample_inverse_cdf

if TYPE_CHECKING:
    from specbatch.traces.capture import CaptureConfig


def sliding_window(model) -> int | None:
    """The window W of the model's sliding-window layers, or None if it has none."""
    config = model.config.get_text_config(decoder=True)
    window = getattr(config, "sliding_window", None)
    types = getattr(config, "layer_types", None)
    if not window or getattr(config, "use_sliding_window", True) is False:
        return None
    if types is not None and "sliding_attention" not in types:
        return None
    return int(window)


def full_cache():
    """A KV cache whose every layer keeps all keys (sliding layers included)."""
    from transformers import DynamicCache

    return DynamicCache()


def window_masks(model, q_pos, kv_pos, kv_valid, window: int):
    """Attention masks from real positions for a model with sliding-window layers.

    q_pos:    # [P, Q] real positions of the queries
    kv_pos:   # [P, L] real positions of the cache slots (new tokens included)
    kv_valid: # [P, L] bool, False for slots the row must not see
    returns the ``attention_mask`` argument: a dict {"full_attention", "sliding_attention"}
    of [P, 1, Q, L] masks for models with per-layer types, else the sliding mask alone
    """
    import torch

    before = kv_pos[:, None, :] <= q_pos[:, :, None]                       # [P, Q, L]
    causal = (before & kv_valid[:, None, :])[:, None]
    sliding = causal & (kv_pos[:, None, :] > q_pos[:, :, None] - window)[:, None]
    config = model.config.get_text_config(decoder=True)
    if getattr(config, "_attn_implementation", "sdpa") == "eager":
        dtype = next(model.parameters()).dtype
        low = torch.finfo(dtype).min
        causal, sliding = (torch.where(m, 0.0, low).to(dtype) for m in (causal, sliding))
    if getattr(config, "layer_types", None) is not None:
        return {"full_attention": causal, "sliding_attention": sliding}
    return sliding


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
    out = target(input_ids=ids, past_key_values=None if native_cache else full_cache(),
                 use_cache=True)
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
    # left padding shifts a row's slots and positions alike, so slot distances are real ones
    out = target(input_ids=ids, attention_mask=mask, position_ids=pos,
                 past_key_values=full_cache(), use_cache=True)
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
    new_pos = ctx[:, None] + torch.arange(k, device=device)[None, :]    # [P, K] real positions
    slot_pos = torch.cat([torch.arange(prefix, device=device).expand(p, -1), new_pos], dim=1)

    def masks(model, mask, queries: int):
        """The 2D ``mask`` (slots), or real-position masks for a sliding-window model."""
        window = sliding_window(model)
        if window is None:
            return mask.long()
        n = mask.shape[1]
        return window_masks(model, slot_pos[:, n - queries:n], slot_pos[:, :n], mask, window)

    u = uniforms.to(device)
    tokens = [sample_inverse_cdf(probs_at(draft_row0, cfg.temperature), u[:, 0])]
    d_logits = [draft_row0]
    if k > 1:
        cache = _shared_cache(draft_cache, prefix, p)
        for j in range(1, k):
            mask = torch.cat([keep, torch.ones(p, j, dtype=torch.bool, device=device)], dim=1)
            out = draft(input_ids=tokens[-1].view(p, 1), past_key_values=cache, use_cache=True,
                        attention_mask=masks(draft, mask, 1),
                        position_ids=(ctx + j - 1).view(p, 1))
            cache = out.past_key_values
            d_logits.append(out.logits[:, -1])
            tokens.append(sample_inverse_cdf(probs_at(d_logits[-1], cfg.temperature), u[:, j]))
    x = torch.stack(tokens, dim=1)                        # [P, K]
    cache = _shared_cache(target_cache, prefix, p)
    mask = torch.cat([keep, torch.ones(p, k, dtype=torch.bool, device=device)], dim=1)
    out = target(input_ids=x, past_key_values=cache, use_cache=True,
                 attention_mask=masks(target, mask, k), position_ids=new_pos)
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
        d_out = draft(input_ids=full, past_key_values=full_cache(), use_cache=True)
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
    ``c + y_<t`` from scratch (then K − 1 cached steps) and the target on ``c + y_<t + X^K``,
    each with the model's own caches and masks (sliding windows as the model implements them).
    """
    import torch

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
