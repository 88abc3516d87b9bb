"""The in-memory trace: the :class:`Trace` dataclass, building one and checking its values.

A trace (format ``specbatch-trace``, version 1; files and fields in ``traces/FORMAT.md``,
reading and writing in :mod:`specbatch.traces.format.files`) holds, per request, one row per output
position t: the K tokens the draft proposes from ``prompt + y_<t`` and the THEORY.md §3
statistics of that drafted path — ``q = Ms(X_i|·)``, ``pt = Mb(X_i|·)`` (so ``r_i = pt/q``),
``z[:, j] = Z_{j+1}`` — plus the draft-side signals ``draft_conf``, ``entropy``, ``top1`` of
the draft's temperature-1 softmax.

Optional column ``proposed`` # [rows] int (traces of a drafter that may propose fewer than
K tokens, such as the n-gram drafter of :mod:`specbatch.traces.capture.ngram`): the number of real
draft tokens of the row, 0..K; slots ``j ≥ proposed`` hold a *filler*, a virtual token outside
the target's support (``q = 1``, ``pt = 0``, draft signals 0), which is lossless: the first
filler is rejected with certainty and the correction token is then drawn from
``max(p_m Mb − 1[filler], 0) ∝ Mb``, the bonus law, so verifying γ > proposed tokens gives the
law of verifying ``proposed``. Absent (older traces, model drafts) it means K everywhere.

Temperature 0 (greedy): the draft is one-hot, so ``q = 1``; the target is one-hot at its
argmax, so ``pt = 1`` when the drafted token is the target's argmax and ``0`` otherwise; ``z``
is computed from those one-hot rows (``Z_{i+1} = p_i (1 − pt_{i+1})``, THEORY.md §3).

:func:`make_trace` checks every value (one-line :class:`~specbatch.errors.SpecbatchError`
naming the file, the field and what was expected). Probabilities and Z may exceed [0, 1] by at
most :data:`SLACK` (1e-6, float round-off of a capture); values are kept exactly as given,
never clipped.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any

import numpy as np

from specbatch.errors import SpecbatchError, require
from specbatch.theory.verify.path_stats import block_weights, token_weights
from specbatch.traces.format.checks import (
    FLOAT_COLUMNS,
    SLACK,
    check_columns,
    check_residuals,
    check_vocabulary,
    first_bad,
    row_locator,
)
from specbatch.traces.format.ranges import concat_ranges
from specbatch.traces.format.tree_nodes import check_tree_meta

FORMAT_NAME = "specbatch-trace"
FORMAT_VERSION = 1
#: Version of a tree trace: the chain columns plus ``nodes-*.parquet``
#: (:mod:`traces.format.tree_nodes`).
TREE_VERSION = 2
#: [rows, K] list columns in file order; draft_token is integer, the rest float64.
LIST_COLUMNS = ("draft_token", *FLOAT_COLUMNS)
#: Optional [rows] integer column: real draft tokens per row (0..K); absent means K.
PROPOSED = "proposed"
REQUEST_COLUMNS = ("request_id", "prompt_len", "output_len", "category", "arrival")

#: Provenance keys every meta.json carries (``None`` when unknown); see FORMAT.md.
PROVENANCE_KEYS = (
    "models", "tokenizer", "draft_samples_per_position", "prompt_source", "seeds", "device",
    "library_versions", "capture_time", "command", "completion",
)


@dataclass(frozen=True, eq=False)
class Trace:
    """A loaded trace: CSR offsets per request and contiguous ``[rows, K]`` matrices.

    Row ``offsets[r] + t`` is output position t of request r (request order = the order of
    ``requests.parquet``). Arrays are read-only. Build one with :func:`make_trace`.
    """

    meta: dict  # meta.json contents
    request_id: np.ndarray  # [R] int64
    prompt_len: np.ndarray  # [R] int64
    output_len: np.ndarray  # [R] int64 (= number of position rows of the request)
    category: np.ndarray  # [R] object (str)
    arrival: np.ndarray  # [R] float64 seconds, NaN when the trace has none
    offsets: np.ndarray  # [R+1] int64 CSR
    draft_token: np.ndarray  # [rows, K] int32
    q: np.ndarray  # [rows, K] float64  Ms(X_i | c, X^{i-1}) at the sampling temperature
    pt: np.ndarray  # [rows, K] float64  Mb(X_i | c, X^{i-1}) at the sampling temperature
    z: np.ndarray  # [rows, K] float64  column j holds Z_{j+1} (THEORY.md §3)
    draft_conf: np.ndarray  # [rows, K] float64  draft temperature-1 prob of the drafted token
    entropy: np.ndarray  # [rows, K] float64  draft temperature-1 entropy (nats)
    top1: np.ndarray  # [rows, K] float64  draft temperature-1 top-1 probability
    path: str | None = None
    proposed: np.ndarray | None = None  # [rows] int64 real draft tokens per row, None = K
    tree: Any = None  # TreeNodes of a version-2 trace: each row's draft tree; None for chains

    @property
    def K(self) -> int:  # noqa: N802  (the papers' symbol)
        return int(self.draft_token.shape[1])

    @property
    def temperature(self) -> float:
        return float(self.meta["temperature"])

    @property
    def status(self) -> str:
        """``complete``, or ``partial`` for a capture stopped before every request was done
        (``meta.json`` field ``completion.status``; resume it with ``capture --resume``)."""
        return str((self.meta.get("completion") or {}).get("status", "complete"))

    @property
    def n_requests(self) -> int:
        return int(self.request_id.shape[0])

    @property
    def n_rows(self) -> int:
        return int(self.draft_token.shape[0])

    @cached_property
    def p(self) -> np.ndarray:
        """BV's ``p_i = P(τ ≥ i | X^i)`` (THEORY.md §3).  # [rows, K]"""
        return _readonly(block_weights(self.q, self.pt))

    @cached_property
    def accept_tv(self) -> np.ndarray:
        """TV's ``P(τ ≥ i | X^i) = Π_{j≤i} min(1, r_j)`` (THEORY.md §2).  # [rows, K]"""
        return _readonly(token_weights(self.q, self.pt))

    @cached_property
    def row_request(self) -> np.ndarray:
        """Request index of every row.  # [rows] int64"""
        return _readonly(np.repeat(np.arange(self.n_requests, dtype=np.int64), self.output_len))

    def rows(self, r: int) -> slice:
        """Row slice of request index ``r`` (not its ``request_id``)."""
        return slice(int(self.offsets[r]), int(self.offsets[r + 1]))

    def columns(self) -> dict[str, np.ndarray]:
        """The ``[rows, K]`` matrices by name (file column order), then ``proposed`` # [rows]
        when the trace has it."""
        cols = {name: getattr(self, name) for name in LIST_COLUMNS}
        if self.proposed is not None:
            cols[PROPOSED] = self.proposed
        return cols

    def requests(self) -> dict[str, np.ndarray]:
        """The ``[R]`` request arrays by name."""
        return {name: getattr(self, name) for name in REQUEST_COLUMNS}

    def subset(self, indices: np.ndarray) -> Trace:
        """A trace holding requests ``indices`` (request indices, in the given order).

        indices:  # [R'] int, each in [0, R), at least one (a repeat is refused: ids are unique)
        """
        indices = check_indices(indices, self.n_requests)
        rows = concat_ranges(self.offsets[indices], self.output_len[indices])
        requests = {name: arr[indices] for name, arr in self.requests().items()}
        columns = {name: arr[rows] for name, arr in self.columns().items()}
        out = make_trace(dict(self.meta), requests, columns, path=self.path)
        return out if self.tree is None else replace(out, tree=self.tree.take(rows))


