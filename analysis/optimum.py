"""Allocation optima for a value array read from a file (``specbatch optimum allocate``).

A value array ``values`` # [N, K] holds per-position values v_{i,j} ≥ 0 (e.g. P(τ_i ≥ j),
THEORY.md §5). An allocation chooses prefix lengths s_i with Σ s_i ≤ C and is worth
Σ_i Σ_{j≤s_i} v_{i,j}; TETRIS's greedy takes the global top-C values, the DP (and its MILP
twin) the exact optimum, and the gap is what the greedy leaves on the table.
"""

from __future__ import annotations

import io
import warnings

import numpy as np

from specbatch.errors import SpecbatchError, require
from specbatch.inputs import read_regular_file
from specbatch.theory.allocate.budget import allocation_value, greedy_topc, optimal_dp, optimal_milp


def read_values(path: str) -> np.ndarray:
    """A [N, K] real array (N, K ≥ 1) from .npy or CSV (comma-separated, no header).

    The file must be a regular file (a FIFO or a device never blocks the read); complex
    arrays are refused rather than losing their imaginary part, an empty file rather than
    read as N = 0, and object arrays (pickles) are never loaded.
    """
    data = read_regular_file(path, "a values file (.npy or CSV)")
    try:
        if path.endswith(".npy"):
            values = np.load(io.BytesIO(data), allow_pickle=False)
        else:
            with warnings.catch_warnings():  # numpy warns on an empty file; refused below
                warnings.simplefilter("ignore", UserWarning)
                values = np.loadtxt(io.StringIO(data.decode("utf-8")), delimiter=",", ndmin=2,
                                    dtype=np.float64)
    except UnicodeDecodeError:
        raise SpecbatchError(f"file {path}: expected a CSV of numbers, got binary data") from None
    except (ValueError, OSError, EOFError) as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise SpecbatchError(f"file {path}: expected a numeric [N, K] array ({reason})") from None
    require(isinstance(values, np.ndarray), f"file {path}: expected one array, got "
            f"{type(values).__name__}")
    require(values.ndim == 2, f"file {path}: expected a 2-d [N, K] array, got shape "
                              f"{values.shape}")
    require(values.size > 0, f"file {path}: expected a non-empty [N, K] array, got shape "
            f"{values.shape}")
    require(not np.issubdtype(values.dtype, np.complexfloating),
            f"file {path}: expected real values, got complex dtype {values.dtype}")
    require(np.issubdtype(values.dtype, np.number) and values.dtype != np.bool_,
            f"file {path}: expected a numeric array, got dtype {values.dtype}")
    return values.astype(np.float64)


def compare_allocations(values: np.ndarray, budget: int, milp: bool = False,
                        where: str = "values") -> dict:
    """Greedy (top-C) and optimal (DP) allocations of ``values`` # [N, K] under ``budget`` C,
    their values and the gap; with ``milp`` also the MILP optimum's value. A bad budget or
    array is a one-line error prefixed with ``where``."""
    try:
        greedy = greedy_topc(values, budget)
        optimal = optimal_dp(values, budget)
        milp_s = optimal_milp(values, budget) if milp else None
    except SpecbatchError as exc:
        raise SpecbatchError(f"{where}: {exc}") from None
    g_val, o_val = allocation_value(values, greedy), allocation_value(values, optimal)
    out = {"n": int(values.shape[0]), "k": int(values.shape[1]), "budget": budget,
           "greedy": greedy.tolist(), "greedy_value": g_val,
           "optimal": optimal.tolist(), "optimal_value": o_val, "gap": o_val - g_val}
    if milp_s is not None:
        out["milp_value"] = allocation_value(values, milp_s)
    return out
