"""Plain integer CSV tables read and written without pandas.

The planner writes its drawn request lengths as a workload file (``prompt_len,output_len`` and
one row of integers per request) and every run reads it back; pandas' import costs ~0.3 CPU-s
of a process that needs nothing else of it. :func:`int_columns` reads such a table and
:func:`int_csv` writes one, each only where the result is certain to be pandas' own
(``pd.read_csv(..., encoding="utf-8-sig")``, ``DataFrame.to_csv(index=False)``); anything else
returns None and the caller uses pandas (simulator.workload.arrivals,
analysis.plan.planner; parity: tests/simulator/workload/test_plain_csv.py).
"""

from __future__ import annotations

import numpy as np

#: Longest integer cell read here (10^15 < 2^53: exact as int64 and as float64).
MAX_DIGITS = 15
_BOM = b"\xef\xbb\xbf"


def int_columns(data: bytes) -> dict[str, np.ndarray] | None:
    """The columns # [N] int64 of ``data`` by header name, or None unless it is a plain
    table: ASCII (after an optional UTF-8 byte-order mark), lines ended by ``\\n`` or
    ``\\r\\n``, a header of distinct non-empty names without quotes, then at least one row of
    as many cells, each 1 to :data:`MAX_DIGITS` decimal digits, no blank line but a last
    line end."""
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
    cells = [cell for row in rows for cell in row]
    if not all(cell.isdigit() and len(cell) <= MAX_DIGITS for cell in cells):
        return None
    table = np.array([int(cell) for cell in cells], dtype=np.int64).reshape(-1, len(names))
    return {name: table[:, j].copy() for j, name in enumerate(names)}


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
