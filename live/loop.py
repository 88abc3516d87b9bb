"""The live speculative-decoding engine: iteration-level continuous batching (THEORY.md §1-§5).

The scheduling is the simulator's (:mod:`specbatch.simulator.engine.core`, one replica, no
preemption: the slot cache holds every running request): requests arrive by the run's arrival
process (:mod:`.pool`), wait in FCFS order, and join while fewer than ``max_num_seqs`` run; a
request leaves at the end of the step in which it emitted its last token. The clock advances
by measured step durations and jumps over idle time (:mod:`.pool`). How a step is composed
follows ``cfg.scheduler``:

- ``"vllm-v1"`` (default), vLLM V1's rule (``vllm/v1/core/sched/scheduler.py``,
  ``Scheduler.schedule``): every step spends one token budget B = ``max_num_batched_tokens``.
  The RUNNING requests go first, each asking 1 + s_i tokens (its pending token and the s_i
  drafts the policy verifies); then WAITING requests FCFS while slots are free, each asking
  its whole prompt, admitted while it fits what is left of B (the first that does not fit
  stops admission, vLLM's ``break`` without chunked prefill). Joiners are prefilled in the
  same step as the decode (a mixed step: one step record with both ``batch`` and
  ``prefill_tokens``, one target pass over both, :meth:`SlotCache.mixed`); a prefill-only
  step happens only when nothing is decoding. Two differences from vLLM, both checked up
  front (:meth:`LiveConfig.check_budget`): prompts are not chunked (vLLM V1 chunks a prompt
  to the budget left; the simulator is run with ``enable_chunked_prefill = false``, which
  follows the same whole-prompt rule), and B must hold every running request's 1 + k tokens,
  so the budget never cuts a running request (vLLM would leave the later ones unscheduled).
- ``"vllm-v0"``: a step that admits requests is a prefill-only step over the joiners'
  prompts, otherwise a decode step over every running request (the papers' setting).

The verbs:

- :func:`prefill`: both models fill the joiners' cache rows (:meth:`SlotCache.prefill`); the
  target's last prompt row gives the first token (greedy at T = 0, else sampled at T)
  (:func:`first_tokens`; in a mixed step the same draw from the mixed pass's prompt rows).
- :func:`decode_step` over the n running requests:

  - :func:`draft`: K sequential draft passes, each sampling ``X_j ~ Ms(·|c, X^{j-1})``;
    with ``draft = "ngram"`` (:mod:`.ngram`) the prompt-lookup proposer instead: up to K
    one-hot tokens per request, no draft model or cache, its CPU time the draft time;
  - :func:`decide`: the step's :class:`~simulator.policies.step_plan.Plan` from the simulator's
    policy on
    the draft's signals (:mod:`.decide`: the same ``plan_step`` as the simulator, budget
    C = k·n, rows in the simulator's batch order);
  - :func:`target_pass`: one pass over the pending token and ``X_1..X_{s_i}``;
  - :func:`verify`: τ with γ = s_i and the simulator's counter-based uniforms
    (:func:`simulator.replay.chain.uniforms` keyed by (seed, request, output position)); the extra
    token from the exact law of THEORY.md §2-§3 (bonus from ``Mb(·|X^γ)`` when τ = γ, else a
    correction from ``max(p_τ Mb(·|X^τ) − Ms(·|X^τ), 0)``, p = 1 for TV). The path statistics q, pt,
    Z of the verified prefix are recorded (:func:`theory.verify.torch_path_stats.path_stats_torch`)
    so the simulator replaying them draws the same τ;
  - :func:`commit`: each request emits ``min(τ + 1, remaining)`` tokens, its cache rows keep
    the accepted prefix (the rest is overwritten next step), and the tokens not yet in a cache
    are pending; :func:`retire` removes finished requests' rows.

Random draws (first token, draft samples, extra token) are counter-based too: uniforms keyed
by (seed, stream, request, output position), so a request's tokens do not depend on which
other requests share its batch (for ``fixed``, the same outputs under any arrivals and
``max_num_seqs``).

Timing (:mod:`.timeline`): a step's duration runs from the end of the previous step (or the idle
jump) to its own end, so admission and retirement bookkeeping are inside a step. ``draft_time`` is
the sum of the draft model calls (the n-gram proposer's CPU time), ``target_time`` the target model
call, ``overhead_time`` the rest (masks and position ids, sampling, policy, verification, cache
moves). Statistics computed only to record the run are paused on the timeline.
"""

