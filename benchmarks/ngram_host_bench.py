"""Host time of vLLM's n-gram proposer, measured on a numba twin and fitted.

vLLM V1's ``ngram`` drafter (vllm/v1/spec_decode/ngram_proposer.py, ``NgramProposer``) runs on
the engine's CPU once per step, after the step's sampled tokens reach the host:

1. ``propose``: a Python loop over the batch keeps the requests that sampled a token this
   step (a partial-prefill chunk samples none) and are below ``max_model_len``;
2. ``batch_propose``: ``numba.set_num_threads`` (1 thread below 8192 tokens in the batch, and
   since the cap ``min(1, cpu_count // 2)`` 1 thread always), then one ``@njit(parallel=True)``
   call whose ``prange`` runs, per kept request, a KMP longest-prefix-suffix scan of the
   *reversed* context (``_find_longest_matched_ngram_and_propose_tokens``): the failure table
   is kept for the first ``prompt_lookup_max`` positions only, the scan never stops early (it
   keeps the earliest occurrence of the longest n-gram), so its work is Θ(context) whatever
   the tokens, plus the fallbacks of partial matches; the kept Python ``list`` is passed in
   (numba unboxes a reflected list: O(n));
3. a Python loop over all n requests builds the drafts (``i in valid_ngram_requests`` on a
   list: O(n · kept); ``ndarray.tolist``).

This file re-implements those three stages (our own code, the same algorithm and complexity;
the proposals equal :func:`specbatch.traces.capture.ngram.propose_ngram`'s, checked before
timing) and times them on this machine's CPU with one numba thread, over batch sizes n and
context lengths L, on real token streams: the held-out stdlib code and prose of
:mod:`specbatch.traces.corpus` encoded by a byte-level BPE trained on the train split (the
bundled traces keep no context token ids). CPU seconds (``time.process_time``) of R calls per
cell, the least of ``--repeats``. It fits, by least squares on relative error,

    t = c0 + c1 · n + c2 · Σ(context) + c3 · n²      (seconds per step; n kept requests)

(c3: stage 3's list membership test, Σ_i i comparisons; the fit without it is printed too)

and reports the in-sample error on the uniform grid and the out-of-sample error on batches of
mixed context lengths (log-uniform 128-32k), and the time against random and repetitive
token streams. This is a measurement of our twin, not of vLLM.

    .venv/bin/python benchmarks/ngram_host_bench.py [--quick] [--json]
    .venv/bin/python benchmarks/ngram_host_bench.py --refit a.json b.json   # cell-wise least

On a shared machine a cell's least over several ``--json`` runs (``--refit``) is the closest
to the unloaded time; simulator.cost.features.host's constants are the refit of two runs.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
import warnings

import numpy as np
from numba import get_num_threads, njit, prange, set_num_threads
from numba.core.errors import NumbaPendingDeprecationWarning

#: vLLM's defaults: prompt_lookup_min = prompt_lookup_max = 5 when neither is given
#: (specbatch.traces.capture.ngram.DEFAULT_N); k = num_speculative_tokens.
N_MIN, N_MAX, K = 5, 5, 4
MAX_MODEL_LEN = 1 << 20
BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
LENGTHS = (128, 512, 2048, 8192, 32768)


@njit(cache=False)
def suffix_lookup(ctx, length, n_min, n_max, k, max_model_len, out):
    """Tokens after the earliest earlier occurrence of the longest suffix n-gram of
    ``ctx[:length]`` (n in [n_min, n_max]) written to ``out[:m]``; returns m (0: none).

    The context is read right to left, so the suffix becomes a prefix and a KMP automaton
    over the reversed context finds, at every position, the longest prefix of the reversed
    context ending there; ``border[j]`` is the failure link of the pattern's first j + 1
    symbols, needed only up to n_max. Θ(length) steps, no early exit."""
    if length < n_min:
        return 0
    k = min(k, max_model_len - length)
    if k <= 0:
        return 0
    last = length - 1
    border = np.zeros(n_max, np.int32)  # [n_max]
    matched = 0  # symbols of the reversed context matched at the current position
    best, best_at = 0, 0
    pos = 1
    while pos < length:
        if ctx[last - matched] == ctx[last - pos]:
            matched += 1
            if matched >= best:  # ties: the later reversed position = the earlier occurrence
                best, best_at = matched, pos
            if pos < n_max:
                border[pos] = matched
            if matched == n_max:
                matched = border[n_max - 1]
            pos += 1
        elif matched:
            matched = border[matched - 1]
        else:
            pos += 1
    if best < n_min:
        return 0
    start = last - best_at + best
    m = min(k, length - start)
    for j in range(m):
        out[j] = ctx[start + j]
    return m


@njit(parallel=True, cache=False)
def propose_kept(kept, num_tokens, token_ids, n_min, n_max, max_model_len, k, drafts, counts):
    """Stage 2's compiled call: :func:`suffix_lookup` for every kept row (``prange``).
    kept: list[int]; num_tokens # [rows]; token_ids # [rows, width]; drafts # [rows, k]."""
    for i in prange(len(kept)):
        row = kept[i]
        counts[row] = suffix_lookup(token_ids[row], num_tokens[row], n_min, n_max, k,
                                    max_model_len, drafts[row])


