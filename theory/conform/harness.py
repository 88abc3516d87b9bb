"""Drawing samples from a sampler under test, for ``specbatch conform`` (THEORY.md §4).

For one pair case, :func:`sample_case` draws drafts from the stated draft law, calls the
sampler in batches through its interface (``padded`` ``[B, γ]`` or vLLM's ``ragged``
flattening, :mod:`specbatch.theory.conform.ragged`), checks the engine contract, and completes
every output ``O = X^τ Y`` to γ+1 tokens by ordinary target sampling. What it returns
(:class:`CaseSamples`) is raw: counts over ``V^(γ+1)``, τ, the per-request draft counts and the
exact-check tallies; :mod:`specbatch.theory.conform.check` turns them into tests.

Ragged batches: each request gets its own number of drafts ``γ_b`` uniform on 0..γ (its draft
is the first ``γ_b`` tokens of a draft drawn from ``Ms``, so still ``Ms``-distributed), as in an
engine batch where requests propose different numbers of tokens. Greedy targets (temperature
0): every emitted token must equal non-speculative greedy decoding of ``Mb`` (argmax, lowest
token id on ties, as ``torch.argmax``), token for token.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import torch

from specbatch.deadline import UserCallTimeout, call_limited
from specbatch.errors import SpecbatchError
from specbatch.theory.conform.pairs import PairCase, PairTables
from specbatch.theory.conform.ragged import call_ragged
from specbatch.theory.conform.samplers import BUILTINS, Sampler
from specbatch.theory.verify.reference import sample_rows


@dataclass(frozen=True)
class CaseSamples:
    """Raw draws of one case.  counts # [V^(γ+1)], tau # [N], gammas # [N] (drafts per
    request), zero_hits / mismatched / greedy_mismatched: outputs failing an exact check."""

    counts: np.ndarray
    tau: np.ndarray
    gammas: np.ndarray
    zero_hits: int
    mismatched: int
    greedy_mismatched: int
    greedy_example: tuple | None  # (draft, emitted, greedy decoding) of the first mismatch


def check_output(out, batch: int, width: int, vocab: int, name: str) -> np.ndarray:
    """Validate the engine contract; return the emitted lengths ``τ + 1`` # [batch]."""
    shape = (batch, width)
    if not isinstance(out, torch.Tensor):
        raise SpecbatchError(f"VERIFIER {name}: returned {type(out).__name__}, expected a "
                             f"torch.int64 tensor of shape [B, γ+1] = {list(shape)}")
    if out.dtype != torch.int64 or tuple(out.shape) != shape:
        raise SpecbatchError(f"VERIFIER {name}: returned {out.dtype} of shape {list(out.shape)}, "
                             f"expected torch.int64 of shape [B, γ+1] = {list(shape)}")
    arr = out.detach().cpu().numpy()
    placeholder = arr == -1
    length = np.where(placeholder.any(axis=1), placeholder.argmax(axis=1), width)
    after = np.arange(width)[None, :] >= length[:, None]
    if (after != placeholder).any() or (length == 0).any():
        raise SpecbatchError(f"VERIFIER {name}: output rows must hold 1..γ+1 tokens followed "
                             "only by -1 placeholders")
    if ((arr < 0) & ~placeholder).any() or (arr >= vocab).any():
        raise SpecbatchError(f"VERIFIER {name}: token ids outside 0..{vocab - 1}")
    return length


def greedy_decoding(tables: PairTables, vocab: int, n: int) -> np.ndarray:
    """Non-speculative greedy decoding of ``Mb``: n argmax tokens (lowest id on ties). # [n]"""
    code, out = 0, []
    for k in range(n):
        token = int(np.argmax(tables.prefix_rows[k][code]))
        out.append(token)
        code = code * vocab + token
    return np.array(out, dtype=np.int64)


def complete(out: np.ndarray, length: np.ndarray, tables: PairTables, vocab: int,
             rng: np.random.Generator) -> tuple[np.ndarray, int]:
    """Complete every output to γ+1 tokens from ``Mb``; count emitted zero-probability tokens.

    returns (sequence index in base V # [batch], emitted tokens of target probability 0)
    """
    batch, n = out.shape
    code = np.zeros(batch, dtype=np.int64)
    zero_hits = 0
    rows = np.arange(batch)
    for k in range(n):
        row = tables.prefix_rows[k][code]  # [batch, V] Mb(·|prefix)
        drawn = sample_rows(row, rng)
        emitted = k < length
        token = np.where(emitted, out[:, k], drawn)
        zero_hits += int((emitted & (row[rows, token] <= 0.0)).sum())
        code = code * vocab + token
    return code, zero_hits


