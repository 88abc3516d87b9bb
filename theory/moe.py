"""Experts a mixture-of-experts pass touches: the weight traffic of a sparse layer (THEORY.md §8).

A MoE layer with E routed experts sends each token to k of them. One pass over Q tokens reads
the weights of every expert at least one of its tokens chose. Let π_e be the probability
that one token's top-k set contains expert e (the *load* of e, as routers report it: the
share of tokens routed to e; Σ_e π_e = k, 0 ≤ π_e ≤ 1). Assuming only that the Q tokens
route independently of each other (their k choices may be correlated within a token),
linearity of expectation gives the exact expected number of distinct experts read:

    E_touched(Q) = Σ_e (1 − (1 − π_e)^Q)

Uniform routing (π_e = k/E) is THEORY.md §8's E · (1 − (1 − k/E)^Q); for Qwen3-30B-A3B
(E = 128, k = 8) 8.0 at Q = 1, 29.1 at Q = 4, 82.4 at Q = 16, 125.9 at Q = 64.

Skew. ``routing_skew`` s ≥ 0 is a one-number law for a measured imbalance: expert loads
proportional to a Zipf law of exponent s over the experts ranked by popularity, capped at 1
(an expert cannot take a token twice):

    π_e = min(1, c · e^(−s)),   e = 1..E,   c such that Σ_e π_e = k

(c found by water-filling: the experts that would exceed 1 take every token, the rest share
k minus their count in Zipf proportions). s = 0 is uniform; larger s concentrates tokens on
fewer experts (fewer distinct experts per pass, less weight traffic), down to the same k
experts for every token as s → ∞. A measured per-expert load vector
(:func:`expected_touched` with ``load``) replaces the law entirely.

:func:`expected_touched` is the closed form; :func:`touched_by_enumeration` the exact twin
(every joint routing of Q tokens under a law over k-subsets, Fractions) and
:func:`touched_by_sampling` the Monte-Carlo one, both in the tests.
"""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np

from specbatch.errors import require


def check_routing(experts: int, top_k: int) -> None:
    """E ≥ 1 routed experts and 1 ≤ k ≤ E chosen per token (one-line error otherwise)."""
    require(isinstance(experts, (int, np.integer)) and experts >= 1,
            f"experts {experts!r}: expected an integer >= 1")
    require(isinstance(top_k, (int, np.integer)) and 1 <= top_k <= experts,
            f"top_k {top_k!r}: expected an integer in [1, experts = {experts}]")


def zipf_load(experts: int, top_k: int, routing_skew: float = 0.0) -> np.ndarray:
    """Per-expert loads π # [E] of the capped Zipf law of exponent ``routing_skew`` (module
    docstring), most popular first; Σ π = k, every π_e ≤ 1."""
    check_routing(experts, top_k)
    require(isinstance(routing_skew, (int, float, np.floating)) and not isinstance(
        routing_skew, bool) and math.isfinite(routing_skew) and routing_skew >= 0,
            f"routing_skew {routing_skew!r}: expected a finite number >= 0 (0 = uniform)")
    weights = np.arange(1, experts + 1, dtype=np.float64) ** -float(routing_skew)  # [E]
    load = np.empty(experts)  # [E]
    capped = 0  # the most popular `capped` experts take every token (water-filling)
    while True:
        rest = weights[capped:]
        load[:capped] = 1.0
        load[capped:] = (top_k - capped) * rest / rest.sum()
        if capped == top_k or load[capped] <= 1.0:
            return np.minimum(load, 1.0)
        capped += 1


def check_load(load, top_k: int) -> np.ndarray:
    """A measured load vector π # [E]: every entry in [0, 1], summing to k (within 1e-6)."""
    arr = np.asarray(load, dtype=np.float64).ravel()
    require(arr.size >= top_k and bool(np.isfinite(arr).all())
            and bool(((arr >= 0) & (arr <= 1)).all()),
            f"expert load: expected >= {top_k} shares in [0, 1], got {arr[:4].tolist()}...")
    require(abs(float(arr.sum()) - top_k) <= 1e-6 * top_k,
            f"expert load: expected shares summing to top_k = {top_k} (each token picks "
            f"{top_k} experts), got {float(arr.sum()):.6g}")
    return arr