class NgramTwin:
    """The three stages of vLLM's per-step n-gram proposal (module docstring), our code."""

    def __init__(self, rows: int, k: int = K, n_min: int = N_MIN, n_max: int = N_MAX,
                 threads: int = 1) -> None:
        self.k, self.n_min, self.n_max, self.threads = k, n_min, n_max, threads
        self.drafts = np.zeros((rows, k), np.int32)  # [rows, k]
        self.counts = np.zeros(rows, np.int32)  # [rows]

    def propose(self, sampled: list, num_tokens: np.ndarray, token_ids: np.ndarray) -> list:
        kept = []
        for i, ids in enumerate(sampled):  # stage 1
            if not len(ids) or num_tokens[i] >= MAX_MODEL_LEN:
                continue
            kept.append(i)
        if kept:  # stage 2
            before = get_num_threads()
            set_num_threads(self.threads if np.sum(num_tokens) >= 8192 else 1)
            propose_kept(kept, num_tokens, token_ids, self.n_min, self.n_max, MAX_MODEL_LEN,
                         self.k, self.drafts, self.counts)
            set_num_threads(before)
        out = []
        for i in range(len(sampled)):  # stage 3
            if i in kept and self.counts[i] > 0:
                out.append(self.drafts[i, :self.counts[i]].tolist())
            else:
                out.append([])
        return out


def token_streams(vocab: int = 8192) -> dict[str, np.ndarray]:
    """Held-out stdlib code and prose as BPE token ids (trained on the train split)."""
    from specbatch.traces.corpus import stdlib_documents
    from specbatch.traces.models.zoo_parts import encode_stream, train_tokenizer

    train = stdlib_documents("code", "train")[:40] + stdlib_documents("prose", "train")[:40]
    tok = train_tokenizer(train, vocab)
    return {kind: encode_stream(tok, stdlib_documents(kind, "heldout")).astype(np.int32)
            for kind in ("code", "prose")}


def batch_of(streams: dict, lengths: np.ndarray, rng: np.random.Generator, kind: str = "text"):
    """(num_tokens # [n], token_ids # [n, max L]): request i holds a window of lengths[i]
    tokens at a random offset, code and prose alternating (``kind`` text), or uniform random
    ids (random), or one 7-token phrase repeated (repetitive)."""
    n, width = len(lengths), int(lengths.max())
    ids = np.zeros((n, width), np.int32)
    for i, length in enumerate(lengths):
        if kind == "random":
            ids[i, :length] = rng.integers(0, 49152, length)
        elif kind == "repetitive":
            ids[i, :length] = np.resize(rng.integers(0, 49152, 7), length)
        else:
            s = streams["code" if i % 2 == 0 else "prose"]
            at = int(rng.integers(0, len(s) - length))
            ids[i, :length] = s[at:at + length]
    return lengths.astype(np.int32), ids


