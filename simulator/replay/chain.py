"""Trace-driven verification: sample τ with common random numbers (THEORY.md §2-§3).

A request at output position t uses trace row ``offsets[r] + t``. Its uniforms
``η_1..η_K`` come from a counter-based hash keyed by (seed, request, position, draft index):
SplitMix64's finaliser on uint64 counters, so the coin a policy sees for request i's j-th
draft token at position t does not depend on the policy, the batch it sits in, the order of
events or how many tokens anyone drafted. Every policy therefore faces the same acceptance
landscape (common random numbers), and a run is bit-reproducible.

τ itself is :func:`theory.verify.path_stats.accept_from_stats` on the gathered rows with ``γ = s_i``
(the verified prefix length): TV accepts while ``η_i < min(1, r_i)``; BV takes ``max{i ≤ γ : η_i <
h_i}`` (half-open, so a threshold of 0 never accepts). Both read only the drafted path, so any γ ≤ K
reuses the row.

:func:`true_accept_probs` gives ``P_{i,j} = P(τ_i ≥ j | X^j)`` from the trace (TV: token
weights, BV: p). :func:`true_gains` gives ``G[i, s] = E[τ_i | X^s]``, the expected accepted tokens
when the first s drafted tokens of the *recorded path* are verified
(:func:`theory.allocate.budget.prefix_gains`), and :func:`expected_accepted` sums it over an
allocation — what this replay realises and what the oracle maximises. For TV G is the prefix sum of
P_{i,j}; for BV it is not (Σ_{j≤s} p_j is E[τ | X^s] only on average over the tokens drafted after
j), so the BV oracle allocates with :func:`theory.allocate.budget.optimal_tree_gains` (twin of
``optimal_dp_gains``).
"""

from __future__ import annotations

import weakref

import numpy as np

from specbatch.errors import SpecbatchError
from specbatch.simulator.replay.rules import names, rule_entry
from specbatch.theory.allocate.budget import prefix_gains
from specbatch.theory.verify.path_stats import accept_from_stats

GOLDEN = np.uint64(0x9E3779B97F4A7C15)  # SplitMix64's Weyl increment
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_POS = np.uint64(0xD1B54A32D192ED03)  # odd multiplier that spreads positions
_S30, _S27, _S31, _S11 = np.uint64(30), np.uint64(27), np.uint64(31), np.uint64(11)
_UNIT = 1.0 / 9007199254740992.0  # 2**-53


