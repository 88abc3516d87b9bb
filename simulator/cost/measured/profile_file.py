"""A latency profile file (Parquet or CSV) read and checked: the measured steps a
:mod:`simulator.cost.measured.profiled` cost model is fitted to, one row per (role, batch size,
query tokens, KV tokens) cell with its latency; optional mixed-pass columns (:data:`MIXED_COLUMNS`).
Every defect is a one-line error naming the file, column and row."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from specbatch.errors import SpecbatchError, require
from specbatch.simulator.cost.interface import ROLES

PROFILE_COLUMNS = ("role", "batch_size", "query_tokens", "kv_tokens", "latency_s")
NUMERIC_COLUMNS = ("batch_size", "query_tokens", "kv_tokens", "latency_s")
#: Optional columns of mixed passes (vLLM V1 steps): prompts packed into the batch's pass.
MIXED_COLUMNS = ("prefill_batch", "prefill_tokens")


def read_profile(path: str | Path):
    """Read and validate a latency profile (Parquet or CSV) into a DataFrame.

    Raises a one-line :class:`SpecbatchError` naming the file and the offending column.
    """
    import pandas as pd

    path = Path(path)
    require(path.is_file(), f"profile {path}: no such file")
    try:
        if path.suffix.lower() in (".parquet", ".pq"):
            df = pd.read_parquet(path)
        else:
            df = pd.read_csv(path)
    except Exception as exc:  # noqa: BLE001 - any reader failure is a bad file
        raise SpecbatchError(f"profile {path}: cannot read: {str(exc).splitlines()[0]}") from None
    for col in PROFILE_COLUMNS:
        require(col in df.columns, f"profile {path}: column {col}: missing "
                f"(expected columns {', '.join(PROFILE_COLUMNS)})")
    for col in NUMERIC_COLUMNS:
        values = pd.to_numeric(df[col], errors="coerce").to_numpy(dtype=np.float64)
        bad = np.flatnonzero(~np.isfinite(values))
        require(bad.size == 0, f"profile {path}: column {col}: expected finite numbers, "
                f"got {df[col].iloc[bad[0]] if bad.size else ''!r} in row "
                f"{bad[0] if bad.size else 0}")
        df[col] = values
    present = [col for col in MIXED_COLUMNS if col in df.columns]
    absent = [col for col in MIXED_COLUMNS if col not in present]
    require(not present or not absent, f"profile {path}: column "
            f"{absent[0] if absent else ''}: missing (mixed passes need both "
            f"{' and '.join(MIXED_COLUMNS)})")
    for col in present:
        values = pd.to_numeric(df[col].fillna(0), errors="coerce").to_numpy(dtype=np.float64)
        bad = np.flatnonzero(~np.isfinite(values) | (values < 0))
        require(bad.size == 0, f"profile {path}: column {col}: expected numbers >= 0, got "
                f"{df[col].iloc[bad[0]] if bad.size else ''!r} in row {bad[0] if bad.size else 0}")
        df[col] = values
    for col, low, strict in (("latency_s", 0.0, True), ("batch_size", 1.0, False),
                             ("query_tokens", 1.0, False), ("kv_tokens", 0.0, False)):
        v = df[col].to_numpy()
        bad = np.flatnonzero(v <= low) if strict else np.flatnonzero(v < low)
        require(bad.size == 0, f"profile {path}: column {col}: expected "
                f"{'>' if strict else '>='} {low:g}, got {v[bad[0]] if bad.size else 0:g} "
                f"in row {bad[0] if bad.size else 0}")
    roles = df["role"].astype(str).str.lower()
    unknown = sorted(set(roles) - set(ROLES))
    require(not unknown, f"profile {path}: column role: expected draft or target, got "
                         f"{unknown[0]!r}"
            if unknown else "")
    df["role"] = roles
    require(len(df) > 0, f"profile {path}: column latency_s: no rows")
    return df


def select_rows(df, column: str, wanted: str | None, path, role: str):
    """Rows of ``df`` whose ``column`` matches ``wanted`` when the column holds several values."""
    if column not in df.columns:
        return df
    values = sorted(set(df[column].astype(str)))
    if len(values) <= 1:
        return df
    require(wanted is not None, f"profile {path}: column {column}: {role} rows hold several "
            f"values ({', '.join(values)}); pick one")
    key = str(wanted).lower()
    mask = df[column].astype(str).str.lower().str.contains(key, regex=False)
    require(bool(mask.any()), f"profile {path}: column {column}: no {role} rows match "
            f"{wanted!r} (have {', '.join(values)})")
    return df[mask]