def _call(sampler: Sampler, tokens, draft_rows, target_rows, gammas, generator, rng):
    """One batch through the sampler's interface; user code's every exception (SystemExit
    included) and a call past the limit on user code (specbatch.deadline) are bad input told
    in one line. returns the output # [m, γ+1]"""
    builtin = BUILTINS.get(sampler.name)
    seconds = 0 if builtin is not None and builtin.fn is sampler.fn else None  # None: limit()
    try:
        if sampler.interface == "ragged":
            return call_limited(call_ragged, sampler.fn, tokens, draft_rows, target_rows,
                                gammas, sampler.target == "greedy", generator, rng,
                                seconds=seconds)
        return call_limited(sampler.fn, tokens, draft_rows, target_rows, generator,
                            seconds=seconds)
    except (KeyboardInterrupt, SpecbatchError):
        raise
    except UserCallTimeout as exc:  # specbatch.deadline: a sampler that never returns
        raise SpecbatchError(f"VERIFIER {sampler.name}: {exc} on one batch (the limit on a "
                             "call into user code: --user-timeout SECONDS, 0 for none)") from None
    except BaseException as exc:  # noqa: BLE001 - sys.exit() in user code is not a verdict
        message = " ".join(str(exc).split())[:300]
        raise SpecbatchError(f"VERIFIER {sampler.name}: raised {type(exc).__name__}: "
                             f"{message}") from None


def sample_case(sampler: Sampler, case: PairCase, tables: PairTables, samples: int,
                batch: int, seed: int, dtype=torch.float32, progress=None) -> CaseSamples:
    """Draw ``samples`` outputs of one case through ``sampler`` (module doc)."""
    vocab, gamma = case.pair.vocab, case.gamma
    rng = np.random.default_rng(seed)
    generator = torch.Generator().manual_seed(seed)
    counts = np.zeros(vocab ** (gamma + 1), dtype=np.int64)
    taus, gammas = [], []
    zero_hits = mismatched = greedy_bad = 0
    example = None
    greedy = greedy_decoding(tables, vocab, gamma + 1) if sampler.target == "greedy" else None
    last = time.monotonic()
    for start in range(0, samples, batch):
        m = min(batch, samples - start)
        pick = rng.choice(len(tables.drafts), size=m, p=tables.draft_prob)
        drafts = tables.drafts[pick]  # [m, γ]
        g_b = (rng.integers(0, gamma + 1, size=m) if sampler.interface == "ragged"
               else np.full(m, gamma))  # [m] drafts per request
        draft_rows = None if sampler.draft == "greedy" else torch.from_numpy(
            tables.draft_rows[pick]).to(dtype)
        target_rows = torch.from_numpy(tables.target_rows[pick]).to(dtype)
        out = _call(sampler, torch.from_numpy(drafts), draft_rows, target_rows, g_b,
                    generator, rng)
        length = check_output(out, m, gamma + 1, vocab, sampler.name)
        if (length > g_b + 1).any():
            raise SpecbatchError(f"VERIFIER {sampler.name}: a request emitted more tokens than "
                                 "its drafts + 1")
        arr = out.detach().cpu().numpy()
        accepted = np.arange(gamma)[None, :] < (length - 1)[:, None]
        mismatched += int((accepted & (arr[:, :gamma] != drafts)).any(axis=1).sum())
        if greedy is not None:
            emitted = np.arange(gamma + 1)[None, :] < length[:, None]
            bad = (emitted & (arr != greedy[None, :])).any(axis=1)
            greedy_bad += int(bad.sum())
            if bad.any() and example is None:
                i = int(np.argmax(bad))
                example = (drafts[i, :g_b[i]].tolist(), arr[i, :length[i]].tolist(),
                           greedy.tolist())
        code, hits = complete(arr, length, tables, vocab, rng)
        zero_hits += hits
        counts += np.bincount(code, minlength=counts.size)
        taus.append(length - 1)
        gammas.append(g_b)
        if progress is not None and time.monotonic() - last > 5.0:
            progress(start + m)
            last = time.monotonic()
    return CaseSamples(counts, np.concatenate(taus), np.concatenate(gammas), zero_hits,
                       mismatched, greedy_bad, example)