def check_indices(indices: Any, n_requests: int, name: str = "indices") -> np.ndarray:
    """``indices`` as an ``[R']`` int64 array of request indices in ``[0, n_requests)``, at
    least one; otherwise a :class:`SpecbatchError` naming ``name`` (a negative index would
    wrap around, and one past the end would read the CSR sentinel as a request)."""
    arr = np.asarray(indices)
    if arr.ndim != 1 or arr.size == 0:
        raise SpecbatchError(f"Trace.subset: argument {name}: expected a non-empty 1-D "
                             f"sequence of request indices, got shape {arr.shape}")
    if arr.dtype == bool or not np.issubdtype(arr.dtype, np.integer):
        raise SpecbatchError(f"Trace.subset: argument {name}: expected integer request "
                             f"indices, got dtype {arr.dtype}")
    bad = arr[(arr < 0) | (arr >= n_requests)]
    if bad.size:
        raise SpecbatchError(f"Trace.subset: argument {name}: expected request indices in "
                             f"[0, {n_requests}), got {int(bad[0])}")
    return arr.astype(np.int64, copy=False)


def default_meta(temperature: float, depth: int, **fields: Any) -> dict:
    """A meta dict with the format header, ``temperature``, ``depth`` and every provenance key.

    Unknown provenance is ``None``; ``fields`` override or add keys.
    """
    meta: dict[str, Any] = {"format": FORMAT_NAME, "version": FORMAT_VERSION,
                            "temperature": float(temperature), "depth": int(depth)}
    meta.update({key: None for key in PROVENANCE_KEYS})
    meta["draft_samples_per_position"] = 1
    meta.update(fields)
    return meta


