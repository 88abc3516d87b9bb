"""The live engine's n-gram (prompt-lookup) draft verb: no draft model, no draft cache.

At a decode step each running request proposes up to K tokens from its own context
(prompt + emitted tokens) with :func:`specbatch.traces.capture.ngram.propose_ngram`, vLLM's
``ngram`` match rule, exactly as ``specbatch capture --draft ngram`` does at the same position.
The draft distribution is one-hot (``q = 1`` on the proposed token), so ``p_i = Π pt_j``
and block verification equals token verification (THEORY.md §3).

Fewer than K proposed tokens: slots ``j ≥ proposed`` hold the filler id V (one past the
target's vocabulary) in the recorded trace, with ``q = 1``, ``pt = 0`` and draft signals 0
(the trace's lossless filler, :mod:`specbatch.traces.format.trace`). The policy sees the proposed
counts through its :class:`~simulator.policies.view.StepView` (``proposed``), so every shared
policy drafts and verifies at most ``proposed`` tokens per request
(:meth:`simulator.policies.view.StepView.cap`), as the simulator does on the trace; the target
therefore never scores a filler, and a request with nothing proposed takes an ordinary
one-token target step (τ = 0, the extra token is the bonus).
Fillers are fed to the target (past a row's verified prefix, never read) and to the verifier
as token 0, which only rows past their verified length could see.
"""

from __future__ import annotations

import time

import numpy as np

from specbatch.traces.capture.drafters import one_hot_logits
from specbatch.traces.capture.ngram import propose_ngram


def propose(contexts: list[list[int]], depth: int, n_min: int, n_max: int,
            vocab: int) -> tuple[np.ndarray, np.ndarray, float]:
    """The n-gram draft of a batch: (tokens # [n, K] int64 with fillers V, proposed # [n]
    int64, the proposer's own CPU seconds).

    contexts: n token lists (each request's prompt + emitted tokens).
    """
    begin = time.thread_time()
    proposals = [propose_ngram(c, depth, n_min, n_max) for c in contexts]
    tokens = np.full((len(proposals), depth), vocab, dtype=np.int64)
    proposed = np.zeros(len(proposals), dtype=np.int64)
    for row, p in enumerate(proposals):
        tokens[row, :len(p)] = p
        proposed[row] = len(p)
    return tokens, proposed, time.thread_time() - begin


def fed_tokens(x, vocab: int):
    """``x`` # [n, K] with fillers (ids ≥ V) replaced by token 0, for the target and the
    verifier (module docstring)."""
    import torch

    return torch.where(x < vocab, x, torch.zeros_like(x))


def one_hot_draft(x, vocab: int):
    """The one-hot draft logits # [n, K, V] of the fed tokens ``x`` # [n, K] (≥ V: fillers)."""
    return one_hot_logits(fed_tokens(x, vocab), vocab)


def filler_signals(stats: dict, proposed: np.ndarray) -> dict:
    """Path statistics with the draft signals of filler slots (``j ≥ proposed``) set to 0, as
    capture records them.  proposed # [n]"""
    filler = np.arange(stats["q"].shape[1])[None, :] >= proposed[:, None]  # [n, K]
    for name in ("draft_conf", "top1", "entropy"):
        stats[name] = np.where(filler, 0.0, stats[name])
    return stats


def proposed_confidence(proposed: np.ndarray, depth: int) -> np.ndarray:
    """The draft confidence a one-hot draft records: 1 on proposed slots, 0 on fillers.
    proposed # [n] -> # [n, K]"""
    return (np.arange(depth)[None, :] < proposed[:, None]).astype(np.float64)


def draft_ngram(live, batch, kv: np.ndarray):
    """The live loop's draft verb for n-gram drafts (``live``: :class:`.loop.Live`, ``batch``:
    :class:`.batch.Batch`, kv # [n]): x # [n, K] (fillers V), one-hot logits
    # [n, K, V] of the fed tokens, the proposer's CPU seconds, proposed # [n]. Recorded as one
    draft pass (query 1 per request) priced at the proposer's time."""
    import torch

    rec, cfg = live.rec, live.cfg
    contexts = [rec.prompt_ids[u] + rec.outputs[u] for u in batch.uid.tolist()]
    tokens, proposed, seconds = propose(contexts, cfg.depth, *cfg.ngram, live.vocab)
    x = torch.from_numpy(tokens).to(live.device)
    rec.add_pass("draft", np.ones(batch.n, dtype=np.int64), kv, seconds, 0)
    return x, one_hot_draft(x, live.vocab), seconds, proposed
