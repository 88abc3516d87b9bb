"""The live engine as a server's core: requests arrive at any time and join the running batch.

:func:`specbatch.live.loop.run_live` runs a fixed set of requests with one temperature; a
server needs what vLLM's engine core does: a background loop that takes requests as they
come (each with its own temperature T, seed, output length and logprobs), admits them into
``max_num_seqs`` slots of the same :class:`~.cache.SlotCache` the live run uses, and runs
decode steps over everything running. A step is the live loop's (THEORY.md §1-§3):

- joiners get a prefill-only step (vLLM V0's rule, :mod:`.loop`), the first token drawn from
  the target's last prompt row at the request's T (argmax at T = 0);
- ``speculate = "fixed:K"``: K sequential draft passes, ``X_j ~ Ms(·|c, X^{j-1})`` at the
  row's T (``draft_sample = "greedy"``: ``X_j = argmax Ms``, passed to the sampler as
  ``draft_probs = None``, vLLM's ``draft_sample_method``); one target pass over the pending
  token and ``X_1..X_K``; then the *sampler* with ``specbatch conform``'s engine signature
  (:mod:`specbatch.theory.conform.samplers`) decides ``X^τ`` and the extra token. The verifier
  is a rule of :mod:`specbatch.simulator.replay.rules` (``token``: TV, ``block``: BV, both
  :func:`theory.verify.torch_batched.verify_torch`) or any sampler named by ``sampler``
  (a built-in, a catalogued engine bug, or ``package.module:callable``), so a deliberately
  broken sampler can be served and caught over HTTP;
- ``speculate = "off"``: one target pass per step, one token per request (the reference a
  speculative server must match in law).

Randomness: a request with a ``seed`` has its own ``torch.Generator`` (draft uniforms, first
token, and the sampler's generator), so it reproduces whatever else is running; the sampler is
then called on that row alone. Unseeded rows share the engine's generator (seeded by the
server's seed) and are verified in one sampler call over all of them, as an engine does: a
sampler whose fault depends on the batch (1Cat-vLLM #656, batch > 2) shows only there.

Counters follow vLLM's speculative-decoding metrics (``vllm/v1/spec_decode/metrics.py``): per
request-step with drafts, one *draft*, K *draft tokens*, τ *accepted tokens*, and one accepted
token at every position j < τ (THEORY.md §9: MAL = 1 + A/D, acceptance rate A/T).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from specbatch.errors import SpecbatchError, require

#: Draft sampling methods (vLLM's ``draft_sample_method``).
DRAFT_SAMPLES = ("probabilistic", "greedy")


def parse_speculate(text: str) -> int:
    """``off`` -> 0, ``fixed:K`` -> K (1..64); a one-line error naming ``--speculate``."""
    if text == "off":
        return 0
    kind, _, k = text.partition(":")
    require(kind == "fixed" and k.isdigit() and 1 <= int(k) <= 64,
            f"--speculate: expected off or fixed:K with 1 <= K <= 64, got {text!r}")
    return int(k)


@dataclass(frozen=True)
class ServeConfig:
    """Settings of one server (module docstring).

    speculate: ``off`` or ``fixed:K``; verify: a chain rule of the rule catalogue; sampler:
    a sampler spec that replaces the rule's (None: the rule's ``tv-torch``/``bv-torch``);
    draft_sample: ``probabilistic`` or ``greedy``; max_num_seqs: running slots; max_model_len:
    prompt + output tokens per request; seed: the engine generator's seed.
    """

    speculate: str = "fixed:3"
    verify: str = "token"
    sampler: str | None = None
    draft_sample: str = "probabilistic"
    max_num_seqs: int = 16
    max_model_len: int = 512
    seed: int = 0

    @property
    def k(self) -> int:
        """K, draft tokens per request-step (0: no speculation)."""
        return parse_speculate(self.speculate)

    def check(self) -> None:
        from specbatch.simulator.replay.rules import names

        self.k  # noqa: B018 - parses --speculate
        chain = names(kind="chain")
        require(self.verify in chain, f"--verify: expected a chain rule of the rule catalogue "
                f"({', '.join(chain)}; tree rules verify trees, a server drafts chains), got "
                f"{self.verify!r}")
        require(self.draft_sample in DRAFT_SAMPLES, f"--draft-sample: expected one of "
                f"{', '.join(DRAFT_SAMPLES)}, got {self.draft_sample!r}")
        require(self.max_num_seqs >= 1, f"--max-num-seqs: expected >= 1, got "
                f"{self.max_num_seqs}")
        require(self.max_model_len >= 2, f"--max-model-len: expected >= 2, got "
                f"{self.max_model_len}")

    @property
    def sampler_spec(self) -> str:
        """The sampler actually served: ``sampler`` or the rule's torch verifier."""
        return self.sampler or {"token": "tv-torch", "block": "bv-torch"}[self.verify]


