"""Sweeps: spec validation, expansion, resumable storage, and executor-independent tables.

The mechanics are specified against a small stand-in config class and a deterministic fake
runner (the runner is injectable), so these tests need no simulation; one test checks the
real SimConfig's field names are what specs are validated against.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from specbatch.analysis.sweep.points import run_key, trace_fingerprint
from specbatch.analysis.sweep.runner import collect_results, read_requests, run_sweep
from specbatch.analysis.sweep.spec import expand, load_spec, parse_override, parse_spec
from specbatch.errors import SpecbatchError
from specbatch.simulator.config import sim_config as config
from specbatch.traces import synth


@dataclass(frozen=True)
class FakeConfig:
    policy: str = "fixed"
    num_speculative_tokens: int = 1
    extra: int = 0
    budget: int | None = None
    rate: float = 1.0
    verify: str = "token"
    seed: int = 0


def fake_runner(config: dict):
    """Deterministic summary + per-request table, a function of the config only."""
    k, seed = config["num_speculative_tokens"], config["seed"]
    bonus = 5.0 if config["policy"] == "tetris" else 0.0
    rng = np.random.default_rng(seed * 100 + k)
    requests = pd.DataFrame({"request_id": np.arange(8), "e2e": rng.uniform(1, 2, 8),
                             "ttft": rng.uniform(0, 0.1, 8), "extra_col": 1})
    summary = {"throughput": 100.0 + 10 * k + bonus + seed, "e2e_mean": 2.0 - 0.1 * k,
               "requests": 8, "mal": 1.0 + 0.2 * k}
    return summary, requests


def counting_runner(config: dict):
    """fake_runner that also leaves one marker file per call (visible across processes)."""
    marks = Path(os.environ["SWEEP_TEST_MARKS"])
    (marks / f"{run_key(config)}-{os.getpid()}-{len(list(marks.iterdir()))}").touch()
    return fake_runner(config)


def failing_runner(config: dict):
    """fake_runner that crashes on k = 3 (a point in the middle of the grid)."""
    if config["num_speculative_tokens"] == 3:
        raise RuntimeError("simulated crash")
    return fake_runner(config)


class StopAfter:
    """Serial runner that raises KeyboardInterrupt after ``n`` successful runs (a Ctrl-C)."""

    def __init__(self, n: int):
        self.n, self.calls = n, 0

    def __call__(self, config: dict):
        if self.calls >= self.n:
            raise KeyboardInterrupt
        self.calls += 1
        return fake_runner(config)


SPEC = {
    "name": "t",
    "seeds": [0, 1],
    "base": {"rate": 2.0},
    "axes": {"policy": ["fixed", "tetris"], "num_speculative_tokens": [1, 2, 3]},
}


def spec(**changes):
    return parse_spec({**SPEC, **changes}, "spec.toml", FakeConfig)


# --- spec validation --------------------------------------------------------------------


@pytest.mark.parametrize(
    "changes, needle",
    [
        ({"axes": {"polcy": ["fixed"]}}, "field 'polcy': unknown config field"),
        ({"axes": {"policy": []}}, "field 'policy': empty axis"),
        ({"axes": {"num_speculative_tokens": ["two"]}}, "field 'num_speculative_tokens': expected "
                                                        "int"),
        ({"axes": {"num_speculative_tokens": [True]}}, "field 'num_speculative_tokens': expected "
                                                       "int"),
        ({"axes": {"policy": "fixed"}}, "field 'policy': expected a list"),
        ({"base": {"rate": "fast"}}, "[base] field 'rate': expected float"),
        ({"base": {"nope": 1}}, "[base] field 'nope': unknown config field"),
        ({"seeds": []}, "field 'seeds'"),
        ({"seeds": [0, 0]}, "duplicate seeds"),
        ({"axes": {"seed": [1, 2]}}, "field 'seed'"),
        ({"typo": 1}, "field 'typo': unknown top-level key"),
        ({"report": {"replicate": "medusa"}}, "field 'replicate'"),
    ],
)
def test_bad_spec_is_one_line_error_naming_file_and_field(changes, needle):
    with pytest.raises(SpecbatchError) as info:
        spec(**changes)
    message = str(info.value)
    assert message.startswith("spec spec.toml:")
    assert needle in message
    assert "\n" not in message


def test_optional_fields_accept_none_and_ints_widen_to_float():
    s = spec(base={"budget": 8, "rate": 3}, axes={"rate": [1, 2.5]})
    assert [r["rate"] for r in expand(s, FakeConfig)] == [1, 1, 2.5, 2.5]


def test_unreadable_toml_names_the_file(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text("[axes\npolicy = 1")
    with pytest.raises(SpecbatchError, match=r"^spec .*bad\.toml: not valid TOML"):
        load_spec(path, FakeConfig)
    with pytest.raises(SpecbatchError, match="file not found"):
        load_spec(tmp_path / "missing.toml", FakeConfig)


# --- expansion and keys -----------------------------------------------------------------


def test_expansion_is_the_product_times_seeds_in_spec_order():
    runs = expand(spec(), FakeConfig)
    assert len(runs) == 2 * 3 * 2
    assert [(r["policy"], r["num_speculative_tokens"], r["seed"]) for r in runs[:4]] == [
        ("fixed", 1, 0), ("fixed", 1, 1), ("fixed", 2, 0), ("fixed", 2, 1)]
    assert all(r["rate"] == 2.0 and r["budget"] is None for r in runs)  # base + defaults resolved


def test_union_of_grids_drops_duplicate_runs():
    s = spec(axes=[{"policy": ["fixed"], "num_speculative_tokens": [1, 2]},
                   {"policy": ["fixed", "tetris"], "num_speculative_tokens": [2], "extra": [0, 1]}])
    runs = expand(s, FakeConfig)
    combos = [(r["policy"], r["num_speculative_tokens"], r["extra"]) for r in runs[::2]]
    assert combos == [("fixed", 1, 0), ("fixed", 2, 0), ("fixed", 2, 1), ("tetris", 2, 0),
                      ("tetris", 2, 1)]


def test_run_key_depends_on_every_field_and_the_version_only():
    a = expand(spec(), FakeConfig)[0]
    assert run_key(a) == run_key(dict(reversed(list(a.items()))))
    assert run_key(a) != run_key({**a, "seed": 7})
    assert run_key(a) != run_key(a, version="999")


# --- running, storage, resume -------------------------------------------------------------


def test_sweep_writes_points_and_tidy_table(tmp_path):
    outcome = run_sweep(spec(), tmp_path, runner=fake_runner, config_cls=FakeConfig, progress=False)
    assert (outcome.total, outcome.computed, outcome.reused) == (12, 12, 0)
    table = pd.read_parquet(tmp_path / "results.parquet")
    assert len(table) == 12
    assert list(table.columns[:7]) == ["policy", "num_speculative_tokens", "extra", "budget",
                                       "rate", "verify", "seed"]
    # a summary key that clashes with a config field gets a suffix; run/setting keys added
    assert {"throughput", "e2e_mean", "requests", "mal", "run", "setting"} <= set(table.columns)
    assert table.groupby("setting").seed.nunique().eq(2).all()
    csv = pd.read_csv(tmp_path / "results.csv")
    assert np.allclose(csv.throughput, table.throughput)
    record = json.loads((tmp_path / "points" / f"{table.run[0]}.json").read_text())
    assert record["config"]["policy"] == "fixed" and record["summary"]["throughput"] == 110.0
    requests = read_requests(tmp_path, table.run[0])
    assert list(requests.columns) == ["request_id", "e2e", "ttft"]  # unknown columns dropped
    assert not list((tmp_path / "points").glob(".*"))  # no temporary files left


def test_interrupted_serial_sweep_resumes_with_only_missing_runs(tmp_path, monkeypatch):
    with pytest.raises(KeyboardInterrupt):
        run_sweep(spec(), tmp_path, runner=StopAfter(5), config_cls=FakeConfig, progress=False)
    assert len(list((tmp_path / "points").glob("*.json"))) == 5
    marks = tmp_path / "marks"
    marks.mkdir()
    monkeypatch.setenv("SWEEP_TEST_MARKS", str(marks))
    outcome = run_sweep(spec(), tmp_path, runner=counting_runner, config_cls=FakeConfig,
                        progress=False)
    assert (outcome.computed, outcome.reused) == (7, 5)
    assert len(list(marks.iterdir())) == 7
    # a third run computes nothing
    again = run_sweep(
        spec(), tmp_path, runner=counting_runner, config_cls=FakeConfig, progress=False
    )
    assert again.computed == 0 and len(list(marks.iterdir())) == 7
    fresh = run_sweep(spec(), tmp_path / "fresh", runner=fake_runner, config_cls=FakeConfig,
                      progress=False)
    pd.testing.assert_frame_equal(again.table, fresh.table)


def test_crash_in_process_pool_keeps_finished_runs_and_rerun_fills_the_rest(tmp_path, monkeypatch):
    with pytest.raises(RuntimeError, match="simulated crash"):
        run_sweep(spec(), tmp_path, runner=failing_runner, workers=2, config_cls=FakeConfig,
                  progress=False)
    stored = {p.stem for p in (tmp_path / "points").glob("*.json")}
    assert len(stored) < 12
    marks = tmp_path / "marks"
    marks.mkdir()
    monkeypatch.setenv("SWEEP_TEST_MARKS", str(marks))
    outcome = run_sweep(spec(), tmp_path, runner=counting_runner, workers=2, config_cls=FakeConfig,
                        progress=False)
    ran = {m.name.split("-")[0] for m in marks.iterdir()}
    assert outcome.computed == len(ran) == 12 - len(stored)
    assert ran.isdisjoint(stored)


def test_corrupt_point_file_is_recomputed(tmp_path):
    first = run_sweep(spec(), tmp_path, runner=fake_runner, config_cls=FakeConfig, progress=False)
    (tmp_path / "points" / f"{first.table.run[3]}.json").write_text("{trunc")
    again = run_sweep(spec(), tmp_path, runner=fake_runner, config_cls=FakeConfig, progress=False)
    assert again.computed == 1
    pd.testing.assert_frame_equal(first.table, again.table)


def test_collect_results_names_a_missing_run(tmp_path):
    run_sweep(spec(), tmp_path, runner=fake_runner, config_cls=FakeConfig, progress=False)
    victim = next((tmp_path / "points").glob("*.json"))
    victim.unlink()
    with pytest.raises(SpecbatchError, match=f"run {victim.stem} has no stored result"):
        collect_results(tmp_path)


def test_process_pool_and_dask_local_cluster_give_identical_tables(tmp_path):
    distributed = pytest.importorskip("distributed")
    serial = run_sweep(spec(), tmp_path / "serial", runner=fake_runner, config_cls=FakeConfig,
                       progress=False)
    pool = run_sweep(spec(), tmp_path / "pool", runner=fake_runner, workers=2,
                     config_cls=FakeConfig, progress=False)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster) as client:
        dask = run_sweep(spec(), tmp_path / "dask", runner=fake_runner, client=client,
                         config_cls=FakeConfig, progress=False)
    pd.testing.assert_frame_equal(serial.table, pool.table)
    pd.testing.assert_frame_equal(serial.table, dask.table)
    for name in ("pool", "dask"):
        on_disk = pd.read_parquet(tmp_path / name / "results.parquet")
        pd.testing.assert_frame_equal(on_disk, serial.table)


def test_workers_below_one_is_a_user_error(tmp_path):
    with pytest.raises(SpecbatchError, match="--workers"):
        run_sweep(spec(), tmp_path, runner=fake_runner, workers=0, config_cls=FakeConfig)


# --- against the real simulator config -----------------------------------------------------


def test_specs_are_validated_against_simconfig_fields():
    with pytest.raises(SpecbatchError,
                       match="field 'num_speculative_tokenz': unknown config field"):
        parse_spec({"axes": {"num_speculative_tokenz": [1]}}, "x.toml", config.SimConfig)
    s = parse_spec({"axes": {"num_speculative_tokens": [1, 2]}}, "x.toml", config.SimConfig)
    assert len(expand(s, config.SimConfig)) == 2


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "specbatch", *args], capture_output=True, text=True
    )


@pytest.mark.parametrize("body, field", [
    ("[axes]\nnum_speculative_tokens = []\n", "num_speculative_tokens"),
    ("[axes]\nnot_a_field = [1]\n", "not_a_field"),
    ("[base]\nmax_num_seqs = \"many\"\n", "max_num_seqs"),
])
def test_sweep_cli_bad_spec_exits_2_with_one_line(tmp_path, body, field):
    path = tmp_path / "bad.toml"
    path.write_text(body)
    result = _cli("sweep", str(path), "--out", str(tmp_path / "out"))
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "bad.toml" in lines[0] and field in lines[0]
    assert not (tmp_path / "out").exists()


def test_preflight_rejects_a_draft_deeper_than_the_trace_before_running(tmp_path):
    deep = parse_spec({"base": {"trace": "synth", "policy": "tetris"},
                       "axes": {"num_speculative_tokens": [6], "extra": [3]}}, "deep.toml",
                      config.SimConfig)
    with pytest.raises(SpecbatchError, match=r"spec deep\.toml: field 'num_speculative_tokens'.*K "
                                             r"= 8"):
        run_sweep(deep, tmp_path / "out", progress=False)
    missing = parse_spec({"base": {"trace": str(tmp_path / "nope")}}, "m.toml", config.SimConfig)
    with pytest.raises(SpecbatchError, match=r"spec m\.toml: field 'trace'"):
        run_sweep(missing, tmp_path / "out2", progress=False)
    assert not list((tmp_path / "out").glob("points/*.json"))


def test_trace_identity_changes_when_the_trace_is_recaptured(tmp_path):
    from specbatch.traces.format.files import write_trace

    path = tmp_path / "trace"
    write_trace(synth.synth_trace(synth.SynthConfig(requests=3, output_mean=8.0)), path)
    first, depth = trace_fingerprint(str(path))
    assert depth == 8 and trace_fingerprint(str(path))[0] == first
    meta = path / "meta.json"
    meta.write_text(meta.read_text().replace("{", '{"recaptured": true, ', 1))
    assert trace_fingerprint(str(path))[0] != first
    config = {"trace": str(path), "seed": 0}
    assert run_key(config, trace_id=first) != run_key(config, trace_id="other")


def test_bundled_specs_are_valid_and_cover_the_replications():
    from specbatch.analysis.specs import SPECS_DIR, spec_path

    names = sorted(p.stem for p in SPECS_DIR.glob("*.toml"))
    assert {"tetris", "block_gamma", "load"} <= set(names)
    runs = {name: expand(load_spec(spec_path(name), config.SimConfig), config.SimConfig)
            for name in names}
    tetris = load_spec(spec_path("tetris"), config.SimConfig)
    assert tetris.report["replicate"] == "tetris"
    assert {r["policy"] for r in runs["tetris"]} == {"ar", "fixed", "dsd", "tetris"}
    assert {r["num_speculative_tokens"] for r in runs["tetris"] if r["policy"] == "fixed"} == set(
        range(1, 7))
    block = runs["block_gamma"]
    assert {r["verify"] for r in block} == {"token", "block"}
    assert max(r["num_speculative_tokens"] for r in block) == 8


def test_overrides_set_a_field_everywhere_and_drop_its_axis(tmp_path):
    path = tmp_path / "s.toml"
    path.write_text('seeds = [0]\n[base]\nrate = 1.0\n[axes]\npolicy = ["fixed", "tetris"]\n'
                    'num_speculative_tokens = [1, 2, 3]\n')
    overrides = dict(map(parse_override, ["num_speculative_tokens=2", "verify=block"]))
    assert overrides == {"num_speculative_tokens": 2, "verify": "block"}
    s = load_spec(path, FakeConfig, overrides)
    runs = expand(s, FakeConfig)
    assert [(r["policy"], r["num_speculative_tokens"], r["verify"]) for r in runs] == [
        ("fixed", 2, "block"), ("tetris", 2, "block")]
    with pytest.raises(SpecbatchError, match="expected FIELD=VALUE"):
        parse_override("verify")
    with pytest.raises(SpecbatchError, match="field 'nope': unknown config field"):
        load_spec(path, FakeConfig, {"nope": 1})


def test_sweep_cli_runs_real_simulations_and_a_rerun_reuses_them(tmp_path):
    path = tmp_path / "tiny.toml"
    path.write_text('seeds = [0, 1]\n[base]\ntrace = "synth"\nrequests = 8\nmax_num_seqs = 4\n'
                    '[axes]\npolicy = ["fixed", "tetris"]\nk = [2]\ne = [1]\n')
    first = _cli("sweep", str(path), "--out", str(tmp_path / "out"), "--workers", "2", "--json")
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout)["computed"] == 4
    table = pd.read_parquet(tmp_path / "out" / "results.parquet")
    assert table.num_speculative_tokens.eq(2).all() and table.extra.eq(1).all()  # k, e aliases
    assert (table.throughput > 0).all() and table.requests_result.eq(8).all()
    again = _cli("sweep", str(path), "--out", str(tmp_path / "out"), "--json")
    assert json.loads(again.stdout)["computed"] == 0
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "out" / "results.parquet"), table)


@pytest.mark.parametrize("spelling, axis", [("k", "num_speculative_tokens"),
                                            ("num_speculative_tokens", "k"),
                                            ("k", "k"),
                                            ("num_speculative_tokens", "num_speculative_tokens")])
def test_an_override_replaces_the_axis_whichever_spelling_either_side_uses(tmp_path, spelling,
                                                                           axis):
    path = tmp_path / "s.toml"
    path.write_text(f'seeds = [0]\n[base]\ntrace = "synth"\n{axis} = 1\n[[axes]]\n'
                    f'policy = ["fixed"]\n{axis} = [1, 2]\n[[axes]]\npolicy = ["tetris"]\n'
                    f'{axis} = [1, 3]\ne = [1, 2]\n')
    runs = expand(load_spec(path, config.SimConfig, {spelling: 4, "e": 3}), config.SimConfig)
    assert sorted((r["policy"], r["num_speculative_tokens"], r["extra"]) for r in runs) == [
        ("fixed", 4, 3), ("tetris", 4, 3)]
    full = expand(load_spec(path, config.SimConfig, {"num_speculative_tokens": 4, "extra": 3}),
                  config.SimConfig)
    assert runs == full
    assert set(config.ALIASES) == {"k", "e", "n"}  # every alias the config accepts is covered
    n_runs = expand(load_spec(path, config.SimConfig, {"n": 7}), config.SimConfig)
    assert {r["requests"] for r in n_runs} == {7}


def test_a_field_spelled_twice_in_one_table_is_a_one_line_error():
    with pytest.raises(SpecbatchError, match=r"\[axes\] field 'num_speculative_tokens': given "
                                             r"twice \(as 'k' and 'num_speculative_tokens'\)"):
        parse_spec({"axes": {"k": [1], "num_speculative_tokens": [2]}}, "x.toml", config.SimConfig)
    with pytest.raises(SpecbatchError, match=r"\[base\] field 'extra': given twice"):
        parse_spec({"base": {"extra": 1, "e": 2}}, "x.toml", config.SimConfig)


@pytest.mark.parametrize("override", ["e=5", "extra=5", "k=7", "num_speculative_tokens=7"])
def test_sweep_cli_override_past_the_traces_depth_fails_preflight_before_any_run(tmp_path,
                                                                                override):
    path = tmp_path / "deep.toml"
    path.write_text('seeds = [0]\n[base]\ntrace = "synth"\nrequests = 4\nmax_num_seqs = 4\n'
                    '[[axes]]\npolicy = ["fixed"]\nnum_speculative_tokens = [1, 2]\n'
                    '[[axes]]\npolicy = ["tetris"]\nnum_speculative_tokens = [3, 6]\n'
                    'extra = [1, 2]\n')
    result = _cli("sweep", str(path), "--out", str(tmp_path / "out"), "--set", override,
                  "--no-progress")
    assert result.returncode == 2, result.stdout
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "deep.toml" in lines[0] and "field 'num_speculative_tokens'" in lines[0]
    assert "K = 8" in lines[0] and "policy tetris" in lines[0]
    assert not list((tmp_path / "out").glob("points/*.json"))


def test_an_edited_workload_file_gets_new_run_keys(tmp_path):
    from specbatch.analysis.sweep.runner import input_identity

    path = tmp_path / "w.csv"
    path.write_text("prompt_len,output_len\n10,20\n")
    first = input_identity({"trace": "t", "workload": str(path)}, {"t": "abc"})
    assert first.startswith("abc+workload:")
    assert input_identity({"trace": "t", "workload": str(path)}, {"t": "abc"}) == first
    path.write_text("prompt_len,output_len\n10,21\n")
    assert input_identity({"trace": "t", "workload": str(path)}, {"t": "abc"}) != first
    assert input_identity({"trace": "t", "workload": None}, {"t": "abc"}) == "abc"


def test_every_input_file_a_run_names_is_hashed_by_its_bytes(tmp_path, monkeypatch):
    """Run keys hash the contents of the config.json target/draft, the profiled cost's profile
    and a user policy's module, not their paths: a file edited in place gets new keys."""
    from specbatch.analysis.sweep.runner import input_files, input_identity

    files = {name: tmp_path / name for name in ("t.json", "d.json", "p.csv", "w.csv")}
    for path in files.values():
        path.write_text("v1")
    (tmp_path / "mypol.py").write_text("from specbatch.simulator.policies.registry import Policy\n"
                                       "class P(Policy):\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    config = {"trace": "t", "workload": str(files["w.csv"]), "target": str(files["t.json"]),
              "draft": str(files["d.json"]), "cost": "profiled", "profile": str(files["p.csv"]),
              "policy": "mypol:P"}
    try:
        assert [field for field, _ in input_files(config)] == [
            "workload", "target", "draft", "profile", "policy"]
        first = input_identity(config, {"t": "abc"})
        for path in (*files.values(), tmp_path / "mypol.py"):
            before = path.read_bytes()
            path.write_bytes(before + b"\n# edited")
            assert input_identity(config, {"t": "abc"}) != first, path.name
            path.write_bytes(before)
            assert input_identity(config, {"t": "abc"}) == first
    finally:
        sys.modules.pop("mypol", None)
    roofline = {**config, "cost": "roofline", "workload": None, "target": "vicuna-33b",
                "draft": "vicuna-68m", "policy": "fixed"}
    assert input_identity(roofline, {"t": "abc"}) == "abc"  # no file: the key it always had


