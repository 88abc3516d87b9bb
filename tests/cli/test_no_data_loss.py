"""Nothing already on disk is lost: ``simulate --out``, ``live --out`` and ``validate --out``
replace only a result of their own kind and config (``--force``: of any config), refuse anything
else naming what is there, and write the result folder whole, so a kill -9 at any moment leaves the
old complete result or the new complete one."""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import pandas as pd
import pytest

from specbatch.cli import main
from specbatch.io import RESULT_MARKER

SIM = ["simulate", "--trace", "synth", "--policy", "fixed", "--k", "2"]
SIM_FILES = {RESULT_MARKER, "config.toml", "requests.parquet", "steps.parquet", "summary.json"}


def snapshot(folder):
    """Every file under ``folder`` with its bytes."""
    return {p.relative_to(folder).as_posix(): p.read_bytes()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def one_line_error(capsys, code, needle):
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and err.startswith("specbatch: error: ")
    assert needle in err, err


def test_simulate_reruns_the_same_config_into_its_own_result(tmp_path, capsys):
    out = tmp_path / "run"
    assert main([*SIM, "--requests", "8", "--out", str(out)]) == 0
    first = snapshot(out)
    assert set(first) == SIM_FILES
    assert main([*SIM, "--requests", "8", "--out", str(out)]) == 0
    assert snapshot(out) == first  # same config + seed: bit-identical, replaced whole
    capsys.readouterr()


def test_simulate_refuses_another_config_unless_forced(tmp_path, capsys):
    out = tmp_path / "run"
    assert main([*SIM, "--requests", "8", "--out", str(out)]) == 0
    before = snapshot(out)
    capsys.readouterr()
    one_line_error(capsys, main([*SIM, "--requests", "9", "--out", str(out)]),
                   "holds a simulate result of another configuration (pass --force")
    assert snapshot(out) == before
    assert main([*SIM, "--requests", "9", "--force", "--out", str(out)]) == 0
    assert len(pd.read_parquet(out / "requests.parquet")) == 9


def test_simulate_never_overwrites_a_trace_even_with_force(tmp_path, capsys):
    from specbatch.traces.format.files import write_trace
    from specbatch.traces.synth import SynthConfig, synth_trace

    trace = tmp_path / "trace"
    write_trace(synth_trace(SynthConfig(requests=3, output_mean=8.0)), trace)
    before = snapshot(trace)
    for flags in ([], ["--force"]):
        one_line_error(capsys, main([*SIM, "--requests", "8", *flags, "--out", str(trace)]),
                       "holds files that are not a simulate result (meta.json, "
                       "positions-00000.parquet, requests.parquet)")
    assert snapshot(trace) == before
    (tmp_path / "file").write_text("x")
    one_line_error(capsys, main([*SIM, "--out", str(tmp_path / "file")]),
                   "exists and is not a directory")


def test_simulate_refuses_a_live_result(tmp_path, capsys):
    live = tmp_path / "live"
    live.mkdir()
    (live / RESULT_MARKER).write_text(json.dumps({"kind": "live", "identity": "x"}))
    (live / "steps.parquet").write_text("72 measured steps")
    one_line_error(capsys, main([*SIM, "--force", "--out", str(live)]),
                   "holds a specbatch live result, not a simulate result")
    assert (live / "steps.parquet").read_text() == "72 measured steps"


#: ``specbatch simulate`` whose writes are slow (each waits 0.1 s after printing "write"), so a
#: kill lands while the result folder is half written.
SLOW_SIMULATE = """
import pathlib, sys, time
import pandas as pd
from specbatch import io

def slowly(write):
    def wrapper(*args, **kwargs):
        print("write", flush=True)
        time.sleep(0.1)
        return write(*args, **kwargs)
    return wrapper

pd.DataFrame.to_parquet = slowly(pd.DataFrame.to_parquet)
pathlib.Path.write_text = slowly(pathlib.Path.write_text)
io.atomic_write = slowly(io.atomic_write)
from specbatch.cli import main
sys.exit(main(sys.argv[1:]))
"""


def check_complete(out, requests_options):
    """``out`` holds one whole simulate result of one of ``requests_options``: every file,
    each readable, all of the same run; returns that run's request count."""
    assert set(snapshot(out)) == SIM_FILES
    n = len(pd.read_parquet(out / "requests.parquet"))
    assert n in requests_options
    assert f"requests = {n}" in (out / "config.toml").read_text()
    assert json.loads((out / "summary.json").read_text())["requests"] == n
    assert len(pd.read_parquet(out / "steps.parquet")) > 0
    return n


def test_kill_9_while_simulate_replaces_a_result_leaves_the_old_one_whole(tmp_path, capsys):
    out = tmp_path / "run"
    assert main([*SIM, "--requests", "8", "--out", str(out)]) == 0
    proc = subprocess.Popen([sys.executable, "-c", SLOW_SIMULATE, *SIM, "--force",
                             "--requests", "9", "--out", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    for _ in range(3):  # of its 7 writes
        assert proc.stdout.readline() == "write\n"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert check_complete(out, [8]) == 8
    assert len(list(tmp_path.iterdir())) == 2  # the killed writer's hidden folder
    assert main([*SIM, "--force", "--requests", "10", "--out", str(out)]) == 0
    assert check_complete(out, [10]) == 10
    assert [p.name for p in tmp_path.iterdir()] == ["run"]  # ... cleaned by the next run
    capsys.readouterr()


torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

#: A seconds-long live run: one-layer random-weight shapes, random token prompts.
LIVE = ["live", "--draft", "vicuna-68m", "--target", "vicuna-68m", "--layers", "1",
        "--prompts", "random:2:4", "--max-new-tokens", "2", "--k", "1", "--warmup", "0",
        "--json"]


def test_live_replaces_only_its_own_result(tmp_path, capsys):
    out = tmp_path / "live"
    assert main([*LIVE, "--out", str(out)]) == 0
    assert (out / "live.json").exists() and (out / RESULT_MARKER).exists()
    config = (out / "config.toml").read_text()
    assert str((out / "trace").resolve()) in config and ".tmp-" not in config
    assert main([*LIVE, "--out", str(out)]) == 0  # the same flags again
    before = snapshot(out)
    capsys.readouterr()
    one_line_error(capsys, main([*LIVE, "--max-new-tokens", "3", "--out", str(out)]),
                   "holds a live result of another configuration (pass --force")
    assert snapshot(out) == before
    sim = tmp_path / "sim"
    assert main([*SIM, "--requests", "4", "--out", str(sim)]) == 0
    capsys.readouterr()
    one_line_error(capsys, main([*LIVE, "--force", "--out", str(sim)]),
                   "holds a specbatch simulate result, not a live result")
    one_line_error(capsys, main(["validate", str(out), "--in-sample", "--force", "--out",
                                 str(out)]),
                   "holds a specbatch live result, not a validate result")
    assert snapshot(out) == before
    assert main(["validate", str(out), "--in-sample", "--json", "--out", str(tmp_path / "v")]) == 0
    assert {"validate.json", "requests.parquet", RESULT_MARKER} <= {
        p.name for p in (tmp_path / "v").iterdir()}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["live", "sim", "v"]


def test_trace_synth_force_never_replaces_a_simulate_result_or_other_files(tmp_path, capsys):
    out = tmp_path / "run"
    assert main([*SIM, "--requests", "8", "--out", str(out)]) == 0
    before = snapshot(out)
    capsys.readouterr()
    synth = ["trace", "synth", "--requests", "2", "--force", "--out"]
    one_line_error(capsys, main([*synth, str(out)]),
                   "holds a specbatch simulate result, not a trace result")
    assert snapshot(out) == before
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "requests.parquet").write_text("my own table")
    (mine / "notes.txt").write_text("keep")
    one_line_error(capsys, main([*synth, str(mine)]),
                   "holds files that are not a trace result (notes.txt, requests.parquet)")
    assert snapshot(mine) == {"requests.parquet": b"my own table", "notes.txt": b"keep"}
    assert main([*synth, str(tmp_path / "t")]) == 0  # a trace is replaced with --force
    assert main([*synth, str(tmp_path / "t"), "--seed", "4"]) == 0