@dataclass
class GenRequest:
    """One generation: its inputs, then what the engine filled in (``on_done`` is called from
    the engine thread when it finished, or with ``error`` set when its step failed)."""

    prompt_ids: list[int]
    max_tokens: int
    temperature: float = 1.0
    seed: int | None = None
    top_logprobs: int = 0
    ignore_eos: bool = False
    on_done: Any = None
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    top: list[list[tuple[int, float]]] = field(default_factory=list)
    finish_reason: str | None = None
    error: str | None = None
    generator: Any = None


class Counters:
    """vLLM's speculative-decoding and request counters (module docstring), thread-safe."""

    def __init__(self, k: int) -> None:
        self.lock = threading.Lock()
        self.drafts = self.draft_tokens = self.accepted = 0
        self.per_pos = [0] * k
        self.prompt_tokens = self.generation_tokens = 0
        self.finished: dict[str, int] = {}
        self.failed = 0

    def count_step(self, k: int, tau: np.ndarray) -> None:
        with self.lock:
            self.drafts += len(tau)
            self.draft_tokens += k * len(tau)
            self.accepted += int(tau.sum())
            for j in range(k):
                self.per_pos[j] += int((tau > j).sum())

    def count_done(self, req: GenRequest) -> None:
        with self.lock:
            self.prompt_tokens += len(req.prompt_ids)
            self.generation_tokens += len(req.tokens)
            self.finished[req.finish_reason] = self.finished.get(req.finish_reason, 0) + 1

    def snapshot(self) -> dict:
        with self.lock:
            return {"drafts": self.drafts, "draft_tokens": self.draft_tokens,
                    "accepted": self.accepted, "per_pos": list(self.per_pos),
                    "prompt_tokens": self.prompt_tokens,
                    "generation_tokens": self.generation_tokens,
                    "finished": dict(self.finished), "failed": self.failed}


def row_probs(logits, temps):
    """Float64 laws at each row's temperature, one-hot at the argmax where T = 0.

    logits # [n, ..., V]; temps # [n] float -> # [n, ..., V]
    """
    import torch

    t = torch.as_tensor(np.asarray(temps, dtype=np.float64), device=logits.device)
    shape = (-1,) + (1,) * (logits.dim() - 1)
    greedy = (t == 0).view(shape)
    x = logits.double()
    soft = torch.softmax(x / torch.where(t == 0, 1.0, t).view(shape), dim=-1)
    hot = torch.nn.functional.one_hot(x.argmax(-1), x.shape[-1]).double()
    return torch.where(greedy, hot, soft)


