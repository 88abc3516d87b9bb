"""The passes of a compiled step priced, with its prompt chunks prefilled.

:func:`step_passes` does what simulator.engine.v1.step.V1Step.run_composed does after the
verification: the draft's decode passes and the rejection sampler from the verified requests'
sums, the chunks' prefill from exact integer sums, and the target's one pass over both, with
the pricing of kernel.pricing (roofline or PassTable, host terms) and the same float
expressions in the same order.

The module imports numba; import it only where numba is installed.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from specbatch.simulator.engine.v1.kernel.layout import (
    F_ROWS,
    I_DEPTH,
    I_DRAFTS_CHUNKS,
    I_VERIFY,
    S_PREFILLED,
)
from specbatch.simulator.engine.v1.kernel.pricing import (
    decode_draft_seconds,
    draft_time,
    first_pass,
    host_target,
    role_time,
    verify_seconds,
)


@njit(cache=True)
def step_passes(keep, dsum, vsum, asum, skv, svkv, svv, maxd, snz, smax, kept_d, kept_kv,
                kept_tau, total, kept, decoding, tokens, st, first, ints, floats, tab, tlaw):
    """The seconds of the step's passes, and its prompt chunks prefilled: the draft's decode
    passes over the ``keep`` verified requests (their sums as kernel.verify.verify_commit gave
    them), the rejection sampler's seconds, then each scheduled prefilling request (running,
    then admitted, among the first ``total``) advances by its chunk, the draft prefills the
    chunks when it drafts them, and the target's pass prices the decoding requests and the
    chunks together (host terms; a head's, a vLLM V1 draft model's or the n-gram proposer's
    pass 1 on its sums when ``first``). Returns (draft, target, verify seconds, draft
    passes, prompt tokens prefilled)."""
    depth, has_verify, drafts_chunks = ints[I_DEPTH], ints[I_VERIFY], ints[I_DRAFTS_CHUNKS]
    draft_t = 0.0
    verify_t = 0.0
    passes = 0
    sq = sc = sqc = sqq = 0
    if keep:
        sq = vsum + keep
        sc = skv
        sqc = svkv + skv
        sqq = svv + 2 * vsum + keep
        if depth:
            passes = depth if dsum == keep * depth else maxd
            if passes:
                draft_t = decode_draft_seconds(floats, keep, passes, dsum, asum, skv,
                                               kept_d, kept_kv, kept_tau, tab, tlaw)
        if has_verify:
            verify_t = verify_seconds(floats, ints, keep, vsum, smax, snz)
    # ---- prefill: the running requests' chunks, then the admitted ones'
    pn = pq = pc = pqc = pqq = 0
    for i in range(total):
        if i < kept and decoding[i]:
            continue
        q = tokens[i]
        if q == 0:
            continue
        c0 = st[S_PREFILLED, i]
        pn += 1
        pq += q
        pc += c0
        pqc += q * c0
        pqq += q * q
        st[S_PREFILLED, i] = c0 + q
    if pn and drafts_chunks:
        draft_t += draft_time(
            floats, np.float64(pn), np.float64(pq), np.float64(pc), np.float64(pqc),
            np.float64(pqq), np.float64(pn) if floats[F_ROWS] else -1.0, tab, tlaw)
    # logit rows n + S: a prefill chunk's last token only (V1Step.run_composed)
    rows = np.float64(sq + pq) - np.float64(pq - pn) if floats[F_ROWS] else -1.0
    target_t = host_target(floats, role_time(  # n: the decoding requests + the chunks
        floats, 0, np.float64(keep + pn), np.float64(sq + pq), np.float64(sc + pc),
        np.float64(sqc + pqc), np.float64(sqq + pqq), rows, tab, tlaw), keep + pn)
    if first:  # a head's or a vLLM V1 draft model's pass 1 or the n-gram proposer, on
        # the target pass's sums
        draft_t += first_pass(floats, np.float64(keep + pn), np.float64(sq + pq),
                              np.float64(sc + pc), np.float64(sqc + pqc),
                              np.float64(sqq + pqq), tab, tlaw)
    return draft_t, target_t, verify_t, passes, pq
