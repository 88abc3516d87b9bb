"""Live batched speculative decoding on Hugging Face causal LMs, measured like the simulator.

:func:`run_live` runs one static batch of N requests (all arriving at t = 0, the simulator's
``arrival = "burst"`` with ``max_num_seqs = N``) through a real draft/target loop and records
exactly the tables :mod:`simulator.metrics` defines, so a live run and its simulation can be
compared column by column (``specbatch validate``).

One run (THEORY.md §1-§5 notation: draft ``Ms``, target ``Mb``, window k, extra e):

1. **Prefill step**: both models run over the right-padded prompts; the target's last row gives
   the first output token (greedy at T = 0, else sampled at temperature T).
2. **Decode step** over the n running requests:

   - *draft*: K = k (``fixed``) or K = k + e (``tetris``) sequential draft passes over the whole
     batch, each sampling ``X_j ~ Ms(·|c, X^{j-1})`` at temperature T (argmax at T = 0);
   - *policy*: ``fixed`` verifies s_i = k; ``tetris`` ranks the surrogate
     ``Π_{l≤j} Ms_1(X_l)`` (the draft's temperature-1 probability of its drafted tokens) and
     allocates the budget C = k·n with :func:`simulator.policies.allocate` (TV: global top-C,
     theory.allocate.greedy_topc; BV: exact DP, theory.allocate.optimal_dp);
   - *target*: one pass over ``pending token + X_1..X_{s_i}`` (query s_i + 1, ragged, padded);
   - *verify*: τ with γ = s_i and the simulator's counter-based uniforms
     (:func:`simulator.verify.uniforms` keyed by (seed, request, output position)), and the
     extra token from the exact law of THEORY.md §2-§3 (a bonus from ``Mb(·|X^γ)`` when τ = γ,
     else a correction from ``max(p_τ Mb(·|X^τ) − Ms(·|X^τ), 0)``, p = 1 for TV), by
     ``theory.verify_torch.accept_and_residual`` (``verifier = "theory"``, when present) or by
     :func:`theory.stats.accept_from_stats` + :func:`extra_token_law` on the recorded
     statistics (``"local"``). The path statistics q, pt, Z of the verified prefix
     (THEORY.md §3) are recorded either way, so the simulator replaying them draws the same τ;
   - the request emits ``min(τ + 1, remaining)`` tokens; finished requests leave the batch.

KV caches are reused (``past_key_values``): each model keeps one batched cache with a validity
mask (prompt padding is a hole too). Rejected draft tokens are not cropped (requests accept
different lengths) but masked out as *holes*; new tokens get explicit position ids (count of valid tokens before them), so
the attention each request sees is exactly its own sequence. When holes exceed
``compact_fraction`` of a cache it is compacted by one gather (left padding, no holes). The
cost of this bookkeeping is part of the measured overhead.

Static-batch caveat: the prefill pads every prompt to the longest one and the decode caches
keep those pads as holes (compaction cannot drop them while the longest row needs its slots),
so with prompts of unequal lengths the live engine does work a vLLM-like engine (packed
prefill, paged KV) does not, and the simulator does not charge it. Fidelity runs therefore use
equal-length prompts (``random:N:LEN``); the per-pass ``cache_slots`` column of
``profile.csv`` shows the padded attention length actually computed.

Timing: ``draft_time`` is the sum of the draft model calls, ``target_time`` the target model
call (the forward passes alone, as a latency profile measures them), ``overhead_time`` the rest
of the step (masks and position ids, draft sampling, policy, verification, cache bookkeeping); on CUDA every boundary calls ``torch.cuda.synchronize()``. Work done only to
record the run (the trace statistics when the torch verifier decides, the draft signals under
``fixed``) is paused on the timeline. Times are seconds from the start of the prefill step; ``throughput`` = output tokens / makespan as in
:func:`simulator.metrics.summarize`.

Outputs of :func:`write_live` (``OUT/``): ``requests.parquet``, ``steps.parquet``,
``summary.json`` (the simulator's tables), ``live.json`` (the manifest: models, prompt source
and lengths, policy, k, e, verify, seed, device, dtype), ``config.toml`` (the equivalent
:class:`simulator.config.SimConfig`), ``profile.csv`` (one row per forward pass in the latency
profile format of :mod:`simulator.cost`, query/KV tokens counted as the simulator counts them),
``profile_grid.csv`` (with ``--profile-grid``: both models timed on the run's
(batch, query, KV) cells, :func:`grid_cells`), ``outputs.jsonl`` (prompt and generated token ids) and ``trace/`` (a trace whose row at
every visited output position holds the drafted path's recorded statistics; rows never
visited hold a filler the replay never reads).
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
from specbatch.theory.verify_torch import extra_token_law_torch

from specbatch.errors import SpecbatchError, require
from specbatch.io import write_json

POLICIES = ("fixed", "tetris")
RULES = ("token", "block")
#: Seed-stream tag of the live loop's own draws (draft samples, extra tokens, first token).
_STREAM = 0x11FE


@dataclass(frozen=True)
class LiveConfig:
    """Settings of one live run (recorded in ``live.json``)."""

    max_new_tokens: int = 32
    policy: str = "fixed"
    k: int = 3
    extra: int = 0
    verify: str = "token"
    temperature: float = 0.0
    device: str = "cpu"
    dtype: str = "float32"
    seed: int = 0
    max_prompt_tokens: int = 512
    compact_fraction: float = 0.25
    #: "theory": τ and the extra token from theory.verify_torch.accept_and_residual when that
    #: module is present (else "local"); "local": theory.stats.accept_from_stats and
    #: :func:`extra_token_law` on the recorded statistics (the simulator's own τ function).
    verifier: str = "theory"

    @property
    def depth(self) -> int:
        """Draft passes per step: K = k (fixed) or k + e (tetris), as the simulator's policies."""
        return self.k if self.policy == "fixed" else self.k + self.extra

    def check(self) -> None:
        require(self.policy in POLICIES,
                f"--policy: expected one of {', '.join(POLICIES)}, got {self.policy!r}")
        require(self.verify in RULES, f"--verify: expected one of {', '.join(RULES)}, "
                f"got {self.verify!r}")
        require(self.k >= 1, f"--k: expected k >= 1, got {self.k}")
        require(self.extra >= 0, f"--extra: expected e >= 0, got {self.extra}")
        require(self.depth <= 64, f"--k/--extra: expected k + e <= 64, got {self.depth}")
        require(self.max_new_tokens >= 1,
                f"--max-new-tokens: expected >= 1, got {self.max_new_tokens}")
        require(math.isfinite(self.temperature) and self.temperature >= 0,
                f"--temperature: expected T >= 0, got {self.temperature}")
        require(self.seed >= 0, f"--seed: expected >= 0, got {self.seed}")
        require(self.verifier in ("theory", "local"),
                f"verifier: expected theory or local, got {self.verifier!r}")