def expected_touched(tokens: float, experts: int, top_k: int, routing_skew: float = 0.0,
                     load=None) -> float:
    """E_touched(Q) for Q = ``tokens`` (module docstring): uniform routing by default, the
    Zipf law of ``routing_skew``, or a measured per-expert ``load`` vector. 0 for Q = 0."""
    check_routing(experts, top_k)
    require(tokens >= 0 and math.isfinite(tokens), f"tokens {tokens!r}: expected Q >= 0")
    if load is None and routing_skew == 0:
        return uniform_touched(float(tokens), experts, top_k)
    pi = check_load(load, top_k) if load is not None else zipf_load(experts, top_k, routing_skew)
    require(pi.size == experts, f"expert load: expected {experts} shares (one per expert), "
            f"got {pi.size}")
    return float(np.sum(1.0 - (1.0 - pi) ** tokens))


def uniform_touched(tokens: float, experts: int, top_k: int) -> float:
    """E · (1 − (1 − k/E)^Q): the hot-path scalar form (no checks)."""
    return experts * (1.0 - (1.0 - top_k / experts) ** tokens)


def touched_by_enumeration(tokens: int, subset_law: dict[tuple[int, ...], Fraction]) -> Fraction:
    """The exact E[distinct experts] over every joint routing of ``tokens`` independent tokens,
    each drawing its k-subset from ``subset_law`` (k-subset -> probability, summing to 1):
    the brute-force twin of :func:`expected_touched` (exponential; small cases only)."""
    require(sum(subset_law.values()) == 1, "subset_law: expected probabilities summing to 1")
    total = Fraction(0)
    for joint in itertools.product(subset_law.items(), repeat=tokens):
        prob = Fraction(1)
        seen: set[int] = set()
        for subset, p in joint:
            prob *= p
            seen.update(subset)
        total += prob * len(seen)
    return total


def subset_marginals(subset_law: dict[tuple[int, ...], Fraction], experts: int) -> list[Fraction]:
    """π_e = P(e ∈ a token's k-subset) of a law over k-subsets # [E]."""
    pi = [Fraction(0)] * experts
    for subset, p in subset_law.items():
        for e in subset:
            pi[e] += p
    return pi


def touched_by_sampling(tokens: int, load: np.ndarray, top_k: int, samples: int,
                        seed: int = 0) -> tuple[float, float]:
    """Monte-Carlo E[distinct experts] and its standard error: each token draws k distinct
    experts by systematic (Madow) sampling, whose inclusion probabilities are exactly
    ``load`` # [E] (Σ = k, each ≤ 1), independently of the other tokens."""
    pi = check_load(load, top_k)
    rng = np.random.default_rng(seed)
    cum = np.concatenate([[0.0], np.cumsum(pi)])  # [E + 1]
    offsets = rng.random((samples, tokens))  # [samples, Q]
    points = offsets[..., None] + np.arange(top_k)  # [samples, Q, k]
    chosen = np.searchsorted(cum, points, side="right") - 1  # [samples, Q, k]
    chosen = np.clip(chosen, 0, pi.size - 1).reshape(samples, -1)
    hit = np.zeros((samples, pi.size), dtype=bool)  # [samples, E]
    np.put_along_axis(hit, chosen, True, axis=1)
    counts = hit.sum(axis=1)  # [samples]
    return float(counts.mean()), float(counts.std(ddof=1) / math.sqrt(samples))


def ep_local_experts(experts: int, ep_size: int) -> int:
    """Experts one rank holds under expert parallelism: E / ep_size, ep_size = dp · tp (vLLM
    ``vllm/model_executor/layers/fused_moe/layer.py`` ``determine_expert_map``, linear placement;
    an uneven split, which vLLM gives the first E mod ep_size ranks one more, is refused)."""
    require(isinstance(ep_size, (int, np.integer)) and ep_size >= 1,
            f"ep_size {ep_size!r}: expected an integer >= 1")
    require(experts % ep_size == 0, f"ep_size {ep_size}: expected a divisor of the {experts} "
            "routed experts (an uneven expert split is not priced)")
    return experts // ep_size


def ep_pairs(tokens_total: float, top_k: int, ep_size: int) -> float:
    """Expected (token, expert) pairs one EP rank computes when the dp ranks together send
    ``tokens_total`` = Σ_ranks Q_r tokens through a MoE layer under uniform routing: each token
    picks k experts, each rank holds 1/ep_size of them, so Σ Q_r · k / ep_size."""
    return tokens_total * top_k / ep_size


def ep_local_touched(tokens_total: float, experts: int, top_k: int, ep_size: int) -> float:
    """Expected distinct experts of one EP rank's E / ep_size that at least one of the
    ``tokens_total`` tokens of all ranks picks, uniform routing: each local expert is missed by
    one token with probability 1 − k/E, so (E / ep_size) · (1 − (1 − k/E)^{Σ Q_r}) (the
    rank's share of :func:`uniform_touched`, by symmetry over the experts)."""
    return ep_local_experts(experts, ep_size) * (1.0 - (1.0 - top_k / experts) ** tokens_total)
