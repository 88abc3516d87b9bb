"""One model's KV cache as fixed slots, one per running request (a continuous-batching cache).

Each layer holds ``keys``/``values`` # [slots, heads, length, head_dim], allocated once. The
running requests occupy rows 0..n-1; ``count`` # [slots] (host, int64) is the number of valid
tokens of each row, which is also the position id of its next token. A forward pass over the
running batch writes its new tokens in place at ``count_i .. count_i + w - 1`` of row i and
attends over the view ``rows 0..n-1, slots 0..max_i count_i + w - 1`` with a 4-D additive mask
``key j visible to query r of row i  ⇔  j ≤ count_i + r``, so every request sees exactly its
own sequence; the slots between a row's end and the view's end are masked and overwritten by
the row's next tokens. So:

- rejected draft tokens are not holes: committing a step sets ``count_i`` to the accepted
  length and the next pass overwrites the rejected slots (no masks of holes, no compaction);
- a finished request leaves by moving the last running row into its row (one row copy per
  leaving request, :meth:`SlotCache.remove`); nothing of it stays in the batch, so a pass costs
  what the running set costs: n rows over the running set's longest sequence;
- joiners are prefilled into free rows n..n+m-1 (:meth:`SlotCache.prefill`): prompts of equal
  length as one ``[m, p]`` batch, prompts of unequal length packed into one row ``[1, Σp]``
  with a block-diagonal causal mask and per-prompt position ids (no padding; attention over the
  packed block costs (Σp)², the price of a dense mask without a variable-length kernel);
- a mixed step (vllm-v1: decode tokens and whole prompts in one target pass,
  :meth:`SlotCache.mixed`) packs every row's new tokens into one row and attends over the
  rows' views laid end to end, each token masked to its own row (no padding of the short
  decode rows to the prompts' length).

The slot cache works for Hugging Face decoders whose attention calls
``cache.update(key, value, layer_idx)`` and takes a prepared 4-D mask (the Llama
family: SmolLM2, Llama, Vicuna shapes). This is a padded-batch dense engine, not paged
attention: a pass still reads the running rows up to the longest one.
"""

from __future__ import annotations

import time

import numpy as np

from specbatch.traces.capture.cache_api import cache_kwargs


def _cache_base():
    from transformers.cache_utils import Cache

    return Cache


def _slot_kv(owner):
    """A ``transformers`` Cache whose ``update`` is :meth:`SlotCache.update`."""
    base = _cache_base()

    class SlotKV(base):
        def __init__(self) -> None:
            super().__init__(layers=[])

        def update(self, key_states, value_states, layer_idx, *args, **kwargs):
            return owner.update(key_states, value_states, layer_idx)

        def get_seq_length(self, layer_idx: int = 0) -> int:
            return int(owner.count[:owner.n].max(initial=0))

    return SlotKV()


def model_kv_shape(model) -> tuple[int, int, int]:
    """(layers, KV heads, head_dim) of a Hugging Face decoder's config."""
    c = model.config
    heads = getattr(c, "num_key_value_heads", None) or c.num_attention_heads
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    return int(c.num_hidden_layers), int(heads), int(head_dim)


