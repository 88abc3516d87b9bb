"""The KV cache's groups and block pool the way vLLM V1 lays them out for models whose layers
differ (sliding-window next to full attention): which layers share a block table, how many
bytes one pool block takes, and how many blocks the memory next to the weights holds.

Read from vLLM's source (vllm-project/vllm):

- ``vllm/v1/kv_cache_interface.py``: every attention layer has a spec; a full layer
  ``FullAttentionSpec``, a sliding one ``SlidingWindowSpec(sliding_window=W)``, both with
  ``page_size_bytes`` = 2 · block_size · num_kv_heads · head_size · dtype bytes (K and V of
  ``block_size`` tokens of one layer).
- ``vllm/v1/core/kv_cache_utils.py``, ``get_kv_cache_groups``:

  1. ``--disable-hybrid-kv-cache-manager`` (``unify_hybrid_kv_cache_specs``): when full and
     sliding layers are both present, every sliding spec becomes a full one (blocks for every
     token; the compute still slides). A model whose layers are all alike is left as it is:
     its specs are already uniform (so Mistral-7B-v0.1, every layer sliding, keeps its
     sliding group either way).
  2. Every layer's spec equal (``is_kv_cache_spec_uniform``), or one attention type with
     different page sizes (``UniformTypeKVCacheSpecs``: all full, or all sliding with one W):
     one group of all layers; ``get_kv_cache_config_from_groups`` then gives
     num_blocks = available // Σ_layers page_size, a pool block holding every layer.
  3. Otherwise (``_get_kv_cache_groups_uniform_page_size``, after
     ``unify_kv_cache_spec_page_size`` multiplies the block size of smaller pages up to the
     largest page, refusing a page that does not divide it): the layers are split by spec
     into groups of ``group_size`` layers, group_size = the fewest layers of one spec, or the
     most when most < 1.5 · fewest; a spec with n layers makes ⌈n / group_size⌉ groups (the
     last padded). ``get_num_blocks``: num_blocks = available // page_size // group_size; all
     groups draw their blocks from that one pool (a pool block is one page of group_size
     layers).

So Gemma-3 (L_s = 5 L_f, every layer alike but for the window) has group_size L_f: one full
group and five sliding groups; gpt-oss-20b (12 + 12) has two groups of 12 layers.

The draft model's layers (a separate draft model or an EAGLE head) are part of the same spec
set in vLLM; here they join as full-attention layers of their own page size (a windowed
draft's layers as sliding ones). A multi-head-latent-attention model next to a windowed one
is refused (vLLM's ``MLAAttentionSpec`` never shares a page size with the others there).

What the pool charges a request (vllm/v1/core/single_type_kv_cache_manager.py) is in
simulator.engine.kv (:class:`~specbatch.simulator.engine.kv.GroupTables`); this module is the
layout and its memory: :func:`kv_layout`, :meth:`KVLayout.num_blocks`.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

from specbatch.errors import SpecbatchError
from specbatch.traces.models.model_shape import ModelShape


@dataclass(frozen=True)
class KVGroup:
    """One KV cache group: ``window`` W of its sliding layers (0: full attention), its
    ``block_size`` in tokens (the configured one times the page ratio of step 3), and how many
    real ``layers`` it holds (the rest of group_size is padding)."""

    window: int
    block_size: int
    layers: int


@dataclass(frozen=True)
class KVLayout:
    """The groups of one model pair and the bytes one pool block takes (``block_bytes``, over
    all tp GPUs together, as the weights are counted). ``hybrid``: some group slides, so a
    request's blocks are charged per group (simulator.engine.kv); False: one full-attention
    group, today's per-token accounting."""

    groups: tuple[KVGroup, ...]
    block_bytes: int
    group_size: int

    @property
    def hybrid(self) -> bool:
        return any(g.window for g in self.groups)

    def num_blocks(self, free_bytes: float) -> int:
        """Pool blocks in ``free_bytes`` (``get_num_blocks``: available // page // group_size,
        one page of group_size layers per block), 0 when nothing is free."""
        return max(0, int(free_bytes // self.block_bytes))

    def vllm_tokens(self, num_blocks: int, block_size: int) -> int:
        """What vLLM logs as "GPU KV cache size: N tokens" (``_report_kv_cache_config``):
        num_blocks // len(groups) · the smallest group block size."""
        return num_blocks // len(self.groups) * min(g.block_size for g in self.groups)


def layer_specs(shape: ModelShape, kv_b: int) -> Counter:
    """(kind, kv_heads, head_dim or width, W) -> layers of ``shape`` (kind "mla" for a latent
    cache, "attn" otherwise; W = 0 on full layers)."""
    if shape.is_mla:
        return Counter({("mla", 1, shape.cache_width, 0): shape.layers})
    specs: Counter = Counter()
    full = shape.layers - shape.sliding_layers
    if full:
        specs[("attn", shape.kv_heads, shape.head_dim, 0)] += full
    if shape.sliding_layers:
        specs[("attn", shape.kv_heads, shape.head_dim, int(shape.sliding_window))] += \
            shape.sliding_layers
    return specs


def page_bytes(spec: tuple, kv_b: int, block_size: int) -> int:
    """``page_size_bytes`` of one layer of ``spec`` at ``block_size`` tokens."""
    kind, heads, width, _ = spec
    return (1 if kind == "mla" else 2) * heads * width * kv_b * block_size


def kv_layout(target: ModelShape, draft: ModelShape | None, kv_b: int, block_size: int = 16,
              disable_hybrid_kv_cache_manager: bool = False) -> KVLayout:
    """vLLM V1's KV cache groups of ``target`` and ``draft`` (None: a drafter without KV) at
    ``kv_b`` bytes per element and ``block_size`` tokens per block (module docstring)."""
    specs = layer_specs(target, kv_b)
    if draft is not None:
        specs.update(layer_specs(draft, kv_b))
    kinds = {s[3] > 0 for s in specs}
    if disable_hybrid_kv_cache_manager and kinds == {True, False}:
        merged: Counter = Counter()
        for (kind, heads, width, _), n in specs.items():
            merged[(kind, heads, width, 0)] += n
        specs = merged
    windows = {s[3] for s in specs}
    if len(windows) == 1:  # one attention type: one group of every layer (steps 1-2)
        block = sum(n * page_bytes(s, kv_b, block_size) for s, n in specs.items())
        total = sum(specs.values())
        return KVLayout((KVGroup(windows.pop(), block_size, total),), block, total)
    if any(s[0] == "mla" for s in specs):
        raise SpecbatchError(f"model {target.name}: expected no multi-head latent attention "
                             "next to sliding-window layers (vLLM groups them by one page size)")
    return uniform_page_layout(specs, kv_b, block_size)


def pages_unify(target: ModelShape, draft: ModelShape | None) -> bool:
    """Whether vLLM's hybrid KV cache manager can hold ``target`` and ``draft`` together: one
    attention type, or every layer's page size dividing the largest
    (``unify_kv_cache_spec_page_size``; :func:`uniform_page_layout` refuses otherwise). Page
    sizes scale alike with the element bytes and block size, so neither matters."""
    specs = layer_specs(target, 2)
    if draft is not None:
        specs.update(layer_specs(draft, 2))
    if len({s[3] for s in specs}) == 1:
        return True
    pages = {page_bytes(s, 2, 16) for s in specs}
    return all(max(pages) % p == 0 for p in pages)


def uniform_page_layout(specs: Counter, kv_b: int, block_size: int) -> KVLayout:
    """Step 3 of the module docstring: pages unified to the largest, layers split into groups
    of group_size, the pool block one page of group_size layers."""
    pages = {s: page_bytes(s, kv_b, block_size) for s in specs}
    largest = max(pages.values())
    odd = [p for p in pages.values() if largest % p]
    if odd:
        raise SpecbatchError(f"config: field disable_hybrid_kv_cache_manager: expected true "
                             f"for layer page sizes {sorted(set(pages.values()))} bytes, one not "
                             "dividing the largest (vLLM's unify_kv_cache_spec_page_size "
                             "refuses the hybrid groups then), got False")
    counts = list(specs.values())
    group_size = min(counts)
    if max(counts) < 1.5 * min(counts):
        group_size = max(counts)
    groups = []
    for spec, n in specs.items():  # in the order the layers' specs first appear
        bs = block_size * (largest // pages[spec])
        for i in range(math.ceil(n / group_size)):
            groups.append(KVGroup(spec[3], bs, len(range(i, n, math.ceil(n / group_size)))))
    return KVLayout(tuple(groups), largest * group_size, group_size)