def make_trace(meta: dict, requests: dict, columns: dict, path: str | None = None) -> Trace:
    """Build and check a :class:`Trace` from in-memory arrays.

    meta:      dict with at least ``temperature``; ``format``/``version`` are set, ``depth``
               is set to K (or must equal it), missing provenance keys become ``None``.
    requests:  ``request_id, prompt_len, output_len, category`` # [R] each, and optional
               ``arrival`` # [R] (NaN when absent)
    columns:   the seven :data:`LIST_COLUMNS` # [rows, K] each, rows ordered by request (in
               ``requests`` order) then position, ``rows = sum(output_len)``; optionally
               :data:`PROPOSED` # [rows] int (module docstring)
    Raises :class:`SpecbatchError` (field named, file ``<memory>``) on any violation.
    Arrays already of the right dtype and contiguous are not copied: the Trace holds
    read-only views of them, so do not modify them afterwards.
    """
    where = path or "<memory>"
    req = _request_arrays(requests, where)
    cols = _column_arrays(columns, where)
    rows, k = cols["draft_token"].shape
    meta = _normalised_meta(meta, where, k)
    check_requests(req, where)
    total = int(req["output_len"].sum())
    require(total == rows, f"file {where}: field output_len: expected the lengths to sum to the "
            f"{rows} position rows, got {total}")
    offsets = np.zeros(len(req["request_id"]) + 1, dtype=np.int64)
    np.cumsum(req["output_len"], out=offsets[1:])
    locate = row_locator(req["request_id"], offsets)
    check_columns(cols, float(meta["temperature"]), where, locate)
    check_vocabulary(cols["draft_token"], _target_vocab(meta), where, locate)
    check_residuals(cols, where, locate)
    if columns.get(PROPOSED) is not None:
        cols[PROPOSED] = _proposed_array(columns[PROPOSED], cols, where)
    arrays = {**req, "offsets": offsets, **cols}
    return Trace(meta=meta, path=path, **{key: _readonly(v) for key, v in arrays.items()})


def _request_arrays(requests: dict, where: str) -> dict:
    """The five request arrays # [R] each, converted and checked for presence and shape."""
    for name in REQUEST_COLUMNS[:4]:
        require(name in requests, f"file {where}: field {name}: expected a request array, got none")
    n = len(np.asarray(requests["request_id"]))
    req = {
        "request_id": as_int(requests["request_id"], where, "request_id"),
        "prompt_len": as_int(requests["prompt_len"], where, "prompt_len"),
        "output_len": as_int(requests["output_len"], where, "output_len"),
        "category": np.asarray(requests["category"], dtype=object),
        "arrival": np.asarray(requests.get("arrival", np.full(n, np.nan)), dtype=np.float64),
    }
    for name, arr in req.items():
        require(arr.shape == (n,), f"file {where}: field {name}: expected shape ({n},), got "
                                   f"{arr.shape}")
    return req


def _column_arrays(columns: dict, where: str) -> dict:
    """The seven :data:`LIST_COLUMNS` # [rows, K]: int32 tokens, float64 rest, one shape."""
    for name in LIST_COLUMNS:
        require(name in columns, f"file {where}: field {name}: expected a [rows, K] array, got "
                                 "none")
    cols = {}
    for name in LIST_COLUMNS:
        arr = np.asarray(columns[name])
        require(arr.ndim == 2, f"file {where}: field {name}: expected a [rows, K] array, got shape "
                               f"{arr.shape}")
        if name == "draft_token":
            require(arr.dtype.kind in "iu", f"file {where}: field {name}: expected integers, got "
                                            f"{arr.dtype}")
            require(arr.size == 0 or int(arr.max()) < 2**31, f"file {where}: field {name}: "
                    f"expected token ids < 2^31 (int32), got {int(arr.max()) if arr.size else 0}")
            require(arr.size == 0 or int(arr.min()) >= 0, f"file {where}: field {name}: "
                    f"expected token ids >= 0, got {int(arr.min()) if arr.size else 0}")
            cols[name] = np.ascontiguousarray(arr, dtype=np.int32)
        else:
            require(arr.dtype.kind in "fiu", f"file {where}: field {name}: expected floats, got "
                                             f"{arr.dtype}")
            cols[name] = np.ascontiguousarray(arr, dtype=np.float64)
    rows, k = cols["draft_token"].shape
    for name, arr in cols.items():
        require(arr.shape == (rows, k),
                f"file {where}: field {name}: expected shape ({rows}, {k}), got {arr.shape}")
    return cols