from __future__ import annotations

import numpy as np

from specbatch.errors import require
from specbatch.live.cache import SlotCache
from specbatch.live.config import LiveConfig
from specbatch.live.decide import plan_from_draft
from specbatch.live.ngram import draft_ngram, fed_tokens, filler_signals
from specbatch.live.pool import Pool, arrival_times
from specbatch.live.record import LiveResult, Recorder
from specbatch.live.running_batch import Batch, empty_pending
from specbatch.live.state import Live, draw, step_end, step_start, stream_uniforms
from specbatch.live.timeline import Timeline
from specbatch.simulator.policies.registry import make_policy
from specbatch.simulator.policies.step_plan import Plan
from specbatch.simulator.replay.chain import request_keys, uniforms
from specbatch.theory.verify.path_stats import accept_from_stats
from specbatch.theory.verify.torch_batched import accept_and_residual, extra_token_law_torch
from specbatch.theory.verify.torch_path_stats import path_stats_torch, probs_at, sample_inverse_cdf
from specbatch.traces.capture.ngram import NGRAM

VERIFIER_NAMES = {"theory": "specbatch.theory.verify.torch_batched",
                  "local": "specbatch.theory.verify.path_stats.accept_from_stats + "
                           "specbatch.theory.verify.torch_batched.extra_token_law_torch"}


def prefill(live: Live, batch: Batch, joined: list[int]) -> Batch:
    """The prefill-only step of the joiners: both caches get their prompts, the first token
    is drawn; requests with one output token finish."""
    rec, start = live.rec, step_start(live)
    prompts = [rec.prompt_ids[u] for u in joined]
    plen = rec.prompt_len[joined]
    pre_d = draft_prefill(live, joined)
    logits = live.tcache.prefill(live.target_model, prompts)
    pre_t = live.tcache.seconds
    rec.add_pass("target", plen, np.zeros_like(plen), pre_t, int(plen.max()))
    batch, gone = retire(live, batch.join(first_tokens(live, joined, logits)))
    end = step_end(live, start, batch=0, prefill_tokens=int(plen.sum()), drafted=0, verified=0,
                   accepted=0, emitted=len(joined), depth=0, draft_time=pre_d, target_time=pre_t)
    rec.first_token[joined] = end
    rec.finish[gone] = end
    return batch


def draft_prefill(live: Live, joined: list[int]) -> float:
    """The draft model's cache gets the joiners' prompts (its logits are not used); returns
    its seconds (0 for the n-gram drafter, which has no cache)."""
    if live.dcache is None:
        return 0.0
    plen = live.rec.prompt_len[joined]
    live.dcache.prefill(live.draft_model, [live.rec.prompt_ids[u] for u in joined])
    live.rec.add_pass("draft", plen, np.zeros_like(plen), live.dcache.seconds, int(plen.max()))
    return live.dcache.seconds


def first_tokens(live: Live, joined: list[int], logits) -> Batch:
    """Each joiner's first token, drawn from its last prompt row's ``logits`` # [m, V]; the
    joiners as a batch whose pending token is it (to be joined to the running rows)."""
    import torch

    uid = np.asarray(joined, dtype=np.int64)
    y0 = draw(live, logits, stream_uniforms(live, "first", uid, np.zeros_like(uid), 1)[:, 0])
    for u, tok in zip(joined, y0.tolist()):
        live.rec.outputs[u].append(int(tok))
    live.rec.pos[uid] = 1
    return Batch(uid, y0, torch.stack([y0, torch.zeros_like(y0)], dim=1), torch.ones_like(y0))


def retire(live: Live, batch: Batch) -> tuple[Batch, np.ndarray]:
    """Requests that emitted their output length leave both caches; returns the running
    batch and the uids that left # [l] (finished at the step's end)."""
    done = live.rec.pos[batch.uid] >= live.rec.out_len[batch.uid]
    if not done.any():
        return batch, batch.uid[done]
    leave = np.flatnonzero(done)
    order = live.tcache.remove(leave)
    if live.dcache is not None:
        live.dcache.remove(leave)  # the same rows move in both caches
    return batch.take(order), batch.uid[done]


