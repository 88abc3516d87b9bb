"""Prompt-lookup (n-gram) drafting: propose the tokens that followed an earlier occurrence of
the context's last n tokens, as vLLM's ``ngram`` speculative method does.

Match rule (vLLM v1 ``NgramProposer``; parameters ``prompt_lookup_min`` = ``n_min``,
``prompt_lookup_max`` = ``n_max``, ``num_speculative_tokens`` = ``k``). For a context
``c`` of length L:

1. an *occurrence* of the suffix ``c[L-n:]`` is a start ``s`` with ``c[s:s+n] == c[L-n:]`` and
   ``s + n ≤ L − 1`` (it ends before the last token, so at least one token follows it; it may
   overlap the suffix itself);
2. the n used is the longest ``n ∈ [n_min, n_max]`` that has an occurrence (n from n_max down
   to n_min, the first that matches); no occurrence for any n (or ``L < n_min``): nothing is
   proposed;
3. among that n's occurrences the **earliest** wins (smallest s), as vLLM's search keeps the
   leftmost match of the longest n-gram;
4. the proposal is the tokens that followed it, ``c[s+n : s+n+k]``, cut at the end of the
   context: 1..k tokens. It is never extended (vLLM drafts nothing more where fewer than k
   tokens follow). vLLM's cap at ``max_model_len`` is not modelled.

The draft distribution of every proposed token is one-hot (THEORY.md §3: block verification
then equals token verification). :func:`propose_ngram` is the vectorised fast path
(one window comparison per n); :func:`propose_ngram_reference` the reference twin (plain loops
over every n and every start, the rule above written out).
"""

from __future__ import annotations

import numpy as np

from specbatch.errors import require
from specbatch.traces.capture.drafters import Drafter, one_hot_logits

#: The ``--draft`` value that selects this drafter instead of a draft model directory.
NGRAM = "ngram"
#: vLLM's defaults when neither bound is given (``prompt_lookup_min = prompt_lookup_max = 5``).
DEFAULT_N = 5


def ngram_bounds(n_min: int | None, n_max: int | None) -> tuple[int, int]:
    """``(n_min, n_max)`` with vLLM's defaults: both unset → (5, 5); one unset → the other's
    value. Raises a one-line error for ``n_min < 1`` or ``n_min > n_max``."""
    if n_min is None and n_max is None:
        n_min = n_max = DEFAULT_N
    n_min = n_max if n_min is None else n_min
    n_max = n_min if n_max is None else n_max
    require(n_min >= 1, f"--ngram-min: expected an integer >= 1, got {n_min}")
    require(n_max >= n_min, f"--ngram-max: expected >= --ngram-min ({n_min}), got {n_max}")
    return int(n_min), int(n_max)


def propose_ngram(context, k: int, n_min: int, n_max: int) -> np.ndarray:
    """Tokens the n-gram drafter proposes after ``context`` (module docstring's rule).

    context:  # [L] int token ids
    returns   # [m] int64, 0 ≤ m ≤ k (empty when nothing matches)
    """
    c = np.asarray(context, dtype=np.int64)
    length = c.shape[0]
    if k <= 0:
        return c[:0]
    for n in range(min(n_max, length - 1), n_min - 1, -1):
        # windows starting at s = 0..L-n-1: those ending at or before index L-2
        windows = np.lib.stride_tricks.sliding_window_view(c[:length - 1], n)  # [L-n, n]
        hits = np.flatnonzero((windows == c[length - n:]).all(axis=1))
        if hits.size:
            start = int(hits[0]) + n
            return c[start:start + k].copy()
    return c[:0]


def propose_ngram_reference(context, k: int, n_min: int, n_max: int) -> list[int]:
    """Reference twin of :func:`propose_ngram`: every (n, start) pair checked token by token,
    then the longest n and, for it, the earliest start chosen."""
    c = [int(x) for x in context]
    length = len(c)
    matches = []  # (n, s)
    for n in range(n_min, n_max + 1):
        for s in range(length):
            if s + n > length - 1:
                break
            if all(c[s + j] == c[length - n + j] for j in range(n)):
                matches.append((n, s))
    if not matches or k <= 0:
        return []
    n = max(m[0] for m in matches)
    s = min(m[1] for m in matches if m[0] == n)
    return c[s + n:s + n + k]


class NgramDrafter(Drafter):
    """Capture's n-gram drafter: position t's draft is :func:`propose_ngram` over
    ``c + y_<t`` (the target's reference prefix), one-hot, then virtual fillers.

    A row proposes ``m = proposed`` tokens (0..K); slots ``j ≥ m`` hold the filler token id V
    (one past the target's vocabulary), to which the target gives probability 0, so the row
    keeps K columns and stays lossless (:mod:`specbatch.traces.format.trace`). ``Ms`` is one-hot at
    the drafted token at any temperature (over V + 1 columns, the filler included), so the
    batched path returns no draft logits and capture records the one-hot statistics
    directly. The uniforms are not used: the draft is deterministic.
    """

    def __init__(self, n_min: int, n_max: int, vocab: int) -> None:
        self.n_min, self.n_max, self.vocab = int(n_min), int(n_max), int(vocab)

    def identity(self) -> dict:
        return {"name": NGRAM, "drafter": NGRAM, "n_min": self.n_min, "n_max": self.n_max,
                "params": 0, "signals": "one-hot draft: draft_conf = top1 = 1, entropy = 0 on "
                "proposed tokens; 0 on filler slots"}

    def start(self, prompt_ids: list[int], y):
        """The request's tokens ``c + y`` # [|c| + n] int64 (numpy)."""
        return np.concatenate([np.asarray(prompt_ids, dtype=np.int64), y.cpu().numpy()])

    def draft(self, state, n_prompt: int, ts, uniforms, cfg) -> tuple:
        """(tokens # [P, K] with fillers, None: one-hot rows, proposed # [P])."""
        import torch

        proposals = [propose_ngram(state[:n_prompt + int(t)], cfg.depth, self.n_min, self.n_max)
                     for t in ts.tolist()]
        tokens, proposed = self._tokens(proposals, cfg.depth)
        return torch.from_numpy(tokens).to(ts.device), None, proposed

    def draft_one(self, ctx, uniforms, cfg) -> tuple:
        """The reference twin's draft: :func:`propose_ngram_reference` on ``ctx`` # [1, L],
        with explicit one-hot logits # [1, K, V+1]."""
        import torch

        proposal = propose_ngram_reference(ctx[0].tolist(), cfg.depth, self.n_min, self.n_max)
        tokens, proposed = self._tokens([proposal], cfg.depth)
        x = torch.from_numpy(tokens).to(ctx.device)
        return x, one_hot_logits(x, self.vocab + 1), proposed

    def _tokens(self, proposals: list, k: int) -> tuple[np.ndarray, np.ndarray]:
        """(tokens # [P, K] padded with the filler id V, proposed # [P]) of ``proposals``."""
        proposed = np.array([len(p) for p in proposals], dtype=np.int64)
        tokens = np.full((len(proposals), k), self.vocab, dtype=np.int64)
        for row, p in enumerate(proposals):
            tokens[row, :len(p)] = p
        return tokens, proposed
