"""A sweep directory belongs to one spec and one run at a time; its trace identity covers the
trace's bytes; damaged stored points are recomputed; pool workers die with the sweep."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from specbatch.analysis.sweep import points
from specbatch.analysis.sweep.points import spec_identity, trace_fingerprint
from specbatch.analysis.sweep.runner import run_sweep
from specbatch.analysis.sweep.spec import parse_spec
from specbatch.cli import main
from specbatch.errors import SpecbatchError
from specbatch.traces import synth
from tests.analysis.sweep.test_runner import SPEC, FakeConfig, fake_runner, spec


def snapshot(folder: Path) -> dict:
    return {p.relative_to(folder).as_posix(): p.read_bytes()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def test_another_spec_is_refused_naming_both_and_nothing_changes(tmp_path):
    run_sweep(spec(), tmp_path, runner=fake_runner, config_cls=FakeConfig, progress=False)
    before = snapshot(tmp_path)
    other = parse_spec({**SPEC, "name": "other", "seeds": [0]}, "other.toml", FakeConfig)
    with pytest.raises(SpecbatchError) as info:
        run_sweep(other, tmp_path, runner=fake_runner, config_cls=FakeConfig, progress=False)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"--out {tmp_path}: belongs to sweep 't' (spec spec.toml, id ")
    assert "not to sweep 'other' (spec other.toml, id " in message
    assert snapshot(tmp_path) == before


def test_the_same_spec_reruns_even_with_new_report_options_or_an_older_manifest(tmp_path):
    run_sweep(spec(), tmp_path, runner=fake_runner, config_cls=FakeConfig, progress=False)
    retitled = spec(report={"title": "new title"})
    assert run_sweep(retitled, tmp_path, runner=fake_runner, config_cls=FakeConfig,
                     progress=False).computed == 0
    manifest = json.loads((tmp_path / "sweep.json").read_text())
    assert manifest["spec_id"] == spec_identity(manifest)
    del manifest["spec_id"]  # as written before manifests recorded it
    (tmp_path / "sweep.json").write_text(json.dumps(manifest))
    assert run_sweep(spec(), tmp_path, runner=fake_runner, config_cls=FakeConfig,
                     progress=False).computed == 0


def test_a_directory_holding_other_files_is_refused(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(SpecbatchError, match=r"holds files that are not a sweep \(notes\.txt\)"):
        run_sweep(spec(), tmp_path, runner=fake_runner, config_cls=FakeConfig, progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == [".specbatch.lock", "notes.txt"]


def test_demo_refuses_another_sweeps_directory(tmp_path, capsys):
    run_sweep(spec(), tmp_path, runner=fake_runner, config_cls=FakeConfig, progress=False)
    before = snapshot(tmp_path)
    assert main(["demo", "--quick", "--trace", "tiny", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "belongs to sweep 't'" in err and "'demo-quick'" in err
    assert snapshot(tmp_path) == before


#: A sweep whose one run waits a minute: the directory stays locked meanwhile.
HOLD_SWEEP = """
import sys, time
from specbatch.analysis.sweep.spec import parse_spec
from specbatch.analysis.sweep.runner import run_sweep

def wait(config):
    print("running", flush=True)
    time.sleep(60)

run_sweep(parse_spec({"name": "held", "base": {"trace": "synth"}}, "held.toml"), sys.argv[1],
          runner=wait, progress=False)
"""


def test_a_second_sweep_on_a_running_directory_is_refused_in_one_line(tmp_path):
    held = subprocess.Popen([sys.executable, "-c", HOLD_SWEEP, str(tmp_path)],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert held.stdout.readline() == "running\n"
        same = parse_spec({"name": "held", "base": {"trace": "synth"}}, "held.toml")
        with pytest.raises(SpecbatchError, match=rf"^--out {tmp_path}: another sweep \(pid "
                           rf"{held.pid}\) is running on it; wait for it to finish"):
            run_sweep(same, tmp_path, runner=fake_runner, progress=False)
    finally:
        held.kill()
        held.wait()
    assert not (tmp_path / "results.parquet").exists()


#: A sweep on 2 pool workers whose runs write their pid to DIR/pids and wait a minute.
POOL_SWEEP = """
import os, sys, time
from pathlib import Path
from specbatch.analysis.sweep.spec import parse_spec
from specbatch.analysis.sweep.runner import run_sweep