class ServeEngine:
    """The background batching loop over a draft/target pair (module docstring).

    ``submit`` is called from any thread; the loop runs in its own thread after ``start``.
    """

    def __init__(self, draft_model, target_model, cfg: ServeConfig, eos_id: int | None = None):
        import torch

        from specbatch.live.cache import SlotCache
        from specbatch.theory.conform.samplers import load_sampler

        cfg.check()
        self.cfg, self.k = cfg, cfg.k
        require(self.k == 0 or draft_model is not None,
                "--speculate: expected a --draft model for fixed:K, got none")
        self.sampler = load_sampler(cfg.sampler_spec).fn if self.k else None
        self.target, self.draft = target_model, draft_model if self.k else None
        self.device = next(target_model.parameters()).device
        self.vocab = int(target_model.get_output_embeddings().weight.shape[0])
        self.eos_id = eos_id
        length = cfg.max_model_len + self.k + 2
        self.tcache = SlotCache(target_model, cfg.max_num_seqs, length)
        self.dcache = (SlotCache(draft_model, cfg.max_num_seqs, length) if self.k else None)
        self.gen = torch.Generator().manual_seed(int(cfg.seed))
        self.counters = Counters(self.k)
        self.waiting: deque[GenRequest] = deque()
        self.rows: list[GenRequest] = []
        self.cond = threading.Condition()
        self.stopping = False
        self.thread: threading.Thread | None = None
        self._empty()

    # ------------------------------------------------------------ the outside

    def submit(self, req: GenRequest) -> None:
        """Queue a request (checked by the caller against :meth:`check_request`)."""
        import torch

        if req.seed is not None:
            req.generator = torch.Generator().manual_seed(int(req.seed) % 2**63)
        with self.cond:
            self.waiting.append(req)
            self.cond.notify()

    def check_request(self, n_prompt: int, max_tokens: int) -> str | None:
        """Why a request cannot run (a message naming the field), or None."""
        if n_prompt < 1:
            return "prompt: expected at least one token, got an empty prompt"
        if n_prompt + max_tokens > self.cfg.max_model_len:
            return (f"max_tokens: prompt ({n_prompt} tokens) + max_tokens ({max_tokens}) "
                    f"exceeds the server's max_model_len {self.cfg.max_model_len}")
        return None

    def load(self) -> tuple[int, int]:
        """(running, waiting) requests."""
        with self.cond:
            return len(self.rows), len(self.waiting)

    def start(self) -> None:
        self.thread = threading.Thread(target=self._run, name="specbatch-engine", daemon=True)
        self.thread.start()

    def stop(self) -> None:
        with self.cond:
            self.stopping = True
            self.cond.notify()
        if self.thread is not None:
            self.thread.join(timeout=10)

    # ------------------------------------------------------------ the loop

    def _run(self) -> None:
        import torch

        with torch.inference_mode():
            while True:
                with self.cond:
                    while not self.stopping and not self.waiting and not self.rows:
                        self.cond.wait()
                    if self.stopping:
                        return
                    free = self.cfg.max_num_seqs - len(self.rows)
                    joined = [self.waiting.popleft() for _ in range(min(free,
                                                                       len(self.waiting)))]
                try:
                    if joined:
                        self._prefill(joined)
                    elif self.rows:
                        self._decode()
                except Exception as exc:  # noqa: BLE001 - a failed step fails its requests
                    self._fail(joined, f"{type(exc).__name__}: {exc}")

    def _empty(self) -> None:
        from specbatch.live.running_batch import Batch, empty_pending

        self.batch = Batch(np.zeros(0, dtype=np.int64), *empty_pending(self.device))

    def _fail(self, joined: list[GenRequest], message: str) -> None:
        """A step raised: every running and joining request fails, the caches are emptied."""
        running = {id(r) for r in self.rows}
        failed = self.rows + [r for r in joined if id(r) not in running]
        self.rows = []
        self.tcache.n = 0
        if self.dcache is not None:
            self.dcache.n = 0
        self._empty()
        with self.counters.lock:
            self.counters.failed += len(failed)
        for req in failed:
            req.error = message
            if req.on_done is not None:
                req.on_done(req)

    def _uniforms(self, reqs: list[GenRequest], width: int) -> np.ndarray:
        """# [n, width] float64 uniforms, each row from its request's generator (or the
        engine's)."""
        import torch

        return np.stack([torch.rand(width, generator=r.generator or self.gen,
                                    dtype=torch.float64).numpy() for r in reqs])

    def _sample(self, probs, reqs: list[GenRequest]):
        """One token per row of probs # [n, V] by inverse CDF with the rows' uniforms."""
        import torch

        from specbatch.theory.verify.torch_path_stats import sample_inverse_cdf

        u = torch.from_numpy(self._uniforms(reqs, 1)[:, 0]).to(probs.device)
        return sample_inverse_cdf(probs, u)

    def _prefill(self, joined: list[GenRequest]) -> None:
        """The joiners' prompts into both caches; each draws its first token."""
        import torch

        from specbatch.live.running_batch import Batch

        prompts = [r.prompt_ids for r in joined]
        logits = self.tcache.prefill(self.target, prompts)  # [m, V]
        if self.dcache is not None:
            self.dcache.prefill(self.draft, prompts)
        temps = [r.temperature for r in joined]
        y0 = self._sample(row_probs(logits, temps), joined)
        with self.cond:
            self.rows = self.rows + joined
        self.batch = self.batch.join(Batch(np.zeros(len(joined), dtype=np.int64), y0,
                                           torch.stack([y0, torch.zeros_like(y0)], dim=1),
                                           torch.ones_like(y0)))
        self._emit(joined, y0[:, None], torch.zeros(len(joined), dtype=torch.long),
                   logits[:, None])
        self._retire()

    def _emit(self, reqs, tokens, tau, raw_logits) -> None:
        """Append each row's tokens[i, :tau_i + 1] with their log-probabilities (raw target
        logits, vLLM's default ``raw_logprobs``), cut at max_tokens and at EOS.

        tokens # [n, G+1]; tau # [n]; raw_logits # [n, G+1, V]
        """
        import torch

        logp = torch.log_softmax(raw_logits.double(), dim=-1)
        toks, taus = tokens.cpu().numpy(), tau.cpu().numpy()
        for i, req in enumerate(reqs):
            for j in range(int(taus[i]) + 1):
                if req.finish_reason is not None:
                    break
                tok = int(toks[i, j])
                req.tokens.append(tok)
                req.logprobs.append(float(logp[i, j, tok]))
                if req.top_logprobs:
                    val, idx = logp[i, j].topk(min(req.top_logprobs, self.vocab))
                    req.top.append(list(zip(idx.tolist(), val.tolist())))
                if tok == self.eos_id and not req.ignore_eos:
                    req.finish_reason = "stop"
                elif len(req.tokens) >= req.max_tokens:
                    req.finish_reason = "length"

    def _retire(self) -> None:
        """Finished rows leave both caches; their requests are answered."""
        gone = [i for i, r in enumerate(self.rows) if r.finish_reason is not None]
        if not gone:
            return
        leave = np.asarray(gone, dtype=np.int64)
        order = self.tcache.remove(leave)
        if self.dcache is not None:
            self.dcache.remove(leave)
        done = [self.rows[i] for i in gone]
        with self.cond:
            self.rows = [self.rows[i] for i in order]
        self.batch = self.batch.take(order)
        for req in done:
            self.counters.count_done(req)
            if req.on_done is not None:
                req.on_done(req)

    def _decode(self) -> None:
        """One decode step over every running row (module docstring)."""
        import torch

        reqs, n = self.rows, len(self.rows)
        temps = [r.temperature for r in reqs]
        if self.k == 0:
            logits = self.tcache.forward(self.target, self.batch.pend_t[:, None])  # [n, 1, V]
            self.tcache.count[:n] += 1
            y = self._sample(row_probs(logits[:, 0], temps), reqs)
            self.batch.pend_t = y
            self._emit(reqs, y[:, None], torch.zeros(n, dtype=torch.long), logits)
            self._retire()
            return
        start_t, start_d = self.tcache.count[:n].copy(), self.dcache.count[:n].copy()
        x, q = self._draft(reqs, temps)  # [n, K], [n, K, V]
        ids = torch.cat([self.batch.pend_t[:, None], x], dim=1)
        logits = self.tcache.forward(self.target, ids)  # [n, K+1, V]
        p = row_probs(logits, temps)
        out = self._verify(reqs, x, None if self.cfg.draft_sample == "greedy" else q, p)
        tau = (out >= 0).sum(dim=1) - 1  # [n]
        y = out[torch.arange(n), tau]
        self.counters.count_step(self.k, tau.cpu().numpy())
        self._commit(x, tau, y, start_t, start_d)
        self._emit(reqs, out.clamp(min=0), tau, logits)
        self._retire()

    def _draft(self, reqs, temps):
        """K draft passes from the pending tokens: x # [n, K], q # [n, K, V] (the law each
        X_j was drawn from: one-hot for greedy drafts and for T = 0)."""
        import torch

        from specbatch.theory.verify.torch_path_stats import sample_inverse_cdf

        n, batch, cache = len(reqs), self.batch, self.dcache
        u = torch.from_numpy(self._uniforms(reqs, self.k))  # [n, K]
        width = int(batch.pend_w.max())
        ids = batch.pend_d[:, :width]
        pend_w = batch.pend_w.cpu().numpy()
        last = torch.from_numpy(pend_w - 1).to(self.device)
        xs, qs = [], []
        for d in range(self.k):
            out = cache.forward(self.draft, ids, keep=None if d == 0 else 1)
            logits = out[torch.arange(n, device=self.device), last] if d == 0 else out[:, -1]
            cache.count[:n] += pend_w if d == 0 else 1
            if self.cfg.draft_sample == "greedy":
                tok = logits.argmax(-1)
                q = torch.nn.functional.one_hot(tok, logits.shape[-1]).double()
            else:
                q = row_probs(logits, temps)
                tok = sample_inverse_cdf(q, u[:, d].to(q.device))
            xs.append(tok)
            qs.append(q)
            ids = tok[:, None]
        return torch.stack(xs, dim=1), torch.stack(qs, dim=1)

    def _verify(self, reqs, x, q, p):
        """The sampler's output # [n, K+1] (emitted tokens, then -1): seeded rows one by one
        with their own generators, the others in one call with the engine's. The sampler runs
        on the host (its generator is a CPU ``torch.Generator``, as ``specbatch conform``
        calls it), whatever the models' device."""
        import torch

        n = len(reqs)
        out = torch.full((n, self.k + 1), -1, dtype=torch.long, device=self.device)
        seeded = [i for i, r in enumerate(reqs) if r.generator is not None]
        shared = [i for i, r in enumerate(reqs) if r.generator is None]
        groups = [([i], reqs[i].generator) for i in seeded]
        if shared:
            groups.append((shared, self.gen))
        for rows, gen in groups:
            idx = torch.tensor(rows, device=self.device)
            got = self.sampler(x[idx].cpu(), None if q is None else q[idx].cpu(),
                               p[idx].cpu(), gen)
            out[idx] = _checked(got, len(rows), self.k, self.vocab).to(self.device)
        return out

    def _commit(self, x, tau, y, start_t, start_d) -> None:
        """Cache counts keep the accepted prefix; the pending tokens of the next step (the
        live loop's :func:`~.loop.commit`)."""
        import torch

        t = tau.cpu().numpy()
        n = len(t)
        self.tcache.count[:n] = start_t + 1 + t
        pend_w = self.batch.pend_w.cpu().numpy()
        self.dcache.count[:n] = start_d + pend_w + np.minimum(t, self.k - 1)
        full = (tau == self.k).to(self.device)  # X_K accepted, never fed to the draft
        self.batch.pend_d = torch.stack([torch.where(full, x[:, -1], y),
                                         torch.where(full, y, torch.zeros_like(y))], dim=1)
        self.batch.pend_w = 1 + full.long()
        self.batch.pend_t = y


def _checked(got, rows: int, k: int, vocab: int):
    """The sampler's output as # [rows, K+1] int64, or a SpecbatchError naming the contract
    it breaks (shape, ids outside the vocabulary, a -1 before an emitted token)."""
    import torch

    if not isinstance(got, torch.Tensor) or tuple(got.shape) != (rows, k + 1):
        shape = tuple(got.shape) if isinstance(got, torch.Tensor) else type(got).__name__
        raise SpecbatchError(f"sampler: expected output_token_ids of shape [{rows}, {k + 1}], "
                             f"got {shape}")
    got = got.long().cpu()
    emitted = got >= 0
    if ((got >= vocab) | (got < -1)).any() or not emitted[:, 0].all() or \
            (emitted[:, 1:] & ~emitted[:, :-1]).any():
        raise SpecbatchError("sampler: expected emitted token ids in [0, V) followed by -1 "
                             "placeholders, at least one token per row")
    return got


def wall_time() -> int:
    """Seconds since the epoch (the ``created`` field)."""
    return int(time.time())
