"""The live batched speculative-decoding loop, composed of short verbs (THEORY.md §1-§5).

One run (draft ``Ms``, target ``Mb``, window k, extra e, K = the policy's required depth):

1. :func:`prefill`: both models run over the right-padded prompts; the target's last row
   gives the first output token (greedy at T = 0, else sampled at temperature T).
2. Decode steps over the n running requests (:func:`decode_step`):

   - :func:`draft`: K sequential draft passes over the whole batch, each sampling
     ``X_j ~ Ms(·|c, X^{j-1})`` at temperature T (argmax at T = 0);
   - :func:`decide`: the simulator's own ``Policy.decide`` on a :class:`StepView` of the
     draft's signals (``tetris`` reads the draft's temperature-1 confidence of its drafted
     tokens; ``fixed`` reads nothing) with budget C = k·n;
   - :func:`target_pass`: one pass over the pending token and ``X_1..X_{s_i}`` (query
     s_i + 1, ragged, padded);
   - :func:`verify`: τ with γ = s_i and the simulator's counter-based uniforms
     (:func:`simulator.verify.uniforms` keyed by (seed, request, output position)); the extra
     token from the exact law of THEORY.md §2-§3 (a bonus from ``Mb(·|X^γ)`` when τ = γ, else
     a correction from ``max(p_τ Mb(·|X^τ) − Ms(·|X^τ), 0)``, p = 1 for TV). The path
     statistics q, pt, Z of the verified prefix are recorded either way
     (:func:`theory.stats_torch.path_stats_torch`), so the simulator replaying them draws the
     same τ;
   - :func:`commit`: each request emits ``min(τ + 1, remaining)`` tokens, rejected draft
     tokens become cache holes (:mod:`.cache`), and the tokens not yet in a cache are pending
     for the next step; :func:`retire` drops finished requests before the next step.

Static-batch caveat: the prefill pads every prompt to the longest one and the decode caches
keep those pads as holes (compaction cannot drop them while the longest row needs its slots),
so with prompts of unequal lengths the live engine does work a vLLM-like engine (packed
prefill, paged KV) does not, and the simulator does not charge it. Fidelity runs therefore use
equal-length prompts (``random:N:LEN``); the per-pass ``cache_slots`` column of
``profile.csv`` shows the padded attention length actually computed.

Timing (:mod:`.timeline`): ``draft_time`` is the sum of the draft model calls,
``target_time`` the target model call (the forward passes alone, as a latency profile
measures them), ``overhead_time`` the rest of the step (masks and position ids, draft
sampling, policy, verification, cache bookkeeping). Statistics computed only to record the
run (the trace's, when the torch verifier decides) are paused on the timeline.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from specbatch.errors import require
from specbatch.live.cache import SlotCache
from specbatch.live.config import LiveConfig
from specbatch.live.record import LiveResult, Recorder
from specbatch.live.timeline import Timeline
from specbatch.simulator.policies import Policy, StepView, make_policy
from specbatch.simulator.verify import request_keys, uniforms
from specbatch.theory.stats import accept_from_stats
from specbatch.theory.stats_torch import path_stats_torch, probs_at, sample_inverse_cdf
from specbatch.theory.verify_torch import accept_and_residual, extra_token_law_torch

#: Seed-stream tag of the live loop's own draws (draft samples, extra tokens, first token).
_STREAM = 0x11FE
VERIFIER_NAMES = {"theory": "specbatch.theory.verify_torch",
                  "local": "specbatch.theory.stats.accept_from_stats + "
                           "specbatch.theory.verify_torch.extra_token_law_torch"}


@dataclass
class Live:
    """What the verbs of one run share: models, settings, policy, caches, clock, records."""

    draft_model: Any
    target_model: Any
    cfg: LiveConfig
    device: Any
    policy: Policy
    rng: np.random.Generator
    keys: np.ndarray  # [N] uint64 the simulator's per-request uniform streams
    clock: Timeline
    rec: Recorder
    dcache: SlotCache
    tcache: SlotCache
    t0: float = 0.0  # timeline origin: the start of the prefill step
    last_end: float = 0.0  # end of the last step


@dataclass
class Batch:
    """The running requests between steps.

    act:     # [n] request ids (uids) still running
    pend_t:  # [n, 1] the last emitted token, not yet in the target cache
    pend_d:  # [n, 2] tokens not yet in the draft cache, left-padded
    pend_w:  # [n] how many of pend_d are real (1, or 2 after a fully accepted draft)
    """

    act: np.ndarray
    pend_t: Any
    pend_d: Any
    pend_w: Any

    @property
    def n(self) -> int:
        return int(self.act.shape[0])


def draw(live: Live, logits):
    """One token per row at temperature T (argmax at T = 0).  logits # [n, V] -> # [n]"""
    import torch

    if live.cfg.temperature == 0:
        return logits.argmax(-1)
    u = torch.from_numpy(live.rng.random(logits.shape[0])).to(live.device)
    return sample_inverse_cdf(probs_at(logits, float(live.cfg.temperature)), u)


