"""Synthetic traces from real arithmetic on synthetic distributions (THEORY.md §3).

Every request owns a target and a noise model over a small vocabulary ``V``: first-order
Markov tables (rows drawn from a Dirichlet, floored so every token has probability > 0),
picked from a shared pool of ``tables`` tables. At temperature 1 the draft is the mixture

    Ms(·|x) = λ · Mb(·|x) + (1 − λ) · N(·|x),

with a similarity λ per request (easy requests around ``similarity``, a ``hard_fraction`` around
``hard_similarity``) jittered per draft position (``similarity_spread`` on the logit scale). At
temperature T both rows are tempered, ``M_T ∝ M^{1/T}``; at T = 0 they are one-hot at their argmax
(greedy), exactly as a capture records them (the temperature-0 rule of ``traces/format/trace.py``).

For each request the target's reference output ``y`` is sampled from ``Mb`` at T; row t drafts K
tokens from the context ``y_{t−1}`` by sampling the draft at T, and ``q, pt, z`` come from
:func:`theory.verify.path_stats.position_stats` on the full draft/target rows along the drafted
path, so r, p, Z and the draft signals are mutually consistent. ``draft_conf``, ``entropy`` and
``top1`` are read from the draft's temperature-1 row.

Surrogate quality (how well ``draft_conf`` predicts acceptance, for TETRIS):
- ``natural``: the draft's own temperature-1 probability of the drafted token (a capture);
- ``perfect``: ``draft_conf = min(1, r)``, so ``cumprod(draft_conf)`` equals TV's
  ``P(τ ≥ j | X^j)`` (:func:`theory.verify.path_stats.token_weights`) bit for bit;
- ``good`` / ``poor``: ``(1 − w) · min(1, r) + w · U(0, 1)`` with ``w = surrogate_noise``
  (default 0.1 for good, 0.8 for poor).
In the last three, ``top1`` is raised to ``max(top1, draft_conf)`` so ``draft_conf ≤ top1``.

Constant-acceptance mode (``constant_alpha = α``, T > 0): a deterministic (one-hot) draft,
``q = 1``, and target probability ``pt = α`` on the drafted token, so every ``min(1, r_i) = α``
exactly; the target's other mass is spread by Dirichlet draws and ``z`` again comes from
position_stats. A one-hot draft makes BV equal TV path by path: ``p_i = α^i``,
``Z_{i+1} = p_i (1 − α)``, and on every row both rules give ``P(τ ≥ i) = α^i``, hence
``E[τ + 1] = (1 − α^{γ+1}) / (1 − α)``. Draft signals are those of a one-hot draft
(``draft_conf = top1 = 1``, ``entropy = 0``) unless a surrogate overrides ``draft_conf``.

Deterministic for a seed; vectorised over rows (chunks of rows, loops only over K and over
output positions of the reference chain).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime, timezone

import numpy as np

from specbatch.errors import require
from specbatch.theory.verify.path_stats import draft_signals, position_stats
from specbatch.traces.format.trace import Trace, default_meta, make_trace

SURROGATES = ("natural", "perfect", "good", "poor")
DEFAULT_NOISE = {"good": 0.1, "poor": 0.8}
LEVELS = 65  # similarity λ is quantised to the grid l / (LEVELS − 1)
MAX_VOCAB = 64  # keeps the precomputed draft tables small (P · LEVELS · V² floats)
FLOOR = 1e-3  # share of uniform mass mixed into every table row (full support, q > 0)


@dataclass(frozen=True)
class SynthConfig:
    """Knobs of :func:`synth_trace` (lengths in tokens, arrival rate in requests/second)."""

    requests: int = 64
    depth: int = 8  # K, drafted tokens per position
    temperature: float = 1.0  # 0 = greedy
    vocab: int = 32  # V
    prompt_mean: float = 256.0  # lognormal prompt length: mean, log-scale sigma, cap
    prompt_sigma: float = 0.5
    prompt_max: int = 4096
    output_mean: float = 128.0  # lognormal output length (= position rows per request)
    output_sigma: float = 0.5
    output_max: int = 1024
    similarity: float = 0.85  # λ of easy requests (draft = λ target + (1 − λ) noise)
    hard_fraction: float = 0.3  # share of hard requests
    hard_similarity: float = 0.4  # λ of hard requests
    similarity_spread: float = 0.5  # std of per-position jitter of logit(λ)
    concentration: float = 0.3  # Dirichlet concentration of table rows (smaller = peakier)
    surrogate: str = "natural"  # natural | perfect | good | poor
    surrogate_noise: float | None = None  # w for good/poor (None: 0.1 / 0.8)
    constant_alpha: float | None = None  # every min(1, r) = α exactly
    arrival_rate: float | None = None  # Poisson arrivals (req/s); None = no arrival times
    tables: int = 16  # size of the shared pool of Markov tables
    seed: int = 0

    def check(self) -> None:
        """Raise SpecbatchError on an out-of-range knob."""
        require(self.requests >= 1, f"synth: requests: expected >= 1, got {self.requests}")
        require(self.depth >= 1, f"synth: depth: expected K >= 1, got {self.depth}")
        require(self.temperature >= 0 and np.isfinite(self.temperature),
                f"synth: temperature: expected a finite number >= 0, got {self.temperature}")
        require(2 <= self.vocab <= MAX_VOCAB,
                f"synth: vocab: expected 2..{MAX_VOCAB}, got {self.vocab}")
        for name in ("prompt_mean", "output_mean", "concentration"):
            value = getattr(self, name)
            require(value > 0, f"synth: {name}: expected > 0, got {value}")
        for name in ("prompt_sigma", "output_sigma", "similarity_spread"):
            value = getattr(self, name)
            require(value >= 0, f"synth: {name}: expected >= 0, got {value}")
        require(self.prompt_max >= 1 and self.output_max >= 1,
                "synth: prompt_max/output_max: expected >= 1")
        for name in ("similarity", "hard_similarity", "hard_fraction"):
            value = getattr(self, name)
            require(0 <= value <= 1, f"synth: {name}: expected a value in [0, 1], got {value}")
        require(self.surrogate in SURROGATES,
                f"synth: surrogate: expected one of {', '.join(SURROGATES)}, got "
                f"{self.surrogate!r}")
        if self.surrogate_noise is not None:
            require(0 <= self.surrogate_noise <= 1,
                    "synth: surrogate_noise: expected a value in [0, 1], got "
                    f"{self.surrogate_noise}")
        if self.constant_alpha is not None:
            require(0 < self.constant_alpha <= 1,
                    f"synth: constant_alpha: expected a value in (0, 1], got {self.constant_alpha}")
            require(self.temperature > 0, "synth: constant_alpha: expected temperature > 0 "
                    "(at temperature 0 acceptance is 0 or 1), got 0")
        if self.arrival_rate is not None:
            require(self.arrival_rate > 0, "synth: arrival_rate: expected > 0, got "
                                           f"{self.arrival_rate}")
        require(self.tables >= 1, f"synth: tables: expected >= 1, got {self.tables}")


def synth_trace(config: SynthConfig) -> Trace:
    """A synthetic :class:`~traces.format.files.Trace` (see the module docstring for the model)."""
    config.check()
    rng = np.random.default_rng(config.seed)
    n, k, v = config.requests, config.depth, config.vocab
    prompt_len = _lognormal_lengths(
        rng, n, config.prompt_mean, config.prompt_sigma, config.prompt_max
    )
    output_len = _lognormal_lengths(
        rng, n, config.output_mean, config.output_sigma, config.output_max
    )
    hard = rng.random(n) < config.hard_fraction
    lam = np.where(hard, config.hard_similarity, config.similarity)  # [n]
    target_tab = _tables(rng, config.tables, v, config.concentration)  # [P, V, V]
    noise_tab = _tables(rng, config.tables, v, config.concentration)  # [P, V, V]
    req_pair = rng.integers(config.tables, size=n)  # [n] table pair (target p, noise p)
    arrival = np.full(n, np.nan)
    if config.arrival_rate is not None:
        arrival = np.cumsum(rng.exponential(1.0 / config.arrival_rate, size=n))
        arrival -= arrival[0]

    context = _reference_contexts(rng, config, target_tab, req_pair, output_len)  # [rows]
    rows = int(output_len.sum())
    row_req = np.repeat(np.arange(n), output_len)  # [rows]
    jitter = rng.standard_normal((rows, k)) * config.similarity_spread
    with np.errstate(divide="ignore"):
        logit = np.log(lam) - np.log1p(-lam)
        lam_rows = 1.0 / (1.0 + np.exp(-(logit[row_req, None] + jitter)))  # [rows, K]
    level = np.rint(lam_rows * (LEVELS - 1)).astype(np.int64)  # [rows, K] index into λ grid
    uniforms = rng.random((rows, k))  # sampling the draft

    out = {name: np.empty((rows, k)) for name in ("q", "pt", "z", "draft_conf", "entropy", "top1")}
    out["draft_token"] = np.empty((rows, k), dtype=np.int32)
    tables = (
        None if config.constant_alpha is not None else _draft_tables(config, target_tab, noise_tab)
    )
    chunk = max(1, 250_000 // ((k + 1) * v))
    for start in range(0, rows, chunk):
        sl = slice(start, min(rows, start + chunk))
        if tables is not None:
            stats = _chunk_markov(config, tables, req_pair[row_req[sl]], context[sl], level[sl],
                                  uniforms[sl])
        else:
            stats = _chunk_constant(config, np.random.default_rng([config.seed, start]),
                                    sl.stop - sl.start)
        for name, arr in stats.items():
            out[name][sl] = arr

    _apply_surrogate(config, rng, out)
    requests = {
        "request_id": np.arange(n, dtype=np.int64),
        "prompt_len": prompt_len,
        "output_len": output_len,
        "category": np.where(hard, "synthetic-hard", "synthetic-easy").astype(object),
        "arrival": arrival,
    }
    return make_trace(_synth_meta(config), requests, out)


def _synth_meta(config: SynthConfig) -> dict:
    """meta.json of a synthetic trace: the format header, provenance and the knobs."""
    n, v = config.requests, config.vocab
    return default_meta(
        config.temperature, config.depth,
        models={"draft": {"name": "synthetic-draft", "vocab": v},
                "target": {"name": "synthetic-target", "vocab": v}},
        tokenizer=None,
        prompt_source="synthetic",
        seeds={"synth": config.seed},
        device="cpu",
        library_versions={"numpy": np.__version__},
        capture_time=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        command=None,
        completion={"complete": True, "requests_done": n, "requests_total": n},
        synth=asdict(config),
    )


def _lognormal_lengths(rng: np.random.Generator, n: int, mean: float, sigma: float,
                       cap: int) -> np.ndarray:
    """Integer lengths, lognormal with the given mean, clipped to [1, cap].  returns # [n]"""
    mu = np.log(mean) - sigma**2 / 2
    return np.clip(np.rint(rng.lognormal(mu, sigma, size=n)), 1, cap).astype(np.int64)


