"""Bad numbers, devices, paths, input files and oversized jobs are one-line errors (exit 2).

Each case is a class of input a user or a fuzzer tried: integers beyond int64, negative
seeds, zero or negative counts, devices torch does not run on, unreadable or absurd input
files, jobs that cannot finish on a workstation. None may print a traceback.
"""

from __future__ import annotations

import errno
import json
import socket
import threading
import time

import pytest

from specbatch.cli import main
from specbatch.limits import ALLOW_ENV
from tests.cli.oneline import assert_one_line_error

BIG = str(2**70)


def run(capsys, argv):
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse refuses a malformed flag value
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("argv, needle", [
    (["capture", "--draft", "d", "--target", "t", "--prompts", "default:4", "--out", "o",
      "--limit", "-1"], "--limit: expected an integer >= 1, got -1"),
    (["capture", "--draft", "d", "--target", "t", "--prompts", "default:4", "--out", "o",
      "--max-prompt-tokens", "0"], "--max-prompt-tokens: expected an integer >= 1"),
    (["capture", "--draft", "d", "--target", "t", "--prompts", "default:4", "--out", "o",
      "--chunk-requests", "0"], "--chunk-requests: expected an integer >= 1"),
    (["capture", "--draft", "d", "--target", "t", "--prompts", "default:4", "--out", "o",
      "--seed", "-3"], "--seed: expected an integer >= 0, got -3"),
    (["capture", "--draft", "d", "--target", "t", "--prompts", "default:4", "--out", "o",
      "--device", "tpu"], "--device: expected cpu, cuda, cuda:N or mps, got 'tpu'"),
    (["capture", "--draft", "d", "--target", "t", "--prompts", "default:4", "--out", "o",
      "--depth", "100000"], f"--depth: 100000 exceeds the limit of 256; set {ALLOW_ENV}=1"),
    (["zoo", "train", "--out", "z", "--threads", "0"], "--threads: expected an integer >= 1"),
    (["zoo", "train", "--out", "z", "--device", "tpu"], "--device: expected cpu"),
    (["zoo", "train", "--out", "z", "--seed", BIG], "at most 2^63 - 1 (int64)"),
    (["profile", "--model", "vicuna-68m", "--out", "p.csv", "--layers", "0"],
     "--layers: expected an integer >= 1, got 0"),
    (["profile", "--model", "vicuna-68m", "--out", "p.csv", "--device", "tpu"], "--device"),
    (["profile", "--model", "vicuna-68m", "--out", "p.csv", "--batch", "1,x"],
     "--batch: expected an integer >= 1, got 'x'"),
    (["profile", "--model", "vicuna-68m", "--out", "p.csv", "--batch", "100000",
      "--kv", "100000"], "1e10 tokens in one cell exceeds the limit"),
    (["prove", "--seed", BIG], "--seed: expected an integer >= 0 of at most 2^63 - 1"),
    (["prove", "--seed", "-1"], "--seed: expected an integer >= 0, got -1"),
    (["prove", "--instances", "1000000000"], "--instances: 1000000000 exceeds the limit"),
    (["trace", "synth", "--out", "s", "--seed", "-1"], "--seed: expected an integer >= 0"),
    (["trace", "synth", "--out", "s", "--requests", "1000000000"], "GiB of memory"),
    (["cost", "show", "--kv", str(10**21)], "--kv: expected an integer >= 0 of at most 2^63"),
    (["cost", "show", "--kv", "1e21"], "--kv: expected an integer >= 0, got '1e21'"),
    (["cost", "show", "--batch", str(10**18)], "exceeds the limit of 65536"),
    (["sweep", "spec.toml", "--out", "s", "--workers", "0"], "--workers: expected"),
])
def test_bad_numbers_and_devices_are_one_line_errors(argv, needle, capsys, tmp_path,
                                                     monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, _, err = run(capsys, argv)
    assert_one_line_error(code, err, needle)


def test_the_allow_large_variable_lifts_a_cap(capsys, monkeypatch):
    from specbatch.cli.common import capped_int

    monkeypatch.setenv(ALLOW_ENV, "1")
    assert capped_int(10)("11") == 11


def test_a_name_too_long_for_the_filesystem_is_one_line(capsys, tmp_path):
    code, _, err = run(capsys, ["trace", "synth", "--out", str(tmp_path / ("a" * 300)),
                                "--requests", "2"])
    assert_one_line_error(code, err, "the directory name is too long (at most 240 bytes)")


def test_out_of_memory_is_one_line(capsys, tmp_path, monkeypatch):
    import specbatch.cli.trace as trace_cli

    def exhausted(config):
        raise MemoryError

    monkeypatch.setattr(trace_cli, "synth_trace", exhausted)
    code, _, err = run(capsys, ["trace", "synth", "--out", str(tmp_path / "s")])
    assert_one_line_error(code, err, "out of memory")


def test_an_os_error_that_is_not_about_a_path_keeps_its_traceback(tmp_path, monkeypatch):
    """A bug must stay visible: only path, permission and disk errors become one line."""
    import specbatch.cli.trace as trace_cli

    def broken(config):
        raise OSError(errno.EIO, "input/output error")

    monkeypatch.setattr(trace_cli, "synth_trace", broken)
    with pytest.raises(OSError, match="input/output error"):
        main(["trace", "synth", "--out", str(tmp_path / "s")])


# ------------------------------------------------------------------ input files


def _inputs(tmp_path):
    binary = tmp_path / "binary.toml"
    binary.write_bytes(bytes(range(256)) * 8)
    folder = tmp_path / "folder.toml"
    folder.mkdir()
    deep_toml = tmp_path / "deep.toml"
    deep_toml.write_text("a = " + "[" * 3000 + "]" * 3000 + "\n")
    deep_json = tmp_path / "deep.json"
    deep_json.write_text("[" * 100_000 + "]" * 100_000)
    nested = tmp_path / "nested.json"
    nested.write_text("[" * 100 + "]" * 100)
    return {"binary": binary, "folder": folder, "deep_toml": deep_toml,
            "deep_json": deep_json, "nested": nested}


@pytest.mark.parametrize("kind, needle", [
    ("binary", "expected UTF-8 text, got binary data"),
    ("folder", "expected a regular file, got a directory"),
    ("deep_toml", "nested at most 64 levels"),
])
def test_a_bad_sweep_spec_file_is_one_line(kind, needle, capsys, tmp_path):
    path = _inputs(tmp_path)[kind]
    code, _, err = run(capsys, ["sweep", str(path), "--out", str(tmp_path / "out")])
    assert_one_line_error(code, err, needle)


@pytest.mark.parametrize("kind, needle", [
    ("binary", "expected UTF-8 text"),
    ("folder", "got a directory"),
    ("deep_json", "nested at most 64 levels"),
    ("nested", "nested at most 64 levels deep, got 100"),
])
def test_a_bad_pair_file_is_one_line(kind, needle, capsys, tmp_path):
    path = _inputs(tmp_path)[kind]
    code, _, err = run(capsys, ["optimum", "verify", "--pair", str(path), "--gamma", "1"])
    assert_one_line_error(code, err, needle)


@pytest.mark.parametrize("kind", ["binary", "folder"])
def test_a_bad_values_file_is_one_line(kind, capsys, tmp_path):
    path = _inputs(tmp_path)[kind]
    code, _, err = run(capsys, ["optimum", "allocate", "--values", str(path), "--budget", "1"])
    assert_one_line_error(code, err, str(path))


def test_a_fifo_spec_is_refused_without_blocking(capsys, tmp_path):
    import os

    fifo = tmp_path / "spec.toml"
    os.mkfifo(fifo)
    code, _, err = run(capsys, ["sweep", str(fifo), "--out", str(tmp_path / "out")])
    assert_one_line_error(code, err, "expected a regular file")


# ------------------------------------------------------------------ size caps


def test_a_billion_point_grid_is_refused_before_it_is_expanded(capsys, tmp_path):
    axes = "\n".join(f"{name} = {list(range(1, 33))}" for name in
                     ("max_num_seqs", "num_speculative_tokens", "requests", "extra",
                      "replicas", "tp"))
    spec = tmp_path / "huge.toml"
    spec.write_text(f'name = "huge"\n[base]\ntrace = "synth"\n[axes]\n{axes}\n')
    start = time.perf_counter()
    code, _, err = run(capsys, ["sweep", str(spec), "--out", str(tmp_path / "out")])
    assert_one_line_error(code, err, "1.07e9 runs (points x seeds) exceeds the limit of 100000")
    assert ALLOW_ENV in err and time.perf_counter() - start < 10
    assert not (tmp_path / "out").exists()


def test_a_million_seeds_are_refused(capsys, tmp_path):
    spec = tmp_path / "seeds.toml"
    spec.write_text('name = "seeds"\nseeds = [' + ",".join(map(str, range(1_000_000)))
                    + ']\n[base]\ntrace = "synth"\n')
    code, _, err = run(capsys, ["sweep", str(spec), "--out", str(tmp_path / "out")])
    assert_one_line_error(code, err, "1e6 runs")


def test_a_milp_over_a_large_values_file_is_refused(capsys, tmp_path):
    import numpy as np

    path = tmp_path / "values.npy"
    np.save(path, np.full((100_000, 8), 0.5))
    code, _, err = run(capsys, ["optimum", "allocate", "--values", str(path), "--budget", "4",
                                "--milp"])
    assert_one_line_error(code, err, "--milp: 800000 binary variables (N x K) exceeds the limit")


def test_a_dp_too_large_to_finish_is_refused(capsys, tmp_path):
    import numpy as np

    path = tmp_path / "values.npy"
    np.save(path, np.full((200_000, 16), 0.5))
    code, _, err = run(capsys, ["optimum", "allocate", "--values", str(path),
                                "--budget", "1000000"])
    assert_one_line_error(code, err, "GiB of memory")


# ------------------------------------------------------------------ --scheduler


class Listener:
    """A local TCP server on 127.0.0.1 that accepts and then stays silent or sends junk."""

    def __init__(self, reply: bytes | None):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(4)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.reply, self.stop, self.conns = reply, threading.Event(), []
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.conns.append(conn)
            if self.reply is not None:
                conn.sendall(self.reply)

    def close(self):
        self.stop.set()
        self.thread.join(timeout=5)
        for conn in self.conns:
            conn.close()
        self.sock.close()


@pytest.fixture
def spec(tmp_path):
    path = tmp_path / "spec.toml"
    path.write_text('name = "s"\n[base]\ntrace = "synth"\nrequests = 2\n')
    return path


@pytest.mark.parametrize("reply, needle", [
    (None, "no Dask handshake within 5 s"),
    (b"\xff" * 64, "not a Dask scheduler (its first frame announces 18446744073709551615"),
    (b"\x20" + b"\x00" * 7 + b"\x01" * 32, "not a Dask scheduler (its first message"),
])
def test_a_scheduler_that_is_not_dask_fails_within_seconds(reply, needle, spec, tmp_path,
                                                           capsys):
    pytest.importorskip("distributed")
    server = Listener(reply)
    try:
        start = time.perf_counter()
        code, _, err = run(capsys, ["sweep", str(spec), "--out", str(tmp_path / "out"),
                                    "--scheduler", f"tcp://127.0.0.1:{server.port}"])
        elapsed = time.perf_counter() - start
    finally:
        server.close()
    assert_one_line_error(code, err, needle)
    assert elapsed < 15


@pytest.mark.parametrize("address", ["not a url", "http://127.0.0.1:8786", "tcp://host",
                                     "tcp://:8786", "tcp://127.0.0.1:99999", "tls://h:1"])
def test_a_malformed_scheduler_address_is_one_line(address, spec, tmp_path, capsys):
    code, _, err = run(capsys, ["sweep", str(spec), "--out", str(tmp_path / "out"),
                                "--scheduler", address])
    assert_one_line_error(code, err, "expected 'local', tcp://HOST:PORT or HOST:PORT")


def test_a_closed_port_is_one_line(spec, tmp_path, capsys):
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nothing listens there now
    code, _, err = run(capsys, ["sweep", str(spec), "--out", str(tmp_path / "out"),
                                "--scheduler", f"127.0.0.1:{port}"])
    assert_one_line_error(code, err, "cannot connect")


def test_a_real_scheduler_passes_the_handshake_check():
    distributed = pytest.importorskip("distributed")
    import logging

    from specbatch.analysis.sweep.executors import check_scheduler

    with distributed.LocalCluster(n_workers=0, processes=False, host="127.0.0.1",
                                  protocol="tcp", dashboard_address=None,
                                  silence_logs=logging.ERROR) as cluster:
        host, port = check_scheduler(cluster.scheduler_address)
    assert host == "127.0.0.1" and port > 0


def test_json_mode_errors_keep_stdout_empty(capsys, tmp_path):
    code, out, err = run(capsys, ["prove", "--only", "nope", "--json"])
    assert_one_line_error(code, err, "--only")
    assert out == ""
    json.dumps(out)
