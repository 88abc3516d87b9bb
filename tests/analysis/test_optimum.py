"""analysis.optimum: value arrays from files and the greedy-vs-optimal comparison."""

from __future__ import annotations

import numpy as np
import pytest

from specbatch.analysis.optimum import compare_allocations, read_values
from specbatch.errors import SpecbatchError


def test_read_values_from_npy_and_csv(tmp_path):
    values = np.array([[0.9, 0.5], [0.8, 0.1]])
    np.save(tmp_path / "v.npy", values)
    np.savetxt(tmp_path / "v.csv", values, delimiter=",")
    assert np.array_equal(read_values(str(tmp_path / "v.npy")), values)
    assert np.allclose(read_values(str(tmp_path / "v.csv")), values)
    with pytest.raises(SpecbatchError, match="got no such file"):
        read_values(str(tmp_path / "none.csv"))
    np.save(tmp_path / "flat.npy", values.ravel())
    with pytest.raises(SpecbatchError, match=r"2-d \[N, K\] array"):
        read_values(str(tmp_path / "flat.npy"))


def test_optimum_is_never_worse_than_greedy_and_spends_the_budget():
    values = np.array([[0.9, 0.85, 0.1], [0.88, 0.2, 0.0]])  # prefix values, non-increasing rows
    out = compare_allocations(values, 3, milp=True)
    assert out["gap"] >= 0 and out["optimal_value"] == pytest.approx(out["milp_value"])
    assert sum(out["optimal"]) <= 3 and sum(out["greedy"]) <= 3
    assert (out["n"], out["k"], out["budget"]) == (2, 3, 3)
    with pytest.raises(SpecbatchError, match="^file x: "):
        compare_allocations(values, -1, where="file x")
