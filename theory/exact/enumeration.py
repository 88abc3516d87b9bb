"""Exact enumeration of one speculative iteration and of the whole loop (THEORY.md §2-4).

Everything here enumerates every draft ``x ∈ V^γ`` (and every output) of an explicit model pair
(:mod:`theory.exact.small_models`), so the laws are exact: Fractions when the pair is exact, float64
otherwise. Nothing is sampled.

One iteration from context ``c`` (THEORY.md §1): the draft ``X^γ ~ Ms(·|c)``, a rule returns
``τ ∈ {0..γ}`` and one extra token ``Y``; the output is ``O = X^τ Y``.

- Token verification (TV, §2): ``P(τ ≥ i | X^γ) = Π_{j≤i} min(1, r_j)``,
  ``Y ∝ max(Mb(·|X^τ) − Ms(·|X^τ), 0)`` for τ < γ, ``Y ~ Mb(·|X^γ)`` for τ = γ.
- Block verification (BV, §3): ``τ = max{i : η_i < h_i}`` with independent uniforms, so
  ``P(τ = k | X^γ) = h_k Π_{j>k} (1 − h_j)`` (``h_0 = 1``);
  ``Y ∝ max(p_τ Mb(·|X^τ) − Ms(·|X^τ), 0)`` for τ < γ.

Note on THEORY.md §3: the identity is ``P(τ ≥ i | X^i) = p_i`` (conditioning on the first i
draft tokens only). Conditioned on the whole draft, ``E[τ | X^γ]`` is *not* ``Σ p_i`` in
general (the paper's example: draft ``aa`` has ``Σ p_i = 3/4`` but ``E[τ | X^2 = aa] = 1/2``);
:func:`per_draft` gives the latter, which is the per-draft table of THEORY.md §4.

Tiers: the path statistics here — :func:`block_weights_exact` (``p_i`` by the recursion),
:func:`residual_mass_exact` (``Z_{i+1}``), :func:`block_thresholds_exact` (``h_i``),
:func:`path_stats_exact`, :func:`draft_signals_exact` — and :func:`extra_token_law_exact` are the
exact twins of the numpy reference (:mod:`specbatch.theory.verify.path_stats`,
:func:`specbatch.theory.verify.reference.extra_token_law`) and of the torch fast path
(:mod:`specbatch.theory.verify.torch_path_stats`,
:func:`specbatch.theory.verify.torch_batched.extra_token_law_torch`). They compute in the inputs'
number type: Fractions give exact values, floats a readable reference for float tests.
"""

from __future__ import annotations

import itertools
import math
from collections import defaultdict
from dataclasses import dataclass

from specbatch.errors import SpecbatchError, require
from specbatch.theory.exact.small_models import (
    ModelPair,
    Number,
    Prefix,
    TableModel,
    one_of,
    sequence_prob,
    zero_of,
)
from specbatch.theory.verify.reference import RULES


@dataclass(frozen=True)
class DraftPath:
    """Everything one verification rule needs on one drafted path (THEORY.md §2-3).

    ``accept[i-1] = min(1, r_i)``; ``p[i] = p_i`` for i = 0..γ (BV's clipped weight, p_0 = 1);
    ``z[i] = Z_{i+1}`` for i = 0..γ-1; ``h[i-1] = h_i``; ``tau[k] = P(τ = k | X^γ = draft)``
    under the path's rule.
    """

    draft: Prefix
    prob: Number  # Ms(draft | c)
    accept: tuple
    p: tuple
    z: tuple
    h: tuple
    tau: tuple
    rule: str

    def tail(self, i: int) -> Number:
        """``P(τ ≥ i | X^γ = draft)``."""
        return sum(self.tau[i:], 0 * self.prob)

    def expected_tau(self) -> Number:
        return sum((k * t for k, t in enumerate(self.tau)), 0 * self.prob)


def _check_rule(rule: str) -> None:
    require(rule in RULES, f"rule: expected one of {list(RULES)}, got {rule!r}")


def _check_depth(pair: ModelPair, draft_depth: int, target_depth: int) -> None:
    for name, model, depth in (("draft", pair.draft, draft_depth),
                               ("target", pair.target, target_depth)):
        if isinstance(model, TableModel) and model.depth < depth:
            raise SpecbatchError(
                f"table model '{name}': depth {model.depth} is too small; this computation "
                f"needs prefixes up to length {depth}"
            )


