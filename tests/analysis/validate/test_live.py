"""`specbatch validate`: a live run's output directory replays end to end through the
simulator (same trajectory), with in-sample, grid and external cost models; bad paths are
one-line errors with exit code 2."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from specbatch.analysis.validate.live import accuracy_warnings, validate  # noqa: E402
from specbatch.live.config import LiveConfig  # noqa: E402
from specbatch.live.loop import run_live  # noqa: E402
from specbatch.live.record import write_live  # noqa: E402
from specbatch.simulator.engine.request_state import STEP_COLUMNS  # noqa: E402
from specbatch.simulator.metrics import REQUEST_COLUMNS  # noqa: E402
from tests.live.helpers import (  # noqa: E402
    IDS,
    PROMPTS,
    load_saved_pair,
    one_torch_thread,
    run_cli,
    save_pair,
)


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    with one_torch_thread():
        yield


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    return save_pair(tmp_path_factory.mktemp("livepair"))


@pytest.fixture(scope="module")
def prompts_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("prompts") / "prompts.jsonl"
    path.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in PROMPTS))
    return str(path)


def _check_live_dir(out) -> pd.DataFrame:
    """The simulator's tables, summary, profile and manifest of a live run; returns profile."""
    requests = pd.read_parquet(out / "requests.parquet")
    steps = pd.read_parquet(out / "steps.parquet")
    assert tuple(requests.columns) == REQUEST_COLUMNS
    assert tuple(steps.columns) == STEP_COLUMNS
    assert (requests["tokens"] == 10).all() and (requests["finish"] > requests["first_token"]).all()
    summary = json.loads((out / "summary.json").read_text())
    for key in ("throughput", "e2e_mean", "mal", "vsr", "draft_efficiency", "makespan"):
        assert summary[key] is not None and np.isfinite(summary[key])
    profile = pd.read_csv(out / "profile.csv")
    for col in ("model", "role", "device", "dtype", "batch_size", "query_tokens", "kv_tokens",
                "latency_s"):
        assert col in profile.columns
    manifest = json.loads((out / "live.json").read_text())
    for key in ("policy", "k", "extra", "verify", "seed", "device", "dtype", "temperature"):
        assert key in manifest["settings"]
    assert manifest["models"]["target"]["shape"]["layers"] == 2
    assert len(manifest["prompt_len"]) == len(PROMPTS)
    grid = pd.read_csv(out / "profile_grid.csv")  # the run's (batch, query, KV) cells
    assert set(grid["role"]) == {"draft", "target"}
    assert set(grid["batch_size"]) == {5, 3, 2, 1}
    assert set(grid.loc[grid["role"] == "target", "query_tokens"]) >= {1, 2, 3, 4}
    return profile


def test_live_cli_writes_the_simulator_tables_and_validate_replays_them(pair, prompts_file,
                                                                        tmp_path, capsys):
    out = tmp_path / "live"
    code, stdout, _ = run_cli(capsys, "live", "--draft", pair[0], "--target", pair[1],
                              "--prompts", prompts_file, "--max-new-tokens", "10", "--policy",
                              "tetris", "--k", "2", "--extra", "1", "--verify", "block",
                              "--temperature", "1.0", "--warmup", "0", "--profile-grid",
                              "--grid-repeats", "1", "--out", str(out), "--json")
    assert code == 0
    printed = json.loads(stdout)
    assert printed["tokens"] == 10 * len(PROMPTS) and printed["throughput"] > 0
    profile = _check_live_dir(out)
    n_steps = len(pd.read_parquet(out / "steps.parquet"))
    for flags, source in (([], "profile_grid.csv"), (["--in-sample"], "in-sample")):
        code, stdout, err = run_cli(capsys, "validate", str(out), *flags, "--json")
        assert code == 0, err
        report = json.loads(stdout)
        assert source in report["cost_model"]
        assert report["trajectory_match"] is True  # same positions, same τ: same steps
        assert report["simulated"]["steps"] == report["measured"]["steps"] == n_steps
        assert report["simulated"]["tokens"] == report["measured"]["tokens"]
        for key in ("throughput", "step_latency_mean", "decode_step_latency_mean"):
            assert np.isfinite(report["relative_error"][key])
    files = []  # external profiles, one per role (the live passes, three times each)
    for role in ("draft", "target"):
        files.append(str(tmp_path / f"{role}.csv"))
        pd.concat([profile[profile["role"] == role]] * 3).to_csv(files[-1], index=False)
    sim_out = tmp_path / "sim"
    code, stdout, err = run_cli(capsys, "validate", str(out), "--profile", *files,
                                "--overhead", "0", "--out", str(sim_out))
    assert code == 0, err
    assert "throughput" in stdout and "rel. error" in stdout
    saved = json.loads((sim_out / "validate.json").read_text())
    assert saved["overhead_per_step"] == 0 and "target.csv" in saved["cost_model"]
    assert (sim_out / "steps.parquet").is_file()