def right_pad(seqs: list[list[int]], device, pad: int = 0):
    """Prompts padded on the right: ids # [N, W] long, valid # [N, W] bool.

    Right padding keeps every query row attending to at least one real key (a pad slot sees
    its own prompt), so no attention row is fully masked; the pads become cache holes.
    """
    import torch

    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad, dtype=torch.long, device=device)
    valid = torch.zeros((len(seqs), width), dtype=torch.bool, device=device)
    for i, s in enumerate(seqs):
        ids[i, :len(s)] = torch.tensor(s, dtype=torch.long, device=device)
        valid[i, :len(s)] = True
    return ids, valid


def prefill(live: Live) -> Batch:
    """The prefill step: both caches filled with the prompts, the first token drawn."""
    import torch

    rec, clock, device = live.rec, live.clock, live.device
    n, plen = len(rec.prompt_ids), rec.prompt_len
    live.t0 = clock.now()
    ids, valid = right_pad(rec.prompt_ids, device)
    start = clock.now()
    live.dcache.forward(live.draft_model, ids, valid, keep=1)  # its logits are not used
    # only the rows' last prompt slots need logits (as a serving engine computes them)
    ends, where = np.unique(plen - 1, return_inverse=True)
    logits = live.tcache.forward(live.target_model, ids, valid,
                                 keep=torch.from_numpy(ends).to(device))
    y0 = draw(live, logits[torch.arange(n, device=device), torch.from_numpy(where).to(device)])
    pre_d, pre_t = live.dcache.seconds, live.tcache.seconds
    rec.add_pass("draft", n, plen.mean(), 0, pre_d, ids.shape[1])
    rec.add_pass("target", n, plen.mean(), 0, pre_t, ids.shape[1])
    for i, tok in enumerate(y0.tolist()):
        rec.outputs[i].append(int(tok))
    rec.pos[:] = 1
    end = clock.now()
    rec.first_token[:] = end - live.t0
    rec.step_rows.append((0, start - live.t0, end - live.t0, 0, int(plen.sum()), 0, 0, 0, n,
                          0, pre_d, pre_t, (end - start) - pre_d - pre_t))
    live.last_end = end
    return Batch(act=np.arange(n), pend_t=y0[:, None],
                 pend_d=torch.stack([torch.zeros_like(y0), y0], dim=1),
                 pend_w=torch.ones(n, dtype=torch.long, device=device))


def retire(live: Live, batch: Batch) -> Batch:
    """Requests that emitted ``max_new_tokens`` finish (at the last step's end) and leave."""
    import torch

    done = live.rec.pos[batch.act] >= live.cfg.max_new_tokens
    if not done.any():
        return batch
    live.rec.finish[batch.act[done]] = live.last_end - live.t0
    keep = np.flatnonzero(~done)
    rows = torch.from_numpy(keep).to(live.device)
    if keep.size:
        for cache in (live.dcache, live.tcache):
            cache.select(rows)
    return Batch(batch.act[keep], batch.pend_t[rows], batch.pend_d[rows], batch.pend_w[rows])