def _tables(rng: np.random.Generator, count: int, v: int, concentration: float) -> np.ndarray:
    """Markov tables, rows Dirichlet(concentration) floored by FLOOR/V.  returns # [P, V, V]"""
    rows = rng.dirichlet(np.full(v, concentration), size=(count, v))
    return (1 - FLOOR) * rows + FLOOR / v


def _temper(rows: np.ndarray, temperature: float) -> np.ndarray:
    """``M_T ∝ M^{1/T}``; one-hot argmax at T = 0.  rows: # [..., V]"""
    if temperature == 1.0:
        return rows
    if temperature == 0.0:
        return (np.arange(rows.shape[-1]) == rows.argmax(axis=-1)[..., None]).astype(np.float64)
    logits = np.log(rows) / temperature
    logits -= logits.max(axis=-1, keepdims=True)
    out = np.exp(logits)
    return out / out.sum(axis=-1, keepdims=True)


def _sample(rows: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Inverse-CDF sample from each row with u in [0, 1); never picks a zero-probability token.

    rows: # [B, V]; u: # [B]; returns # [B] int64
    """
    cdf = np.cumsum(rows, axis=1)
    threshold = (1.0 - u) * cdf[:, -1]  # in (0, total]
    x = (cdf < threshold[:, None]).sum(axis=1)
    return np.minimum(x, rows.shape[1] - 1)


def _reference_contexts(rng, config, target_tab, req_pair, output_len) -> np.ndarray:
    """Context token ``y_{t−1}`` of every row: the target's reference chain sampled at T.

    Loops over output positions (vectorised over requests).  returns # [rows] int64
    """
    n = output_len.size
    longest = int(output_len.max())
    tempered = _temper(target_tab, config.temperature)  # [P, V, V]
    prev = rng.integers(config.vocab, size=n)  # y_{-1}: a random last prompt token
    ctx = np.empty((longest, n), dtype=np.int64)
    u = rng.random((longest, n))
    for t in range(longest):
        ctx[t] = prev
        prev = _sample(tempered[req_pair, prev], u[t])
    keep = np.arange(longest)[:, None] < output_len[None, :]  # [T, n]
    return ctx.T[keep.T]  # request-major order


def _draft_tables(config: SynthConfig, target_tab: np.ndarray, noise_tab: np.ndarray) -> dict:
    """Every row the draft and target can take, precomputed once (flat lookup tables).

    The draft row of pair p at similarity level l after token x is
    ``λ_l · target_tab[p, x] + (1 − λ_l) · noise_tab[p, x]`` with ``λ_l = l / (LEVELS − 1)``;
    its flat index is ``(p · LEVELS + l) · V + x``; target rows are indexed ``p · V + x``.
    target_tab, noise_tab: # [P, V, V]
    """
    p, v = target_tab.shape[0], config.vocab
    lam = np.linspace(0.0, 1.0, LEVELS)[None, :, None, None]  # [1, L, 1, 1]
    draft1 = lam * target_tab[:, None] + (1 - lam) * noise_tab[:, None]  # [P, L, V, V]
    draft1 = draft1.reshape(-1, v)
    draft_t = _temper(draft1, config.temperature)
    argmax = draft1.argmax(axis=1)
    signals = draft_signals(argmax, draft1)  # per table row: entropy (nats) and top-1
    return {
        "draft1": draft1,  # [P*L*V, V] temperature-1 rows (draft signals)
        "draft_t": draft_t,  # [P*L*V, V] rows at the sampling temperature
        "cdf": np.cumsum(draft_t, axis=1),  # [P*L*V, V]
        "argmax": argmax,  # [P*L*V] greedy token
        "entropy": signals["entropy"],  # [P*L*V] nats
        "top1": signals["top1"],  # [P*L*V]
        "target_t": _temper(target_tab, config.temperature).reshape(p * v, v),  # [P*V, V]
    }


def _chunk_markov(config, tables, pair, context, level, uniforms) -> dict:
    """Draft K tokens per row from the lookup tables and record their statistics.

    pair: # [B] table pair of each row; context: # [B] token y_{t-1}; level: # [B, K] λ level;
    uniforms: # [B, K]; returns dict of # [B, K] arrays (q, pt, z by position_stats)
    """
    b, k = level.shape
    v = config.vocab
    tokens = np.empty((b, k), dtype=np.int64)
    combo = np.empty((b, k), dtype=np.int64)
    draft_rows = np.empty((b, k, v))
    target_rows = np.empty((b, k + 1, v))
    prev = context
    for i in range(k):
        c = (pair * LEVELS + level[:, i]) * v + prev  # [B]
        if config.temperature == 0:
            x = tables["argmax"][c]
        else:
            cdf = np.take(tables["cdf"], c, axis=0)  # [B, V]
            # in (0, total]: never a zero-mass token
            threshold = (1.0 - uniforms[:, i]) * cdf[:, -1]
            x = np.minimum(np.count_nonzero(cdf < threshold[:, None], axis=1), v - 1)
        tokens[:, i], combo[:, i] = x, c
        draft_rows[:, i] = np.take(tables["draft_t"], c, axis=0)
        target_rows[:, i] = np.take(tables["target_t"], pair * v + prev, axis=0)
        prev = x
    target_rows[:, k] = np.take(tables["target_t"], pair * v + prev, axis=0)
    stats = position_stats(tokens, draft_rows, target_rows)
    return {"draft_token": tokens, "q": stats["q"], "pt": stats["pt"], "z": stats["z"],
            "draft_conf": tables["draft1"][combo, tokens], "entropy": tables["entropy"][combo],
            "top1": tables["top1"][combo]}


def _chunk_constant(config, rng, b) -> dict:
    """``b`` rows of a deterministic (one-hot) draft with ``pt = α`` on the drafted token.

    ``q = 1`` and ``pt = α`` give ``min(1, r_i) = α`` bit for bit; the target's other mass
    ``1 − α`` is spread by a Dirichlet draw. With a one-hot draft BV equals TV path by path
    (THEORY.md §3): ``p_i = α^i`` and ``Z_{i+1} = p_i (1 − α)``, so both rules accept
    ``P(τ ≥ i | X^γ) = α^i`` on every row. returns dict of # [b, K] arrays
    """
    v, k = config.vocab, config.depth
    alpha = float(config.constant_alpha)
    tokens = rng.integers(v, size=(b, k))
    rest = rng.dirichlet(np.full(v - 1, config.concentration), size=(b, k))  # [b, K, V-1]
    target_rows = np.empty((b, k + 1, v))
    others = np.arange(v)[None, None, :] != tokens[:, :, None]  # [b, K, V]
    target_rows[:, :k][others] = (rest * (1 - alpha)).ravel()
    np.put_along_axis(target_rows[:, :k], tokens[:, :, None], alpha, axis=2)
    target_rows[:, k] = rng.dirichlet(np.full(v, config.concentration), size=b)
    draft_rows = (np.arange(v)[None, None, :] == tokens[:, :, None]).astype(np.float64)
    stats = position_stats(tokens, draft_rows, target_rows)
    ones = np.ones((b, k))
    return {"draft_token": tokens, "q": stats["q"], "pt": stats["pt"], "z": stats["z"],
            "draft_conf": ones, "entropy": np.zeros((b, k)), "top1": ones}


def _apply_surrogate(config: SynthConfig, rng: np.random.Generator, out: dict) -> None:
    """Overwrite ``draft_conf`` according to ``config.surrogate`` (in place)."""
    if config.surrogate == "natural":
        return
    with np.errstate(divide="ignore", invalid="ignore"):
        accept = np.minimum(out["pt"] / out["q"], 1.0)  # same expression as token_weights
    if config.surrogate == "perfect":
        conf = accept
    else:
        w = (
            config.surrogate_noise
            if config.surrogate_noise is not None
            else DEFAULT_NOISE[config.surrogate]
        )
        conf = (1 - w) * accept + w * rng.random(accept.shape)
    out["draft_conf"] = conf
    out["top1"] = np.maximum(out["top1"], conf)
