"""Specification of the profiled model's family choice (simulator/cost/measured/profiled.py): NNLS
law vs interpolated grid, chosen per role by k-fold held-out MAPE."""

from __future__ import annotations

import json
import pickle

import numpy as np
import pandas as pd
import pytest

from specbatch.cli import main
from specbatch.simulator.cost.interface import SumsCostModel, batch_sums
from specbatch.simulator.cost.measured.profiled import (
    FAMILIES,
    FAMILY_TIE,
    fit_profile,
    fit_report,
    fit_role,
)
from tests.simulator.cost.measured.test_profiled import synthetic_profile

BATCHES, QUERIES, KVS = (1, 2, 4, 8, 16, 32, 64, 128, 256), (1, 2, 4, 8), (0, 256, 1024, 4096)


def knee_profile() -> pd.DataFrame:
    """A full grid from a strongly non-linear law: a step of 4x in latency once Q = n·q > 64,
    and a cache read cost that saturates."""
    rows = []
    for role, scale in (("target", 1.0), ("draft", 0.1)):
        for b in BATCHES:
            for q in QUERIES:
                for c in KVS:
                    t = (1e-3 if b * q <= 64 else 4e-3) * (1 + 0.2 * min(c, 256) / 256)
                    rows.append(("m", role, b, q, c, scale * t))
    return pd.DataFrame(rows, columns=["model", "role", "batch_size", "query_tokens",
                                       "kv_tokens", "latency_s"])


@pytest.fixture()
def linear_csv(tmp_path):
    path = tmp_path / "linear.csv"
    synthetic_profile().to_csv(path, index=False)
    return path


@pytest.fixture()
def knee_csv(tmp_path):
    path = tmp_path / "knee.csv"
    knee_profile().to_csv(path, index=False)
    return path


def test_linear_law_chooses_nnls(linear_csv):
    cost = fit_profile(linear_csv)
    for fit in cost.fits.values():
        cv = dict(fit.family_cv)
        assert set(cv) == set(FAMILIES)
        assert fit.family == "nnls" and cv["nnls"] < cv["grid"]
        assert fit.cv_mape == cv["nnls"] < 0.03


def test_knee_law_chooses_the_grid_and_reproduces_grid_points(knee_csv):
    cost = fit_profile(knee_csv)
    df = knee_profile()
    for role, fit in cost.fits.items():
        cv = dict(fit.family_cv)
        assert fit.family == "grid" and cv["grid"] < cv["nnls"]
        rows = df[df.role == role]
        pred = fit.predict(rows.batch_size, rows.query_tokens, rows.kv_tokens)
        np.testing.assert_allclose(pred, rows.latency_s, rtol=1e-9)
        cells = rows[["batch_size", "query_tokens", "kv_tokens", "latency_s"]].values[::7]
        for b, q, c, t in cells:
            qa, ca = np.full(int(b), int(q)), np.full(int(b), int(c))
            assert cost.step_time(role, qa, ca) == pytest.approx(t, rel=1e-9)


def test_beyond_the_grid_the_edge_grows_with_the_nnls_law_and_sums_stay_exact(knee_csv):
    """Inside the box the grid is exact; beyond it the edge's value is scaled by the NNLS
    law's growth from the edge, so a long prefill chunk costs more than the grid's edge."""
    cost = fit_profile(knee_csv)
    assert isinstance(cost, SumsCostModel)
    fit = cost._fit("target")
    edge = cost.step_time("target", np.full(256, 8), np.full(256, 4096))
    far = cost.step_time("target", np.full(1024, 64), np.full(1024, 100_000))
    nnls = type(fit)(**{**fit.__dict__, "family": "nnls"})  # the same fit, NNLS law alone
    growth = (nnls.predict([1024], [64], [100_000]) / nnls.predict([256], [8], [4096]))[0]
    assert far == pytest.approx(edge * growth, rel=1e-9) and far > edge
    assert cost.step_time("target", np.zeros(0), np.zeros(0)) == 0.0
    rng = np.random.default_rng(0)
    for _ in range(20):
        n = int(rng.integers(1, 300))
        q, c = rng.integers(1, 12, n), rng.integers(0, 5000, n)
        t = cost.step_time("draft", q, c)
        assert t > 0 and t == cost.time_from_sums("draft", *batch_sums(q, c))
    clone = pickle.loads(pickle.dumps(cost))
    assert clone.step_time("target", np.full(3, 5), np.full(3, 700)) == cost.step_time(
        "target", np.full(3, 5), np.full(3, 700))


def test_cv_is_deterministic_and_families_can_be_restricted(knee_csv):
    a, b = fit_report(fit_profile(knee_csv)), fit_report(fit_profile(knee_csv))
    assert a == b
    only = fit_profile(knee_csv, families=("nnls",))
    assert all(f.family == "nnls" and dict(f.family_cv).keys() == {"nnls"}
               for f in only.fits.values())