def draft(live: Live, batch: Batch, kv: np.ndarray, pos: np.ndarray):
    """K sequential draft passes over the batch, the first fed the pending tokens.

    kv, pos: # [n] the simulator's KV count and output position per request
    returns x # [n, K] drafted tokens, logits # [n, K, V], summed model seconds, proposed
    # [n] (None: all K); the n-gram drafter: :func:`draft_ngram`
    """
    import torch

    if live.dcache is None:
        return draft_ngram(live, batch, kv)  # :mod:`.ngram`
    n, depth, cache = batch.n, live.cfg.depth, live.dcache
    u = stream_uniforms(live, "draft", batch.uid, pos, depth)  # [n, K]
    width = int(batch.pend_w.max())
    ids = batch.pend_d[:, :width]
    pend_w = batch.pend_w.cpu().numpy()
    last = torch.from_numpy(pend_w - 1).to(live.device)
    xs, rows, seconds = [], [], 0.0
    ones = np.ones(n, dtype=np.int64)
    for d in range(depth):
        view = int(cache.count[:n].max()) + ids.shape[1]
        out = cache.forward(live.draft_model, ids, keep=None if d == 0 else 1)
        logits = out[torch.arange(n, device=live.device), last] if d == 0 else out[:, -1]
        cache.count[:n] += pend_w if d == 0 else 1
        tok = draw(live, logits, u[:, d])
        seconds += cache.seconds
        live.rec.add_pass("draft", ones, kv + d, cache.seconds, view)
        xs.append(tok)
        rows.append(logits)
        ids = tok[:, None]
    return torch.stack(xs, dim=1), torch.stack(rows, dim=1), seconds, None


def decide(live: Live, batch: Batch, kv: np.ndarray, x, draft_logits,
           proposed: np.ndarray | None) -> Plan:
    """The step's plan (:func:`.decide.plan_from_draft`) in the batch's row order."""
    return plan_from_draft(live.policy, live.pool.rank[batch.uid], kv, x, draft_logits,
                           proposed)


def target_pass(live: Live, batch: Batch, x, s: np.ndarray, kv: np.ndarray,
                joined: list[int]):
    """One target pass over the pending token and each request's verified prefix, and the
    ``joined`` requests' whole prompts in the same pass when any (:meth:`SlotCache.mixed`).

    x: # [n, K];  s: # [n] verified lengths;  kv: # [n] (pass record)
    returns logits # [n, G+1, V] (G = max s), the joiners' last prompt logits # [m, V] (None
    without joiners), seconds
    """
    import torch

    g = int(s.max())
    ids = torch.cat([batch.pend_t[:, None], fed_tokens(x[:, :g], live.vocab)], dim=1)
    cache = live.tcache
    view = int(cache.count[:batch.n].max()) + g + 1
    if not joined:
        logits, first = cache.forward(live.target_model, ids), None
        live.rec.add_pass("target", s + 1, kv, cache.seconds, view)
    else:
        plen = live.rec.prompt_len[joined]
        logits, first = cache.mixed(live.target_model, ids, s + 1,
                                    [live.rec.prompt_ids[u] for u in joined])
        live.rec.add_pass("target", np.concatenate([s + 1, plen]),
                          np.concatenate([kv, np.zeros_like(plen)]), cache.seconds,
                          max(view, int(plen.max())))
    return logits, first, cache.seconds


