"""`specbatch simulate --workload`: imported request lengths and arrivals, end to end."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from specbatch.cli import main
from specbatch.simulator.workload.arrivals import EXAMPLE_WORKLOAD


def test_bundled_example_runs_end_to_end(tmp_path, capsys):
    out = tmp_path / "out"
    code = main(["simulate", "--workload", "example", "--arrival", "trace", "--requests", "60",
                 "--policy", "tetris", "--extra", "1", "--out", str(out), "--json"])
    captured = capsys.readouterr()
    assert code == 0
    summary = json.loads(captured.out)
    assert summary["requests"] == 60 and summary["tokens"] > 0
    assert "note: workload" in captured.err and "wrapped" in captured.err
    table = pd.read_csv(EXAMPLE_WORKLOAD).head(60)
    req = pd.read_parquet(out / "requests.parquet").sort_values("uid")
    assert req["prompt_len"].tolist() == table["prompt_len"].tolist()
    assert req["output_len"].tolist() == table["output_len"].tolist()
    assert req["arrival"].tolist() == pytest.approx((table["arrival"]).tolist())
    assert 'workload = "example"' in (out / "config.toml").read_text()


def test_workload_on_the_synth_trace_text_table(capsys):
    assert main(["simulate", "--trace", "synth", "--workload", "example", "--requests", "20"]) == 0
    assert "throughput" in capsys.readouterr().out


@pytest.mark.parametrize("text, name, field", [
    ("prompt_len,output_len\n5,-3\n", "w.csv", "output_len"),
    ("prompt_len\n5\n", "w.csv", "output_len"),
    ("prompt_len,output_len,arrival\n5,3,2.0\n5,3,1.0\n", "w.csv", "arrival"),
    ('{"prompt_len": 5, "output_len": 1.5}\n', "w.jsonl", "output_len"),
])
def test_bad_workload_file_exits_2_with_one_line(tmp_path, capsys, text, name, field):
    path = tmp_path / name
    path.write_text(text)
    code = main(["simulate", "--trace", "synth", "--workload", str(path)])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert f"workload {path}: field {field}" in err


def test_unknown_extension_exits_2(tmp_path, capsys):
    path = tmp_path / "w.txt"
    path.write_text("x")
    assert main(["simulate", "--trace", "synth", "--workload", str(path)]) == 2
    assert "expected a file ending in .csv" in capsys.readouterr().err


def test_no_workload_keeps_the_pre_workload_results(capsys):
    """Pinned from the run before the workload field existed (same command, same numbers;
    verification unpriced, as the engine then was)."""
    code = main(["simulate", "--trace", "synth", "--requests", "16", "--policy", "tetris",
                 "--extra", "1", "--arrival", "poisson", "--verify-cost", "none",
                 "--scheduler", "vllm-v0", "--host", "fixed",  # the flat 1 ms
                 "--client-ttft-s", "0", "--json"])  # the engine's stamps, as then
    summary = json.loads(capsys.readouterr().out)
    assert code == 0
    assert {k: summary[k] for k in ("tokens", "steps", "drafted", "verified", "accepted")} == {
        "tokens": 2461, "steps": 209, "drafted": 3380, "verified": 2535, "accepted": 1626}
    assert summary["makespan"] == pytest.approx(5.689719558725319, rel=1e-12)
    assert summary["e2e_p99"] == pytest.approx(3.879642315299681, rel=1e-12)


def test_help_documents_the_columns(capsys):
    with pytest.raises(SystemExit):
        main(["simulate", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for word in ("--workload", "prompt_len", "output_len", "timestamp", "category", ".jsonl"):
        assert word in text