# ----------------------------------------------------------------------------- loading
def load_models(draft: str, target: str, device: str = "cpu", dtype: str = "float32",
                seed: int = 0, layers: int | None = None):
    """(tokenizer or None, draft, target, identities) from model directories or shape names.

    Two local HF model directories load as in ``specbatch capture`` (their tokenizer included).
    A name from :mod:`traces.shapes` (e.g. ``llama-3.1-8b``) builds random weights of that
    architecture on ``device`` (seeded; ``layers`` overrides the layer count for smoke runs):
    step times depend on the shape, not on the weights, and near-uniform random rows still give
    non-trivial acceptance at temperature 1. Such runs have no tokenizer (use random prompts).
    """
    import torch
    from specbatch.traces.capture import load_pair, model_identity

    if Path(draft).is_dir() and Path(target).is_dir() and layers is None:
        tok, d, t = load_pair(draft, target, device, dtype)
        return tok, d, t, {"draft": model_identity(d, draft), "target": model_identity(t, target)}
    from specbatch.traces.profile import load_profile_model
    from specbatch.traces.shapes import SHAPES

    for role, spec in (("draft", draft), ("target", target)):
        require(Path(spec).is_dir() or spec in SHAPES,
                f"{role} model {spec}: expected a local Hugging Face model directory or a shape "
                f"name ({', '.join(sorted(SHAPES))}), got neither")
    models, ids = {}, {}
    for offset, (role, spec) in enumerate((("draft", draft), ("target", target))):
        torch.manual_seed(seed + offset)
        model, label = load_profile_model(spec, device, dtype, layers)
        models[role] = model
        ident = model_identity(model, spec)
        ident.update(name=label, path=spec if Path(spec).is_dir() else None,
                     weights="pretrained" if Path(spec).is_dir() and layers is None
                     else f"random (torch seed {seed + offset})")
        ids[role] = ident
    dv = models["draft"].get_output_embeddings().weight.shape[0]
    tv = models["target"].get_output_embeddings().weight.shape[0]
    require(dv == tv, f"models {draft} and {target}: expected the same vocabulary, got {dv} and "
            f"{tv} output logits")
    return None, models["draft"], models["target"], ids


def random_prompts(spec: str, vocab: int) -> tuple[list[list[int]], str]:
    """``random:N:LEN[:SEED]``: N prompts of LEN uniform token ids in [0, vocab) (seeded)."""
    parts = spec.split(":")
    try:
        n, length = int(parts[1]), int(parts[2])
        seed = int(parts[3]) if len(parts) > 3 else 0
    except (ValueError, IndexError):
        raise SpecbatchError(f"--prompts {spec}: expected random:N:LEN[:SEED], got a "
                             "non-integer field") from None
    require(n >= 1 and length >= 1, f"--prompts {spec}: expected N >= 1 and LEN >= 1")
    rng = np.random.default_rng([seed, 0x9A0])
    ids = rng.integers(0, vocab, size=(n, length)).tolist()
    return ids, f"{n} prompts of {length} uniform random token ids (seed {seed})"


# ----------------------------------------------------------------------------- KV cache
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


# ----------------------------------------------------------------------------- verification
def load_torch_verifier():
    """``theory.verify_torch.accept_and_residual`` (τ, unnormalised extra-token weights), or
    None where that module is not present."""
    try:
        from specbatch.theory.verify_torch import accept_and_residual
    except ModuleNotFoundError:
        return None
    return accept_and_residual