def verify(live: Live, batch: Batch, x, draft_logits, target_logits, s: np.ndarray,
           pos: np.ndarray, proposed: np.ndarray | None = None):
    """τ (numpy and torch, # [n]), the extra token y # [n] and the path statistics (numpy
    dict, :func:`theory.verify.torch_path_stats.path_stats_torch`) of one step.

    Uniforms: the simulator's, keyed by (seed, request, output position). ``verifier = "theory"``:
    :func:`theory.verify.torch_batched.accept_and_residual` decides and the statistics are recorded
    off the timeline; ``"local"``: :func:`theory.verify.path_stats.accept_from_stats` on the
    statistics (the simulator's τ function) and
    :func:`theory.verify.torch_batched.extra_token_law_torch`. N-gram drafts (``proposed`` # [n]):
    fillers enter as token 0 (s ≤ proposed, so none is verified) and their recorded draft signals
    are 0 (:func:`.ngram.filler_signals`).
    """
    import torch

    cfg, device, temp = live.cfg, live.device, float(live.cfg.temperature)
    x = fed_tokens(x, live.vocab)
    s_t = torch.from_numpy(s).to(device)
    g = target_logits.shape[1] - 1
    ms, mb = probs_at(draft_logits, temp), probs_at(target_logits, temp)  # [n, K | G+1, V]
    eta = uniforms(live.keys[batch.uid], pos, cfg.depth)
    if cfg.verifier == "theory" and g > 0:
        tau_t, law = accept_and_residual(cfg.verify, x[:, :g], ms[:, :g], mb,
                                         torch.from_numpy(eta[:, :g]).to(device), lengths=s_t)
        tau = tau_t.cpu().numpy().astype(np.int64)
        with live.clock.paused():
            stats = path_stats_torch(x, draft_logits, target_logits, temp, gamma=s_t)
    else:
        stats = path_stats_torch(x, draft_logits, target_logits, temp, gamma=s_t)
        tau = accept_from_stats(stats["q"], stats["pt"], stats["z"], s, eta,
                                cfg.verify).astype(np.int64)
        tau_t = torch.from_numpy(tau).to(device)
        law = extra_token_law_torch(ms, mb, tau_t, cfg.verify, gamma=s_t,
                                    p=torch.from_numpy(stats["p"]).to(device))
    u = stream_uniforms(live, "extra", batch.uid, pos, 1)[:, 0]
    y = sample_inverse_cdf(law, torch.from_numpy(u).to(device))
    if proposed is not None:
        stats = filler_signals(stats, proposed)
    return tau, tau_t, y, stats


def commit(live: Live, batch: Batch, x, tau: np.ndarray, y, stats: dict,
           starts: tuple[np.ndarray, np.ndarray],
           proposed: np.ndarray) -> tuple[Batch, np.ndarray]:
    """Emit the accepted tokens and y, keep each cache row's accepted prefix, and set the
    pending tokens of the next step.

    starts: (draft, target) # [n] cache counts before this step's passes
    proposed: # [n] real draft tokens per request (recorded with the position)
    returns the batch of the next step and emitted # [n]
    """
    import torch

    n, depth, rec = batch.n, live.cfg.depth, live.rec
    emitted = np.minimum(tau + 1, rec.out_len[batch.uid] - rec.pos[batch.uid])
    rec.add_positions(batch.uid, x.cpu().numpy(), stats, tau, y.cpu().numpy(), emitted,
                      proposed)
    pend_w = batch.pend_w.cpu().numpy()
    live.tcache.count[:n] = starts[1] + 1 + tau
    if live.dcache is not None:
        live.dcache.count[:n] = starts[0] + pend_w + np.minimum(tau, depth - 1)
    full = torch.from_numpy(tau == depth).to(live.device)  # X_K accepted, never fed to the draft
    pend_d = torch.stack([torch.where(full, x[:, -1], y),
                          torch.where(full, y, torch.zeros_like(y))], dim=1)
    return Batch(batch.uid, y, pend_d, 1 + full.long()), emitted


def admit_v1(live: Live, running: int, asked: int) -> list[int]:
    """vllm-v1's admission after the running requests asked ``asked`` tokens: FCFS whole
    prompts into the free slots while they fit what is left of the token budget."""
    left = live.cfg.token_budget - asked
    return live.pool.admit(running, left, live.rec.prompt_len)