def cpu_seconds(twin: NgramTwin, num_tokens, ids, repeats: int, budget: float) -> float:
    """Least over ``repeats`` (a loaded machine only adds) of CPU seconds per call, each
    from R calls (R sized so that one measurement takes about ``budget`` CPU seconds)."""
    sampled = [[1]] * len(num_tokens)
    t0 = time.process_time()
    twin.propose(sampled, num_tokens, ids)
    one = max(time.process_time() - t0, 1e-6)
    reps = max(1, min(2000, int(budget / one)))
    out = []
    for _ in range(repeats):
        t0 = time.process_time()
        for _ in range(reps):
            twin.propose(sampled, num_tokens, ids)
        out.append((time.process_time() - t0) / reps)
    return float(np.min(out))


def design(n, tokens, pairs: bool) -> np.ndarray:
    """Columns 1, n, S (and n² with ``pairs``)  # [rows, 3 or 4]."""
    n, s = np.asarray(n, float), np.asarray(tokens, float)
    cols = [np.ones_like(n), n, s] + ([n * n] if pairs else [])
    return np.stack(cols, axis=-1)


def fit(rows: list[dict], pairs: bool = True) -> tuple[np.ndarray, float, float]:
    """(c0, c1, c2[, c3]), MAPE and max relative error of t = c0 + c1 n + c2 S [+ c3 n²] over
    ``rows``, least squares on relative error (each row weighted by 1 / t)."""
    n = np.array([r["n"] for r in rows], float)  # [rows]
    s = np.array([r["tokens"] for r in rows], float)  # [rows]
    t = np.array([r["t"] for r in rows], float)  # [rows]
    x = design(n, s, pairs)  # [rows, p]
    coef = np.linalg.lstsq(x / t[:, None], np.ones_like(t), rcond=None)[0]
    err = (x @ coef) / t - 1.0  # [rows]
    return coef, float(np.mean(np.abs(err))), float(np.max(np.abs(err)))


def predict(coef, n, tokens) -> float:
    return float(design(n, tokens, len(coef) == 4) @ coef)


def refit(paths: list[str]) -> None:
    """Print the fit over the cell-wise least time of several ``--json`` outputs, and its
    error on their held-out batches (each batch's least time)."""
    runs = [json.load(open(p)) for p in paths]
    grid = [{**r, "t": min(run["grid"][i]["t"] for run in runs)}
            for i, r in enumerate(runs[0]["grid"])]
    coef, mape, worst = fit(grid)
    lin, lin_mape, _ = fit(grid, pairs=False)
    print(f"refit of {len(runs)} runs: NGRAM_CALL_S = {coef[0]:.4g}, NGRAM_REQUEST_S = "
          f"{coef[1]:.4g}, NGRAM_TOKEN_S = {coef[2]:.4g}, NGRAM_PAIR_S = {coef[3]:.4g}  "
          f"(MAPE {mape:.1%}, max {worst:.1%}; without n² MAPE {lin_mape:.1%})")
    for i, h in enumerate(runs[0]["held_out"]):
        t = min(run["held_out"][i]["t"] for run in runs)
        print(f"held out (mixed L): n {h['n']:>3} Σ {h['tokens']:>8} t {t * 1e6:9.1f} µs "
              f"fit {predict(coef, h['n'], h['tokens']) / t - 1.0:+.1%}")