def _proposed_array(values, cols: dict, where: str) -> np.ndarray:
    """The ``proposed`` column # [rows] int64, checked: integers in 0..K, and every filler slot
    (``j ≥ proposed``) holds ``q = 1``, ``pt = 0`` (the lossless filler, module docstring)."""
    rows, k = cols["draft_token"].shape
    arr = as_int(values, where, PROPOSED)
    require(arr.shape == (rows,), f"file {where}: field {PROPOSED}: expected shape ({rows},), "
            f"got {arr.shape}")
    bad = np.flatnonzero((arr < 0) | (arr > k))
    require(bad.size == 0, f"file {where}: field {PROPOSED}: expected integers in 0..K = {k}, "
            f"got {int(arr[bad[0]]) if bad.size else 0} at row {int(bad[0]) if bad.size else 0}")
    filler = np.arange(k)[None, :] >= arr[:, None]  # [rows, K]
    wrong = filler & ((np.abs(cols["q"] - 1) > SLACK) | (np.abs(cols["pt"]) > SLACK))
    if wrong.any():
        row, col = first_bad(wrong)
        raise SpecbatchError(f"file {where}: field {PROPOSED}: expected q = 1 and pt = 0 on the "
                             f"filler past {int(arr[row])} proposed tokens, got q = "
                             f"{float(cols['q'][row, col])!r}, pt = "
                             f"{float(cols['pt'][row, col])!r} "
                             f"at row {row}, draft position {col + 1}")
    return arr


def _normalised_meta(meta: dict, where: str, k: int) -> dict:
    """A checked copy of ``meta``: ``depth`` = K, plain JSON numbers, format header, provenance."""
    meta = dict(meta)
    meta.setdefault("depth", k)
    if isinstance(meta["depth"], np.integer):  # numpy scalars from a caller: store plain JSON
        meta["depth"] = int(meta["depth"])
    if isinstance(meta.get("temperature"), (np.integer, np.floating)):
        meta["temperature"] = float(meta["temperature"])
    check_meta(meta, where, depth=k)
    meta["format"] = FORMAT_NAME
    meta["version"] = meta.get("version", FORMAT_VERSION)
    for key in PROVENANCE_KEYS:
        meta.setdefault(key, None)
    return meta


def as_int(values: Any, where: str, name: str) -> np.ndarray:
    """``values`` as contiguous int64 (whole floats converted); non-integers and uint64 values
    int64 cannot hold are one-line errors naming ``where`` and ``name``."""
    arr = np.asarray(values)
    if (arr.dtype.kind == "f" and arr.size and np.all(np.isfinite(arr))
            and np.all(arr == np.round(arr))):
        arr = arr.astype(np.int64)
    require(arr.dtype.kind in "iu" or arr.size == 0,
            f"file {where}: field {name}: expected integers, got {arr.dtype}")
    require(arr.dtype != np.uint64 or arr.size == 0 or int(arr.max()) < 2**63,
            f"file {where}: field {name}: expected integers below 2^63, got "
            f"{int(arr.max()) if arr.size else 0}")
    return np.ascontiguousarray(arr, dtype=np.int64)


def _target_vocab(meta: dict) -> int | None:
    """The target's vocabulary size V recorded in ``meta.json`` (``models.target.shape.vocab``),
    or None when the trace does not record one."""
    target = (meta.get("models") or {}).get("target")
    vocab = (target.get("shape") or {}).get("vocab") if isinstance(target, dict) and \
        isinstance(target.get("shape"), dict) else None
    return vocab if isinstance(vocab, int) and not isinstance(vocab, bool) and vocab > 0 else None


