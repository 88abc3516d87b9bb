"""The value checks of a trace's ``[rows, K]`` columns, with one-line errors.

Ranges (probabilities and Z in [0, 1], entropy ≥ 0, up to :data:`SLACK`; ``q > 0``;
``draft_conf ≤ top1``), the temperature-0 rule (one-hot draft ``q = 1``, ``pt ∈ {0, 1}``), and
the window THEORY.md §3 gives every ``Z_{i+1}`` of a row (:func:`check_residuals`). Every
message names the file, the field, the row, the draft position and the request and output
position the row belongs to. :func:`specbatch.traces.format.trace.make_trace` runs them all, so
every reader of a trace refuses a damaged one.
"""

from __future__ import annotations

import numpy as np

from specbatch.errors import SpecbatchError
from specbatch.theory.verify.path_stats import block_weights

#: Float slack allowed outside [0, 1] for probabilities and Z, and below 0 for entropy.
SLACK = 1e-6
#: Unit round-off of float32, the precision models compute their rows in and traces may be
#: stored in; it scales the tolerance of the residual-mass bounds (:func:`z_tolerance`).
FLOAT32_UNIT = 2.0**-24


#: The float columns of a trace, in file order (``draft_token`` is the integer one).
FLOAT_COLUMNS = ("q", "pt", "z", "draft_conf", "entropy", "top1")
#: Columns bounded to [0, 1] (up to SLACK).
UNIT_COLUMNS = ("q", "pt", "z", "draft_conf", "top1")


def first_bad(mask: np.ndarray) -> tuple[int, int]:
    """(row, column) of the first True entry of ``mask`` # [rows, K] (column 0 for 1-d)."""
    flat = int(np.flatnonzero(mask.ravel())[0])
    return divmod(flat, mask.shape[1]) if mask.ndim == 2 else (flat, 0)


def check_columns(cols: dict, temperature: float, where: str, locate) -> None:
    """Value checks on the [rows, K] matrices (row and column of the first violation named)."""
    for name in FLOAT_COLUMNS:
        arr = cols[name]
        finite = np.isfinite(arr)
        if not finite.all():
            row, col = first_bad(~finite)
            raise SpecbatchError(f"file {where}: field {name}: expected finite values, got "
                                 f"{arr[row, col]} {locate(row, col)}")
        low = -SLACK
        high = 1 + SLACK if name in UNIT_COLUMNS else np.inf
        bad = (arr < low) | (arr > high)
        if bad.any():
            row, col = first_bad(bad)
            rng = "[0, 1]" if name in UNIT_COLUMNS else ">= 0"
            raise SpecbatchError(f"file {where}: field {name}: expected values in {rng} (slack "
                                 f"{SLACK:g}), got {float(arr[row, col])!r} {locate(row, col)}")
    q = cols["q"]
    bad = q <= 0
    if bad.any():
        row, col = first_bad(bad)
        raise SpecbatchError(f"file {where}: field q: expected q > 0 on a drafted token, got "
                             f"{float(q[row, col])!r} {locate(row, col)}")
    bad = cols["draft_conf"] > cols["top1"] + SLACK
    if bad.any():
        row, col = first_bad(bad)
        raise SpecbatchError(f"file {where}: field draft_conf: expected <= top1, got "
                             f"{float(cols['draft_conf'][row, col])!r} > "
                             f"{float(cols['top1'][row, col])!r} "
                             f"{locate(row, col)}")
    if temperature == 0:
        bad = np.abs(q - 1) > SLACK
        if bad.any():
            row, col = first_bad(bad)
            raise SpecbatchError(f"file {where}: field q: expected 1 at temperature 0 (one-hot "
                                 f"greedy draft), got {float(q[row, col])!r} {locate(row, col)}")
        pt = cols["pt"]
        bad = (np.abs(pt) > SLACK) & (np.abs(pt - 1) > SLACK)
        if bad.any():
            row, col = first_bad(bad)
            raise SpecbatchError(f"file {where}: field pt: expected 0 or 1 at temperature 0 "
                                 f"(target argmax mismatch/match), got {float(pt[row, col])!r} "
                                 f"{locate(row, col)}")


def check_vocabulary(tokens: np.ndarray, vocab: int | None, where: str, locate) -> None:
    """Token ids within the target's vocabulary: ``0 .. V`` where ``V`` itself is the filler
    of drafters that propose fewer than K tokens (FORMAT.md). ``vocab`` None: not recorded,
    only the int32 range (checked when the column is read) applies."""
    if vocab is None or tokens.size == 0:
        return
    bad = tokens > vocab
    if bad.any():
        row, col = first_bad(bad)
        raise SpecbatchError(f"file {where}: field draft_token: expected token ids in 0..{vocab} "
                             f"(the target's vocabulary {vocab} in meta.json, {vocab} = "
                             f"filler), got {int(tokens[row, col])} {locate(row, col)}")