def verified_stats(draft_tokens, ms, mb, gamma):
    """q, pt, z of the drafted paths restricted to the verified prefix (THEORY.md §3).

    Positions j ≥ γ_i (0-based) were not scored by the target: pt = z = 0 there (never read by
    ``accept_from_stats`` with γ = s_i). float64 numpy out.

    draft_tokens: # [n, K] long;  ms: # [n, K, V];  mb: # [n, G+1, V] (G = max γ);  gamma: # [n]
    returns (q, pt, z, p) # [n, K] numpy float64
    """
    import torch
    from specbatch.theory.stats import block_weights

    n, k = draft_tokens.shape
    g = mb.shape[1] - 1
    tok = draft_tokens.unsqueeze(-1)
    q = ms.gather(-1, tok).squeeze(-1)
    inside = torch.arange(k, device=ms.device)[None, :] < gamma[:, None]  # [n, K]
    pt = torch.zeros_like(q)
    if g:
        pt[:, :g] = mb[:, :g].gather(-1, tok[:, :g]).squeeze(-1)
    pt = torch.where(inside, pt, 0.0)
    q_np, pt_np = q.cpu().numpy(), pt.cpu().numpy()
    p_np = block_weights(q_np, pt_np)
    z = torch.zeros_like(q)
    if g:
        p = torch.from_numpy(p_np).to(ms.device)
        p_prev = torch.cat([torch.ones_like(p[:, :1]), p[:, :-1]], dim=1)[:, :g]
        z[:, :g] = (p_prev[:, :, None] * mb[:, :g] - ms[:, :g]).clamp_(min=0.0).sum(-1)
    z = torch.where(inside, z, 0.0)
    return q_np, pt_np, z.cpu().numpy(), p_np


def draft_signals(draft_logits, draft_tokens):
    """The draft's temperature-1 confidence of its drafted tokens, entropy (nats) and top-1.

    draft_logits: # [n, K, V];  draft_tokens: # [n, K];  returns three numpy # [n, K]
    """
    import torch

    logp = torch.log_softmax(draft_logits.double(), dim=-1)
    p1 = logp.exp()
    conf = p1.gather(-1, draft_tokens.unsqueeze(-1)).squeeze(-1)
    ent = -(p1 * logp).nan_to_num(0.0).sum(-1).clamp(min=0.0)
    top1 = p1.max(-1).values
    return conf.cpu().numpy(), ent.cpu().numpy(), np.maximum(top1.cpu().numpy(),
                                                             conf.cpu().numpy())


# ----------------------------------------------------------------------------- the loop
@dataclass
class LiveResult:
    """Tables of one live run (column definitions: :mod:`simulator.metrics`)."""

    config: LiveConfig
    requests: pd.DataFrame
    steps: pd.DataFrame
    summary: dict
    passes: pd.DataFrame  # one row per forward pass (latency-profile columns)
    outputs: list  # generated token ids per request
    trace_rows: dict  # uid -> {position: (draft_token, q, pt, z, conf, entropy, top1)}
    prompt_ids: list = field(default_factory=list)


def _right_pad(seqs: list[list[int]], device, pad: int = 0):
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


