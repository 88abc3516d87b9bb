"""KV-cache accounting: the capacity a run uses and the paged mode's blocks (vLLM V1 style).

Two modes (``SimConfig.kv_mode``):

- ``reserve``: a request reserves its whole footprint prompt + output + K + 1 tokens at
  admission and frees it at finish (never preempted); ``kv_capacity`` None = unlimited.
- ``paged``: each replica's KV cache is a pool of ``capacity // block_size`` blocks of
  ``block_size`` tokens. A request holds ⌈tokens / block_size⌉ blocks and grows as its KV
  does; when the pool runs out, the newest running request is preempted by recomputation.
  ``kv_capacity`` None = what the cost model's memory leaves next to the weights,
  (tp·M·u − W_target − W_draft) / KV bytes per token with u = ``gpu_memory_utilization``,
  the weights in the target's ``quantization`` and the KV at ``kv_cache_dtype``'s bytes
  (simulator.cost.analytic.precision: an fp8 cache holds twice the tokens of a bf16 one)
  (the cost model's ``kv_capacity_tokens(u)``, simulator.cost.analytic.memory); a cost model without
  memory information (the profiled one measures times only) needs an explicit capacity.

Paged mode, step by step (vLLM V1's scheduler; the engine calls these verbs):

1. :meth:`BlockManager.grow`: before a step, every decoding request at output position t
   (KV c = prompt + t, engine convention) is grown to hold its KV plus the step's lookahead
   slots, the pending token and K drafted tokens (K = the policy's depth):
   ⌈(c + K + 1) / block_size⌉ blocks. Blocks are never shrunk while a request runs
   (rejected draft slots are reused by the next step, as vLLM does). If the pool cannot
   supply the growth, the **newest** running request (last admitted; prefilling ones
   included) is preempted, repeatedly, until it can: all its blocks are freed and it goes
   back to the front of the waiting queue (the older of two preempted requests in front).
   Its emitted tokens stay emitted (position t kept).
2. Admission (FCFS, only in a step that preempted nobody, as vLLM V1): a waiting request
   joins while ``max_num_seqs`` allows and the free pool holds the blocks of its prefill and
   its first token, ⌈(fill + 1) / block_size⌉, where fill = prompt for a fresh request and
   prompt + t for a preempted one (:meth:`BlockManager.admission_blocks`). Without chunked
   prefill those blocks are allocated at admission; with it they are only checked, and
   each prompt chunk allocates ⌈(prefilled + chunk) / block_size⌉ when it is scheduled
   (:meth:`BlockManager.allocate_chunks`, FCFS; a chunk shrinks to what the free pool holds).
3. Recomputation: a re-admitted request prefills prompt + t tokens (priced as a prefill of
   that length; counted in ``recomputed_tokens`` at the preemption), emits no token for it,
   and continues decoding from t with the same trace rows, so under a fixed policy the
   common random numbers give it the same τ sequence as without preemption.
4. At finish a request's blocks return to the pool.

Sliding-window models (``ModelShape.sliding_layers``) under vllm-v1 use vLLM V1's hybrid KV cache
manager unless ``disable_hybrid_kv_cache_manager``: the pool is num_blocks blocks shared by
the model's KV cache groups (simulator.cost.analytic.kv_groups: :func:`hybrid_layout`, the capacity
num_blocks · block_size tokens), and a request is charged in every group what vLLM charges it
(simulator.engine.group_tables; :class:`BlockManager` keeps the tables, the vllm-v1
composer's reference walk, simulator.engine.v1.reference, charges them). A layout of one
full-attention group (no window, or the knob set) is the accounting above, unchanged.
Not modelled there: prefix caching (the run caches nothing, a note says so) and the
vllm-v0 scheduler (refused: vLLM V0 had no hybrid manager).

A lone request must fit the pool: ⌈(prompt + output + K + 1) / block_size⌉ ≤ pool blocks
(checked by :func:`check_fits`), which also guarantees progress: the oldest running request
is never preempted while another runs, and alone it always fits.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from specbatch.errors import SpecbatchError
from specbatch.simulator.cost.analytic.kv_groups import KVLayout, kv_layout, pages_unify
from specbatch.simulator.cost.analytic.memory import check_weights_fit
from specbatch.simulator.cost.gpus.hardware import get_hardware
from specbatch.simulator.engine.group_tables import GroupTables, lone_peak_blocks
from specbatch.simulator.engine.request_state import Replica, Row

if TYPE_CHECKING:
    from specbatch.simulator.config.sim_config import SimConfig
    from specbatch.simulator.cost.interface import CostModel

_PREFILLED, _FILL, _BLOCKS, _PROMPT, _POS = (int(Row.PREFILLED), int(Row.FILL), int(Row.BLOCKS),
                                             int(Row.PROMPT), int(Row.POS))


def kv_capacity(config: SimConfig, cost: CostModel) -> int | None:
    """KV-cache tokens per replica the run uses (None = unlimited, reserve mode only).

    Every mode first checks that the models' weights fit the devices at all
    (:func:`~specbatch.simulator.cost.analytic.memory.check_weights_fit`)."""
    check_weights_fit(config.hardware, config.target, config.draft, config.tp,
                      config.gpu_memory_utilization, config.draft_weight_bits,
                      config.quantization)
    if config.kv_mode == "reserve" or config.kv_capacity is not None:
        return config.kv_capacity
    memory = getattr(cost, "kv_capacity_tokens", None)
    if memory is None:
        raise SpecbatchError(
            f"config: field kv_capacity: expected a KV capacity in tokens for kv_mode paged "
            f"(cost model {type(cost).__name__} has no memory information), got None")
    if windowed_shapes(config):  # the hybrid manager's pool unless disabled (module docstring)
        hybrid_layout(config)  # refuses the vllm-v0 scheduler
        tokens = int(memory(float(config.gpu_memory_utilization), int(config.block_size),
                            bool(config.disable_hybrid_kv_cache_manager)))
    else:
        tokens = int(memory(float(config.gpu_memory_utilization)))
    if tokens < config.block_size:
        raise SpecbatchError(
            f"config: field gpu_memory_utilization: expected room for KV blocks next to the "
            f"weights of {config.target} and {config.draft} on {config.tp} x {config.hardware} "
            f"(set tp or kv_capacity), got {config.gpu_memory_utilization!r} "
            f"({tokens} tokens free)")
    return tokens


def windowed_shapes(config: SimConfig) -> tuple:
    """(target, draft) shapes of a run where one has sliding-window layers (the draft None
    for a host-side drafter), else ()."""
    from specbatch.simulator.cost.features.draft_head import config_head
    from specbatch.simulator.defaults import FREE_DRAFTS
    from specbatch.traces.models.shapes import find_shape

    target = find_shape(str(config.target))
    head = config_head(config) if target is not None else None  # an EAGLE / MTP head's layer
    draft = (None if str(config.draft).lower() in FREE_DRAFTS
             else head.layer if head is not None else find_shape(str(config.draft)))
    if target is None or not (target.is_windowed or (draft is not None and draft.is_windowed)):
        return ()
    return target, draft


def hybrid_refused(config: SimConfig) -> bool:
    """Whether ``config``'s models have sliding-window layers whose pages vLLM's hybrid KV
    cache manager cannot unify (simulator.cost.analytic.kv_groups.pages_unify): such a run needs
    ``disable_hybrid_kv_cache_manager``, which ``cost show`` and ``plan`` then set."""
    shapes = windowed_shapes(config)
    return bool(shapes) and not pages_unify(*shapes)


def hybrid_layout(config: SimConfig) -> KVLayout | None:
    """The KV cache groups of a paged run under vLLM V1's hybrid KV cache manager
    (simulator.cost.analytic.kv_groups.kv_layout), or None when a request's blocks are one count:
    reserve mode, ``disable_hybrid_kv_cache_manager``, no known shape, or no group that slides.
    One-line error for the vllm-v0 scheduler (vLLM V0 had no hybrid manager: set the knob)."""
    from specbatch.simulator.cost.analytic.precision import kv_element_bytes

    shapes = windowed_shapes(config) if config.kv_mode == "paged" else ()
    if not shapes:
        return None
    target, draft = shapes
    kv_b = kv_element_bytes(config.kv_cache_dtype, get_hardware(config.hardware))
    layout = kv_layout(target, draft, kv_b, int(config.block_size),
                       bool(config.disable_hybrid_kv_cache_manager))
    if not layout.hybrid:
        return None
    if not config.scheduler_row.hybrid_kv:
        raise SpecbatchError(
            f"config: field disable_hybrid_kv_cache_manager: expected true under scheduler "
            f"{config.scheduler} (vLLM V0 had no hybrid KV cache manager; {target.name} has "
            f"sliding-window layers), got False")
    return layout


def hybrid_notes(config: SimConfig) -> tuple[str, ...]:
    """A run note when prefix caching is asked next to the hybrid manager's groups."""
    if config.enable_prefix_caching and hybrid_layout(config) is not None:
        return ("enable_prefix_caching: not modelled with the hybrid KV cache manager's "
                "sliding-window groups; this run caches no blocks (a readmitted request "
                "recomputes all)",)
    return ()