def test_a_config_json_target_edited_in_place_is_recomputed(tmp_path):
    target = tmp_path / "model" / "config.json"
    target.parent.mkdir()
    shape = {"architectures": ["LlamaForCausalLM"], "hidden_size": 2048,
             "intermediate_size": 8192, "num_attention_heads": 32, "num_hidden_layers": 16,
             "num_key_value_heads": 8, "vocab_size": 128256, "torch_dtype": "bfloat16"}
    target.write_text(json.dumps(shape))
    spec = tmp_path / "s.toml"
    spec.write_text(f'[base]\ntrace = "synth"\nrequests = 4\ntarget = "{target.parent}"\n'
                    '[axes]\nnum_speculative_tokens = [1]\n')
    out = tmp_path / "out"
    first = run_sweep(load_spec(spec), out, progress=False)
    assert (first.computed, first.reused) == (1, 0)
    again = run_sweep(load_spec(spec), out, progress=False)
    assert (again.computed, again.reused) == (0, 1)
    target.write_text(json.dumps({**shape, "num_hidden_layers": 32}))
    edited = run_sweep(load_spec(spec), out, progress=False)
    assert (edited.computed, edited.reused) == (1, 0)
    assert edited.table["makespan"].iloc[0] > first.table["makespan"].iloc[0]