def run_live(draft, target, prompt_ids: list[list[int]], cfg: LiveConfig,
             names: tuple[str, str] = ("draft", "target")) -> LiveResult:
    """Run the batched speculative loop (module docstring) on loaded models.

    prompt_ids: N token-id lists (non-empty). names: model names for the pass table.
    """
    import torch
    from specbatch.simulator.engine import STEP_COLUMNS
    from specbatch.simulator.metrics import summarize
    from specbatch.simulator.policies import allocate
    from specbatch.simulator.verify import request_keys, uniforms
    from specbatch.theory.stats import accept_from_stats
    from specbatch.theory.stats_torch import probs_at, sample_inverse_cdf

    torch_verifier = load_torch_verifier() if cfg.verifier == "theory" else None

    cfg.check()
    require(len(prompt_ids) >= 1, "prompts: expected at least one prompt, got none")
    require(all(len(p) >= 1 for p in prompt_ids), "prompts: expected non-empty token lists")
    device = next(target.parameters()).device
    cuda = device.type == "cuda"
    temp, depth, rule = float(cfg.temperature), cfg.depth, cfg.verify
    n_req, max_new = len(prompt_ids), int(cfg.max_new_tokens)
    rng = np.random.default_rng([int(cfg.seed), _STREAM])
    keys = request_keys(int(cfg.seed), np.arange(n_req))  # same streams as the simulator
    prompt_len = np.array([len(p) for p in prompt_ids], dtype=np.int64)

    clock = {"paused": 0.0}

    def now() -> float:
        """Seconds on the measured timeline (instrumentation time excluded)."""
        if cuda:
            torch.cuda.synchronize(device)
        return time.perf_counter() - clock["paused"]

    class instrumentation:  # noqa: N801 - a context manager used as a statement
        """Work done only to record the run (trace statistics): paused on the timeline."""

        def __enter__(self):
            self.start = now()

        def __exit__(self, *exc):
            clock["paused"] += now() - self.start

    def draw(logits):
        """One token per row at temperature T (argmax at T = 0).  logits # [n, V]"""
        if temp == 0:
            return logits.argmax(-1)
        u = torch.from_numpy(rng.random(logits.shape[0])).to(device)
        return sample_inverse_cdf(probs_at(logits, temp), u)

    dname, tname = names
    dev_name, dtype_name = str(device), cfg.dtype
    passes: list[tuple] = []

    def record_pass(role, n, query, kv, seconds, slots) -> None:
        passes.append((dname if role == "draft" else tname, role, dev_name, dtype_name, n,
                       float(query), float(kv), float(seconds), int(slots)))

    first_token = np.full(n_req, np.nan)
    finish = np.full(n_req, np.nan)
    r_steps, r_drafted, r_verified, r_accepted = (np.zeros(n_req, dtype=np.int64)
                                                  for _ in range(4))
    pos = np.zeros(n_req, dtype=np.int64)  # tokens emitted so far = output position t
    outputs: list[list[int]] = [[] for _ in range(n_req)]
    trace_rows: dict[int, dict] = {i: {} for i in range(n_req)}
    step_rows: list[tuple] = []
    dcache, tcache = SlotCache(now), SlotCache(now)

    with torch.inference_mode():
        t0 = now()
        # ---------------------------------------------------------------- prefill step
        ids, valid = _right_pad(prompt_ids, device)
        a = now()
        dcache.forward(draft, ids, valid, keep=1)  # the draft's prefill logits are not used
        # only the rows' last prompt slots need logits (as a serving engine computes them)
        ends, where = np.unique(prompt_len - 1, return_inverse=True)
        logits = tcache.forward(target, ids, valid, keep=torch.from_numpy(ends).to(device))
        logits = logits[torch.arange(n_req, device=device), torch.from_numpy(where).to(device)]
        y0 = draw(logits)
        pre_d, pre_t = dcache.seconds, tcache.seconds
        record_pass("draft", n_req, prompt_len.mean(), 0, pre_d, ids.shape[1])
        record_pass("target", n_req, prompt_len.mean(), 0, pre_t, ids.shape[1])
        act = np.arange(n_req)
        pend_t = y0[:, None]  # [n, 1] the last emitted token, not yet in the target cache
        pend_d = torch.stack([torch.zeros_like(y0), y0], dim=1)  # [n, 2], left-padded
        pend_w = torch.ones(n_req, dtype=torch.long, device=device)  # 1 or 2 tokens pending
        for i, tok in enumerate(y0.tolist()):
            outputs[i].append(int(tok))
        pos[:] = 1
        end = now()
        first_token[:] = end - t0
        step_rows.append((0, a - t0, end - t0, 0, int(prompt_len.sum()), 0, 0, 0, n_req, 0,
                          pre_d, pre_t, (end - a) - pre_d - pre_t))
        last_end = end

        # ---------------------------------------------------------------- decode steps
        while True:
            done = pos[act] >= max_new
            if done.any():
                finish[act[done]] = last_end - t0
                rows = torch.from_numpy(np.flatnonzero(~done)).to(device)
                act = act[~done]
                if act.size:
                    for cache in (dcache, tcache):
                        cache.select(rows)
                    pend_t, pend_d, pend_w = pend_t[rows], pend_d[rows], pend_w[rows]
            if act.size == 0:
                break
            start = last_end
            n = act.size
            kv = prompt_len[act] + pos[act]  # the simulator's KV count (pending token included)
            # draft: K sequential passes over the batch
            width = int(pend_w.max())
            ids = pend_d[:, 2 - width:]
            valid = (torch.arange(2, device=device)[None, :] >= 2 - pend_w[:, None])[:, 2 - width:]
            d_start = dcache.length
            draft_t = 0.0
            xs, dl = [], []
            for d in range(depth):
                logits = dcache.forward(draft, ids, valid)[:, -1]
                tok = draw(logits)
                draft_t += dcache.seconds
                record_pass("draft", n, 1, kv.mean() + d, dcache.seconds, dcache.length)
                xs.append(tok)
                dl.append(logits)
                ids, valid = tok[:, None], torch.ones((n, 1), dtype=torch.bool, device=device)
            x = torch.stack(xs, dim=1)  # [n, K]
            d_logits = torch.stack(dl, dim=1)  # [n, K, V]
            # policy (before verification: draft-side signals only)
            if cfg.policy == "fixed":
                with instrumentation():
                    conf, ent, top1 = draft_signals(d_logits, x)
                s = np.full(n, cfg.k, dtype=np.int64)
            else:
                conf, ent, top1 = draft_signals(d_logits, x)
                s = allocate(np.cumprod(conf, axis=1), cfg.k * n, rule).astype(np.int64)
            s_t = torch.from_numpy(s).to(device)
            g = int(s.max())
            # target: one pass over the pending token and the verified prefix
            ids = torch.cat([pend_t, x[:, :g]], dim=1)
            valid = torch.arange(g + 1, device=device)[None, :] <= s_t[:, None]
            t_start = tcache.length
            t_logits = tcache.forward(target, ids, valid)
            target_t = tcache.seconds
            record_pass("target", n, (s + 1).mean(), kv.mean(), target_t, tcache.length)
            # verification: statistics of the verified prefix, τ with the simulator's uniforms
            ms = probs_at(d_logits, temp)  # [n, K, V]
            mb = probs_at(t_logits, temp)  # [n, g+1, V]
            eta = uniforms(keys[act], pos[act], depth)
            if torch_verifier is not None and g > 0:
                tau_t, law = torch_verifier(rule, x[:, :g], ms[:, :g], mb,
                                            torch.from_numpy(eta[:, :g]).to(device),
                                            lengths=s_t)
                tau = tau_t.cpu().numpy().astype(np.int64)
                with instrumentation():
                    q, pt, z, p = verified_stats(x, ms, mb, s_t)
            else:
                q, pt, z, p = verified_stats(x, ms, mb, s_t)
                tau = accept_from_stats(q, pt, z, s, eta, rule).astype(np.int64)
                tau_t = torch.from_numpy(tau).to(device)
                law = extra_token_law_torch(ms, mb, tau_t, rule, gamma=s_t,
                                           p=torch.from_numpy(p).to(device))
            y = sample_inverse_cdf(law, torch.from_numpy(rng.random(n)).to(device))
            emitted = np.minimum(tau + 1, max_new - pos[act])
            x_cpu, y_cpu = x.cpu().numpy(), y.cpu().numpy()
            for i, u in enumerate(act.tolist()):
                trace_rows[u][int(pos[u])] = (x_cpu[i], q[i], pt[i], z[i], conf[i], ent[i],
                                              top1[i])
                outputs[u].extend([int(t) for t in x_cpu[i, :tau[i]]] + [int(y_cpu[i])])
                del outputs[u][int(pos[u] + emitted[i]):]
            # caches: rejected draft tokens become holes
            ar_g = torch.arange(g + 1, device=device)[None, :]
            tcache.keep_slots(t_start, ar_g <= tau_t[:, None])
            keep_d = torch.cat([torch.ones((n, width), dtype=torch.bool, device=device),
                                torch.arange(1, depth, device=device)[None, :] <= tau_t[:, None]],
                               dim=1)
            dcache.keep_slots(d_start, keep_d)
            full = tau_t == depth  # X_K was accepted but never fed to the draft
            pend_d = torch.stack([torch.where(full, x[:, -1], torch.zeros_like(y)), y], dim=1)
            pend_w = 1 + full.long()
            pend_t = y[:, None]
            for cache in (dcache, tcache):
                if cache.holes() > cfg.compact_fraction:
                    cache.compact()
            pos[act] += emitted
            r_steps[act] += 1
            r_drafted[act] += depth
            r_verified[act] += s
            r_accepted[act] += tau
            end = now()
            step_rows.append((0, start - t0, end - t0, n, 0, depth * n, int(s.sum()),
                              int(tau.sum()), int(emitted.sum()), depth, draft_t, target_t,
                              (end - start) - draft_t - target_t))
            last_end = end

    requests = pd.DataFrame({
        "uid": np.arange(n_req, dtype=np.int64), "trace_index": np.arange(n_req, dtype=np.int64),
        "replica": np.zeros(n_req, dtype=np.int64), "prompt_len": prompt_len,
        "output_len": np.full(n_req, max_new, dtype=np.int64),
        "arrival": np.zeros(n_req), "first_token": first_token, "finish": finish,
        "tokens": pos.copy(), "steps": r_steps, "drafted": r_drafted, "verified": r_verified,
        "accepted": r_accepted,
    })
    cols = list(zip(*step_rows))
    steps = pd.DataFrame({name: np.asarray(v, dtype=np.float64 if name in (
        "time", "end", "draft_time", "target_time", "overhead_time") else np.int64)
        for name, v in zip(STEP_COLUMNS, cols)})
    summary = summarize(requests, steps)
    decode = steps[steps["batch"] > 0]
    summary.update({
        "policy": cfg.policy, "verify": cfg.verify, "live": True, "device": dev_name,
        "verifier": "specbatch.theory.verify_torch" if torch_verifier is not None
        else "specbatch.theory.stats.accept_from_stats + extra_token_law",
        "dtype": cfg.dtype, "step_latency_mean": float((steps["end"] - steps["time"]).mean()),
        "decode_step_latency_mean": float((decode["end"] - decode["time"]).mean())
        if len(decode) else float("nan"),
        "overhead_per_decode_step": float(decode["overhead_time"].mean())
        if len(decode) else float("nan"),
    })
    pass_df = pd.DataFrame(passes, columns=["model", "role", "device", "dtype", "batch_size",
                                            "query_tokens", "kv_tokens", "latency_s",
                                            "cache_slots"])
    return LiveResult(config=cfg, requests=requests, steps=steps, summary=summary,
                      passes=pass_df, outputs=outputs, trace_rows=trace_rows,
                      prompt_ids=[list(map(int, p)) for p in prompt_ids])


