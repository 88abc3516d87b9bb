"""Specification of simulator/cost/measured/profiled.py: the profiled fit and bad profiles."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from specbatch.errors import SpecbatchError
from specbatch.simulator.cost.gpus.hardware import get_hardware
from specbatch.simulator.cost.measured.profiled import ProfiledCost, fit_profile
from specbatch.simulator.cost.registry import build_cost_model
from tests.simulator.helpers import ones

# ----------------------------------------------------------------------------- profiled


TRUE_LAW = {"const": 2e-3, "query": 3e-5, "kv": 2e-8, "query_kv": 1e-9}


def synthetic_profile(rows: int = 120, noise: float = 0.01, seed: int = 0) -> pd.DataFrame:
    """A profile from a known linear law times (1 + noise·N(0,1)), for both roles."""
    rng = np.random.default_rng(seed)
    frames = []
    for role, scale, model in (("target", 1.0, "vicuna-33b"), ("draft", 0.05, "vicuna-68m")):
        b = rng.choice([1, 2, 4, 8, 16, 32, 64, 128], rows)
        q = rng.choice([1, 2, 4, 8], rows)
        c = rng.choice([0, 128, 512, 1024, 2048], rows)
        law = (TRUE_LAW["const"] + TRUE_LAW["query"] * b * q + TRUE_LAW["kv"] * b * c
               + TRUE_LAW["query_kv"] * b * q * c)
        lat = scale * law * (1 + noise * rng.standard_normal(rows))
        frames.append(pd.DataFrame({
            "model": model, "role": role, "device": "NVIDIA H100 80GB HBM3", "dtype": "bfloat16",
            "batch_size": b, "query_tokens": q, "kv_tokens": c, "latency_s": lat}))
    return pd.concat(frames, ignore_index=True)


@pytest.fixture()
def profile_csv(tmp_path):
    path = tmp_path / "profile.csv"
    synthetic_profile().to_csv(path, index=False)
    return path


def test_fit_recovers_a_known_linear_law(profile_csv):
    cost = fit_profile(profile_csv)
    assert isinstance(cost, ProfiledCost)
    for role, scale in (("target", 1.0), ("draft", 0.05)):
        fit = cost.fits[role]
        assert fit.rows == 120 and fit.folds == 5
        assert fit.cv_mape < 0.03 and fit.fit_mape < 0.02
        coef = dict(zip(fit.feature_names, fit.coef))
        assert all(v >= 0 for v in fit.coef)
        assert coef["const"] == pytest.approx(scale * TRUE_LAW["const"], rel=0.2)
        q, c = ones(32, 4), ones(32, 1024)
        law = scale * (TRUE_LAW["const"] + TRUE_LAW["query"] * 128 + TRUE_LAW["kv"] * 32 * 1024
                       + TRUE_LAW["query_kv"] * 128 * 1024)
        assert cost.step_time(role, q, c) == pytest.approx(law, rel=0.03)
    assert set(cost.cv_mape) == {"draft", "target"}


def test_fit_reads_parquet_and_build_cost_model_uses_it(tmp_path):
    path = tmp_path / "profile.parquet"
    synthetic_profile().to_parquet(path)
    cost = build_cost_model("profiled", hardware="h100", profile=str(path))
    assert cost.overhead == get_hardware("h100").overhead
    assert cost.step_time("target", ones(8), ones(8, 100)) > cost.step_time("draft", ones(8),
                                                                              ones(8, 100))
    assert cost.step_time("target", ones(0), ones(0)) == 0.0


def test_profiled_fit_of_a_roofline_bends_at_the_knee(tmp_path, h100):
    # A profile sampled from the roofline itself (max of two lines) is fitted within a few %.
    rows = []
    for b in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512):
        for q in (1, 4, 8):
            for c in (0, 256, 1024):
                t = h100.step_time("target", ones(b, q), ones(b, c))
                rows.append(("vicuna-33b", "target", b, q, c, t))
    df = pd.DataFrame(rows, columns=["model", "role", "batch_size", "query_tokens", "kv_tokens",
                                     "latency_s"])
    path = tmp_path / "roof.csv"
    df.to_csv(path, index=False)
    fit = fit_profile(path).fits["target"]
    assert fit.knots and fit.cv_mape < 0.1


def test_missing_role_is_an_error_only_when_used(tmp_path):
    df = synthetic_profile()
    path = tmp_path / "target_only.csv"
    df[df.role == "target"].to_csv(path, index=False)
    cost = fit_profile(path)
    assert cost.step_time("target", ones(1), ones(1)) > 0
    with pytest.raises(SpecbatchError, match=r"target_only.csv: column role: no rows for 'draft'"):
        cost.step_time("draft", ones(1), ones(1))


def test_several_models_per_role_are_selected_by_name(tmp_path):
    a, b = synthetic_profile(seed=1), synthetic_profile(seed=2)
    b["model"] = b["model"].str.replace("vicuna", "llama")
    b["latency_s"] *= 10
    path = tmp_path / "two.csv"
    pd.concat([a, b]).to_csv(path, index=False)
    with pytest.raises(SpecbatchError, match="column model: .*several"):
        fit_profile(path)
    slow = fit_profile(path, target="llama-33b", draft="llama-68m")
    fast = fit_profile(path, target="vicuna-33b", draft="vicuna-68m")
    q, c = ones(4), ones(4, 10)
    assert slow.step_time("target", q, c) > 5 * fast.step_time("target", q, c)


@pytest.mark.parametrize(
    "mutate, match",
    [
        (lambda d: d.drop(columns=["latency_s"]), "column latency_s: missing"),
        (lambda d: d.drop(columns=["kv_tokens"]), "column kv_tokens: missing"),
        (lambda d: d.assign(latency_s=d.latency_s.where(d.index != 3)),
         "column latency_s: expected finite numbers.*row 3"),
        (lambda d: d.assign(kv_tokens=d.kv_tokens.astype(object).where(d.index != 5, "x")),
         "column kv_tokens: expected finite numbers"),
        (lambda d: d.assign(latency_s=d.latency_s.where(d.index != 7, -0.1)),
         "column latency_s: expected > 0, got -0.1 in row 7"),
        (lambda d: d.assign(batch_size=d.batch_size.where(d.index != 2, 0)),
         "column batch_size: expected >= 1"),
        (lambda d: d.assign(role=d.role.where(d.index != 0, "oracle")),
         "column role: expected draft or target, got 'oracle'"),
        (lambda d: d.iloc[[0, 1, 2, 200, 201, 202, 203, 204, 205]],
         "column role: 3 rows for 'target', expected at least 6"),
        (lambda d: d.iloc[:0], "no rows"),
    ],
)
def test_bad_profiles_are_one_line_errors_naming_file_and_column(tmp_path, mutate, match):
    path = tmp_path / "bad.csv"
    mutate(synthetic_profile()).to_csv(path, index=False)
    with pytest.raises(SpecbatchError, match=match) as info:
        fit_profile(path)
    message = str(info.value)
    assert "\n" not in message and "bad.csv" in message


def test_unreadable_or_absent_profile(tmp_path):
    with pytest.raises(SpecbatchError, match="no such file"):
        fit_profile(tmp_path / "nope.csv")
    bad = tmp_path / "bad.parquet"
    bad.write_text("not parquet")
    with pytest.raises(SpecbatchError, match="bad.parquet: cannot read"):
        fit_profile(bad)


@pytest.fixture(scope="module")
def profiled(tmp_path_factory):
    path = tmp_path_factory.mktemp("profile") / "profile.csv"
    synthetic_profile().to_csv(path, index=False)
    return fit_profile(path)


@given(
    n=st.integers(1, 64),
    q=st.integers(1, 8),
    c=st.integers(0, 4096),
    dq=st.integers(0, 600),
    dc=st.integers(0, 4096),
    role=st.sampled_from(["draft", "target"]),
)
def test_profiled_step_time_is_positive_and_monotone(profiled, n, q, c, dq, dc, role):
    # Non-negative coefficients on non-decreasing features: more work never costs less.
    base = profiled.step_time(role, ones(n, q), ones(n, c))
    assert base > 0
    assert profiled.step_time(role, ones(n, q + dq), ones(n, c)) >= base
    assert profiled.step_time(role, ones(n, q), ones(n, c + dc)) >= base
    assert profiled.step_time(role, ones(n + 1, q), ones(n + 1, c)) >= base


def test_profiled_step_time_matches_the_fitted_law_on_uniform_batches(profiled):
    fit = profiled.fits["target"]
    for b, q, c in [(1, 1, 0), (64, 4, 700), (512, 1, 2048), (3, 300, 0)]:
        expected = float(fit.predict([b], [q], [c])[0])
        assert profiled.step_time("target", ones(b, q), ones(b, c)) == pytest.approx(expected)


def test_mape_warnings_name_each_role_over_the_limit():
    from specbatch.simulator.cost.measured.profiled import MAPE_WARN, fit_role, mape_warnings

    fit = fit_role([1, 2, 4, 8, 16, 32, 64, 128], [1] * 8, [512] * 8,
                   [1.0, 0.5, 2.0, 0.7, 3.0, 0.9, 4.0, 1.1], role="draft", model="noisy")
    cost = ProfiledCost(fits={"draft": fit})
    assert MAPE_WARN == 0.10 and fit.cv_mape > MAPE_WARN
    (line,) = mape_warnings(cost)
    assert line.startswith("draft noisy:") and "exceeds 10 %" in line
    assert mape_warnings(cost, limit=10.0) == []


# ----------------------------------------------------------------------------- mixed rows


def test_a_mixed_row_has_the_features_of_its_concatenated_batch():
    """A mixed pass (3 decode rows of 4 tokens on 50 cached, 2 prompts of 30) is fitted on the
    batch sums the simulator prices a mixed step with."""
    from specbatch.simulator.cost.interface import batch_sums
    from specbatch.simulator.cost.measured.profiled import profile_features

    x = profile_features([3], [4], [50], (10.0,), [2], [30])[0]
    n, sq, sc, sqc, sqq = batch_sums(np.array([4, 4, 4, 30, 30.0]), np.array([50, 50, 50, 0, 0.0]))
    assert x.tolist() == [1.0, n, sq, sc, sqc, sqq, sq - 10.0]
    assert profile_features([3], [4], [50], (), [0], [0]).tolist() == \
        profile_features([3], [4], [50]).tolist()


def test_zero_mixed_columns_fit_the_same_law_as_none(profile_csv, tmp_path):
    df = pd.read_csv(profile_csv)
    df["prefill_batch"], df["prefill_tokens"] = 0, 0
    df.to_csv(tmp_path / "zeros.csv", index=False)
    a, b = fit_profile(profile_csv), fit_profile(tmp_path / "zeros.csv")
    for role in ("draft", "target"):
        assert a.fits[role].coef == b.fits[role].coef
        assert a.fits[role].family_cv == b.fits[role].family_cv


def test_a_fit_with_mixed_rows_recovers_a_law_of_the_concatenated_batch(tmp_path):
    rng = np.random.default_rng(1)
    rows = 150
    b, q = rng.choice([1, 2, 4, 8], rows), rng.choice([1, 2, 4], rows)
    c = rng.choice([64, 256], rows)
    m, p = rng.choice([0, 0, 1, 3], rows), rng.choice([16, 64], rows)
    law = (TRUE_LAW["const"] + TRUE_LAW["query"] * (b * q + m * p) + TRUE_LAW["kv"] * b * c
           + TRUE_LAW["query_kv"] * b * q * c)
    pd.DataFrame({"role": "target", "batch_size": b, "query_tokens": q, "kv_tokens": c,
                  "latency_s": law, "prefill_batch": m, "prefill_tokens": np.where(m, p, 0)}
                 ).to_csv(tmp_path / "mixed.csv", index=False)
    model = fit_profile(tmp_path / "mixed.csv", families=("nnls",))
    mixed = model.step_time("target", np.array([2, 2, 40.0]), np.array([100, 100, 0.0]))
    want = TRUE_LAW["const"] + TRUE_LAW["query"] * 44 + TRUE_LAW["kv"] * 200 \
        + TRUE_LAW["query_kv"] * 400
    assert mixed == pytest.approx(want, rel=0.02)


def test_a_profile_with_one_mixed_column_is_an_error(profile_csv, tmp_path):
    df = pd.read_csv(profile_csv)
    df["prefill_batch"] = 1
    df.to_csv(tmp_path / "half.csv", index=False)
    with pytest.raises(SpecbatchError, match="column prefill_tokens: missing"):
        fit_profile(tmp_path / "half.csv")
    df["prefill_tokens"] = -1
    df.to_csv(tmp_path / "negative.csv", index=False)
    with pytest.raises(SpecbatchError, match="column prefill_tokens: expected numbers >= 0"):
        fit_profile(tmp_path / "negative.csv")
