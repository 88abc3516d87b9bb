"""simulate() specification: summary contents, determinism, speedup against ar."""

from __future__ import annotations

import json

import numpy as np
import pytest

from specbatch.simulator.config.sim_config import load_config, make_config
from specbatch.simulator.config.toml_writer import to_toml
from specbatch.simulator.run import simulate
from tests.simulator.helpers import LinearCost

# memory-bound flavour: a pass costs mostly a fixed time, so verifying k + 1 tokens is cheap
COST = LinearCost(fixed=0.25, per_token=2**-8, draft_fixed=2**-5, draft_per_token=2**-10,
                  per_kv=2**-16, overhead=2**-6)
KEYS = ("throughput", "e2e_mean", "e2e_p50", "e2e_p99", "ttft_mean", "tpot_mean", "vsr", "mal",
        "draft_efficiency", "target_efficiency", "goodput", "tokens", "requests", "makespan")


def test_same_config_and_seed_give_byte_identical_files(tmp_path, synth_trace_natural):
    config = load_config(None, trace="synth", policy="tetris", extra=1, verify="block",
                         requests=40, arrival="poisson", rate=4.0, replicas=2,
                         router="least_outstanding", slo=30.0, seed=5)
    names = ("requests.parquet", "steps.parquet", "summary.json", "config.toml")
    a = simulate(config, synth_trace_natural, cost_model=COST).write(tmp_path / "a")
    b = simulate(config, synth_trace_natural, cost_model=COST).write(tmp_path / "b")
    for name in names:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
    c = simulate(config.replace(seed=6), synth_trace_natural, cost_model=COST).write(tmp_path / "c")
    assert (a / "requests.parquet").read_bytes() != (c / "requests.parquet").read_bytes()


def test_summary_definitions(synth_trace_natural):
    result = simulate(load_config(None, trace="synth", policy="fixed", requests=30, slo=10.0,
                                  speedup=True), synth_trace_natural, cost_model=COST)
    s, req = result.summary, result.requests
    assert set(KEYS) <= set(s)
    e2e = req["finish"] - req["arrival"]
    assert np.isclose(
        s["throughput"], req["tokens"].sum() / (req["finish"].max() - req["arrival"].min())
    )
    assert np.isclose(s["e2e_mean"], e2e.mean()) and np.isclose(
        s["e2e_p99"], np.percentile(e2e, 99)
    )
    assert np.isclose(s["vsr"], req["accepted"].sum() / req["verified"].sum())
    assert np.isclose(s["mal"], (req["accepted"].sum() + req["steps"].sum()) / req["steps"].sum())
    assert np.isclose(s["goodput"], (e2e <= 10.0).sum() / s["makespan"])
    assert s["speedup_vs_ar"] > 1.0  # α ≈ 0.6 on this trace and drafting is cheap here
    json.dumps(s)  # plain JSON-able values


def test_ar_has_unit_mal_and_no_drafting(synth_trace_natural):
    s = simulate(load_config(None, trace="synth", policy="ar", requests=20), synth_trace_natural,
                 cost_model=COST).summary
    assert s["mal"] == 1.0 and s["drafted"] == 0 and s["draft_time"] == 0.0


def test_tetris_with_no_budget_does_the_work_of_autoregressive_decoding(synth_trace_natural):
    cost = LinearCost()
    ar = simulate(load_config(None, trace="synth", policy="ar", requests=16),
                  synth_trace_natural, cost_model=cost)
    tetris = simulate(load_config(None, trace="synth", policy="tetris", k=3, extra=1, budget=0,
                                  requests=16), synth_trace_natural, cost_model=cost)
    assert int(tetris.steps["drafted"].sum()) == 0 and int(tetris.steps["verified"].sum()) == 0
    assert tetris.summary["makespan"] == ar.summary["makespan"]
    assert tetris.summary["tokens"] == ar.summary["tokens"]


def _partial_copy(tmp_path, trace):
    from specbatch.traces.format.files import write_trace

    path = tmp_path / "partial"
    write_trace(trace, path)
    meta = json.loads((path / "meta.json").read_text())
    meta["completion"] = {"status": "partial", "done": trace.n_requests, "total": 99}
    (path / "meta.json").write_text(json.dumps(meta))
    return path


def test_a_partial_capture_is_refused_unless_allowed(tmp_path, synth_trace_natural):
    import pytest

    from specbatch.errors import SpecbatchError

    config = load_config(None, trace=str(_partial_copy(tmp_path, synth_trace_natural)),
                         policy="ar", requests=4)
    with pytest.raises(SpecbatchError, match="partial capture .*--allow-partial"):
        simulate(config, cost_model=LinearCost())
    assert simulate(config, cost_model=LinearCost(), allow_partial=True).summary["requests"] == 4