# ----------------------------------------------------------------------------- grid profile
def grid_cells(n: int, depth: int, prompt_mean: float, max_new: int) -> dict:
    """The (batch, query, kv) cells a live run's workload visits, as a profiling grid.

    Batches n, ⌈n/2⌉, ⌈n/4⌉, ..., 1; KV lengths prompt, prompt + max_new/2, prompt + max_new
    (prompt = mean prompt length); queries 1 (draft) and 1..K+1 (target); plus the prefill
    cell (query = mean prompt length, KV 0) at every batch size. returns role -> list of cells.
    """
    batches, b = [], int(n)
    while True:
        batches.append(b)
        if b == 1:
            break
        b = (b + 1) // 2
    p = max(1, int(round(prompt_mean)))
    kvs = sorted({p, p + max_new // 2, p + max_new})
    prefill = [(b, p, 0) for b in batches]
    return {"draft": [(b, 1, kv) for b in batches for kv in kvs] + prefill,
            "target": [(b, q, kv) for b in batches for q in range(1, depth + 2) for kv in kvs]
            + prefill}


def time_masked_forward(model, batch: int, query: int, kv: int, warmup: int = 2,
                        repeats: int = 5) -> list[float]:
    """Wall seconds of ``repeats`` forward passes of ``[batch, query]`` new tokens on ``kv``
    random cached ones, called exactly as the live loop calls the model (a 2-D attention mask
    and explicit position ids; only the last position's logits for a prefill, all ``query``
    positions otherwise); ``torch.cuda.synchronize`` around each pass on CUDA.

    :func:`traces.profile.time_forward` passes no mask (HF may then take a cheaper causal
    path), so this is the profile of the engine that :func:`run_live` actually runs.
    """
    import torch
    from transformers import DynamicCache

    p = next(model.parameters())
    device, dtype = p.device, p.dtype
    c = model.config
    heads = getattr(c, "num_key_value_heads", None) or c.num_attention_heads
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    gen = torch.Generator(device="cpu").manual_seed(0)
    ids = torch.randint(0, c.vocab_size, (batch, query), generator=gen).to(device)
    mask = torch.ones((batch, kv + query), dtype=torch.long, device=device)
    pos = (kv + torch.arange(query, device=device))[None].expand(batch, -1)
    keep = 1 if kv == 0 else query
    cuda = device.type == "cuda"
    times = []
    with torch.inference_mode():
        for i in range(warmup + repeats):
            cache = None
            if kv:
                shape = (batch, heads, kv, head_dim)
                cache = DynamicCache([(torch.randn(shape, device=device, dtype=dtype),
                                       torch.randn(shape, device=device, dtype=dtype))
                                      for _ in range(c.num_hidden_layers)])
            if cuda:
                torch.cuda.synchronize(device)
            t0 = time.perf_counter()
            model(input_ids=ids, attention_mask=mask, position_ids=pos, past_key_values=cache,
                  use_cache=True, logits_to_keep=keep)
            if cuda:
                torch.cuda.synchronize(device)
            if i >= warmup:
                times.append(time.perf_counter() - t0)
    return times


def profile_grid(draft, target, names: tuple[str, str], cells: dict, device: str, dtype: str,
                 warmup: int = 2, repeats: int = 5) -> pd.DataFrame:
    """Median forward-pass time of uniform batches on random KV caches
    (:func:`time_masked_forward`) at every cell of :func:`grid_cells`; latency-profile columns
    (:data:`traces.profile.PROFILE_COLUMNS`). Measured separately from the live run, so a cost
    model fitted to it is out-of-sample for that run."""
    import statistics

    from specbatch.traces.profile import PROFILE_COLUMNS

    rows = []
    for role, model, name in (("draft", draft, names[0]), ("target", target, names[1])):
        for b, q, kv in cells[role]:
            times = time_masked_forward(model, b, q, kv, warmup, repeats)
            rows.append({"model": name, "role": role, "device": device, "dtype": dtype,
                         "batch_size": b, "query_tokens": q, "kv_tokens": kv,
                         "latency_s": statistics.median(times), "repeats": repeats,
                         "latency_min_s": min(times), "latency_max_s": max(times)})
    return pd.DataFrame(rows, columns=list(PROFILE_COLUMNS))


# ----------------------------------------------------------------------------- outputs
def build_trace(result: LiveResult, meta_extra: dict | None = None):
    """A :class:`traces.format.Trace` of the live run: row t of request r holds the statistics
    of the path drafted at output position t (visited positions); other rows hold a filler
    (q = 1, pt = z = 0, confidence 1) that a replay of the same run never reads."""
    from specbatch.traces.format import default_meta, make_trace

    cfg = result.config
    k = cfg.depth
    n_req = len(result.prompt_ids)
    out_len = result.requests["output_len"].to_numpy()
    rows = int(out_len.sum())
    cols = {"draft_token": np.zeros((rows, k), dtype=np.int32), "q": np.ones((rows, k)),
            "pt": np.zeros((rows, k)), "z": np.zeros((rows, k)),
            "draft_conf": np.ones((rows, k)), "entropy": np.zeros((rows, k)),
            "top1": np.ones((rows, k))}
    offsets = np.concatenate([[0], np.cumsum(out_len)])
    names = ("draft_token", "q", "pt", "z", "draft_conf", "entropy", "top1")
    visited = 0
    for r in range(n_req):
        for t, values in result.trace_rows[r].items():
            row = offsets[r] + t
            for name, v in zip(names, values):
                cols[name][row] = v
            visited += 1
    meta = default_meta(cfg.temperature, k, source="specbatch live", visited_rows=visited,
                        **(meta_extra or {}))
    requests = {"request_id": np.arange(n_req, dtype=np.int64),
                "prompt_len": result.requests["prompt_len"].to_numpy(),
                "output_len": out_len, "category": np.array(["live"] * n_req, dtype=object),
                "arrival": np.zeros(n_req)}
    return make_trace(meta, requests, cols)


def sim_config_values(cfg: LiveConfig, n_requests: int) -> dict:
    """SimConfig fields that describe the same workload (burst of N, one batch of N)."""
    return {"requests": n_requests, "sampling": "in_order", "arrival": "burst",
            "max_num_seqs": n_requests, "policy": cfg.policy, "num_speculative_tokens": cfg.k,
            "extra": cfg.extra if cfg.policy == "tetris" else 0, "verify": cfg.verify,
            "seed": cfg.seed}


def write_live(result: LiveResult, out: str | Path, manifest: dict) -> Path:
    """Write the tables, manifest, profile, outputs and trace into ``out`` (module docstring)."""
    from specbatch.simulator.config import make_config, to_toml
    from specbatch.traces.format import write_trace

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    result.requests.to_parquet(out / "requests.parquet", index=False)
    result.steps.to_parquet(out / "steps.parquet", index=False)
    write_json(out / "summary.json", result.summary)
    result.passes.to_csv(out / "profile.csv", index=False)
    with open(out / "outputs.jsonl", "w") as fh:
        for i, toks in enumerate(result.outputs):
            fh.write(json.dumps({"uid": i, "prompt_ids": result.prompt_ids[i],
                                 "output_ids": toks}) + "\n")
    write_trace(build_trace(result, {"live_manifest": "../live.json"}), out / "trace")
    values = sim_config_values(result.config, len(result.prompt_ids))
    values.update(trace=str((out / "trace").resolve()), cost="profiled",
                  profile=str((out / "profile.csv").resolve()))
    (out / "config.toml").write_text(to_toml(make_config(values, "live config")))
    full = {**manifest, "settings": asdict(result.config), "depth": result.config.depth,
            "requests": len(result.prompt_ids),
            "prompt_len": result.requests["prompt_len"].tolist(),
            "kv_cache": "reused (past_key_values); rejected tokens masked as holes, compacted "
                        f"when holes exceed {result.config.compact_fraction:g} of a cache",
            "files": ["requests.parquet", "steps.parquet", "summary.json", "profile.csv",
                      "outputs.jsonl", "trace/", "config.toml"]}
    write_json(out / "live.json", full)
    return out


# ----------------------------------------------------------------------------- validate
def _rel(sim: float, meas: float) -> float:
    """Relative error (simulated − measured) / measured (NaN when measured is 0)."""
    return (sim - meas) / meas if meas else float("nan")


def read_live(live_dir: str | Path) -> dict:
    """The manifest and tables of a ``specbatch live`` output directory (one-line errors)."""
    from specbatch.traces.format import read_trace

    d = Path(live_dir)
    require(d.is_dir(), f"LIVE_DIR {d}: expected the output directory of `specbatch live`, "
            "got no such directory")
    for name in ("live.json", "requests.parquet", "steps.parquet", "profile.csv", "trace"):
        require((d / name).exists(), f"file {d / name}: expected a `specbatch live` output, "
                "got no such file")
    try:
        manifest = json.loads((d / "live.json").read_text())
    except json.JSONDecodeError as exc:
        raise SpecbatchError(f"file {d / 'live.json'}: expected JSON, got {exc}") from None
    require(isinstance(manifest, dict) and isinstance(manifest.get("settings"), dict),
            f"file {d / 'live.json'}: field settings: expected the live settings, got none")
    try:
        requests = pd.read_parquet(d / "requests.parquet")
        steps = pd.read_parquet(d / "steps.parquet")
    except Exception as exc:  # noqa: BLE001 - any reader failure is a bad file
        raise SpecbatchError(f"LIVE_DIR {d}: cannot read the tables: "
                             f"{str(exc).splitlines()[0][:160]}") from None
    return {"dir": d, "manifest": manifest, "requests": requests, "steps": steps,
            "trace": read_trace(d / "trace")}


def fit_in_sample(path: str | Path, overhead: float):
    """:class:`simulator.cost.ProfiledCost` fitted to a live run's own ``profile.csv``.

    Same law and cross-validation as :func:`simulator.cost.fit_profile` (one
    :func:`simulator.cost.fit_role` per role) but without its minimum of rows per role, so a
    short run still validates (a fit on fewer rows than features is weak; the CV MAPE says so).
    """
    from specbatch.simulator.cost import ProfiledCost, fit_role, read_profile

    df = read_profile(path)
    fits = {}
    for role in ("draft", "target"):
        rows = df[df["role"] == role]
        require(len(rows) >= 2, f"profile {path}: column role: {len(rows)} rows for {role!r}, "
                "expected at least 2")
        fits[role] = fit_role(rows["batch_size"], rows["query_tokens"], rows["kv_tokens"],
                              rows["latency_s"], role=role, model=str(rows["model"].iloc[0]))
    return ProfiledCost(fits=fits, overhead=float(overhead), path=str(path))


def combine_profiles(paths: list[str], out: Path) -> str:
    """One latency-profile CSV from several (e.g. one per role from ``specbatch profile``)."""
    from specbatch.simulator.cost import read_profile

    frames = [read_profile(p) for p in paths]
    pd.concat(frames, ignore_index=True).to_csv(out, index=False)
    return str(out)


def validate(live_dir: str | Path, profile: str | list | None = None,
             target_model: str | None = None,
             draft_model: str | None = None, overhead: float | None = None,
             out: str | Path | None = None, in_sample: bool = False) -> dict:
    """Simulate a live run's workload and compare (``specbatch validate``).

    Workload: the live run's own trace (``LIVE_DIR/trace``: the statistics recorded at every
    visited output position), N requests with their prompt and output lengths, burst arrival,
    ``max_num_seqs = N``, the same policy, k, e, budget (k × running) and verifier, and the same
    seed, hence the same verifier uniforms. At temperature 0 — and at any temperature when the
    replay draws the same τ — the simulated run visits exactly the live run's positions and
    takes the same steps (``trajectory_match``); the remaining error is the cost model's.

    Cost model: :func:`simulator.cost.fit_profile` on ``profile`` (one or several files); by
    default on ``LIVE_DIR/profile_grid.csv`` when ``specbatch live --profile-grid`` measured
    one (same models and device, separate uniform-batch passes: out-of-sample), else (or with
    ``in_sample``) :func:`fit_in_sample` on the live run's own ``profile.csv`` (one row per
    measured forward pass: an **in-sample** fit). The per-step
    overhead is ``overhead`` or the live run's mean measured overhead per step.
    Returns the report dict (measured, simulated, relative errors).
    """
    from specbatch.simulator.config import make_config
    from specbatch.simulator.cost import fit_profile
    from specbatch.simulator.run import simulate

    live = read_live(live_dir)
    d, man, meas_req, meas_steps = live["dir"], live["manifest"], live["requests"], live["steps"]
    st = man["settings"]
    cfg = LiveConfig(**{k: st[k] for k in LiveConfig.__dataclass_fields__ if k in st})
    n_req = int(meas_req.shape[0])
    if not profile and not in_sample and (d / "profile_grid.csv").is_file():
        profile = str(d / "profile_grid.csv")
    in_sample = bool(in_sample) or not profile
    if isinstance(profile, (list, tuple)) and len(profile) == 1:
        profile = profile[0]
    profile_path = str(d / "profile.csv") if in_sample else profile
    over = float(meas_steps["overhead_time"].mean()) if overhead is None else float(overhead)
    require(math.isfinite(over) and over >= 0, f"--overhead: expected seconds >= 0, got {over}")
    if in_sample:
        cost = fit_in_sample(profile_path, over)
    elif isinstance(profile_path, (list, tuple)):
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            combined = combine_profiles(list(profile_path), Path(tmp) / "profile.csv")
            cost = fit_profile(combined, overhead=over, target=target_model, draft=draft_model)
        profile_path = ", ".join(map(str, profile_path))
    else:
        profile_path = str(profile_path)
        cost = fit_profile(profile_path, overhead=over, target=target_model, draft=draft_model)
    for role in ("draft", "target"):
        require(role in cost.fits, f"profile {profile_path}: column role: no {role} rows")
    values = sim_config_values(cfg, n_req)
    values.update(trace=str(d / "trace"), cost="profiled",
                  profile=str(d / "profile.csv") if in_sample else profile_path)
    config = make_config(values, f"live manifest {d / 'live.json'}")
    sim = simulate(config, trace=live["trace"], cost_model=cost)
    if out is not None:
        sim.write(out)
    s_steps, s_sum = sim.steps, sim.summary
    m_sum = json.loads((d / "summary.json").read_text()) if (d / "summary.json").is_file() \
        else {}
    same = (len(s_steps) == len(meas_steps)
            and bool((s_steps["accepted"].to_numpy() == meas_steps["accepted"].to_numpy()).all())
            and bool((s_steps["verified"].to_numpy() == meas_steps["verified"].to_numpy()).all()))
    m_lat = (meas_steps["end"] - meas_steps["time"]).to_numpy()
    s_lat = (s_steps["end"] - s_steps["time"]).to_numpy()
    m_dec = meas_steps["batch"].to_numpy() > 0
    s_dec = s_steps["batch"].to_numpy() > 0
    tokens = int(meas_req["tokens"].sum())
    m_makespan = float(meas_req["finish"].max() - meas_req["arrival"].min())
    measured = {
        "throughput": tokens / m_makespan if m_makespan else float("nan"),
        "makespan": m_makespan, "steps": int(len(meas_steps)),
        "step_latency_mean": float(m_lat.mean()),
        "decode_step_latency_mean": float(m_lat[m_dec].mean()) if m_dec.any() else float("nan"),
        "draft_time": float(meas_steps["draft_time"].sum()),
        "target_time": float(meas_steps["target_time"].sum()),
        "overhead_time": float(meas_steps["overhead_time"].sum()),
        "mal": m_sum.get("mal"), "tokens": tokens,
    }
    simulated = {
        "throughput": float(s_sum["throughput"]), "makespan": float(s_sum["makespan"]),
        "steps": int(len(s_steps)), "step_latency_mean": float(s_lat.mean()),
        "decode_step_latency_mean": float(s_lat[s_dec].mean()) if s_dec.any() else float("nan"),
        "draft_time": float(s_sum["draft_time"]), "target_time": float(s_sum["target_time"]),
        "overhead_time": float(s_sum["overhead_time"]), "mal": float(s_sum["mal"]),
        "tokens": int(s_sum["tokens"]),
    }
    errors = {key: _rel(simulated[key], measured[key]) for key in
              ("throughput", "makespan", "step_latency_mean", "decode_step_latency_mean",
               "draft_time", "target_time", "overhead_time")}
    if same:
        errors["step_latency_mape"] = float(np.mean(np.abs(s_lat - m_lat) / m_lat))
    report = {
        "live_dir": str(d), "policy": cfg.policy, "verify": cfg.verify, "k": cfg.k,
        "extra": cfg.extra, "requests": n_req, "temperature": cfg.temperature,
        "device": man.get("settings", {}).get("device"), "dtype": cfg.dtype,
        "acceptance": "replay of the live run's recorded per-position statistics "
                      "(LIVE_DIR/trace, same verifier uniforms)",
        "trajectory_match": same,
        "cost_model": "profiled law (simulator.cost) fitted to " + (
            "the live run's own passes (in-sample)" if in_sample else profile_path),
        "cost_cv_mape": cost.cv_mape, "overhead_per_step": over,
        "measured": measured, "simulated": simulated, "relative_error": errors,
    }
    if out is not None:

        write_json(Path(out) / "validate.json", report)
    return report


def format_report(report: dict) -> str:
    """Plain-text table of :func:`validate`'s report."""
    m, s, e = report["measured"], report["simulated"], report["relative_error"]
    lines = [
        f"live run    {report['live_dir']}  ({report['policy']}, verify {report['verify']}, "
        f"k {report['k']}, e {report['extra']}, N {report['requests']}, "
        f"T {report['temperature']:g}, {report['device']} {report['dtype']})",
        f"acceptance  {report['acceptance']}; same trajectory: {report['trajectory_match']}",
        f"cost model  {report['cost_model']}; CV MAPE "
        + ", ".join(f"{r} {v:.1%}" for r, v in report["cost_cv_mape"].items())
        + f"; overhead {report['overhead_per_step'] * 1e3:.3f} ms/step",
        "",
        f"{'metric':<26}{'measured':>14}{'simulated':>14}{'rel. error':>12}",
    ]
    for key, unit, scale in (("throughput", "tok/s", 1.0), ("makespan", "s", 1.0),
                             ("step_latency_mean", "ms", 1e3),
                             ("decode_step_latency_mean", "ms", 1e3),
                             ("draft_time", "s", 1.0), ("target_time", "s", 1.0),
                             ("overhead_time", "s", 1.0)):
        lines.append(f"{key + ' (' + unit + ')':<26}{m[key] * scale:>14.4f}"
                     f"{s[key] * scale:>14.4f}{e[key]:>+12.1%}")
    lines.append(f"{'steps':<26}{m['steps']:>14d}{s['steps']:>14d}")
    if "step_latency_mape" in e:
        lines.append(f"per-step latency MAPE (aligned steps): {e['step_latency_mape']:.1%}")
    return "\n".join(lines)
