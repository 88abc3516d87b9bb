"""The draft step of capture: who proposes the K tokens of each position, on a shared cache.

A :class:`Drafter` proposes the drafted paths of a batch of positions; capture
(:mod:`specbatch.traces.capture.positions`) then scores them with the target in one batched pass and
records the same statistics whatever drafted them. :class:`ModelDrafter` samples a draft
causal LM ``Ms`` at temperature T, or greedily (its argmax chain); the n-gram drafter lives in
:mod:`specbatch.traces.capture.ngram`.

Greedy drafting is vLLM's default ``draft_sample_method = "greedy"`` (vllm/config/
speculative.py, ``SpeculativeConfig``; the V1 proposers, e.g. vllm/v1/spec_decode/eagle.py,
keep the draft's ``argmax`` and pass no draft probabilities; vllm/v1/sample/
rejection_sampler.py, ``rejection_sample``: with ``draft_probs`` None the draft is one-hot,
so ``x̂`` is accepted with probability ``p(x̂)`` and a rejection resamples from the target's
``p`` with ``x̂`` removed). The recorded
``Ms`` of such a draft is one-hot at ``x̂`` (``q = 1``, :func:`one_hot_logits`), while the
signals a policy reads before verification stay those of the draft model's real
temperature-1 distribution (:meth:`Drafter.recorded_logits`).

Sliding-window attention (Gemma 2/3, Mistral): a model's own cache keeps only the last window
of a sliding layer, and its masks measure distance in cache slots. Capture therefore gives
every model a cache that keeps all keys (:func:`full_cache`), and where cache slots and real
positions differ (the shared prefix with per-row holes) passes masks built from real positions
(:func:`window_masks`): key at position ``j`` is visible to a query at ``i`` iff ``j ≤ i`` and,
on a sliding layer of window ``W``, ``i − j < W``. Models without sliding layers take plain
2D masks.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from specbatch.theory.verify.torch_path_stats import probs_at, sample_inverse_cdf
from specbatch.traces.capture.cache_api import cache_kwargs, last_logits, returned_cache
from specbatch.traces.format.identity import model_identity

if TYPE_CHECKING:
    from specbatch.traces.capture.chain import CaptureConfig

__all__ = ["Drafter", "Layout", "ModelDrafter", "as_drafter", "full_cache", "model_identity",
           "one_hot_logits", "shared_cache", "sliding_window", "widen", "window_masks"]


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


def shared_cache(cache, length: int, rows: int, keep: bool = True):
    """A DynamicCache holding the first ``length`` entries of a batch-1 cache, for ``rows`` rows.

    Each layer holds the prefix as a broadcast view (``expand``: no copy; building a
    DynamicCache from data would concatenate, writing ``rows`` copies of the prefix at once:
    0.9 GB for SmolLM2-135M's 30 layers at 32 rows of 640 tokens). A pass still concatenates
    its new tokens per layer (what attention reads); ``keep`` False returns that without
    storing it, so a single scoring pass holds one layer's copy at a time, not all of them
    (the cache is not read after it). The numbers are those of the copied cache."""
    from transformers import DynamicCache

    layer_class = prefix_layer_class()
    out = DynamicCache()
    out.layers = [layer_class(layer.keys[:, :, :length].expand(rows, -1, -1, -1),
                              layer.values[:, :, :length].expand(rows, -1, -1, -1), keep)
                  for layer in cache.layers]
    return out


@functools.cache
def prefix_layer_class() -> type:
    """transformers' DynamicLayer over a prefix view: :meth:`update` concatenates the new
    keys and values to it and stores the result only when ``keep`` (:func:`shared_cache`)."""
    import torch
    from transformers.cache_utils import DynamicLayer

    class PrefixLayer(DynamicLayer):
        def __init__(self, keys, values, keep: bool) -> None:
            super().__init__()
            self.device, self.keys, self.values = keys.device, keys, values
            self.is_initialized, self.keep = True, keep

        def update(self, key_states, value_states, *args, **kwargs):
            k = torch.cat([self.keys, key_states], dim=-2)
            v = torch.cat([self.values, value_states], dim=-2)
            if self.keep:
                self.keys, self.values = k, v
            return k, v

    return PrefixLayer


class Drafter:
    """What proposes the K draft tokens of a batch of positions; everything else (reference
    output, the target's batched scoring pass, the path statistics) is shared.

    :meth:`start` prepares one request (``y`` its reference output); :meth:`draft` proposes
    for the positions ``ts`` at once, :meth:`draft_one` for one context from scratch (the
    naive twin). Both return ``(tokens # [P, K] int64, draft_logits # [P, K, V'],
    proposed # [P] int64 or None)``: :meth:`recorded_logits` of ``draft_logits`` at
    temperature T give ``Ms(·|X^i)``;
    ``V' > V`` only for virtual filler tokens the target gives probability 0 (ids ≥ V);
    :meth:`draft` may return None for a one-hot draft (``Ms`` one-hot at the drafted token at
    any temperature: :func:`one_hot_logits`); ``proposed`` the real tokens per row (None: K).
    """

    def identity(self) -> dict:
        """meta.json's ``models.draft`` entry."""
        raise NotImplementedError

    def start(self, prompt_ids: list[int], y):
        raise NotImplementedError

    def draft(self, state, n_prompt: int, ts, uniforms, cfg: CaptureConfig) -> tuple:
        raise NotImplementedError

    def draft_one(self, ctx, uniforms, cfg: CaptureConfig) -> tuple:
        raise NotImplementedError

    def recorded_logits(self, x, draft_logits) -> tuple:
        """(the logits whose temperature-T softmax is the recorded ``Ms``, the logits of the
        draft-side signals or None for the same ones) of the drafted tokens ``x`` # [P, K]."""
        return draft_logits, None


class ModelDrafter(Drafter):
    """A draft causal LM ``Ms``: sampled at temperature T with the position's uniforms, or,
    with ``greedy``, its argmax at every step (no uniforms used) recorded as a one-hot draft."""

    def __init__(self, model, path: str | None = None, greedy: bool = False) -> None:
        self.model, self.path, self.greedy = model, path, greedy

    def _pick(self, logits, uniforms, temperature: float):
        """The drafted token of each row: the argmax (greedy) or an inverse-CDF sample."""
        if self.greedy:
            return logits.argmax(-1)
        return sample_inverse_cdf(probs_at(logits, temperature), uniforms)

    def recorded_logits(self, x, draft_logits) -> tuple:
        """Greedy: ``Ms`` one-hot at the argmax; signals from the model's real logits."""
        if not self.greedy:
            return draft_logits, None
        return one_hot_logits(x, draft_logits.shape[-1]), draft_logits

    def identity(self) -> dict:
        return model_identity(self.model, self.path or "draft")

    def start(self, prompt_ids: list[int], y):
        """The prefix pass over ``c + y``: (its cache, rows ``Ms(·|c, y_<t)`` # [n, V])."""
        import torch

        full = torch.cat([torch.tensor(prompt_ids, device=y.device), y[:-1]])[None]
        out = self.model(input_ids=full, **cache_kwargs(self.model, full_cache()), use_cache=True,
                         **last_logits(self.model, len(y)))  # rows n_prompt − 1 .. on
        return returned_cache(out), out.logits[0, -len(y):]

    def draft(self, state, n_prompt: int, ts, uniforms, cfg: CaptureConfig) -> tuple:
        """K tokens per position as one batched decode over the shared prefix cache."""
        import torch

        cache0, rows = state
        layout = Layout(n_prompt, ts, cfg.depth)
        p, k = len(ts), cfg.depth
        u = uniforms.to(rows.device)
        logits = [rows[ts]]
        tokens = [self._pick(logits[0], u[:, 0], cfg.temperature)]
        if k > 1:
            cache = shared_cache(cache0, layout.prefix, p)
            for j in range(1, k):
                mask = layout.mask(j)
                out = self.model(input_ids=tokens[-1].view(p, 1),
                                 **cache_kwargs(self.model, cache), use_cache=True,
                                 attention_mask=layout.masks(self.model, mask, 1),
                                 position_ids=(layout.ctx + j - 1).view(p, 1))
                cache = returned_cache(out)
                logits.append(out.logits[:, -1])
                tokens.append(self._pick(logits[-1], u[:, j], cfg.temperature))
        return torch.stack(tokens, dim=1), torch.stack(logits, dim=1), None

    def draft_one(self, ctx, uniforms, cfg: CaptureConfig) -> tuple:
        """The draft on ``ctx`` # [1, L] from scratch, then K − 1 cached steps (own cache)."""
        import torch

        out = self.model(input_ids=ctx, use_cache=True)
        rows, toks = [out.logits[0, -1]], []
        for j in range(cfg.depth):
            toks.append(self._pick(rows[-1], uniforms[j], cfg.temperature))
            if j == cfg.depth - 1:
                break
            out = self.model(input_ids=toks[-1].view(1, 1),
                             **cache_kwargs(self.model, returned_cache(out)), use_cache=True)
            rows.append(out.logits[0, -1])
        return torch.stack(toks)[None], torch.stack(rows)[None], None


def as_drafter(draft) -> Drafter:
    """``draft`` itself when it is a :class:`Drafter`, else a draft model wrapped in one."""
    return draft if isinstance(draft, Drafter) else ModelDrafter(draft)


class Layout:
    """Slots and positions of P paths of K tokens on a shared prefix cache.

    ctx: # [P] context lengths |c| + t;  keep: # [P, prefix] the row's own prefix slots;
    new_pos: # [P, K] real positions of the drafted tokens;  slot_pos: # [P, prefix + K]
    """

    def __init__(self, n_prompt: int, ts, k: int) -> None:
        import torch

        device = ts.device
        p = len(ts)
        self.p, self.ctx = p, n_prompt + ts
        self.prefix = int(self.ctx.max())
        self.keep = torch.arange(self.prefix, device=device)[None, :] < self.ctx[:, None]
        self.new_pos = self.ctx[:, None] + torch.arange(k, device=device)[None, :]
        self.slot_pos = torch.cat([torch.arange(self.prefix, device=device).expand(p, -1),
                                   self.new_pos], dim=1)

    def mask(self, new: int):
        """# [P, prefix + new] bool: the row's prefix and its ``new`` drafted slots."""
        import torch

        ones = torch.ones(self.p, new, dtype=torch.bool, device=self.keep.device)
        return torch.cat([self.keep, ones], dim=1)

    def masks(self, model, mask, queries: int):
        """The 2D ``mask`` (slots), or real-position masks for a sliding-window model."""
        window = sliding_window(model)
        if window is None:
            return mask.long()
        n = mask.shape[1]
        return window_masks(model, self.slot_pos[:, n - queries:n], self.slot_pos[:, :n], mask,
                            window)


def one_hot_logits(x, width: int):
    """Logits 0 at the drafted token and −inf elsewhere: ``Ms`` one-hot at any temperature.

    x: # [P, K] int64 token ids < width;  returns # [P, K, width] float32
    """
    import torch

    logits = torch.full((*x.shape, width), -torch.inf, device=x.device)
    return logits.scatter_(-1, x.unsqueeze(-1), 0.0)


def widen(logits, width: int):
    """``logits`` # [..., V] with ``width − V`` columns of −inf appended (probability 0)."""
    import torch

    extra = width - logits.shape[-1]
    if extra <= 0:
        return logits
    pad = torch.full((*logits.shape[:-1], extra), -torch.inf, dtype=logits.dtype,
                     device=logits.device)
    return torch.cat([logits, pad], dim=-1)