def _positive(v: Number) -> bool:
    return v > 0


def _one_like(x: Number) -> Number:
    """1 in the number type of ``x`` (Fraction for a Fraction, float for a float)."""
    return x * 0 + 1


def block_weights_exact(q, pt) -> tuple:
    """BV's weights ``p_1..p_γ`` by the definition ``p_i = min(p_{i-1} r_i, 1)``, ``p_0 = 1``.

    The exact tier (THEORY.md §3): the recursion itself, in the inputs' number type, so that
    the cumsum/cummax identity of :func:`specbatch.theory.verify.path_stats.block_weights` and
    :func:`specbatch.theory.verify.torch_path_stats.block_weights_torch` has an independent twin.

    q, pt:   # [γ] draft / target probability of each drafted token (q > 0)
    returns  # [γ] tuple, ``p_1..p_γ``
    """
    out: list = []
    for qi, pti in zip(q, pt):
        one = _one_like(qi)
        prev = out[-1] if out else one
        out.append(min(prev * (pti / qi), one))
    return tuple(out)


def residual_mass_exact(weight: Number, draft_row, target_row) -> Number:
    """``Z = Σ_x max(w · Mb(x|X^i) − Ms(x|X^i), 0)`` with ``w = p_i`` (THEORY.md §3).

    draft_row, target_row:  # [V] ``Ms(·|X^i)``, ``Mb(·|X^i)``
    """
    zero = weight * 0
    return sum((max(weight * b - s, zero) for s, b in zip(draft_row, target_row)), zero)


def block_thresholds_exact(p, z) -> tuple:
    """BV's thresholds ``h_1..h_γ`` (THEORY.md §3).

    ``h_i = Z_{i+1} / (Z_{i+1} + 1 − p_i)`` for i < γ (1 when the denominator is 0) and
    ``h_γ = p_γ``. p: # [γ] ``p_1..p_γ``; z: # [γ] ``Z_1..Z_γ`` (``z[j] = Z_{j+1}``).
    """
    gamma = len(p)
    h = []
    for i in range(1, gamma):
        one = _one_like(p[i - 1])
        den = z[i] + (one - p[i - 1])
        h.append(z[i] / den if den > 0 else one)
    if gamma:
        h.append(p[gamma - 1])
    return tuple(h)


def path_stats_exact(draft, draft_rows, target_rows) -> dict:
    """THEORY.md §3 statistics of one drafted path: the exact twin of ``position_stats``.

    draft:        # [γ] drafted tokens ``X_1..X_γ``
    draft_rows:   # [γ, V] ``Ms(·|X^i)``, i = 0..γ-1
    target_rows:  # [γ(+1), V] ``Mb(·|X^i)``; only the first γ rows are read
    returns dict of # [γ] tuples: ``q``, ``pt``, ``p`` (``p_1..p_γ``), ``z`` (``z[j] = Z_{j+1}``)
    """
    q = tuple(row[tok] for row, tok in zip(draft_rows, draft))
    pt = tuple(row[tok] for row, tok in zip(target_rows, draft))
    p = block_weights_exact(q, pt)
    weights = (_one_like(q[0]),) + p[:-1] if q else ()  # p_0..p_{γ-1}
    z = tuple(residual_mass_exact(w, ms, mb)
              for w, ms, mb in zip(weights, draft_rows, target_rows))
    return {"q": q, "pt": pt, "p": p, "z": z}


def draft_signals_exact(draft, draft_rows) -> dict:
    """The draft's signals on one path (twin of ``stats.draft_signals``), from temperature-1 rows.

    ``draft_conf = Ms(X_{i+1}|X^i)`` and ``top1 = max_x Ms(x|X^i)`` in the rows' number type;
    ``entropy = −Σ_x Ms log Ms`` (nats, 0 log 0 = 0) is irrational, so it is a float.
    returns dict of # [γ] tuples
    """
    return {
        "draft_conf": tuple(row[tok] for row, tok in zip(draft_rows, draft)),
        "entropy": tuple(-sum(float(x) * math.log(float(x)) for x in row if x > 0) + 0.0
                         for row in draft_rows),
        "top1": tuple(max(row) for row in draft_rows),
    }