def test_fit_role_on_a_single_axis_grid():
    b = [1, 2, 4, 8, 16, 32, 64, 128]
    fit = fit_role(b, [1] * 8, [0] * 8, [1.0] * 4 + [3.0] * 4, families=("grid",))
    assert fit.family == "grid"
    inside = fit.predict([8, 16, 128], [1] * 3, [0] * 3)
    assert inside == pytest.approx([1.0, 3.0, 3.0])
    assert fit.predict([1000], [1], [0])[0] >= 3.0  # beyond the edge: the NNLS growth, not less


def test_cost_fit_json_lists_each_family_and_the_choice(knee_csv, linear_csv, capsys):
    for path, family in ((knee_csv, "grid"), (linear_csv, "nnls")):
        assert main(["cost", "fit", str(path), "--json"]) == 0
        obj = json.loads(capsys.readouterr().out)
        for role in ("draft", "target"):
            r = obj["roles"][role]
            assert set(r["family_cv_mape"]) == set(FAMILIES)
            assert r["family"] == family == obj["family"][role]
            assert r["cv_mape"] == r["family_cv_mape"][family]
            assert r["cv_mape"] <= min(r["family_cv_mape"].values()) * (1 + FAMILY_TIE)
    assert main(["cost", "fit", str(knee_csv)]) == 0
    out = capsys.readouterr().out
    assert "grid law" in out and "CV MAPE by family: nnls" in out


def test_h100_profile_prices_a_long_prefill_above_the_grid_edge():
    """The real 8B profile measures queries up to 9 tokens: a 512-token prefill must cost more
    than a 9-token pass, by the NNLS law's growth (the grid alone would price them alike).
    The eager H100 is host-bound, so the growth is modest (about 11 % here)."""
    from pathlib import Path

    path = Path(__file__).resolve().parents[4] / "traces/data/profiles/h100-llama-3.1-8b.parquet"
    cost = fit_profile(path)
    nine = cost.step_time("target", np.array([9]), np.array([0]))
    prefill = cost.step_time("target", np.array([512]), np.array([0]))
    fit = cost._fit("target")
    nnls = type(fit)(**{**fit.__dict__, "family": "nnls"})
    growth = (nnls.predict([1], [512], [0]) / nnls.predict([1], [9], [0]))[0]
    assert growth > 1.05 and prefill == pytest.approx(nine * growth, rel=1e-9)


def floored_profile(floor: float = 8e-3, noise: float = 0.01, seed: int = 1) -> pd.DataFrame:
    """A host-bound pass: max(φ, a linear law) times (1 + noise·N(0,1)), model llama-3.2-1b
    (16 layers), so small batches sit on the floor and large ones follow the law."""
    rng = np.random.default_rng(seed)
    rows = []
    for b in BATCHES:
        for q in QUERIES:
            for c in KVS:
                law = 1e-3 + 2e-5 * b * q + 5e-8 * b * c  # the knee is not in Q alone
                rows.append(("llama-3.2-1b", "target", b, q, c,
                             max(floor, law) * (1 + noise * rng.standard_normal())))
    return pd.DataFrame(rows, columns=["model", "role", "batch_size", "query_tokens",
                                       "kv_tokens", "latency_s"])


def test_a_floored_law_chooses_the_floor_family_and_recovers_the_floor(tmp_path, capsys):
    """max(φ, law) cannot be fitted by the NNLS law (its constant term adds instead of
    bounding below); the floor family recovers φ, reports φ/L for a known shape, and its
    batch-sums path is bit-identical to step_time."""
    path = tmp_path / "floored.csv"
    floored_profile().to_csv(path, index=False)
    cost = fit_profile(path)
    fit = cost._fit("target")
    cv = dict(fit.family_cv)
    assert fit.family == "floor" and cv["floor"] < 0.7 * cv["nnls"] and cv["floor"] < 0.06
    assert fit.floor == pytest.approx(8e-3, rel=0.03)
    report = fit_report(cost)["target"]
    assert report["floor_per_layer_s"] == pytest.approx(fit.floor / 16)
    assert cost.step_time("target", np.ones(1, dtype=np.int64), np.zeros(1)) == fit.floor
    rng = np.random.default_rng(0)
    for _ in range(20):
        n = int(rng.integers(1, 300))
        q, c = rng.integers(1, 12, n), rng.integers(0, 5000, n)
        t = cost.step_time("target", q, c)
        assert t >= fit.floor and t == cost.time_from_sums("target", *batch_sums(q, c))
    assert main(["cost", "fit", str(path)]) == 0
    assert "µs per layer" in capsys.readouterr().out


def test_without_a_floor_the_floor_family_is_never_chosen_over_nnls(linear_csv):
    """φ = 0 is always a candidate, and within the tie margin the NNLS law (listed first)
    wins."""
    for fit in fit_profile(linear_csv).fits.values():
        cv = dict(fit.family_cv)
        assert fit.family == "nnls" and cv["nnls"] <= cv["floor"] * (1 + FAMILY_TIE)
