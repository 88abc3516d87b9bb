"""``specbatch report`` on damaged inputs: a one-line error and exit 2, never a traceback,
and the report folder is replaced whole (an earlier report is kept until the new one is
complete)."""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pandas as pd
import pytest

from specbatch.analysis.report.sweep_report import build_report
from specbatch.analysis.sweep.runner import run_sweep
from specbatch.analysis.sweep.spec import parse_spec
from specbatch.cli import main

SPEC = {"name": "inputs", "seeds": [0, 1], "base": {"trace": "synth", "requests": 8},
        "axes": {"policy": ["fixed", "tetris"], "num_speculative_tokens": [1, 2]}}


def small_runner(config: dict):
    k, seed = config["num_speculative_tokens"], config["seed"]
    tput = 100.0 + 10 * k + seed + (5.0 if config["policy"] == "tetris" else 0.0)
    requests = pd.DataFrame({"uid": np.arange(4), "arrival": np.zeros(4),
                             "first_token": np.full(4, 0.1), "finish": np.full(4, 2.0 - k / 10)})
    return {"throughput": tput, "e2e_mean": 2.0 - k / 10, "e2e_p99": 3.0, "vsr": 0.5,
            "mal": 1.0 + k / 3, "requests": 4}, requests


@pytest.fixture(scope="module")
def sweep_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("inputs")
    run_sweep(parse_spec(SPEC, "inputs.toml"), out, runner=small_runner, progress=False)
    return out


@pytest.fixture
def copy(sweep_dir, tmp_path):
    return shutil.copytree(sweep_dir, tmp_path / "sweep")


def report_fails(capsys, folder, needle):
    assert main(["report", str(folder)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("specbatch: error: "), err
    assert needle in err, err


def parquet_of(frame: pd.DataFrame) -> bytes:
    import io

    buffer = io.BytesIO()
    frame.to_parquet(buffer)
    return buffer.getvalue()


@pytest.mark.parametrize("damage, needle", [
    (lambda data: b"\x00garbage" * 40, "expected a sweep results table (Parquet)"),
    (lambda data: data[: len(data) // 2], "expected a sweep results table (Parquet)"),
    (lambda data: b"", "expected a sweep results table (Parquet)"),
    (lambda data: parquet_of(pd.DataFrame({"a": [1], "b": [2]})), "missing column(s) run, "),
    (lambda data: parquet_of(pd.read_parquet(__import__("io").BytesIO(data)).iloc[:0]),
     "got no rows"),
    (lambda data: parquet_of(pd.read_parquet(__import__("io").BytesIO(data))
                             .assign(throughput="fast")), "column 'throughput': expected numbers"),
    # the columns a check of RESULT_COLUMNS let through, and the report then read (traceback)
    (lambda data: parquet_of(pd.read_parquet(__import__("io").BytesIO(data))[
        ["run", "setting", "seed", "policy", "verify", "num_speculative_tokens", "extra",
         "arrival", "rate", "throughput"]]),
     "missing column(s) trace, requests, max_num_seqs, cost, hardware, target, draft, tp, "
     "e2e_mean"),
    (lambda data: parquet_of(pd.read_parquet(__import__("io").BytesIO(data))
                             .assign(e2e_mean="slow")), "column 'e2e_mean': expected numbers"),
    (lambda data: parquet_of(pd.read_parquet(__import__("io").BytesIO(data))
                             .assign(run="0123456789abcdef0123")),
     "(8 runs), got 8 rows of which 1 are not its runs"),
    (lambda data: parquet_of(pd.read_parquet(__import__("io").BytesIO(data)).iloc[:5]),
     "(8 runs), got 5 rows"),
])
def test_a_damaged_results_table_is_a_one_line_error(copy, capsys, damage, needle):
    path = copy / "results.parquet"
    path.write_bytes(damage(path.read_bytes()))
    report_fails(capsys, copy, needle)
    assert not (copy / "report").exists()


def test_a_results_table_that_is_a_folder_is_a_one_line_error(copy, capsys):
    (copy / "results.parquet").unlink()
    (copy / "results.parquet").mkdir()
    report_fails(capsys, copy, "results.parquet: expected a sweep results table")


@pytest.mark.parametrize("manifest, needle", [
    ([], "expected a sweep manifest (a JSON object), got list"),
    ({"name": "x"}, "field 'runs': expected a list of run keys"),
    ({"name": "x", "runs": [], "report": []}, "field 'report': expected a table"),
    (b"\xff\xfe binary", "expected a sweep manifest (JSON)"),
])
def test_a_damaged_manifest_is_a_one_line_error(copy, capsys, manifest, needle):
    data = manifest if isinstance(manifest, bytes) else json.dumps(manifest).encode()
    (copy / "sweep.json").write_bytes(data)
    report_fails(capsys, copy, needle)


def test_a_report_path_that_is_a_file_is_refused_and_kept(copy, capsys):
    (copy / "report").write_text("my notes")
    report_fails(capsys, copy, "report: exists and is not a directory")
    assert (copy / "report").read_text() == "my notes"


def test_a_report_folder_holding_other_files_is_refused_and_kept(copy, capsys):
    (copy / "report").mkdir()
    (copy / "report" / "notes.txt").write_text("mine")
    report_fails(capsys, copy, "holds files that are not a report result (notes.txt)")
    assert (copy / "report" / "notes.txt").read_text() == "mine"


def test_a_damaged_per_request_table_is_a_one_line_error(copy, capsys):
    for path in (copy / "points").glob("*.requests.parquet"):
        path.write_bytes(b"not parquet")
    report_fails(capsys, copy, "expected a run's per-request table (Parquet)")


def test_a_rerun_replaces_the_report_and_an_older_unmarked_one(copy, capsys):
    first = build_report(copy)
    marker = copy / "report" / ".specbatch-result.json"
    marker.unlink()  # as written before report folders carried a marker
    (copy / "report" / "old_figure.png").write_bytes(b"old")
    assert build_report(copy) == first
    assert not (copy / "report" / "old_figure.png").exists() and marker.exists()
    assert [p.name for p in copy.iterdir() if p.name.startswith(".report")] == []


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_a_read_only_sweep_directory_is_a_one_line_error(copy, capsys):
    copy.chmod(0o555)
    try:
        report_fails(capsys, copy, "Permission denied")
    finally:
        copy.chmod(0o755)