def _tau_law_token(accept) -> tuple:
    """TV: ``P(τ = k | X^γ) = Π_{j≤k} a_j · (1 − a_{k+1})`` (``a_{γ+1} := 0``), a_j = min(1,
    r_j)."""
    gamma = len(accept)
    law, survive = [], _one_like(accept[0]) if accept else 1
    for k in range(gamma + 1):
        stop = _one_like(survive) - accept[k] if k < gamma else _one_like(survive)
        law.append(survive * stop)
        if k < gamma:
            survive = survive * accept[k]
    return tuple(law)


def _tau_law_block(h) -> tuple:
    """BV: ``P(τ = k | X^γ) = h_k Π_{j>k} (1 − h_j)`` with ``h_0 = 1`` (independent uniforms)."""
    gamma = len(h)
    law = []
    for k in range(gamma + 1):
        t = h[k - 1] if k >= 1 else (_one_like(h[0]) if h else 1)
        for j in range(k + 1, gamma + 1):
            t = t * (_one_like(h[j - 1]) - h[j - 1])
        law.append(t)
    return tuple(law)


def draft_path(pair: ModelPair, draft: Prefix, rule: str, context: Prefix = ()) -> DraftPath:
    """Per-position quantities and ``P(τ = k | X^γ = draft)`` for one draft (``Ms(draft) > 0``)."""
    _check_rule(rule)
    one = one_of(pair)
    rows_d, rows_t = [], []
    prob = one
    prefix = tuple(context)
    for i, tok in enumerate(draft):
        rows_d.append(pair.draft.row(prefix))
        rows_t.append(pair.target.row(prefix))
        q = rows_d[-1][tok]
        require(q > 0, f"draft {draft}: Ms gives probability 0 to token {tok} at position {i + 1}")
        prob = prob * q
        prefix = prefix + (tok,)
    stats = path_stats_exact(draft, rows_d, rows_t)
    accept = tuple(min(one, b / s) for s, b in zip(stats["q"], stats["pt"]))
    if rule == "token":
        h: tuple = ()
        tau = _tau_law_token(accept) if draft else (one,)
    else:
        h = block_thresholds_exact(stats["p"], stats["z"])
        tau = _tau_law_block(h) if draft else (one,)
    return DraftPath(tuple(draft), prob, accept, (one,) + stats["p"], stats["z"], h, tau, rule)


def draft_paths(pair: ModelPair, gamma: int, rule: str, context: Prefix = ()):
    """Every draft ``x ∈ V^γ`` with ``Ms(x | c) > 0``, as :class:`DraftPath` records."""
    _check_rule(rule)
    require(gamma >= 0, f"gamma: expected >= 0, got {gamma}")
    _check_depth(pair, len(context) + gamma - 1, len(context) + gamma)
    for draft in itertools.product(range(pair.vocab), repeat=gamma):
        if _positive(sequence_prob(pair.draft, draft, context)):
            yield draft_path(pair, draft, rule, context)


def extra_token_law_exact(pair: ModelPair, path: DraftPath, tau: int,
                          context: Prefix = ()) -> tuple:
    """Law of the extra token ``Y`` given τ on ``path`` (THEORY.md §2-3), exactly.

    τ = γ: the bonus law ``Mb(·|X^γ)``; τ < γ: ``max(w Mb(·|X^τ) − Ms(·|X^τ), 0) / Z_{τ+1}``
    with w = 1 (TV) or ``p_τ`` (BV, ``p_0 = 1``). The exact tier of
    :func:`specbatch.theory.verify.reference.extra_token_law` (numpy) and
    :func:`specbatch.theory.verify.torch_batched.extra_token_law_torch`: the model pair and ``path``
    (tokens, weights p, rule) stand for their ``draft_rows, target_rows, p, rule``. A zero-mass
    residual at a τ of positive probability cannot happen exactly, so it raises.

    returns  # [V] tuple summing to 1
    """
    prefix = tuple(context) + path.draft[:tau]
    mb = pair.target.row(prefix)
    if tau == len(path.draft):
        return tuple(mb)
    weight = path.p[tau] if path.rule == "block" else one_of(pair)
    ms = pair.draft.row(prefix)
    zero = zero_of(pair)
    resid = [max(weight * b - s, zero) for s, b in zip(ms, mb)]
    total = sum(resid, zero)
    if not total > 0:
        raise SpecbatchError(
            f"internal: residual mass 0 at τ = {tau} on draft {path.draft} with P(τ = {tau}) > 0")
    return tuple(v / total for v in resid)