def _readonly(arr: np.ndarray) -> np.ndarray:
    """A read-only view (the caller's own array stays writeable; make_trace does not copy,
    so callers must not modify arrays they passed in)."""
    view = np.ascontiguousarray(arr).view()
    view.flags.writeable = False
    return view


def check_meta(meta: Any, where: str, depth: int | None = None) -> None:
    require(isinstance(meta, dict), f"file {where}: expected a JSON object, got "
                                    f"{type(meta).__name__}")
    fmt = meta.get("format", FORMAT_NAME)
    require(fmt == FORMAT_NAME, f"file {where}: field format: expected {FORMAT_NAME!r}, got "
                                f"{fmt!r}")
    version = meta.get("version", FORMAT_VERSION)
    require(version in (FORMAT_VERSION, TREE_VERSION) and not isinstance(version, bool),
            f"file {where}: field version: expected {FORMAT_VERSION} (chains) or "
            f"{TREE_VERSION} (trees), got {version!r}")
    temp = meta.get("temperature")
    require(isinstance(temp, (int, float)) and not isinstance(temp, bool)
            and np.isfinite(temp) and temp >= 0,
            f"file {where}: field temperature: expected a finite number >= 0, got {temp!r}")
    k = meta.get("depth")
    require(isinstance(k, int) and not isinstance(k, bool) and k >= 1,
            f"file {where}: field depth: expected an integer K >= 1, got {k!r}")
    if depth is not None:
        require(k == depth, f"file {where}: field depth: expected the list length {depth}, got {k}")
    if version == TREE_VERSION:
        check_tree_meta(meta, where)
    _check_provenance(meta, where)


#: Values ``completion.status`` may take (``Trace.status``).
COMPLETION_STATUSES = ("complete", "partial")


def _check_provenance(meta: dict, where: str) -> None:
    """The provenance fields readers use have the shapes FORMAT.md gives them: ``models`` an
    object of role -> object or name, ``completion`` an object whose ``status`` (when present)
    is ``complete`` or ``partial``; each may be ``null``."""
    models = meta.get("models")
    require(models is None or isinstance(models, dict), f"file {where}: field models: expected "
            f"an object or null, got {type(models).__name__}")
    for role, model in (models or {}).items():
        require(model is None or isinstance(model, (dict, str)), f"file {where}: field "
                f"models.{role}: expected an object, a name or null, got {type(model).__name__}")
    comp = meta.get("completion")
    require(comp is None or isinstance(comp, dict), f"file {where}: field completion: expected "
            f"an object or null, got {comp!r:.40}")
    status = (comp or {}).get("status", COMPLETION_STATUSES[0])
    require(status in COMPLETION_STATUSES, f"file {where}: field completion.status: expected "
            f"{' or '.join(COMPLETION_STATUSES)}, got {status!r:.40}")


def check_requests(req: dict, where: str) -> None:
    ids = req["request_id"]
    unique, counts = np.unique(ids, return_counts=True)
    dup = unique[counts > 1]
    require(dup.size == 0, f"file {where}: field request_id: expected unique ids, "
            f"got {int(dup[0]) if dup.size else 0} more than once")
    for name, low in (("prompt_len", 0), ("output_len", 1)):
        arr = req[name]
        bad = np.flatnonzero(arr < low)
        require(bad.size == 0, f"file {where}: field {name}: expected integers >= {low}, "
                f"got {int(arr[bad[0]]) if bad.size else 0} for request "
                f"{int(ids[bad[0]]) if bad.size else 0}")
    cat = req["category"]
    is_str = np.fromiter((isinstance(c, str) for c in cat), dtype=bool, count=cat.size)
    if not is_str.all():
        bad = cat[np.flatnonzero(~is_str)[0]]
        raise SpecbatchError(f"file {where}: field category: expected strings, got {bad!r}")
    arrival = req["arrival"]
    nan = np.isnan(arrival)
    require(nan.all() or (~nan).all(), f"file {where}: field arrival: expected all NaN (no "
            "arrivals) or all finite, got a mix")
    if not nan.all():
        require(bool(np.all(np.isfinite(arrival)) and np.all(arrival >= 0)),
                f"file {where}: field arrival: expected finite seconds >= 0, got "
                f"{arrival[~(np.isfinite(arrival) & (arrival >= 0))][:1].tolist()}")