def test_validate_reproduces_the_trajectory_at_temperature_zero(pair, tmp_path):
    models = load_saved_pair(pair)
    result = run_live(*models, IDS, LiveConfig(max_new_tokens=9, policy="fixed", k=3))
    write_live(result, tmp_path / "live", {"models": {}})
    report = validate(tmp_path / "live")
    assert report["trajectory_match"] is True
    assert report["simulated"]["mal"] == pytest.approx(result.summary["mal"])


@pytest.mark.parametrize("args,needle", [
    (["live", "--draft", "/no/such/draft", "--target", "/no/such/target", "--prompts",
      "default:2", "--out", "OUT"], "draft model /no/such/draft"),
    (["live", "--draft", "D", "--target", "T", "--prompts", "/no/such/prompts.jsonl", "--out",
      "OUT", "--policy", "nope"], "--policy"),
    (["validate", "/no/such/live_dir"], "LIVE_DIR /no/such/live_dir"),
])
def test_bad_paths_are_one_line_errors_with_exit_2(args, needle, tmp_path, capsys):
    args = [str(tmp_path / "out") if a == "OUT" else a for a in args]
    code, _, err = run_cli(capsys, *args)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0] and "Traceback" not in err


def test_validate_of_a_directory_without_a_live_run_is_a_one_line_error(tmp_path, capsys):
    code, _, err = run_cli(capsys, "validate", str(tmp_path))
    assert code == 2 and "live.json" in err and len(err.strip().splitlines()) == 1


def _tiny_run(capsys, pair, prompts_file, out, seed, *extra):
    code, _, err = run_cli(capsys, "live", "--draft", pair[0], "--target", pair[1],
                           "--prompts", prompts_file, "--max-new-tokens", "6", "--policy",
                           "fixed", "--k", "2", "--temperature", "1.0", "--max-num-seqs", "2",
                           "--arrival", "poisson", "--rate", "40", "--seed", str(seed),
                           "--warmup", "0", *extra, "--out", str(out), "--json")
    assert code == 0, err


def test_validate_fits_one_run_and_predicts_another_out_of_sample(pair, prompts_file,
                                                                   tmp_path, capsys):
    run_a, run_b = tmp_path / "a", tmp_path / "b"
    _tiny_run(capsys, pair, prompts_file, run_a, 0, "--profile-grid", "--grid-repeats", "1")
    _tiny_run(capsys, pair, prompts_file, run_b, 1)
    for args in (["--fit", str(run_a), "--predict", str(run_b)], [str(run_b), "--fit",
                                                                  str(run_a)]):
        code, stdout, err = run_cli(capsys, "validate", *args, "--json")
        assert code == 0, err
        report = json.loads(stdout)
        assert report["mode"] == "out-of-sample" and report["fit_dir"] == str(run_a)
        assert report["live_dir"] == str(run_b) and "profile_grid.csv" in report["cost_model"]
        a_steps = pd.read_parquet(run_a / "steps.parquet")
        assert report["overhead_per_step"] == pytest.approx(a_steps["overhead_time"].mean())
        assert report["simulated"]["tokens"] == report["measured"]["tokens"] == 6 * len(PROMPTS)
        # fixed: every request's τ sequence replays exactly, whatever the predicted schedule
        b_req = pd.read_parquet(run_b / "requests.parquet")
        assert report["simulated"]["mal"] == pytest.approx(report["measured"]["mal"])
        assert report["measured"]["e2e_mean"] == pytest.approx(
            float((b_req["finish"] - b_req["arrival"]).mean()))
        for key in ("throughput", "e2e_mean", "e2e_p99", "tpot_mean", "step_latency_mape"):
            assert np.isfinite(report["relative_error"][key]), key
        # the JSON names every miss larger than the fit's own error, and stderr says it too
        assert report["warnings"] == accuracy_warnings(report["relative_error"],
                                                       report["cost_cv_mape"])
        assert err.count("warning: ") == len(report["warnings"])
    code, stdout, _ = run_cli(capsys, "validate", "--fit", str(run_a), "--predict", str(run_b))
    assert code == 0 and "out-of-sample" in stdout and "per-step latency MAPE" in stdout
    code, _, err = run_cli(capsys, "validate", str(run_b), "--predict", str(run_a))
    assert code == 2 and "LIVE_DIR or --predict" in err