def iteration_law(pair: ModelPair, gamma: int, rule: str, context: Prefix = ()) -> dict:
    """Exact law of ``(τ, O)`` of one iteration: ``{(τ, O): P}`` with ``O = X^τ Y`` (len τ+1)."""
    law: dict = defaultdict(lambda: zero_of(pair))
    for path in draft_paths(pair, gamma, rule, context):
        for k, pk in enumerate(path.tau):
            if not pk > 0:
                continue
            mass = path.prob * pk
            for y, py in enumerate(extra_token_law_exact(pair, path, k, context)):
                if py > 0:
                    law[(k, path.draft[:k] + (y,))] += mass * py
    return dict(law)


def output_law(pair: ModelPair, gamma: int, rule: str, context: Prefix = ()) -> dict:
    """``Q(s) = P(O = s)`` for one iteration (THEORY.md §4)."""
    q: dict = defaultdict(lambda: zero_of(pair))
    for (_, out), prob in iteration_law(pair, gamma, rule, context).items():
        q[out] += prob
    return dict(q)


def tau_law(pair: ModelPair, gamma: int, rule: str, context: Prefix = ()) -> tuple:
    """``P(τ = k)`` for k = 0..γ."""
    law = [zero_of(pair)] * (gamma + 1)
    for path in draft_paths(pair, gamma, rule, context):
        for k, pk in enumerate(path.tau):
            law[k] += path.prob * pk
    return tuple(law)


def expected_tau(pair: ModelPair, gamma: int, rule: str, context: Prefix = ()) -> Number:
    """``E[τ]`` of one iteration under ``rule``, by enumeration of the algorithm."""
    return sum((k * pk for k, pk in enumerate(tau_law(pair, gamma, rule, context))),
               zero_of(pair))


def per_draft(pair: ModelPair, gamma: int, rule: str, context: Prefix = ()) -> dict:
    """``{x: (Ms(x), E[τ | X^γ = x])}`` for every draft of positive probability (THEORY §4)."""
    return {path.draft: (path.prob, path.expected_tau())
            for path in draft_paths(pair, gamma, rule, context)}


def validity_residual(pair: ModelPair, gamma: int, rule: str, context: Prefix = ()) -> Number:
    """``max_z |Σ_{k=0..γ} Q(z^{k+1}) Mb(z_{k+2..γ+1} | z^{k+1}) − Mb(z)|`` over z ∈ V^{γ+1}.

    THEORY.md §4: zero iff one iteration followed by ordinary target sampling reproduces the
    target's law; exactly 0 for a lossless rule on an exact pair.
    """
    q = output_law(pair, gamma, rule, context)
    zero = zero_of(pair)
    worst = zero
    for z in itertools.product(range(pair.vocab), repeat=gamma + 1):
        lhs = zero
        for k in range(gamma + 1):
            head = z[: k + 1]
            qk = q.get(head, zero)
            if qk:
                lhs += qk * sequence_prob(pair.target, z[k + 1:], tuple(context) + head)
        rhs = sequence_prob(pair.target, z, context)
        worst = max(worst, abs(lhs - rhs))
    return worst


def loop_law(pair: ModelPair, gamma: int, rule: str, n: int) -> dict:
    """Exact law of the first ``n`` output tokens of the whole speculative loop.

    Starting from the empty context, each iteration appends ``O = X^τ Y`` drawn from
    :func:`output_law` at the current context; the loop runs until at least n tokens exist.
    Needs model rows for prefixes up to length ``n − 1 + γ``.
    """
    require(1 <= n <= 4, f"n: expected 1..4 output tokens, got {n}")
    require(gamma >= 1, f"gamma: expected >= 1, got {gamma}")
    _check_depth(pair, n - 2 + gamma, n - 1 + gamma)
    zero = zero_of(pair)
    final: dict = defaultdict(lambda: zero)
    frontier: dict = {(): one_of(pair)}
    cache: dict = {}
    while frontier:
        nxt: dict = defaultdict(lambda: zero)
        for ctx, mass in frontier.items():
            if ctx not in cache:
                cache[ctx] = output_law(pair, gamma, rule, ctx)
            for out, prob in cache[ctx].items():
                seq = ctx + out
                if len(seq) >= n:
                    final[seq[:n]] += mass * prob
                else:
                    nxt[seq] += mass * prob
        frontier = dict(nxt)
    return dict(final)


