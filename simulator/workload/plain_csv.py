"""Plain integer CSV tables read and written without pandas.

The planner writes its drawn request lengths as a workload file (``prompt_len,output_len`` and
one row of integers per request) and every run reads it back; pandas' import costs ~0.3 CPU-s
of a process that needs nothing else of it. :func:`int_columns` reads such a table and
:func:`int_csv` writes one, each only where the result is certain to be pandas' own
(``pd.read_csv(..., encoding="utf-8-sig")``, ``DataFrame.to_csv(index=False)``); anything else
returns None and the caller uses pandas (simulator.workload.arrivals,
analysis.plan.planner; parity: tests/simulator/workload/test_plain_csv.py).

:func:`decimal_column` reads a column of plain decimals (``0.127508``: digits, at most one
point, no sign or exponent) the way pandas' default C parser does where that is certain: with
at most :data:`MAX_DIGITS` significant digits and at most :data:`MAX_FRACTION` after the
point, the digits form an integer N < 2^53 and 10^f is exact in float64, so N / 10^f is one
correctly rounded IEEE division, the correctly rounded value of the decimal, which pandas'
``precise_xstrtod`` (digits accumulated exactly, then one division by its exact power of
ten) and Python's ``float`` both return.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from specbatch.array_cache import cached_arrays

#: Longest integer cell read here (10^15 < 2^53: exact as int64 and as float64).
MAX_DIGITS = 15
#: Most digits after a decimal point read here (10^22 is the largest power of ten exact in
#: float64).
MAX_FRACTION = 22
_BOM = b"\xef\xbb\xbf"
#: 10^f for f = 0..MAX_FRACTION, each exact (float of an exact integer below 2^53 · 2^k).
_POW10 = tuple(float(10 ** f) for f in range(MAX_FRACTION + 1))


def int_columns(data: bytes) -> dict[str, np.ndarray] | None:
    """The columns # [N] int64 of ``data`` by header name, or None unless it is a plain
    table: ASCII (after an optional UTF-8 byte-order mark), lines ended by ``\\n`` or
    ``\\r\\n``, a header of distinct non-empty names without quotes, then at least one row of
    as many cells, each 1 to :data:`MAX_DIGITS` decimal digits, no blank line but a last
    line end."""
    table = text_columns(data)
    if table is None:
        return None
    out = {}
    for name, cells in table.items():
        column = integer_column(cells)
        if column is None:
            return None
        out[name] = column
    return out


def int_csv(columns: dict[str, np.ndarray]) -> str | None:
    """``pd.DataFrame(columns).to_csv(index=False)`` for integer columns of one length under
    plain names (no comma, quote or line end), or None for anything else."""
    names = list(columns)
    if not names or any(not name or any(c in name for c in ',"\r\n') for name in names):
        return None
    arrays = [np.asarray(columns[name]) for name in names]
    if any(a.ndim != 1 or a.dtype.kind not in "iu" for a in arrays):
        return None
    if len({a.shape[0] for a in arrays}) != 1:
        return None
    rows = zip(*(a.tolist() for a in arrays))
    return ",".join(names) + "\n" + "".join(",".join(map(str, row)) + "\n" for row in rows)


def text_columns(data: bytes) -> dict[str, list[str]] | None:
    """The cells of ``data`` by header name, or None unless it is a plain table as
    :func:`int_columns` requires (any cell text without quotes, commas or line ends)."""
    if data.startswith(_BOM):
        data = data[len(_BOM):]
    try:
        text = data.decode("ascii")
    except UnicodeDecodeError:
        return None
    if '"' in text or "\r" in text.replace("\r\n", "\n"):
        return None
    lines = text.replace("\r\n", "\n").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if len(lines) < 2:
        return None
    names = lines[0].split(",")
    if not all(names) or len(set(names)) != len(names):
        return None
    rows = [line.split(",") for line in lines[1:]]
    if any(len(row) != len(names) for row in rows):  # a row of another width, a blank line
        return None
    return {name: [row[j] for row in rows] for j, name in enumerate(names)}


def integer_column(cells: list[str]) -> np.ndarray | None:
    """``cells`` as int64 # [N] when every cell is 1 to :data:`MAX_DIGITS` digits, else None."""
    if not all(cell.isdigit() and len(cell) <= MAX_DIGITS for cell in cells):
        return None
    return np.array([int(cell) for cell in cells], dtype=np.int64)


def decimal_column(cells: list[str]) -> np.ndarray | None:
    """``cells`` as float64 # [N] (module docstring: N / 10^f, pandas' own values) when every
    cell is a plain decimal within :data:`MAX_DIGITS` significant digits and
    :data:`MAX_FRACTION` fraction digits, else None."""
    out = np.empty(len(cells), dtype=np.float64)  # [N]
    for i, cell in enumerate(cells):
        whole, dot, frac = cell.partition(".")
        digits = whole + frac
        if not digits.isdigit() or (dot and not frac) or len(frac) > MAX_FRACTION:
            return None
        if len(digits.lstrip("0")) > MAX_DIGITS:
            return None
        out[i] = float(int(digits)) / _POW10[len(frac)]
    return out


def lengths_table(data: bytes, aliases: dict, max_tokens: int) -> dict[str, np.ndarray] | None:
    """A workload's arrays (simulator.workload.arrivals.read_with_pandas's: prompt_len,
    output_len # [N] int64, arrival # [N] float64 or NaN, category # [N] None) of a plain table
    holding only a prompt and an output length column (names by ``aliases``) of lengths in
    [1, ``max_tokens``] and optionally an ``arrival`` column of non-decreasing plain
    decimals (seconds); None for anything else (pandas reads it, and names what is wrong)."""
    table = text_columns(data)
    if table is None:
        return None
    names = {str(c).strip().lower(): c for c in table}
    found = {name: [names[a] for a in names_of if a in names]
             for name, names_of in aliases.items()}
    arrival = found["arrival"]
    if (len(found["prompt_len"]) != 1 or len(found["output_len"]) != 1 or len(arrival) > 1
            or len(names) != len(table) or len(table) != 2 + len(arrival)):
        return None
    out: dict[str, np.ndarray] = {}
    for name in ("prompt_len", "output_len"):
        ints = integer_column(table[found[name][0]])
        if ints is None or ((ints < 1) | (ints > max_tokens)).any():
            return None
        out[name] = ints
    n = out["prompt_len"].shape[0]
    out["arrival"] = np.full(n, np.nan)
    if arrival:
        times = decimal_column(table[arrival[0]])  # [N] seconds >= 0 (no sign is read)
        if times is None or (np.diff(times) < 0).any():
            return None
        out["arrival"] = times
    out["category"] = np.full(n, None, dtype=object)
    return out


def kept_lengths_table(data: bytes, digest: str, aliases: dict, max_tokens: int
                       ) -> dict[str, np.ndarray] | None:
    """:func:`lengths_table` of a CSV's bytes (``digest``: their content digest), kept in the
    cache folder so the next process reads the arrays back instead of parsing the text
    (specbatch.array_cache; keyed by the bytes' digest, the aliases, the length limit and this
    module's code); None when the file is not a plain lengths table."""

    def build() -> dict[str, np.ndarray] | None:
        table = lengths_table(data, aliases, max_tokens)
        return None if table is None else {name: table[name] for name in
                                           ("prompt_len", "output_len", "arrival")}

    kept = cached_arrays("workloads", (digest, repr(aliases), max_tokens), (Path(__file__),),
                         build)
    if kept is None:
        return None
    return {**kept, "category": np.full(kept["prompt_len"].shape[0], None, dtype=object)}