def splitmix64(x: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser (a bijection on uint64), elementwise; wraps modulo 2^64.

    x:       # [...] uint64
    returns  # [...] uint64
    """
    x = x ^ (x >> _S30)
    x *= _M1
    x ^= x >> _S27
    x *= _M2
    x ^= x >> _S31
    return x


def request_keys(seed: int, uids: np.ndarray) -> np.ndarray:
    """Per-request stream keys ``mix(mix(seed) + (uid + 1) · GOLDEN)``.

    uids:    # [N] int, simulated request index
    returns  # [N] uint64
    """
    base = splitmix64(np.asarray([seed], dtype=np.uint64))[0]
    u = np.asarray(uids, dtype=np.uint64) + np.uint64(1)
    return splitmix64(base + u * GOLDEN)


def uniforms(keys: np.ndarray, pos: np.ndarray, depth: int) -> np.ndarray:
    """η[i, j] ∈ [0, 1) for request key i at output position pos_i, draft index j < depth.

    Each (request, position) is a SplitMix64 stream seeded ``key ^ pos · C``; draft index j
    reads its (j+1)-th output ``mix(seed + (j + 1) · GOLDEN)``; the top 53 bits give η.

    keys:    # [n] uint64 (request_keys)
    pos:     # [n] int  output position t of the step
    returns  # [n, depth] float64
    """
    seed = keys ^ (np.asarray(pos, dtype=np.int64).view(np.uint64) * _POS)  # pos ≥ 0
    x = np.add(seed[:, None], _DRAFT_INDEX[:depth])  # [n, depth] stream counters
    tmp = np.empty_like(x)  # splitmix64 in place (same bits, fewer temporaries)
    x ^= np.right_shift(x, _S30, out=tmp)
    x *= _M1
    x ^= np.right_shift(x, _S27, out=tmp)
    x *= _M2
    x ^= np.right_shift(x, _S31, out=tmp)
    x >>= _S11
    return x * _UNIT  # uint64 · float -> float64, exact below 2^53


_DRAFT_INDEX = (np.arange(1, 257, dtype=np.uint64) * GOLDEN).astype(np.uint64)


def uniforms_scalar(key: int, pos: int, depth: int) -> list[float]:
    """Pure-Python twin of :func:`uniforms` for one request (reference implementation)."""
    mask = (1 << 64) - 1

    def mix(z: int) -> int:
        z ^= z >> 30
        z = (z * 0xBF58476D1CE4E5B9) & mask
        z ^= z >> 27
        z = (z * 0x94D049BB133111EB) & mask
        return z ^ (z >> 31)

    seed = int(key) ^ ((int(pos) * 0xD1B54A32D192ED03) & mask)
    return [(mix((seed + (j + 1) * 0x9E3779B97F4A7C15) & mask) >> 11) * _UNIT
            for j in range(depth)]


class VerifyTables:
    """Per-trace-row thresholds precomputed once, so a step's τ costs a gather, a compare and
    a table lookup.

    TV: ``A = min(1, r)`` (accept while ``η_i < A_i``). BV: ``H_i = Z_{i+1} / (Z_{i+1} + 1 −
    p_i)`` for i < γ and ``P_i = p_i`` for i = γ (THEORY.md §3; h depends on γ only through
    the last position, so one table serves every γ ≤ K). Per depth D the two are laid out by
    verified length s: ``T[row, s, j]`` = the threshold of draft index j when s are verified,
    and −1 for j ≥ s (η ≥ 0 never passes it), so ``ok = η < T[row, s]`` already holds the
    ``j < s`` mask; τ is then a function of the ok-bits alone (TV: leading successes, BV: last
    success), read from a 2^D lookup table (D ≤ :data:`LUT_DEPTH`; deeper: the same function
    by reductions). :meth:`tau` equals :func:`sample_tau` bit for bit (parity test), which
    stays the reference twin. Which of the two a rule is comes from its catalogue row's
    ``scan`` (simulator.replay.rules): "leading" (TV) or "last" (BV); any other rule, a tree
    rule included, is refused.

    trace columns q, pt, z: # [rows, K]
    """

    def __init__(self, trace, rule: str) -> None:
        row = rule_entry(rule)
        if row.kind != "chain" or row.scan not in ("leading", "last"):
            raise SpecbatchError("verify: expected a chain rule "
                                 f"({', '.join(names(kind='chain'))}) "
                                 f"for VerifyTables, got {rule!r}")
        self.rule = rule
        self.leading = row.scan == "leading"  # TV: leading successes; BV: the last success
        k = trace.K
        if self.leading:
            with np.errstate(divide="ignore", invalid="ignore"):
                self.a = np.minimum(np.nan_to_num(trace.pt / trace.q, nan=0.0), 1.0)
        else:
            from specbatch.theory.verify.path_stats import block_thresholds, block_weights

            self.p = block_weights(trace.q, trace.pt)
            self.h = block_thresholds(self.p, trace.z, np.full(trace.n_rows, k))
        self.index = np.arange(k, dtype=np.int64)
        self.index1 = self.index + 1
        self._by_depth: dict = {}

    def for_depth(self, d: int) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
        """(T # [rows·(d+1), d] thresholds, row ``row·(d+1) + s`` (None above
        :data:`MAX_TABLE` entries: built per step instead); lut # [2^d] τ of each
        ok-bit pattern (None when d > LUT_DEPTH); bit weights # [d]), built once per d."""
        got = self._by_depth.get(d)
        if got is None:
            j = self.index[:d]
            rows = (self.a if self.leading else self.p).shape[0]
            table = None
            if rows * (d + 1) * d <= MAX_TABLE:
                every = np.arange(rows)
                table = np.stack([self.thresholds(every, np.full(rows, s), d)
                                  for s in range(d + 1)], axis=1).reshape(-1, d)
            weights = np.left_shift(1, j).astype(np.int64)
            lut = None
            if d <= LUT_DEPTH:
                bits = (np.arange(1 << d)[:, None] & weights[None, :]) != 0  # [2^d, d]
                lut = self.from_bits(bits)
            got = self._by_depth[d] = (table, lut, weights)
        return got

    def thresholds(self, rows: np.ndarray, verified: np.ndarray, d: int) -> np.ndarray:
        """``T[rows, s]``: threshold of draft index j < d when s are verified, −1 for j ≥ s.

        rows, verified: # [n] int;  returns # [n, d]"""
        j, s = self.index[None, :d], verified[:, None]
        if self.leading:
            thr = self.a[rows, :d]
        else:
            thr = np.where(j == s - 1, self.p[rows, :d], self.h[rows, :d])
        return np.where(j < s, thr, -1.0)

    def from_bits(self, ok: np.ndarray) -> np.ndarray:
        """τ from the ok-bits # [m, d] (j ≥ s already False): TV the leading successes, BV the
        last success (0 if none).  returns # [m] int64"""
        if self.leading:
            return np.cumprod(ok, axis=1).sum(axis=1).astype(np.int64)
        d = ok.shape[1]
        return (ok * self.index1[None, :d]).max(axis=1, initial=0).astype(np.int64)

    def tau(self, rows: np.ndarray, verified: np.ndarray, eta: np.ndarray,
            out: np.ndarray | None = None) -> np.ndarray:
        """τ_i for verified prefix ``s_i`` at trace rows ``rows`` (written into ``out`` when
        given).

        rows: # [n] int;  verified: # [n] int64 (≤ D);  eta: # [n, D];  returns # [n] int64
        """
        d = eta.shape[1]
        table, lut, weights = self.for_depth(d)
        if table is None:  # trace too large for the per-depth table
            ok = eta < self.thresholds(rows, verified, d)
        else:
            ok = eta < table.take(rows * (d + 1) + verified, axis=0)  # [n, d]
        if lut is None:
            tau = self.from_bits(ok)
            if out is None:
                return tau
            out[...] = tau
            return out
        return lut.take(ok @ weights, out=out)


#: Deepest draft for which :class:`VerifyTables` reads τ from a 2^D lookup table.
LUT_DEPTH = 12
#: Most entries of one per-depth threshold table (float64; 2^24 = 128 MiB).
MAX_TABLE = 1 << 24


def sample_tau(q: np.ndarray, pt: np.ndarray, z: np.ndarray, verified: np.ndarray,
               eta: np.ndarray, rule: str) -> np.ndarray:
    """Accepted prefix length τ_i of each request for verified prefix ``s_i`` (γ = s_i).

    q, pt, z:  # [n, D] gathered trace rows (D ≥ max s_i)
    verified:  # [n] int  s_i
    eta:       # [n, D]   uniforms
    returns    # [n] int64, 0 ≤ τ_i ≤ s_i
    """
    return accept_from_stats(q, pt, z, verified, eta, rule)


def true_accept_probs(trace, rows: np.ndarray, depth: int, rule: str) -> np.ndarray:
    """``P_{i,j} = P(τ_i ≥ j)`` for j = 1..depth at the given trace rows.

    TV: ``Π_{l≤j} min(1, r_l)`` (trace.accept_tv); BV: ``p_j`` (trace.p), THEORY.md §2-§3:
    the column the rule's catalogue row names (``accept_column``).
    rows:    # [n] int trace row indices
    returns  # [n, depth]
    """
    table = getattr(trace, accept_column(rule))
    return table[rows, :depth]


def accept_column(rule: str) -> str:
    """The trace column of ``P(τ ≥ j | X^j)`` under chain rule ``rule`` (its catalogue row's
    ``accept_column``); a tree rule or an unknown name is refused."""
    column = rule_entry(rule).accept_column
    if not column:
        raise SpecbatchError(f"verify: expected a chain rule ({', '.join(names(kind='chain'))}), "
                             f"got {rule!r}")
    return column


def true_gains(trace, rows: np.ndarray, depth: int, rule: str) -> np.ndarray:
    """``G[i, s] = E[τ_i | X^s]`` for s = 0..depth at the given trace rows (THEORY.md §2-§3).

    rows:    # [n] int trace row indices
    returns  # [n, depth + 1], column 0 is 0
    """
    return prefix_gains(trace.q[rows, :depth], trace.pt[rows, :depth], trace.z[rows, :depth], rule)


def expected_accepted(trace, rows: np.ndarray, verified: np.ndarray, rule: str) -> float:
    """Expected accepted draft tokens of allocation s at these rows: ``Σ_i E[τ_i | X^{s_i}]``.

    rows:      # [n] int trace row indices
    verified:  # [n] int s_i
    """
    verified = np.asarray(verified, dtype=np.int64)
    depth = int(verified.max(initial=0))
    if depth == 0:
        return 0.0
    gains = true_gains(trace, rows, depth, rule)
    return float(np.take_along_axis(gains, verified[:, None], axis=1).sum())


#: trace -> {(rule, class): tables}: one set of chain replay tables per loaded trace and rule,
#: dropped with the trace (a trace's arrays are read-only and the tables only cache what
#: they compute).
_SHARED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def shared_tables(trace, rule: str, cls=VerifyTables):
    """``cls(trace, rule)`` (a chain rule's replay tables,
    simulator.replay.replay_tables.tables_for), built once per trace object and rule, so the runs of
    a sweep or plan on one loaded trace share its thresholds (~0.1-0.3 s per run on the bundled
    trace) instead of building them per run. Runs are bit-identical either way: the tables are a
    function of the trace's read-only arrays, and their per-depth cache fills with the same values
    whichever run asks first."""
    try:
        by_rule = _SHARED.setdefault(trace, {})
    except TypeError:  # a trace object without weak references: built per run
        return cls(trace, rule)
    tables = by_rule.get((rule, cls))
    if tables is None:
        tables = by_rule[(rule, cls)] = cls(trace, rule)
    return tables