def loop_residual(pair: ModelPair, gamma: int, rule: str, n: int) -> Number:
    """``max_z |P_loop(z) − Mb(z)|`` over z ∈ V^n (0 for a lossless rule)."""
    law = loop_law(pair, gamma, rule, n)
    zero = zero_of(pair)
    return max(abs(law.get(z, zero) - sequence_prob(pair.target, z))
               for z in itertools.product(range(pair.vocab), repeat=n))


def tail_residual(pair: ModelPair, gamma: int, rule: str, context: Prefix = ()) -> Number:
    """``max_{i, x^i} |P(τ ≥ i | X^i = x^i) − w|`` with w the rule's closed form.

    BV: ``w = p_i`` (THEORY.md §3); TV: ``w = Π_{j≤i} min(1, r_j)`` (§2). The left side is
    computed from the enumerated algorithm, averaging over the draft's continuation.
    """
    zero = zero_of(pair)
    joint: dict = defaultdict(lambda: zero)  # (i, x^i) -> P(τ ≥ i, X^i = x^i)
    closed: dict = {}
    for path in draft_paths(pair, gamma, rule, context):
        survive = one_of(pair)
        for i in range(1, gamma + 1):
            key = path.draft[:i]
            joint[key] += path.prob * path.tail(i)
            survive = survive * path.accept[i - 1]
            closed[key] = path.p[i] if rule == "block" else survive
    worst = zero
    for key, mass in joint.items():
        ms = sequence_prob(pair.draft, key, context)
        worst = max(worst, abs(mass / ms - closed[key]))
    return worst


def _prefix_sums(pair: ModelPair, gamma: int, context: Prefix, step) -> Number:
    """``Σ_{i=1..γ} Σ_{x^i} w_i(x^i)`` for a recursion ``w_i = step(w_{i-1}, ms, mb, Ms(x^i))``."""
    zero = zero_of(pair)
    total = zero
    level = {(): (one_of(pair), one_of(pair))}  # x^i -> (w_i, Ms(x^i))
    for _ in range(gamma):
        nxt = {}
        for prefix, (w, ms_prefix) in level.items():
            full = tuple(context) + prefix
            ms, mb = pair.draft.row(full), pair.target.row(full)
            for x in range(pair.vocab):
                ms_x = ms_prefix * ms[x]
                wx = step(w, ms[x], mb[x], ms_x)
                if wx > 0:
                    nxt[prefix + (x,)] = (wx, ms_x)
                    total += wx
        level = nxt
    return total


def expected_tau_formula(pair: ModelPair, gamma: int, rule: str, context: Prefix = ()) -> Number:
    """Closed forms of ``E[τ]`` (THEORY.md §2-3).

    TV: ``Σ_i Σ_{x^i} Π_{j≤i} min(Ms(x_j|x^{j-1}), Mb(x_j|x^{j-1}))``;
    BV: ``Σ_i Σ_{x^i} w_i(x^i)``, ``w_i = min(w_{i-1} Mb(x_i|x^{i-1}), Ms(x^i))``, ``w_0 = 1``.
    """
    _check_rule(rule)
    _check_depth(pair, len(context) + gamma - 1, len(context) + gamma - 1)
    if rule == "token":
        return _prefix_sums(pair, gamma, context, lambda w, s, b, ms_x: w * min(s, b))
    return _prefix_sums(pair, gamma, context, lambda w, s, b, ms_x: min(w * b, ms_x))


def lp_joint_formula(pair: ModelPair, gamma: int, context: Prefix = ()) -> Number:
    """LP A's optimum ``Σ_i Σ_{x^i} min(Ms(x^i), Mb(x^i))`` (THEORY.md §4)."""
    _check_depth(pair, len(context) + gamma - 1, len(context) + gamma - 1)
    zero = zero_of(pair)
    total = zero
    level = {(): (one_of(pair), one_of(pair))}  # x^i -> (Ms(x^i), Mb(x^i))
    for _ in range(gamma):
        nxt = {}
        for prefix, (ms_p, mb_p) in level.items():
            full = tuple(context) + prefix
            ms, mb = pair.draft.row(full), pair.target.row(full)
            for x in range(pair.vocab):
                a, b = ms_p * ms[x], mb_p * mb[x]
                if a > 0 and b > 0:
                    nxt[prefix + (x,)] = (a, b)
                    total += min(a, b)
        level = nxt
    return total