@pytest.mark.parametrize("axes, needle", [
    ({}, "field 'axes': expected at least one axis (field = [values, ...]), got an empty table"),
    ([{"policy": ["fixed"]}, {}], "[[axes]] table 2: expected at least one axis"),
])
def test_empty_axes_are_refused_not_run_as_the_base(axes, needle):
    """An empty [axes] table (or [[axes]] entry) used to run [base] silently."""
    with pytest.raises(SpecbatchError, match=re.escape(needle)):
        parse_spec({"base": {"trace": "synth"}, "axes": axes}, "e.toml", config.SimConfig)
    only_base = parse_spec({"base": {"trace": "synth"}, "seeds": [0, 1]}, "b.toml",
                           config.SimConfig)
    assert len(expand(only_base)) == 2  # no [axes] at all: [base] once per seed, as documented


def test_an_async_scheduling_axis_is_one_text_column_and_its_resolution_another(tmp_path):
    """async_scheduling holds "auto", True or False (specbatch.fields.AutoBool): the tidy
    table spells it as written (auto / true / false, one string column Parquet can store);
    the run's resolution (simulator.run's summary) comes as async_scheduling_result."""
    s = parse_spec({"name": "a", "seeds": [0], "base": {"trace": "synth", "requests": 8},
                    "axes": {"policy": ["fixed"], "async_scheduling": [True, False, "auto"]}},
                   "a.toml", config.SimConfig)
    outcome = run_sweep(s, tmp_path, progress=False)
    table = pd.read_parquet(tmp_path / "results.parquet")
    assert table["async_scheduling"].tolist() == ["true", "false", "auto"]
    assert [v.split(" (")[0] for v in table["async_scheduling_result"]] == [
        "true -> on", "false -> off", "auto -> on"]
    assert table["throughput"].iloc[0] == table["throughput"].iloc[2]  # the same resolution
    assert len(outcome.table) == 3