def test_per_step_prediction_prices_each_step_as_the_simulator_does(pair, tmp_path):
    """On a replay that takes the live run's exact steps, the simulator's step times equal
    the recorded passes priced one by one (the pass sums are the simulator's own)."""
    from specbatch.analysis.validate.live import cost_model, predicted_step_latency

    models = load_saved_pair(pair)
    result = run_live(*models, IDS, LiveConfig(max_new_tokens=7, policy="fixed", k=3))
    write_live(result, tmp_path / "live", {"models": {}})
    report = validate(tmp_path / "live", in_sample=True, out=tmp_path / "sim")
    assert report["trajectory_match"] is True and report["mode"] == "in-sample"
    cost, _, _ = cost_model(tmp_path / "live", None, True, report["overhead_per_step"], None,
                            None)
    sim = pd.read_parquet(tmp_path / "sim" / "steps.parquet")
    pred = predicted_step_latency(cost, pd.read_csv(tmp_path / "live" / "profile.csv"),
                                  len(sim))
    sim_total = sim[["draft_time", "target_time", "overhead_time"]].sum(axis=1).to_numpy()
    np.testing.assert_allclose(pred, sim_total, rtol=1e-9)


def test_a_miss_larger_than_the_cost_models_cv_error_is_warned():
    errors = {"throughput": 1.30, "makespan": -0.565, "e2e_mean": 0.10,
              "step_latency_mape": 2.25, "tpot_mean": 9.0}
    lines = accuracy_warnings(errors, {"draft": 0.112, "target": 0.187})
    assert len(lines) == 3  # throughput, makespan, step MAPE; e2e 10 % is inside 18.7 %
    assert lines[0].startswith("simulated throughput is off by +130.0 %, more than the cost "
                               "model's own cross-validated MAPE (18.7 %)")
    assert lines[2].startswith("per-step latency MAPE is 225.0 %")
    assert accuracy_warnings({"throughput": 0.05, "step_latency_mape": 0.12},
                             {"target": 0.187}) == []
    assert accuracy_warnings(errors, {"target": float("nan")}) == []  # no bound, no claim


@pytest.fixture(scope="module")
def live_run(pair, tmp_path_factory):
    models = load_saved_pair(pair)
    result = run_live(*models, IDS, LiveConfig(max_new_tokens=5, policy="fixed", k=2))
    out = tmp_path_factory.mktemp("damaged") / "live"
    write_live(result, out, {"models": {}})
    return out


def _table(name, change):
    def damage(folder):
        path = folder / name
        change(pd.read_parquet(path)).to_parquet(path, index=False)
    return damage


@pytest.mark.parametrize("damage, needle", [
    (_table("requests.parquet", lambda t: t.assign(finish=np.nan)),
     "requests.parquet: column finish: expected finite numbers, got nan in row 0"),
    (_table("requests.parquet", lambda t: t.iloc[:2]),
     "requests.parquet: expected 5 rows (live.json field requests), got 2"),
    (_table("requests.parquet", lambda t: t.drop(columns=["finish"])),
     "requests.parquet: column finish: missing"),
    (_table("steps.parquet", lambda t: t.drop(columns=["end"])),
     "steps.parquet: column end: missing"),
    (_table("steps.parquet", lambda t: t.assign(batch="x")),
     "steps.parquet: column batch: expected numbers"),
    (_table("steps.parquet", lambda t: t.assign(end=t["time"] - 1)),
     "steps.parquet: column end: expected each step to end no earlier than its time"),
    (_table("steps.parquet", lambda t: t.iloc[:0]), "steps.parquet: expected at least one row"),
])
def test_a_damaged_live_run_is_refused_naming_the_file_and_column(live_run, tmp_path, capsys,
                                                                  damage, needle):
    """validate used to replay NaN finish times and missing rows, or end in a KeyError."""
    import shutil

    folder = shutil.copytree(live_run, tmp_path / "live")
    damage(folder)
    code, _, err = run_cli(capsys, "validate", str(folder))
    assert code == 2 and len(err.strip().splitlines()) == 1 and needle in err, err
