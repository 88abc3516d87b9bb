"""vLLM V1's step composer (``scheduler = "vllm-v1"``): one token budget per step, mixed steps.

Rules, read from vLLM's source (vllm-project/vllm):

- ``vllm/v1/core/sched/scheduler.py``, ``Scheduler.schedule``: every step spends one token
  budget B = ``max_num_batched_tokens``
  (:data:`simulator.config.sim_config.V1_DEFAULT_BATCHED_TOKENS` when unset). RUNNING requests
  go first, in running order (admission order): each asks
  ``num_tokens_with_spec − num_computed_tokens`` tokens, i.e. 1 + s_i (its pending token and
  the s_i drafts it verifies) when decoding, its remaining prompt (prompt + t after a
  preemption) when still prefilling, capped at ``long_prefill_token_threshold`` (> 0; a
  decoding request too) and at what is left of B; scheduling running requests stops once B
  is spent. A request cut by the budget or the threshold verifies only the drafts that fit
  (``spec_token_ids[:num_scheduled_spec_tokens]``), and drafts no more than it verifies. Then,
  only in a step that preempted nobody, WAITING requests FCFS while B is left and
  ``max_num_seqs`` allows: a request asks its whole
  prompt (prompt + t when resumed), chunked to what B has left; with
  ``enable_chunked_prefill = false`` a prompt that does not fit what is left stops
  admission (``break``), as vLLM does.
- ``vllm/v1/core/kv_cache_manager.py``, ``KVCacheManager.allocate_slots`` (paged KV): a
  scheduled request must hold ⌈(computed + num_new_tokens + lookahead) / block_size⌉ blocks,
  where computed = prompt + t − 1 for a decoding request at output position t (the KV of its
  last emitted token is computed in this step) and the prefilled tokens for a prefilling
  one. ``Scheduler.__init__``: lookahead = ``num_speculative_tokens`` (the policy's depth
  K here) for a draft model or EAGLE (``use_eagle`` / ``uses_draft_model``), 0 for n-gram
  (``draft = "ngram"``) and without speculation; a WAITING request is allocated without
  lookahead (``effective_lookahead_tokens = 0`` while ``num_computed_tokens == 0``), so
  admission needs only ⌈num_new_tokens / block_size⌉ blocks: the whole prompt without
  chunking, the chunk with it, ⌈(prompt + t) / block_size⌉ on resume. Blocks never shrink
  while a request runs (rejected drafts' slots are reused).
- Preemption (``Scheduler.schedule``'s ``while True`` around ``allocate_slots``, FCFS
  policy): when a running request's slots do not fit the free pool, the newest running
  request (``self.running.pop()``) is preempted, repeatedly; if that is the request itself,
  scheduling of running requests stops. A preempted request frees all its blocks, goes back
  to the front of the waiting queue (``prepend_request``) and recomputes prompt + t tokens
  when readmitted. A running request's next prompt chunk follows the same rule (it may
  preempt the newest; it never shrinks to the free pool).
- Recompute (``Scheduler.update_from_output`` with the model runner's sampler): a step that
  completes a request's (re)prefill samples one token from its last position, so a
  recomputed request emits its next token (position t → t + 1) when its recompute
  completes, as a fresh prompt emits its first.

Reserve mode (``kv_mode = "reserve"``) keeps its own KV model under this composer: a request
reserves prompt + output + K + 1 tokens at admission, so running requests never preempt.
Paged mode with ``enable_prefix_caching`` keeps the block pool in simulator.engine.prefix (block
identities only with shared-prefix groups; else counts, and one segment per preempted
request's freed blocks).

The composer is vectorised over the running batch (:meth:`V1Composer.compose`: cumulative
sums, one allocation); preemption, which is rare, and admission, which is FCFS, walk
requests one at a time. :meth:`simulator.engine.v1.reference.V1Reference.compose_reference` is its
per-request twin, written as vLLM's loop, selected by the engine's ``reference=True``;
simulator.engine.v1.step runs the composed batch. Where the composition is known without it
(every running request decoding and fitting the budget, no preemption), simulator.engine.v1.fast
runs the step without the composer, and simulator.engine.v1.runs takes runs of identical depth-0
decode steps at once; both give the same results.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from specbatch.fields import fail
from specbatch.simulator.defaults import FREE_DRAFTS
from specbatch.simulator.engine.admission import Admission
from specbatch.simulator.engine.kv import preempted_columns
from specbatch.simulator.engine.prefix import PrefixCache
from specbatch.simulator.engine.request_state import Replica, Row

if TYPE_CHECKING:
    from specbatch.simulator.config.sim_config import SimConfig

_I64 = np.int64
_UID, _PREFILLED, _FILL, _BLOCKS, _PROMPT, _POS = (
    int(Row.UID), int(Row.PREFILLED), int(Row.FILL), int(Row.BLOCKS), int(Row.PROMPT),
    int(Row.POS))
_sum = np.add.reduce  # ndarray.sum without its Python-level wrapper


def ceil_div(a: np.ndarray | int, b: int) -> np.ndarray | int:
    """⌈a / b⌉ for non-negative integers (and arrays of them)."""
    return -(-a // b)


def integer_sums(query: np.ndarray, kv: np.ndarray) -> tuple[int, float, float, float, float]:
    """(n, Σq, Σc, Σq·c, Σq²) of a pass over ``query`` and ``kv`` # [n], summed exactly in
    int64 and given as floats (``SumsCostModel.time_from_sums``'s arguments; exact below
    2^53, and adding two batches' sums gives the sums of both)."""
    return (int(query.shape[0]), float(_sum(query)), float(_sum(kv)), float(query @ kv),
            float(query @ query))


def v1_lookahead(config: SimConfig, speculates: bool, depth: int) -> int:
    """KV lookahead slots of a running request under vllm-v1 (``Scheduler.__init__``): the
    draft depth K for a draft model, 0 for n-gram (``draft = "ngram"``) or a policy that
    does not speculate."""
    return depth if speculates and str(config.draft).lower() not in FREE_DRAFTS else 0


def check_v1_workload(config: SimConfig, capacity: int | None, longest: int, depth: int,
                      lookahead: int) -> None:
    """One-line errors for a vllm-v1 run that could never finish: without chunked prefill a
    request's (re)prefill of up to prompt + output − 1 = ``longest`` − 1 tokens must fit the
    token budget (vLLM asks max_num_batched_tokens >= max_model_len), and in paged mode the
    largest request must run alone in the block pool, its last step holding
    prompt + output − 1 + K + lookahead slots."""
    budget = config.token_budget
    if not config.chunked and longest - 1 > budget:
        fail("config", "max_num_batched_tokens",
             f"room for the longest prompt + output - 1 = {longest - 1} tokens without "
             "chunked prefill (vllm-v1 never splits a prompt then)", budget)
    if capacity is None or config.kv_mode != "paged":
        return
    bs = int(config.block_size)
    slots = longest - 1 + depth + lookahead
    need, pool = ceil_div(slots, bs), capacity // bs
    if need > pool:
        fail("config", "kv_capacity",
             f"a block pool holding the largest request alone under vllm-v1 (prompt + output "
             f"- 1 + K + lookahead = {slots} tokens = {need} blocks of {bs})",
             f"{capacity} tokens = {pool} blocks")


class Composition(NamedTuple):
    """One V1 step's batch, before it runs.

    kept:    running requests kept (the first ``kept`` columns); the others, newest first,
             are preempted
    joined:  uids admitted from the waiting queue, in order (appended after the kept)
    tokens:  # [kept + joined] tokens scheduled per request (0 = not scheduled this step)
    blocks:  # [kept + joined] KV blocks each holds after allocation (paged mode; else 0)
    free:    the replica's free blocks (paged) or reserved tokens (reserve) afterwards
    cached:  per joined request, its tokens found in the prefix cache (prefilled already)
    cut:     some running request got fewer tokens than it asked, or was preempted (None =
             not told: compare ``tokens`` with what was asked)
    """

    kept: int
    joined: tuple[int, ...]
    tokens: np.ndarray
    blocks: np.ndarray
    free: int
    cached: tuple[int, ...] = ()
    cut: bool | None = None


class Admitted(NamedTuple):
    """The waiting requests :meth:`V1Composer.admit_v1` admits, before they join."""

    joined: tuple[int, ...]  # their uids, in queue order
    tokens: list[int]  # each one's prompt tokens scheduled this step (its chunk)
    blocks: list[int]  # each one's KV blocks after allocation (paged mode; else 0)
    cached: list[int]  # each one's tokens found in the prefix cache
    free: int  # free blocks (paged) or reserved tokens (reserve) afterwards


_tuple_new = tuple.__new__  # a NamedTuple from a tuple without its class call (hot path)


class V1Composer(Admission):
    """vLLM V1's general composer (module docstring): the admission part's verbs (``park``)
    plus V1's budget; the base of the vllm-v1 composer (simulator.engine.v1.step), a part of
    the engine (its state: simulator.engine.state; ``max_batched`` is the token budget)."""

    # ------------------------------------------------------------- composition

    def wants(self, state: np.ndarray, d_idx: np.ndarray | None, verified: np.ndarray
              ) -> np.ndarray:
        """Tokens each running request asks: 1 + s_i decoding (``d_idx`` its columns, None =
        all), else its remaining prompt; capped at ``long_prefill_token_threshold`` (> 0),
        which vLLM applies to every running request. # [n]"""
        if d_idx is None:
            want = verified + 1
        else:
            want = state[_FILL] - state[_PREFILLED]
            want[d_idx] = verified + 1
        if self.threshold:
            np.minimum(want, self.threshold, out=want)
        return want

    def compose(self, rep: Replica, want: np.ndarray, ctx: np.ndarray | None = None,
                held: int = 0) -> Composition:
        """The vectorised composer (its :class:`Composition` built with ``tuple.__new__`` in
        field order, as every per-step record: a keyword call costs ~0.4 µs more): the budget's
        cut by one cumulative sum, the running requests' new blocks in one allocation (a
        per-request walk only when the pool runs
        short and someone is preempted), then FCFS admission. ``ctx`` # [n]: prompt + t of
        every running request when all decode and the caller has it (the plan's KV row,
        never written afterwards), else None. ``held``: ``max_num_seqs`` slots the step in
        flight's finished requests still hold (vLLM's async scheduling,
        simulator.engine.async_lag; 0 otherwise), not open to admission."""
        state = rep.state
        budget = self.max_batched
        kept = state.shape[1]
        if not rep.n_prefilling and kept * (self.depth + 1) <= budget:
            tokens, asked = want, None  # each decoding request asks <= 1 + K: all fit
        else:
            asked = int(_sum(want))
            if asked <= budget:  # the common case: every running request gets what it asks
                tokens = want
            else:
                before = np.cumsum(want) - want
                tokens = np.minimum(np.maximum(budget - before, 0), want)
                asked = budget
        cut = tokens is not want  # the budget left some running requests short
        paged = self.blocks is not None
        blocks = state[_BLOCKS]  # a view: copied before it changes
        prefix = rep.prefix
        if prefix is not None:
            free = prefix.n_free
        else:
            free = rep.free_blocks if paged else rep.kv_reserved
        if paged and kept:
            bs = self.blocks.block_size
            if rep.n_prefilling:
                decoding = state[_PREFILLED] >= state[_FILL]
                ctx = state[_PROMPT] + state[_POS]  # prompt + t
                computed = np.where(decoding, ctx - 1, state[_PREFILLED])
                need = ceil_div(computed + tokens + self.lookahead, bs) - blocks
                done = np.where(decoding, ctx,
                                np.minimum(computed + tokens, state[_FILL]))
            else:  # every request decodes: computed = prompt + t − 1
                done = state[_PROMPT] + state[_POS] if ctx is None else ctx  # computed + 1
                need = (done + tokens + (self.lookahead + bs - 2)) // bs - blocks
            np.maximum(need, 0, out=need)
            if cut:
                need *= tokens > 0
            total = int(_sum(need))
            if total <= free:
                if total:
                    blocks = blocks + need
                    free -= total
                    if prefix is not None:
                        if prefix.lazy:
                            prefix.take(total)
                        else:
                            nz = np.flatnonzero(need)
                            prefix.allocate_many(state[_UID, nz], need[nz])
            else:
                tokens = tokens.copy()
                blocks = blocks.copy()
                kept, free = self.preempt_walk(tokens, need, blocks, free, state[_UID], prefix)
                tokens = tokens[:kept]
                blocks = blocks[:kept]
                done = done[:kept]
                asked = int(_sum(tokens))
                cut = True
            if prefix is not None:
                self.cache_scheduled(prefix, state[_UID, :kept], done, tokens, cut)
        if kept < state.shape[1]:  # a step that preempted admits nobody
            return _tuple_new(Composition, (kept, (), tokens, blocks, free, (), True))
        if not rep.waiting or kept >= self.max_seqs - held:
            return _tuple_new(Composition, (kept, (), tokens, blocks, free, (), cut))
        if asked is None:
            asked = int(_sum(tokens))
        if asked >= budget:
            return _tuple_new(Composition, (kept, (), tokens, blocks, free, (), cut))
        joined, t_new, b_new, c_new, free = self.admit_v1(rep, budget - asked, free,
                                                          kept + held)
        if joined:  # lists of Python ints: int64 like the arrays
            tokens = np.concatenate([tokens, t_new])
            blocks = np.concatenate([blocks, b_new])
        return _tuple_new(Composition, (kept, joined, tokens, blocks, free, tuple(c_new), cut))

    @staticmethod
    def cache_scheduled(prefix: PrefixCache, uid: np.ndarray, done: np.ndarray,
                        tokens: np.ndarray, cut: bool) -> None:
        """Hash the blocks the scheduled running requests ``uid`` fill this step, in running
        order: ⌊done / block_size⌋ full blocks, done = min(computed + tokens, prompt + t)
        (never drafts; ``cut``: some have tokens = 0 and are not scheduled)."""
        if cut:
            sel = np.flatnonzero(tokens)
            uid, done = uid[sel], done[sel]
        if prefix.lazy:
            prefix.note_done(uid, done, not cut)
            return
        full = done // prefix.block_size
        grew = np.flatnonzero(full > prefix.hashed[uid])
        prefix.cache_many(uid[grew], full[grew])

    @staticmethod
    def preempt_walk(tokens: np.ndarray, need: np.ndarray, blocks: np.ndarray, free: int,
                     uid: np.ndarray, prefix: PrefixCache | None) -> tuple[int, int]:
        """The running requests in order when the pool runs short: each scheduled one takes
        its blocks, preempting the newest while they do not fit (itself last). Writes the
        scheduled ones' blocks into ``blocks`` and zeroes the tokens of those not scheduled;
        returns (running requests kept, free blocks left). With a prefix cache the blocks
        are taken and freed in that order."""
        end = tokens.shape[0]
        i = int(np.argmax(np.cumsum(need) > free))  # the first that does not fit: walk from it
        blocks[:i] += need[:i]
        free -= int(_sum(need[:i]))
        if prefix is not None:
            nz = np.flatnonzero(need[:i])
            prefix.allocate_many(uid[nz], need[nz])
        while i < end and tokens[i] > 0:
            while need[i] > free and end > i:
                end -= 1
                free += (int(blocks[end]) if prefix is None
                         else prefix.release(int(uid[end]), int(blocks[end])))
            if end == i:
                break
            free -= int(need[i])
            blocks[i] += need[i]
            if prefix is not None and need[i]:
                prefix.allocate(int(uid[i]), int(need[i]))
            i += 1
        tokens[i:] = 0
        return end, free

    def admit_v1(self, rep: Replica, left: int, free: int, seated: int) -> Admitted:
        """Admission in queue order of waiting requests into ``left`` budget tokens and the
        ``max_num_seqs`` slots ``seated`` leaves (the running requests, plus the slots held
        under the async lag: :meth:`compose`'s ``held``); returns :class:`Admitted`: uids,
        tokens, blocks each, tokens each found in the prefix cache, free blocks or reserved
        tokens afterwards. The waiting queue is not changed (:meth:`apply` pops them); the
        prefix cache is (its hits are touched and new blocks taken, as vLLM does)."""
        room = self.max_seqs - seated
        joined: list[int] = []
        tokens: list[int] = []
        blocks: list[int] = []
        cached: list[int] = []
        bs = self.blocks.block_size if self.blocks is not None else 0  # 0: reserve mode
        capacity = self.kv_capacity
        prefix = rep.prefix
        threshold, chunked, parked, prompt_len = (self.threshold, self.chunked, self.parked,
                                                  self.w.prompt_len)
        for u in rep.waiting:
            if left <= 0 or len(joined) >= room:
                break
            col = parked.get(u)
            num_tokens = int(prompt_len[u]) if col is None else int(col[_FILL])
            hits = prefix.hits(u, num_tokens) if prefix is not None else ()
            computed = len(hits) * bs
            num_new = num_tokens - computed
            if threshold and num_new > threshold:
                num_new = threshold
            if num_new > left:
                if not chunked:
                    break
                num_new = left
            if bs:
                fresh = -(-(computed + num_new) // bs) - len(hits)
                need = fresh + (prefix.evictable(hits) if hits else 0)
                if need > free:
                    break
                free -= need
                need = fresh + len(hits)
                if prefix is not None:
                    prefix.admit(u, hits, fresh, min(computed + num_new, num_tokens) // bs)
            else:
                need = 0
                if capacity is not None:
                    fp = int(self.footprint[u])
                    if free + fp > capacity:
                        break
                    free += fp
            joined.append(u)
            tokens.append(num_new)
            blocks.append(need)
            cached.append(computed)
            left -= num_new
        return _tuple_new(Admitted, (tuple(joined), tokens, blocks, cached, free))

    def apply(self, rep: Replica, comp: Composition) -> None:
        """Make ``comp`` the replica's running batch: park the preempted (newest first, each
        to the front of the waiting queue), append the admitted, set blocks and the pool."""
        state = rep.state
        if comp.kept < state.shape[1]:
            tail = state[:, comp.kept:]
            rep.n_prefilling -= int(np.count_nonzero(tail[_PREFILLED] < tail[_FILL]))
            self.park(rep, preempted_columns(tail))
            state = state[:, :comp.kept]
        joined = comp.joined
        if len(joined) == 1 and joined[0] not in self.parked and not any(comp.cached):
            u = joined[0]  # one fresh request: its initial column, no copy before the join
            rep.waiting.popleft()
            state = np.concatenate([state, self.initial[:, u:u + 1]], axis=1)
            rep.n_prefilling += 1
        elif joined:
            new = self.initial.take(joined, axis=1)
            for j, u in enumerate(joined):
                rep.waiting.popleft()
                col = self.parked.pop(u, None)
                if col is not None:
                    new[:, j] = col
                    self.rec.recomputed[u] -= comp.cached[j] if comp.cached else 0
            if any(comp.cached):
                new[_PREFILLED] = comp.cached
            state = np.concatenate([state, new], axis=1)
            rep.n_prefilling += len(joined)
        rep.state = state
        if self.blocks is not None:
            state[_BLOCKS] = comp.blocks
            rep.free_blocks = comp.free
        else:  # reserve mode: every request's blocks stay 0
            rep.kv_reserved = comp.free