def draft(live: Live, batch: Batch, kv: np.ndarray):
    """K sequential draft passes over the batch, the first fed the pending tokens.

    kv: # [n] the simulator's KV count per request (for the pass records)
    returns x # [n, K] drafted tokens, logits # [n, K, V], summed model seconds
    """
    import torch

    n, device = batch.n, live.device
    width = int(batch.pend_w.max())
    ids = batch.pend_d[:, 2 - width:]
    valid = (torch.arange(2, device=device)[None, :] >= 2 - batch.pend_w[:, None])[:, 2 - width:]
    xs, rows, seconds = [], [], 0.0
    for d in range(live.cfg.depth):
        logits = live.dcache.forward(live.draft_model, ids, valid)[:, -1]
        tok = draw(live, logits)
        seconds += live.dcache.seconds
        live.rec.add_pass("draft", n, 1, kv.mean() + d, live.dcache.seconds,
                          live.dcache.length)
        xs.append(tok)
        rows.append(logits)
        ids, valid = tok[:, None], torch.ones((n, 1), dtype=torch.bool, device=device)
    return torch.stack(xs, dim=1), torch.stack(rows, dim=1), seconds


def draft_confidence(draft_logits, draft_tokens) -> np.ndarray:
    """The draft's temperature-1 probability of each drafted token, computed exactly as
    :func:`theory.stats_torch.path_stats_torch` computes ``draft_conf`` (so the trace records
    what the policy read).  draft_logits # [n, K, V], draft_tokens # [n, K] -> # [n, K]"""
    import torch

    p1 = torch.log_softmax(draft_logits.double(), dim=-1).exp()
    return p1.gather(-1, draft_tokens.unsqueeze(-1)).squeeze(-1).cpu().numpy()


def decide(live: Live, kv: np.ndarray, x, draft_logits) -> np.ndarray:
    """Verified lengths s # [n] int64 from the simulator's policy on the draft's signals
    (computed only when the policy reads them); budget C = k·n as in the simulator."""
    n, depth = x.shape
    signals = {"conf": draft_confidence(draft_logits, x)} if "conf" in live.policy.reads else {}
    view = StepView.from_signals(kv, live.policy.k * n, depth, **signals)
    _, verified = live.policy.decide(view)
    return np.asarray(verified, dtype=np.int64)


def target_pass(live: Live, batch: Batch, x, s: np.ndarray, kv: np.ndarray):
    """One target pass over the pending token and each request's verified prefix.

    x: # [n, K];  s: # [n] verified lengths;  kv: # [n] (pass record)
    returns logits # [n, G+1, V] (G = max s), the cache slot where the pass starts, seconds
    """
    import torch

    s_t = torch.from_numpy(s).to(live.device)
    g = int(s.max())
    ids = torch.cat([batch.pend_t, x[:, :g]], dim=1)
    valid = torch.arange(g + 1, device=live.device)[None, :] <= s_t[:, None]
    start = live.tcache.length
    logits = live.tcache.forward(live.target_model, ids, valid)
    live.rec.add_pass("target", batch.n, (s + 1).mean(), kv.mean(), live.tcache.seconds,
                      live.tcache.length)
    return logits, start, live.tcache.seconds


def verify(live: Live, batch: Batch, x, draft_logits, target_logits, s: np.ndarray):
    """τ (numpy and torch, # [n]), the extra token y # [n] and the path statistics (numpy
    dict, :func:`theory.stats_torch.path_stats_torch`) of one step.

    Uniforms: the simulator's, keyed by (seed, request, output position). ``verifier =
    "theory"``: :func:`theory.verify_torch.accept_and_residual` decides and the statistics
    are recorded off the timeline; ``"local"``: :func:`theory.stats.accept_from_stats` on
    the statistics (the simulator's τ function) and
    :func:`theory.verify_torch.extra_token_law_torch`.
    """
    import torch

    cfg, device, temp = live.cfg, live.device, float(live.cfg.temperature)
    s_t = torch.from_numpy(s).to(device)
    g = target_logits.shape[1] - 1
    ms, mb = probs_at(draft_logits, temp), probs_at(target_logits, temp)  # [n, K | G+1, V]
    eta = uniforms(live.keys[batch.act], live.rec.pos[batch.act], cfg.depth)
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
    y = sample_inverse_cdf(law, torch.from_numpy(live.rng.random(batch.n)).to(device))
    return tau, tau_t, y, stats