def wait(config):
    (Path(sys.argv[1]) / "pids" / str(os.getpid())).touch()
    time.sleep(60)

spec = parse_spec({"name": "pool", "base": {"trace": "synth"}, "seeds": [0, 1, 2, 3]}, "p.toml")
run_sweep(spec, Path(sys.argv[1]) / "out", runner=wait, workers=2, progress=False)
"""


def alive(pid: int) -> bool:
    """Running (a zombie waiting to be reaped has exited)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads /proc")
def test_kill_9_of_a_sweep_takes_its_pool_workers_with_it(tmp_path):
    (tmp_path / "pids").mkdir()
    sweep = subprocess.Popen([sys.executable, "-c", POOL_SWEEP, str(tmp_path)])
    deadline = time.monotonic() + 60
    while len(list((tmp_path / "pids").iterdir())) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    workers = [int(p.name) for p in (tmp_path / "pids").iterdir()]
    assert len(workers) == 2 and all(alive(pid) for pid in workers)
    sweep.send_signal(signal.SIGKILL)
    sweep.wait()
    deadline = time.monotonic() + 5
    while any(alive(pid) for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.05)
    survivors = [pid for pid in workers if alive(pid)]
    for pid in survivors:  # leave nothing behind, even when failing
        os.kill(pid, signal.SIGKILL)
    assert survivors == []


def test_the_watchdog_ends_a_worker_whose_parent_is_gone():
    """The portable fallback of die_with_parent (used where prctl is unavailable)."""
    code = ("import os, time\n"
            "from specbatch.analysis.sweep.executors import die_with_parent\n"
            "die_with_parent(os.getppid() + 10**6, poll_s=0.05)  # a pid that does not exist\n"
            "time.sleep(10)\n")
    start = time.monotonic()
    result = subprocess.run([sys.executable, "-c", code], timeout=30)
    assert result.returncode == 1 and time.monotonic() - start < 8


@pytest.mark.parametrize("content", [b"\x00\xff\x89PNG binary", b"[]", b'{"key": 1}', b""])
def test_a_point_file_that_is_not_its_runs_record_is_recomputed(tmp_path, content):
    first = run_sweep(spec(), tmp_path, runner=fake_runner, config_cls=FakeConfig, progress=False)
    (tmp_path / "points" / f"{first.table.run[3]}.json").write_bytes(content)
    again = run_sweep(spec(), tmp_path, runner=fake_runner, config_cls=FakeConfig, progress=False)
    assert again.computed == 1
    pd.testing.assert_frame_equal(first.table, again.table)


def test_trace_identity_covers_the_bytes_of_every_file(tmp_path):
    path = tmp_path / "trace"
    from specbatch.traces.format.files import write_trace

    write_trace(synth.synth_trace(synth.SynthConfig(requests=3, output_mean=8.0)), path)
    first, _ = trace_fingerprint(str(path))
    positions = next(path.glob("positions-*.parquet"))
    data = bytearray(positions.read_bytes())
    data[len(data) // 2] ^= 0x01  # a same-size edit
    positions.write_bytes(bytes(data))
    assert trace_fingerprint(str(path))[0] != first
    (path / ".notes.tmp").write_text("a hidden file is not part of the trace")
    assert trace_fingerprint(str(path))[0] == trace_fingerprint(str(path))[0]


def test_file_digests_are_cached_by_size_and_mtime(tmp_path, monkeypatch):
    path = tmp_path / "f.bin"
    path.write_bytes(b"abc")
    digest = points.file_digest(path)
    monkeypatch.setattr("builtins.open", lambda *a, **k: pytest.fail("re-read a cached file"))
    assert points.file_digest(path) == digest
    monkeypatch.undo()
    path.write_bytes(b"abd")
    os.utime(path, ns=(1, 1))
    assert points.file_digest(path) != digest


def test_a_meta_json_that_is_not_a_regular_file_is_refused_without_opening_it(tmp_path):
    path = tmp_path / "trace"
    path.mkdir()
    os.mkfifo(path / "meta.json")  # reading a FIFO would block
    with pytest.raises(SpecbatchError, match=r"meta\.json: expected .*a regular file"):
        trace_fingerprint(str(path))