def decode_step(live: Live, batch: Batch) -> Batch:
    """draft → decide → (vllm-v1: admit) → target_pass → verify → commit → retire, recorded
    as one step with the plan's counts (drafted: K per request, or its proposed count for
    n-gram drafts; depth: the plan's draft passes), as the simulator records them. Under
    vllm-v1 the requests admitted into the budget left by the running ones' 1 + s_i tokens
    are prefilled in the same step (the draft's prefill, the target's one mixed pass) and
    emit their first token at its end."""
    rec, n = live.rec, batch.n
    start = step_start(live)
    pos = rec.pos[batch.uid].copy()
    kv = rec.prompt_len[batch.uid] + pos  # the simulator's KV count
    dstart = live.dcache.count[:n].copy() if live.dcache is not None else None
    starts = (dstart, live.tcache.count[:n].copy())
    x, draft_logits, draft_t, proposed = draft(live, batch, kv, pos)
    plan = decide(live, batch, kv, x, draft_logits, proposed)
    s = plan.verified
    joined = admit_v1(live, n, int(s.sum()) + n) if live.cfg.token_budget is not None else []
    if joined:
        draft_t += draft_prefill(live, joined)
    target_logits, first, target_t = target_pass(live, batch, x, s, kv, joined)
    tau, tau_t, y, stats = verify(live, batch, x, draft_logits, target_logits, s, pos, proposed)
    rec.count_step(batch.uid, plan.drafted, s, tau)
    batch, emitted = commit(live, batch, x, tau, y, stats, starts, plan.drafted)
    if joined:
        batch = batch.join(first_tokens(live, joined, first))
    batch, gone = retire(live, batch)
    end = step_end(live, start, batch=n, prefill_tokens=int(rec.prompt_len[joined].sum()),
                   drafted=int(plan.drafted.sum()), verified=int(s.sum()),
                   accepted=int(tau.sum()), emitted=int(emitted.sum()) + len(joined),
                   depth=plan.draft_passes(), draft_time=draft_t, target_time=target_t)
    rec.first_token[joined] = end
    rec.finish[gone] = end
    return batch


def start(draft_model, target_model, prompt_ids: list[list[int]], cfg: LiveConfig,
          names: tuple[str, str]) -> Live:
    """The shared state of a run: arrivals and the pool, the simulator's policy for ``cfg``
    and its uniform streams, slot caches on the target's device (no draft cache for the
    n-gram drafter, whose ``draft_model`` is None), a fresh timeline."""
    require((draft_model is None) == (cfg.draft == NGRAM),
            f"draft: expected a draft model exactly when draft is not {NGRAM!r}, got draft "
            f"{cfg.draft!r} with{'out' if draft_model is None else ''} a draft model")
    device = next(target_model.parameters()).device
    clock = Timeline(device)
    n = len(prompt_ids)
    rec = Recorder(prompt_ids, cfg.max_new_tokens, names, str(device), cfg.dtype)
    rec.arrival = arrival_times(cfg, rec.prompt_len, rec.out_len)
    slots = cfg.slots(n)
    length = int((rec.prompt_len + rec.out_len).max()) + cfg.depth + 2
    return Live(draft_model=draft_model, target_model=target_model, cfg=cfg, device=device,
                policy=make_policy(cfg.sim_config(n), cfg.depth),
                keys=request_keys(int(cfg.seed), np.arange(n)),
                pool=Pool(rec.arrival, slots), clock=clock, rec=rec,
                dcache=None if draft_model is None
                else SlotCache(draft_model, slots, length, clock.now),
                tcache=SlotCache(target_model, slots, length, clock.now),
                vocab=int(target_model.get_output_embeddings().weight.shape[0]))


def run_live(draft_model, target_model, prompt_ids: list[list[int]], cfg: LiveConfig,
             names: tuple[str, str] = ("draft", "target")) -> LiveResult:
    """Run the continuous-batching speculative engine (module docstring) on loaded models.

    draft_model: the draft Ms, or None with ``cfg.draft = "ngram"`` (prompt lookup).
    prompt_ids: N non-empty token-id lists (the requests, uid = index).
    names: model names for the pass table.
    """
    import torch

    cfg.check()
    require(len(prompt_ids) >= 1, "prompts: expected at least one prompt, got none")
    require(all(len(p) >= 1 for p in prompt_ids), "prompts: expected non-empty token lists")
    cfg.check_budget([len(p) for p in prompt_ids], len(prompt_ids))
    live = start(draft_model, target_model, prompt_ids, cfg, names)
    pool = live.pool
    with torch.inference_mode():
        batch = Batch(np.zeros(0, dtype=np.int64), *empty_pending(live.device))
        live.mark = live.clock.now()
        while batch.n or not pool.drained:
            pool.arrive(live.now)
            if batch.n and cfg.token_budget is not None:  # vllm-v1: decode first, then admit
                batch = decode_step(live, batch)
            elif joined := pool.admit(batch.n, cfg.token_budget, live.rec.prompt_len):
                batch = prefill(live, batch, joined)
            elif batch.n:
                batch = decode_step(live, batch)
            else:  # idle: jump to the next arrival (no sleeping, no wall time)
                live.now = max(live.now, pool.next_arrival())
                live.mark = live.clock.now()
    return live.rec.result(cfg, VERIFIER_NAMES[cfg.verifier])
