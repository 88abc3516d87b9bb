"""One model's batched KV cache with a validity mask, so requests that accept different
numbers of draft tokens share one tensor.

Rejected draft tokens are not cropped (rows accept different lengths) but masked out as
*holes*; prompt padding is a hole too. New tokens get explicit position ids (the count of
valid tokens before them), so the attention each request sees is exactly its own sequence.
When holes exceed a fraction of the cache, :meth:`SlotCache.compact` gathers the valid slots
(left padding, no holes) in one pass. The bookkeeping is part of the live run's measured
overhead.
"""

from __future__ import annotations

import time


class SlotCache:
    """One model's batched KV cache with a validity mask (holes = rejected tokens, padding).

    ``mask`` # [n, L] bool: slot holds a token of the request's sequence; ``count`` # [n]: valid
    tokens (= the position id of the next token). Every forward appends its slots.
    """

    def __init__(self, clock=None) -> None:
        self.cache = None
        self.mask = None
        self.count = None
        self.clock = clock or time.perf_counter  # synchronising clock (CUDA)
        self.seconds = 0.0  # wall time of the last model call alone

    @property
    def length(self) -> int:
        return 0 if self.mask is None else int(self.mask.shape[1])

    def forward(self, model, ids, valid, keep=None):
        """Run ``model`` on ``ids`` # [n, w] whose slots ``valid`` # [n, w] bool are real tokens
        (the others are padding/holes). Returns logits # [n, w, V], or only the slots ``keep``
        (HF ``logits_to_keep``: an int = the last ``keep`` slots, or a 1-D index tensor)."""
        import torch

        mask = valid if self.mask is None else torch.cat([self.mask, valid], dim=1)
        count = torch.zeros(ids.shape[0], dtype=torch.long, device=ids.device) \
            if self.count is None else self.count
        pos = (count[:, None] + torch.cumsum(valid.long(), dim=1) - 1).clamp_(min=0)
        extra = {} if keep is None else {"logits_to_keep": keep}
        mask_long = mask.long()
        start = self.clock()
        out = model(input_ids=ids, attention_mask=mask_long, position_ids=pos,
                    past_key_values=self.cache, use_cache=True, **extra)
        self.seconds = self.clock() - start
        self.cache, self.mask = out.past_key_values, mask
        self.count = count + valid.long().sum(dim=1)
        return out.logits

    def keep_slots(self, start: int, keep) -> None:
        """Slots ``start .. start + w`` stay valid only where ``keep`` # [n, w] bool."""
        self.mask[:, start:start + keep.shape[1]] &= keep
        self.count = self.mask.long().sum(dim=1)

    def _rebuild(self, layers) -> None:
        from transformers import DynamicCache

        self.cache = DynamicCache(layers)

    def select(self, rows) -> None:
        """Keep batch rows ``rows`` # [n'] long (finished requests leave)."""
        self._rebuild([(layer.keys[rows], layer.values[rows]) for layer in self.cache.layers])
        self.mask, self.count = self.mask[rows], self.count[rows]

    def holes(self) -> float:
        """Fraction of the cache length that is padding or holes for the fullest row."""
        if self.mask is None or self.length == 0:
            return 0.0
        return 1.0 - float(self.count.max()) / self.length

    def compact(self) -> None:
        """Gather the valid slots of every row to the right (left padding, no holes)."""
        import torch

        n, length = self.mask.shape
        keep = int(self.count.max())
        key = torch.where(self.mask, torch.arange(length, device=self.mask.device), -1)
        order = key.sort(dim=1).values[:, length - keep:]  # [n, keep], -1 = padding
        self.mask = order >= 0
        idx = order.clamp(min=0)
        layers = []
        for layer in self.cache.layers:
            k, v = layer.keys, layer.values  # [n, heads, L, head_dim]
            g = idx[:, None, :, None].expand(-1, k.shape[1], -1, k.shape[3])
            layers.append((k.gather(2, g), v.gather(2, g)))
        self._rebuild(layers)