def test_resampling_a_small_trace_is_reported(synth_trace_natural):
    n = synth_trace_natural.n_requests
    many = simulate(load_config(None, trace="synth", policy="ar", requests=n + 5),
                    synth_trace_natural, cost_model=LinearCost())
    assert len(many.notes) == 1 and f"has {n} requests" in many.notes[0]
    few = simulate(load_config(None, trace="synth", policy="ar", requests=2),
                   synth_trace_natural, cost_model=LinearCost())
    assert few.notes == ()



def test_progress_counts_every_finished_request_once_and_changes_nothing(
        synth_trace_natural, monkeypatch, capsys):
    import contextlib

    import specbatch.simulator.engine_run as engine_run

    config = load_config(None, trace="synth", policy="tetris", extra=1, requests=40,
                         replicas=2, arrival="poisson", rate=8.0, speedup=True)
    quiet = simulate(config, synth_trace_natural, cost_model=COST, progress=True)
    assert capsys.readouterr().err == ""  # below PROGRESS_MIN_REQUESTS: no bar
    updates: dict[str, list[int]] = {}

    class Bar:
        def __init__(self, label):
            self.label = label

        def update(self, n):
            updates.setdefault(self.label, []).append(n)

    @contextlib.contextmanager
    def fake_bar(label, total):
        assert total == 40
        yield None if label is None else Bar(label)

    monkeypatch.setattr(engine_run, "PROGRESS_MIN_REQUESTS", 1)
    monkeypatch.setattr(engine_run, "finished_bar", fake_bar)
    loud = simulate(config, synth_trace_natural, cost_model=COST, progress=True)
    assert set(updates) == {"simulate", "simulate ar (speedup)"}
    assert all(sum(n) == 40 and min(n) >= 1 for n in updates.values())
    assert quiet.requests.equals(loud.requests) and quiet.steps.equals(loud.steps)
    assert quiet.summary == loud.summary


def test_a_config_built_directly_is_checked_like_a_loaded_one(synth_trace_natural):
    import pytest

    from specbatch.errors import SpecbatchError
    from specbatch.simulator.config.sim_config import SimConfig

    for field, bad in (("max_num_seqs", 0), ("requests", -5), ("verify", "nope")):
        with pytest.raises(SpecbatchError, match=f"field {field}"):
            simulate(SimConfig(trace="synth", **{field: bad}), synth_trace_natural,
                     cost_model=COST)


def test_write_applies_the_result_folder_checks(tmp_path, synth_trace_natural):
    from specbatch.errors import SpecbatchError
    from specbatch.io import RESULT_MARKER
    from specbatch.traces.format.files import write_trace

    config = make_config({"policy": "fixed", "k": 2, "requests": 6})
    result = simulate(config, synth_trace_natural, cost_model=COST)
    trace = tmp_path / "trace"
    write_trace(synth_trace_natural, trace)
    before = {p.name: p.read_bytes() for p in trace.iterdir()}
    with pytest.raises(SpecbatchError, match=r"^out_dir .*trace: holds files that are not a "
                       "simulate result"):
        result.write(trace)
    assert {p.name: p.read_bytes() for p in trace.iterdir()} == before
    run = result.write(tmp_path / "run")
    assert (run / RESULT_MARKER).is_file()
    result.write(run)  # the same config again: replaced
    other = simulate(config.replace(seed=3), synth_trace_natural, cost_model=COST)
    with pytest.raises(SpecbatchError, match="holds a simulate result of another configuration"):
        other.write(run)
    other.write(run, force=True)
    assert (run / "config.toml").read_text() == to_toml(other.config)


def test_the_memory_estimate_reads_the_workloads_lengths_not_the_traces(tmp_path, monkeypatch,
                                                                        synth_trace_natural):
    """The estimate before the run used the trace's mean output; an imported workload's long
    outputs (steps, and their step-table rows, scale with them) are now counted."""
    from specbatch import limits
    from specbatch.errors import SpecbatchError

    path = tmp_path / "w.csv"
    path.write_text("prompt_len,output_len\n10,16000000\n10,20\n")
    config = make_config({"workload": str(path), "requests": 2, "max_num_seqs": 1})
    short = limits.simulation_bytes(2, synth_trace_natural.n_rows / 40, 1)
    monkeypatch.setattr(limits, "memory_limit", lambda: int(short * 100))
    with pytest.raises(SpecbatchError, match="^config: needs about .* GiB of memory"):
        simulate(config, synth_trace_natural, cost_model=COST)