class SlotCache:
    """Slot KV cache of one model (module docstring).

    ``n``: running rows (0..n-1); ``count`` # [slots] int64 valid tokens per row (host);
    ``seconds``: wall time of the last model call alone (``clock`` synchronises on CUDA).
    """

    def __init__(self, model, slots: int, length: int, clock=None) -> None:
        import torch

        p = next(model.parameters())
        layers, heads, head_dim = model_kv_shape(model)
        shape = (int(slots), heads, int(length), head_dim)
        self.keys = [torch.zeros(shape, dtype=p.dtype, device=p.device) for _ in range(layers)]
        self.values = [torch.zeros(shape, dtype=p.dtype, device=p.device) for _ in range(layers)]
        self.device, self.dtype = p.device, p.dtype
        self.slots, self.length = int(slots), int(length)
        self.count = np.zeros(self.slots, dtype=np.int64)
        self.n = 0
        self.clock = clock or time.perf_counter
        self.seconds = 0.0
        self.kv = _slot_kv(self)
        self._plan = None  # (row index, position index, view length or None, flat) of the pass

    # ------------------------------------------------------------ the model's hook

    def update(self, key_states, value_states, layer_idx: int):
        """Write the pass's keys/values # [B, heads, w, head_dim] at the planned (row, slot)
        indices; return the keys/values the pass attends to (the running view, or the new
        states themselves for a prefill)."""
        rows, pos, view, flat = self._plan
        k, v = self.keys[layer_idx], self.values[layer_idx]
        k[rows, :, pos] = key_states.transpose(1, 2)  # [B, w, heads, head_dim]
        v[rows, :, pos] = value_states.transpose(1, 2)
        if view is None:
            return key_states, value_states
        if flat:  # the running rows laid end to end: [1, heads, n·view, head_dim]
            n, heads, dim = self.n, k.shape[1], k.shape[3]
            return tuple(buf[:n, :, :view].transpose(0, 1).reshape(1, heads, n * view, dim)
                         for buf in (k, v))
        return k[:self.n, :, :view], v[:self.n, :, :view]

    def _call(self, model, ids, pos_ids, mask, plan, keep):
        self._plan = plan
        extra = {} if keep is None else {"logits_to_keep": keep}
        start = self.clock()
        out = model(input_ids=ids, attention_mask=mask, position_ids=pos_ids,
                    **cache_kwargs(model, self.kv), use_cache=True, **extra)
        self.seconds = self.clock() - start
        self._plan = None
        return out.logits

    def _additive(self, allowed):
        """Additive float mask (0 where allowed, the dtype's minimum elsewhere)."""
        import torch

        zero = torch.zeros((), dtype=self.dtype, device=self.device)
        return torch.where(allowed, zero, torch.finfo(self.dtype).min)

    # ------------------------------------------------------------ passes

    def forward(self, model, ids, keep=None):
        """One pass over the running rows: ``ids`` # [n, w] new tokens, written at
        ``count_i + r``; the caller then sets ``count`` (how many were real and kept).
        Returns logits # [n, w, V] (or the last ``keep``)."""
        import torch

        n, w = ids.shape
        base = torch.from_numpy(self.count[:n]).to(self.device)
        pos = base[:, None] + torch.arange(w, device=self.device)[None, :]  # [n, w]
        view = int(self.count[:n].max()) + w
        allowed = torch.arange(view, device=self.device)[None, None, :] <= pos[:, :, None]
        rows = torch.arange(n, device=self.device)[:, None]
        return self._call(model, ids, pos, self._additive(allowed)[:, None],
                          (rows, pos, view, False), keep)

    def prefill(self, model, prompts: list[list[int]]):
        """Fill rows n..n+m-1 with ``prompts`` (m joiners; module docstring) and make them
        running. Returns the logits of each prompt's last token # [m, V]."""
        import torch

        m, dev = len(prompts), self.device
        lens = np.array([len(p) for p in prompts], dtype=np.int64)
        rows = torch.arange(self.n, self.n + m, device=dev)
        if (lens == lens[0]).all():  # one [m, p] batch
            p = int(lens[0])
            ids = torch.tensor(prompts, dtype=torch.long, device=dev)
            pos = torch.arange(p, device=dev)[None, :].expand(m, p)
            allowed = torch.ones((p, p), dtype=torch.bool, device=dev).tril()
            mask = self._additive(allowed)[None, None].expand(m, 1, p, p)
            self.n += m
            logits = self._call(model, ids, pos, mask, (rows[:, None], pos, None, False),
                                1)[:, -1]
        else:  # packed into one row, block-diagonal causal
            ids = torch.tensor([t for q in prompts for t in q], dtype=torch.long, device=dev)
            seg = torch.from_numpy(np.repeat(np.arange(m), lens)).to(dev)  # [Σp]
            pos = torch.from_numpy(np.concatenate([np.arange(x) for x in lens])).to(dev)
            allowed = (seg[:, None] == seg[None, :]) & (pos[None, :] <= pos[:, None])
            last = torch.from_numpy(np.cumsum(lens) - 1).to(dev)
            self.n += m
            logits = self._call(model, ids[None], pos[None], self._additive(allowed)[None, None],
                                (rows[seg][None], pos[None], None, False), last)[0]
        self.count[self.n - m:self.n] = lens
        return logits

    def mixed(self, model, ids, width: np.ndarray, prompts: list[list[int]]):
        """One pass over the n running rows' new tokens and m joiners' whole prompts, packed
        into one row ``[1, T]`` (T = Σ width + Σ p, vLLM's flattened batch): row i's
        ``ids[i, :width_i]`` at positions ``count_i ..``, joiner j's prompt in new row n + j at
        0..p_j − 1. Keys are the n + m rows' views laid end to end; each token sees only its
        own row's tokens up to itself. Makes the joiners running.

        ids: # [n, G] (G ≥ max width);  width: # [n] ≥ 1
        returns logits # [n, G, V] of each running row's tokens (a row's positions past its
        width repeat its last) and # [m, V] of each prompt's last token
        """
        import torch

        n, m, dev = self.n, len(prompts), self.device
        g = ids.shape[1]
        lens = np.array([len(p) for p in prompts], dtype=np.int64)
        seg_w = np.concatenate([np.asarray(width, dtype=np.int64), lens])  # [n + m]
        base = np.concatenate([self.count[:n], np.zeros(m, dtype=np.int64)])
        seg = np.repeat(np.arange(n + m), seg_w)  # [T] row of each token
        first = np.cumsum(seg_w) - seg_w
        pos = base[seg] + np.arange(seg.shape[0]) - first[seg]  # [T]
        view = int((base + seg_w).max())
        real = torch.arange(g, device=dev)[None, :] < torch.from_numpy(seg_w[:n]).to(dev)[:, None]
        flat_ids = torch.cat([ids[real], torch.tensor([t for p in prompts for t in p],
                                                      dtype=torch.long, device=dev)])
        seg_t, pos_t = torch.from_numpy(seg).to(dev), torch.from_numpy(pos).to(dev)
        key_seg = torch.arange(n + m, device=dev).repeat_interleave(view)
        key_slot = torch.arange(view, device=dev).repeat(n + m)
        allowed = (seg_t[:, None] == key_seg[None, :]) & (key_slot[None, :] <= pos_t[:, None])
        keep = np.concatenate([(first[:n, None] + np.minimum(np.arange(g)[None, :],
                                                             seg_w[:n, None] - 1)).ravel(),
                               first[n:] + lens - 1])
        self.n += m
        logits = self._call(model, flat_ids[None], pos_t[None],
                            self._additive(allowed)[None, None],
                            (seg_t[None], pos_t[None], view, True),
                            torch.from_numpy(keep).to(dev))[0]
        self.count[n:n + m] = lens
        return logits[:n * g].reshape(n, g, -1), logits[n * g:]

    # ------------------------------------------------------------ leaving

    def remove(self, leave: np.ndarray) -> np.ndarray:
        """Rows ``leave`` # [l] (indices < n) leave; the last running rows move into their
        rows. Returns ``order`` # [n - l]: new row r holds what old row ``order[r]`` held."""
        import torch

        n = self.n
        gone = np.zeros(n, dtype=bool)
        gone[leave] = True
        order = np.arange(n)
        keep = n - int(gone.sum())
        holes = np.flatnonzero(gone[:keep])  # rows to refill, in the kept range
        movers = np.flatnonzero(~gone[keep:]) + keep  # survivors beyond it
        if holes.size:
            dst = torch.from_numpy(holes).to(self.device)
            src = torch.from_numpy(movers).to(self.device)
            width = int(self.count[movers].max())
            for buf in (*self.keys, *self.values):
                buf[dst, :, :width] = buf[src, :, :width]
            self.count[holes] = self.count[movers]
            order[holes] = movers
        self.n = keep
        return order[:keep]

    def fill_random(self, n: int, kv: int, seed: int = 0) -> None:
        """n running rows holding ``kv`` random cached tokens each (latency profiles)."""
        import torch

        gen = torch.Generator(device="cpu").manual_seed(seed)
        for buf in (*self.keys, *self.values):
            buf[:n, :, :kv] = torch.randn(buf[:n, :, :kv].shape, generator=gen).to(buf)
        self.n = int(n)
        self.count[:n] = kv