def check_parity(streams: dict, rng: np.random.Generator) -> int:
    """Proposals of the twin against specbatch's vectorised n-gram rule on real contexts."""
    from specbatch.traces.capture.ngram import propose_ngram

    twin = NgramTwin(64, k=K, n_min=2, n_max=5)
    lengths = rng.integers(2, 600, 64)
    num_tokens, ids = batch_of(streams, lengths, rng)
    got = twin.propose([[1]] * 64, num_tokens, ids)
    for i in range(64):
        want = propose_ngram(ids[i, :num_tokens[i]], K, 2, 5).tolist()
        assert got[i] == want, (i, got[i], want)
    return 64


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer cells and repeats")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--budget", type=float, default=0.08, help="CPU s per measurement")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--refit", nargs="+", metavar="JSON", help="refit saved --json runs")
    args = ap.parse_args()
    if args.refit:
        refit(args.refit)
        return
    warnings.simplefilter("ignore", NumbaPendingDeprecationWarning)
    set_num_threads(1)
    rng = np.random.default_rng(0)
    streams = token_streams()
    checked = check_parity(streams, rng)
    batches = (1, 4, 16, 64, 256) if args.quick else BATCHES
    lengths = (128, 2048, 32768) if args.quick else LENGTHS
    repeats = 3 if args.quick else args.repeats
    twin = NgramTwin(max(BATCHES))
    grid = []
    for n in batches:
        for length in lengths:
            num_tokens, ids = batch_of(streams, np.full(n, length), rng)
            t = cpu_seconds(twin, num_tokens, ids, repeats, args.budget)
            grid.append({"n": n, "L": length, "tokens": int(n * length), "t": t})
    coef, mape, worst = fit(grid)
    lin, lin_mape, lin_worst = fit(grid, pairs=False)
    held = []
    for n in (3, 24, 100, 200):
        ls = np.exp(rng.uniform(np.log(128), np.log(32768), n)).astype(int)
        num_tokens, ids = batch_of(streams, ls, rng)
        t = cpu_seconds(twin, num_tokens, ids, repeats, args.budget)
        held.append({"n": n, "tokens": int(ls.sum()), "t": t,
                     "err": predict(coef, n, int(ls.sum())) / t - 1.0})
    kinds = {}
    for kind in ("text", "random", "repetitive"):
        num_tokens, ids = batch_of(streams, np.full(64, 8192), rng, kind)
        kinds[kind] = cpu_seconds(twin, num_tokens, ids, repeats, args.budget)
    out = {"cpu": cpu_model(), "threads": 1, "numba_threads_available": get_num_threads(),
           "n_min": N_MIN, "n_max": N_MAX, "k": K, "parity_rows": checked,
           "c0_s": coef[0], "c1_s_per_request": coef[1], "c2_s_per_token": coef[2],
           "c3_s_per_pair": coef[3], "mape": mape, "max_err": worst,
           "linear": {"coef": lin.tolist(), "mape": lin_mape, "max_err": lin_worst},
           "held_out": held, "grid": grid,
           "stream_kind_64x8192_s": kinds}
    if args.json:
        print(json.dumps(out, indent=1))
        return
    print(f"CPU {out['cpu']}, numba 1 thread; prompt_lookup_min = max = {N_MIN}, k = {K}; "
          f"parity with propose_ngram on {checked} contexts")
    print(f"{'n':>5} {'L':>7} {'Σ ctx':>10} {'t (µs)':>11} {'fit err':>8}")
    for r in grid:
        err = predict(coef, r["n"], r["tokens"]) / r["t"] - 1.0
        print(f"{r['n']:>5} {r['L']:>7} {r['tokens']:>10} {r['t'] * 1e6:>11.2f} {err:>+8.1%}")
    print(f"fit: NGRAM_CALL_S = {coef[0]:.4g}, NGRAM_REQUEST_S = {coef[1]:.4g}, "
          f"NGRAM_TOKEN_S = {coef[2]:.4g}, NGRAM_PAIR_S = {coef[3]:.4g}  (MAPE {mape:.1%}, "
          f"max {worst:.1%}, {len(grid)} cells)")
    print(f"without n²: c0 {lin[0]:.4g}, c1 {lin[1]:.4g}, c2 {lin[2]:.4g} (MAPE {lin_mape:.1%}, "
          f"max {lin_worst:.1%})")
    for r in held:
        print(f"held out (mixed L): n {r['n']:>3} Σ {r['tokens']:>8} t {r['t'] * 1e6:9.1f} µs "
              f"fit {r['err']:+.1%}")
    print("stream kind, 64 x 8192 tokens: " + ", ".join(
        f"{k} {v * 1e3:.2f} ms" for k, v in kinds.items()))


if __name__ == "__main__":
    main()
