"""Size limits: estimates come before work, refusals name the limit and how to lift it."""

from __future__ import annotations

import pytest

from specbatch import limits
from specbatch.errors import SpecbatchError


def test_a_size_over_the_limit_is_refused_naming_the_limit_and_the_variable(monkeypatch):
    monkeypatch.delenv(limits.ALLOW_ENV, raising=False)
    limits.check_size("--instances", 10, 10, "instances")
    with pytest.raises(SpecbatchError, match=r"^--instances: 11 instances exceeds the limit of 10; "
                                             r"fewer, or set SPECBATCH_ALLOW_LARGE=1"):
        limits.check_size("--instances", 11, 10, "instances", "fewer")


def test_the_variable_lifts_every_limit(monkeypatch):
    monkeypatch.setenv(limits.ALLOW_ENV, "1")
    limits.check_size("x", 10**12, 1, "runs")
    limits.check_memory("x", 2.0**80)
    monkeypatch.setenv(limits.ALLOW_ENV, "yes")  # only "1" lifts them
    with pytest.raises(SpecbatchError):
        limits.check_size("x", 2, 1, "runs")


def test_the_memory_limit_is_a_fixed_share_of_physical_memory(monkeypatch):
    monkeypatch.delenv(limits.ALLOW_ENV, raising=False)
    total = limits.physical_memory()
    assert total > 0
    assert limits.memory_limit() == int(limits.MEMORY_FRACTION * total)
    limits.check_memory("job", limits.memory_limit())
    with pytest.raises(SpecbatchError, match="GiB of memory, more than the"):
        limits.check_memory("job", limits.memory_limit() + 1)


def test_sweep_runs_are_counted_without_expanding_the_grid():
    grids = [{"k": list(range(1000)), "n": list(range(1000)), "m": list(range(1000))},
             {"policy": ["ar"]}]
    assert limits.grid_runs(grids, seeds=3) == 3 * (10**9 + 1)
    with pytest.raises(SpecbatchError, match="runs"):
        limits.check_sweep("spec s.toml", grids, 3)
    assert limits.check_sweep("spec s.toml", [{"k": [1, 2]}], 2) == 4


def test_an_allocation_is_bounded_by_its_dp_table_and_milp_size():
    limits.check_allocation("values", 100, 8, 50, milp=True)
    with pytest.raises(SpecbatchError, match="--milp: 800000 binary variables"):
        limits.check_allocation("values", 100_000, 8, 4, milp=True)
    with pytest.raises(SpecbatchError, match="memory|DP operations"):
        limits.check_allocation("values", 10**6, 64, 10**7, milp=False)


def test_a_simulation_is_bounded_by_requests_replicas_and_memory():
    limits.check_simulation("config", 1000, 128, 3)
    with pytest.raises(SpecbatchError, match="field requests: 1e9 simulated requests"):
        limits.check_simulation("config", 10**9, 128, 3)
    with pytest.raises(SpecbatchError, match="field replicas"):
        limits.check_simulation("config", 10, 128, 3, replicas=2**62)


def test_simulation_estimate_counts_steps_per_batch():
    """A step serves a batch: the estimate of 10^6 requests at batch 64 stays under the
    2 GB measured runs of that size need, and shrinks as the batch grows."""
    assert limits.simulation_bytes(10**6, 128, 64) < 2e9
    assert limits.simulation_bytes(10**6, 128, 1) > limits.simulation_bytes(10**6, 128, 64)


def test_a_streamed_simulation_is_estimated_without_its_step_table():
    """simulate --out streams the step table: 10^7 requests (outputs 8-256, mean 132) are
    estimated under the 4 GB goal (the run's end, measured on arrays of its sizes, peaks at
    ~2 GB: docs/benchmarks.md), the held table far above it."""
    streamed = limits.simulation_bytes(10**7, 132, 64, streamed=True)
    assert streamed < 4e9 < limits.simulation_bytes(10**7, 132, 64)
    assert limits.simulation_bytes(10**6, 132, 64, streamed=True) < streamed
