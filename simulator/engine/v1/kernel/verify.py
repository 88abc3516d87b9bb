"""The scheduled decoding requests of a compiled step verified and committed.

:func:`verify_commit` replays each request's acceptance from the trace (its η from the key
and position, kernel.acceptance; the chain rule's thresholds, simulator.replay.chain), as
simulator.engine.decode.Decode.verify_decode and ``commit`` do, and sums what the step's
pricing (kernel.passes) and the policies' observation (kernel.plan) read.

The module imports numba; import it only where numba is installed.
"""

from __future__ import annotations

from numba import njit

from specbatch.simulator.engine.v1.kernel.acceptance import eta
from specbatch.simulator.engine.v1.kernel.layout import (
    C_ACCEPTED,
    C_DRAFTED,
    C_POS,
    C_STEPS,
    C_VERIFIED,
    I_LEADING,
    I_WRAP,
    S_UID,
)


@njit(cache=True)
def verify_commit(kept, decoding, tokens, st, counts, plan_s, plan_d, prompt, out, base, wrap,
                  keys, thr, thr2, ints, last_tau, kept_d, kept_kv, kept_tau):
    """Verify and commit the scheduled decoding requests among the first ``kept`` running
    ones: each verifies s_i (cut to the tokens the budget gave it, d_i with it), accepts τ
    by the chain rule on its η (TV: the leading successes, BV: the last success; thr, thr2
    the trace row's thresholds) and emits min(τ + 1, what is left of its output), counted
    in ``counts``; ``last_tau`` # [columns], ``kept_d``, ``kept_kv``, ``kept_tau`` # [keep]
    keep what the pricing and the policies read. Returns (keep, Σ d, Σ s, Σ τ, emitted,
    Σ kv, Σ s·kv, Σ s², max d, #{s > 0}, max s) over the verified requests."""
    has_wrap, leading = ints[I_WRAP], ints[I_LEADING]
    keep = 0
    dsum = vsum = asum = emitted = skv = svkv = svv = maxd = snz = smax = 0
    for i in range(kept):
        if not decoding[i] or tokens[i] == 0:
            continue
        u = st[S_UID, i]
        pos = counts[C_POS, u]
        s = plan_s[i]
        d = plan_d[i]
        if tokens[i] - 1 < s:  # cut by the budget
            s = tokens[i] - 1
            if s < d:
                d = s
        kv = prompt[u] + pos
        tau = 0
        if s:
            row = base[u] + (pos % wrap[u] if has_wrap else pos)
            key = keys[u]
            if leading:
                for j in range(s):
                    if eta(key, pos, j) < thr[row, j]:
                        tau += 1
                    else:
                        break
            else:
                for j in range(s):
                    h = thr2[row, j] if j == s - 1 else thr[row, j]
                    if eta(key, pos, j) < h:
                        tau = j + 1
        e = tau + 1
        if out[u] - pos < e:
            e = out[u] - pos
        counts[C_POS, u] = pos + e
        counts[C_STEPS, u] += 1
        counts[C_DRAFTED, u] += d
        counts[C_VERIFIED, u] += s
        counts[C_ACCEPTED, u] += tau
        last_tau[i] = tau
        kept_d[keep] = d
        kept_kv[keep] = kv
        kept_tau[keep] = tau
        keep += 1
        dsum += d
        vsum += s
        asum += tau
        emitted += e
        skv += kv
        svkv += s * kv
        svv += s * s
        if d > maxd:
            maxd = d
        if s > smax:
            smax = s
        if s:
            snz += 1
    return keep, dsum, vsum, asum, emitted, skv, svkv, svv, maxd, snz, smax