def row_locator(request_id: np.ndarray, offsets: np.ndarray):
    """A function naming row ``row``, draft slot ``col`` as the request and output position it
    belongs to, for error messages (``at row 5, draft position 2 (request 7, output position
    3)``)."""
    def locate(row: int, col: int) -> str:
        r = int(np.searchsorted(offsets, row, side="right")) - 1
        known = 0 <= r < request_id.size
        owner = (f" (request {int(request_id[r])}, output position {row - int(offsets[r])})"
                 if known else "")
        return f"at row {row}, draft position {col + 1}{owner}"
    return locate


def z_tolerance(k: int) -> float:
    """Absolute tolerance of the residual-mass bounds of :func:`check_residuals` at depth K.

    ``p_i`` is recomputed from the stored ``q`` and ``pt``, which are float32 values when the
    models ran in float32 or the trace was stored as float32: each ratio carries a relative
    error of up to 2u (u = 2⁻²⁴), ``p_i`` is a product of at most K of them, and ``Z`` itself
    is a float32 sum; hence ``(2K + 1)·u`` on top of the general :data:`SLACK`. For K = 8 it
    is 2.0e-6, while the largest violation over the bundled traces is 7e-8.
    """
    return SLACK + (2 * k + 1) * FLOAT32_UNIT


def previous_weights(q: np.ndarray, pt: np.ndarray) -> np.ndarray:
    """BV's ``p_0..p_{K-1}`` (``p_0 = 1``, ``p_i = min(p_{i-1} pt_i / q_i, 1)``), shifted one
    column so that column i holds the weight that scales ``Z_{i+1}``.

    Computed by the log identity ``p_i = exp(S_i − max_{j≤i} S_j)``
    (:func:`specbatch.theory.verify.path_stats.block_weights`), not by the recursion: the ratio
    ``pt_i / q_i`` overflows to ∞ for a subnormal q (``0.66 / 5e-324``), and ``p_{i-1} · ∞`` is
    then 1 where the true product ``p_{i-1} · r_i`` is 0.66. The identity costs ~3.6 ms on the
    32k-row bundled trace (the recursion 0.8 ms).  q, pt: # [rows, K];  returns # [rows, K]
    """
    p = block_weights(q, pt)
    return np.concatenate([np.ones((q.shape[0], 1)), p[:, :-1]], axis=1)


def check_residuals(cols: dict, where: str, locate) -> None:
    """Every ``Z_{i+1}`` within the bounds THEORY.md §3 implies for its row.

    With ``p_0 = 1``, ``Z_{i+1} = Σ_x max(p_i Mb(x) − Ms(x), 0)``. Split the sum into the
    drafted token ``X = X_{i+1}`` (its term is ``e = max(p_i pt − q, 0)``) and the rest, where
    ``Σ_{x≠X} p_i Mb(x) = p_i (1 − pt)`` and ``Σ_{x≠X} Ms(x) = 1 − q``:

    - ``Z ≤ p_i (1 − pt) + e`` (drop the ``− Ms`` terms), which is ``≤ p_i``;
    - ``Z ≥ e`` and ``Z ≥ p_i (1 − pt) − (1 − q)`` (drop the ``max``).

    Where the draft is one-hot (``q = 1``: temperature 0, n-gram fillers) the two meet: ``Z =
    p_i (1 − pt)``. The window is continuous in q, so a q that rounds to 1 in float32 storage
    stays consistent. A damaged value (a bit flip, an edited file) almost never stays inside,
    so the reader refuses it instead of simulating wrong acceptance. One vectorised pass over
    the ``[rows, K]`` matrices, no row loop.
    """
    q, pt, z = cols["q"], cols["pt"], cols["z"]
    if z.size == 0:
        return
    p_prev = previous_weights(q, pt)
    tol = z_tolerance(z.shape[1])
    high = p_prev * (1.0 - pt)  # target mass p_i scales off the drafted token ...
    own = p_prev * pt
    own -= q
    np.maximum(own, 0.0, out=own)  # ... and the drafted token's own excess e
    low = high - 1.0
    low += q
    np.maximum(low, own, out=low)  # max(e, p_i (1 − pt) − (1 − q))
    high += own
    bad = (z > high + tol) | (z < low - tol)
    if not bad.any():
        return
    row, col = first_bad(bad)
    i, j = col, col + 1
    above = z[row, col] > high[row, col] + tol
    expected = (f"<= p_{i}·(1 − pt_{j}) + max(0, p_{i}·pt_{j} − q_{j}) = "
                f"{float(high[row, col])!r}" if above else
                f">= max(0, p_{i}·pt_{j} − q_{j}, p_{i}·(1 − pt_{j}) − (1 − q_{j})) = "
                f"{float(low[row, col])!r}")
    raise SpecbatchError(f"file {where}: field z: expected Z_{j} {expected} (THEORY.md §3, "
                         f"tolerance {tol:.1e}), got {float(z[row, col])!r} {locate(row, col)}")