def check_hybrid_fits(config: SimConfig, capacity: int | None, layout: KVLayout,
                      slots: int, step_slots: int) -> None:
    """One-line error when the largest request (``slots`` KV slots at its last step, at most
    ``step_slots`` added by one step) cannot run alone in the hybrid pool
    (simulator.engine.group_tables.lone_peak_blocks)."""
    if capacity is None:
        return
    bs = int(config.block_size)
    need, pool = lone_peak_blocks(layout, slots, step_slots), capacity // bs
    if need > pool:
        raise SpecbatchError(
            f"config: field kv_capacity: expected a block pool holding the largest request "
            f"alone ({slots} slots = {need} blocks over {len(layout.groups)} KV cache groups), "
            f"got {capacity} tokens = {pool} blocks of {bs}")


def lone_request_blocks(config: SimConfig, slots: int, depth: int) -> int:
    """Blocks the largest request (``slots`` KV slots, drafts of ``depth``) needs alone:
    ⌈slots / block_size⌉, or its peak over the hybrid manager's groups
    (:func:`check_hybrid_fits`)."""
    layout = hybrid_layout(config)
    if layout is None:
        return -(-int(slots) // int(config.block_size))
    budget = config.token_budget
    return lone_peak_blocks(layout, int(slots),
                            max(int(budget) if budget else int(slots), depth + 1) + depth)


def check_fits(config: SimConfig, capacity: int | None, max_footprint: int) -> None:
    """Paged mode: one-line error when the largest request (prompt + output + K + 1 =
    ``max_footprint`` tokens) cannot run alone in one replica's block pool (reserve mode's
    token check is config.validate_against_trace)."""
    if capacity is None or config.kv_mode != "paged":
        return
    bs = int(config.block_size)
    need, pool = -(-max_footprint // bs), capacity // bs
    if need > pool:
        raise SpecbatchError(
            f"config: field kv_capacity: expected a block pool holding the largest request "
            f"alone (prompt + output + K + 1 = {max_footprint} tokens = {need} blocks of "
            f"{bs}), got {capacity} tokens = {pool} blocks")


def cap_to_model_len(config: SimConfig, prompt_len: np.ndarray, output_len: np.ndarray
                     ) -> tuple[np.ndarray, tuple[str, ...]]:
    """``max_model_len``: refuse prompts with no room for one output token (one-line error
    naming how many), cap outputs at max_model_len − prompt. Returns the output lengths
    # [N] and a note when some were capped.  prompt_len, output_len # [N]"""
    limit = config.max_model_len
    if limit is None:
        return output_len, ()
    long = int(np.count_nonzero(prompt_len >= limit))
    if long:
        raise SpecbatchError(
            f"config: field max_model_len: expected room for every prompt and one output "
            f"token, got {limit} ({long} of {prompt_len.shape[0]} requests have a prompt of "
            f">= {limit} tokens, the longest {int(prompt_len.max())})")
    capped = np.minimum(output_len, limit - prompt_len)
    n = int(np.count_nonzero(capped < output_len))
    notes = ((f"max_model_len = {limit}: {n} of {output_len.shape[0]} requests' outputs capped "
              f"at max_model_len - prompt",) if n else ())
    return capped, notes


def preempted_columns(tail: np.ndarray) -> np.ndarray:
    """The state columns of preempted requests ``tail`` # [len(Row), p] (in running order)
    as they wait for recomputation: a copy, newest first, holding no blocks, nothing
    prefilled, FILL = prompt + t (what their re-admission prefills)."""
    gone = tail[:, ::-1].copy()
    gone[_PREFILLED] = 0
    gone[_BLOCKS] = 0
    gone[_FILL] = gone[_PROMPT] + gone[_POS]
    return gone


class BlockManager:
    """Paged-mode block accounting of every replica (module docstring, steps 1-4).

    Works on a replica's state matrix (simulator.engine.request_state.Row: PREFILLED, FILL,
    BLOCKS, PROMPT, POS) and its ``free_blocks``; ``reference`` swaps :meth:`growth` for a
    per-request loop twin (parity tests).
    """

    def __init__(self, capacity: int, block_size: int, depth: int, reference: bool = False,
                 layout: KVLayout | None = None):
        self.block_size = int(block_size)
        self.pool = int(capacity) // self.block_size
        self.lookahead = int(depth) + 1  # the pending token and K drafted tokens
        self.reference = reference
        # the hybrid manager's per-group tables (module docstring), None: one count each
        self.tables = GroupTables(layout) if layout is not None else None

    def admission_blocks(self, fill: int) -> int:
        """Blocks of a prefill of ``fill`` tokens and its first token."""
        return -(-(fill + 1) // self.block_size)

    def growth(self, state: np.ndarray, all_decoding: bool = False) -> np.ndarray:
        """Blocks each running request must add before a decode step: decoding requests to
        ⌈(prompt + t + K + 1) / block_size⌉, prefilling ones none (``all_decoding``: the
        caller knows none is prefilling).  state # [len(Row), n] -> # [n]"""
        if self.reference:
            return self.growth_reference(state)
        target = (state[_PROMPT] + state[_POS] + (self.lookahead + self.block_size - 1)
                  ) // self.block_size
        if not all_decoding:
            target *= state[_PREFILLED] >= state[_FILL]
        target -= state[_BLOCKS]
        return np.maximum(target, 0, out=target)

    def growth_reference(self, state: np.ndarray) -> np.ndarray:
        """:meth:`growth`, one request at a time."""
        out = np.zeros(state.shape[1], dtype=np.int64)
        for i in range(state.shape[1]):
            if state[_PREFILLED, i] >= state[_FILL, i]:
                tokens = int(state[_PROMPT, i]) + int(state[_POS, i]) + self.lookahead
                out[i] = max(-(-tokens // self.block_size) - int(state[_BLOCKS, i]), 0)
        return out

    def grow(self, rep: Replica) -> np.ndarray | None:
        """Grow the decoding requests of replica ``rep`` for the next step, preempting the
        newest running requests until the pool suffices. Returns None when nobody was
        preempted, else the preempted requests' state columns # [len(Row), p], newest first,
        with PREFILLED = BLOCKS = 0 and FILL = prompt + t (what their re-admission
        prefills)."""
        state = rep.state
        grow = self.growth(state, rep.n_prefilling == 0)  # [n]
        extra = int(grow.sum())
        free = rep.free_blocks
        if extra <= free:  # the common case: the pool suffices
            if extra:
                state[_BLOCKS] += grow
                rep.free_blocks = free - extra
            return None
        n = state.shape[1]
        while extra > free:  # rare: preempt the newest (last admitted) request
            n -= 1
            extra -= int(grow[n])
            free += int(state[_BLOCKS, n])
            if state[_PREFILLED, n] < state[_FILL, n]:
                rep.n_prefilling -= 1
        gone = preempted_columns(state[:, n:])
        state = state[:, :n]
        state[_BLOCKS] += grow[:n]
        rep.state = state
        rep.free_blocks = free - extra
        return gone

    def allocate_chunks(self, rep: Replica, c_idx: np.ndarray, chunk: np.ndarray) -> np.ndarray:
        """Blocks for the prompt chunks ``chunk`` # [m] of running requests ``c_idx`` # [m]
        (FCFS): each needs ⌈(prefilled + chunk + [it completes the prefill]) / block_size⌉
        blocks (a completing chunk also holds its first token, as admission does); the first
        chunk the free pool cannot hold shrinks to the tokens the rest holds, later ones get
        none. Returns the chunks granted # [m] (zeros allowed)."""
        state, bs = rep.state, self.block_size
        pre, fill, held = state[_PREFILLED, c_idx], state[_FILL, c_idx], state[_BLOCKS, c_idx]
        end = pre + chunk
        need = np.maximum((end + (end >= fill) + bs - 1) // bs - held, 0)  # [m]
        cum = np.cumsum(need)
        free = rep.free_blocks
        if cum[-1] > free:
            chunk, need = chunk.copy(), need.copy()
            j = int(np.argmax(cum > free))
            slots = (int(held[j]) + free - (int(cum[j - 1]) if j else 0)) * bs
            p, f = int(pre[j]), int(fill[j])
            c = min(int(chunk[j]), slots - p)
            if p + c >= f and p + c + 1 > slots:  # no slot left for its first token
                c -= 1
            chunk[j] = c
            need[j] = max(-(-(p + c + (p + c >= f)) // bs) - int(held[j]), 0)
            chunk[j + 1:] = 0
            need[j + 1:] = 0
        state[_BLOCKS, c_idx] += need
        rep.free_blocks = free - int(need.sum())
        return chunk

    def release(self, rep: Replica, gone: np.ndarray) -> None:
        """Return the blocks of finished requests' columns ``gone`` # [len(Row), f]."""
        rep.free_blocks += int(gone[_BLOCKS].sum())
        if self.tables is not None:
            for uid in gone[Row.UID].tolist():
                self.tables.release(uid)