def commit(live: Live, batch: Batch, x, tau: np.ndarray, tau_t, y, stats: dict,
           starts: tuple[int, int], g: int) -> tuple[Batch, np.ndarray]:
    """Emit the accepted tokens and y, turn rejected slots into cache holes, compact a cache
    past ``compact_fraction`` holes, and set the pending tokens of the next step.

    starts: (draft, target) cache slots where this step's passes began;  g: max s
    returns the batch of the next step and emitted # [n]
    """
    import torch

    n, depth, device, rec = batch.n, live.cfg.depth, live.device, live.rec
    emitted = np.minimum(tau + 1, live.cfg.max_new_tokens - rec.pos[batch.act])
    rec.add_positions(batch.act, x.cpu().numpy(), stats, tau, y.cpu().numpy(), emitted)
    live.tcache.keep_slots(starts[1], torch.arange(g + 1, device=device)[None, :]
                           <= tau_t[:, None])
    width = int(batch.pend_w.max())
    live.dcache.keep_slots(starts[0], torch.cat(
        [torch.ones((n, width), dtype=torch.bool, device=device),
         torch.arange(1, depth, device=device)[None, :] <= tau_t[:, None]], dim=1))
    full = tau_t == depth  # X_K was accepted but never fed to the draft
    pend_d = torch.stack([torch.where(full, x[:, -1], torch.zeros_like(y)), y], dim=1)
    for cache in (live.dcache, live.tcache):
        if cache.holes() > live.cfg.compact_fraction:
            cache.compact()
    return Batch(batch.act, y[:, None], pend_d, 1 + full.long()), emitted


def decode_step(live: Live, batch: Batch) -> Batch:
    """draft → decide → target_pass → verify → commit, recorded as one step."""
    rec, depth = live.rec, live.cfg.depth
    start, n = live.last_end, batch.n
    kv = rec.prompt_len[batch.act] + rec.pos[batch.act]  # the simulator's KV count
    d_start = live.dcache.length
    x, draft_logits, draft_t = draft(live, batch, kv)
    s = decide(live, kv, x, draft_logits)
    target_logits, t_start, target_t = target_pass(live, batch, x, s, kv)
    tau, tau_t, y, stats = verify(live, batch, x, draft_logits, target_logits, s)
    rec.count_step(batch.act, depth, s, tau)
    batch, emitted = commit(live, batch, x, tau, tau_t, y, stats, (d_start, t_start),
                            int(s.max()))
    end = live.clock.now()
    rec.step_rows.append((0, start - live.t0, end - live.t0, n, 0, depth * n, int(s.sum()),
                          int(tau.sum()), int(emitted.sum()), depth, draft_t, target_t,
                          (end - start) - draft_t - target_t))
    live.last_end = end
    return batch


def start(draft_model, target_model, prompt_ids: list[list[int]], cfg: LiveConfig,
          names: tuple[str, str]) -> Live:
    """The shared state of a run: the simulator's policy for ``cfg`` and its uniform streams,
    empty caches on the target's device, a fresh timeline and records."""
    device = next(target_model.parameters()).device
    clock = Timeline(device)
    n = len(prompt_ids)
    return Live(draft_model=draft_model, target_model=target_model, cfg=cfg, device=device,
                policy=make_policy(cfg.sim_config(n), cfg.depth),
                rng=np.random.default_rng([int(cfg.seed), _STREAM]),
                keys=request_keys(int(cfg.seed), np.arange(n)), clock=clock,
                rec=Recorder(prompt_ids, names, str(device), cfg.dtype),
                dcache=SlotCache(clock.now), tcache=SlotCache(clock.now))


def run_live(draft_model, target_model, prompt_ids: list[list[int]], cfg: LiveConfig,
             names: tuple[str, str] = ("draft", "target")) -> LiveResult:
    """Run the batched speculative loop (module docstring) on loaded models.

    prompt_ids: N non-empty token-id lists (the batch). names: model names for the pass table.
    """
    import torch

    cfg.check()
    require(len(prompt_ids) >= 1, "prompts: expected at least one prompt, got none")
    require(all(len(p) >= 1 for p in prompt_ids), "prompts: expected non-empty token lists")
    live = start(draft_model, target_model, prompt_ids, cfg, names)
    with torch.inference_mode():
        batch = prefill(live)
        while True:
            batch = retire(live, batch)
            if batch.n == 0:
                break
            batch = decode_step(live, batch)
    return live.rec.result(cfg, VERIFIER_NAMES[cfg.verifier])
