"""``--json`` stdout is exactly one JSON object, for every command that takes ``--json``.

Run in a subprocess: a library that writes at C level (HiGHS prints a banner when a solver
object is created) bypasses ``sys.stdout``, so only the real file descriptor shows it.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from specbatch.cli import build_parser
from tests.cli.oneline import run_cli

SPEC = """name = "tiny"
seeds = [0]
[base]
trace = "synth"
requests = 4
[axes]
num_speculative_tokens = [1, 2]
"""
PAIR = {"vocab": 2, "draft": {"iid": ["2/3", "1/3"]}, "target": {"iid": ["1/3", "2/3"]}}
LIVE = ["live", "--draft", "vicuna-68m", "--target", "vicuna-68m", "--layers", "1",
        "--prompts", "random:2:4", "--max-new-tokens", "2", "--k", "1", "--warmup", "0",
        "--out", "live"]

#: (id, argv) of cheap invocations, in an order where later ones may read earlier outputs.
CASES = [
    ("prove", ["prove", "--instances", "1"]),
    ("optimum verify", ["optimum", "verify", "--pair", "pair.json", "--gamma", "1"]),
    ("optimum allocate", ["optimum", "allocate", "--values", "values.csv", "--budget", "2",
                          "--milp"]),
    ("optimum multidraft", ["optimum", "multidraft", "--pair", "pair.json", "--drafts", "2"]),
    ("optimum tree", ["optimum", "tree", "--pair", "pair.json", "--tree", "2,1"]),
    ("cost show", ["cost", "show", "--batch", "1", "8"]),
    ("cost fit", ["cost", "fit", "profile.csv"]),
    ("cost show calibrated", ["cost", "show", "--cost", "calibrated", "--batch", "1", "8"]),
    ("cost show fp8", ["cost", "show", "--target", "llama-3.1-8b", "--quantization", "fp8",
                       "--kv-cache-dtype", "fp8", "--batch", "1"]),
    ("cost import-vidur", ["cost", "import-vidur",
                           str(Path(__file__).parents[1] / "traces/data/vidur_slice"),
                           "--out", "vidur"]),
    ("cost import-aiconfigurator", ["cost", "import-aiconfigurator",
                                    str(Path(__file__).parents[1] / "traces/data/aic_slice"),
                                    "--out", "aic"]),
    ("trace info", ["trace", "info", "default"]),
    ("trace validate", ["trace", "validate", "default"]),
    ("trace synth", ["trace", "synth", "--out", "synth", "--requests", "4"]),
    ("simulate", ["simulate", "--trace", "synth", "--requests", "8"]),
    ("sweep", ["sweep", "spec.toml", "--out", "sweep", "--workers", "1"]),
    ("report", ["report", "sweep"]),
    ("plan", ["plan", "--out", "plan", "--rate", "2", "--prompt-len", "fixed:50",
              "--output-len", "fixed:20", "--requests", "8", "--tp", "2", "--max-gpus", "2",
              "--policies", "ar", "--workers", "1"]),
    ("models list", ["models", "list"]),
    ("conform", ["conform", "tv-numpy", "--samples", "200", "--only", "iid"]),
    ("acceptance list", ["acceptance", "list"]),
    ("acceptance make", ["acceptance", "make", "--mal", "2.5", "--k", "3", "--out", "m.json"]),
    ("acceptance show", ["acceptance", "show", "mtp-deepseek-v3-k1"]),
    ("acceptance import-vllm-metrics", ["acceptance", "import-vllm-metrics", "metrics.prom",
                                        "--out", "acc.json"]),
    ("acceptance export-profile", ["acceptance", "export-profile", "acc.json", "--out",
                                   "speculation_profile.json"]),
    ("acceptance import-profile", ["acceptance", "import-profile",
                                   "speculation_profile.json", "--out", "acc2.json"]),
]
#: Seconds each (models load, or a grid runs): the slow selection.
SLOW_CASES = [
    ("profile", ["profile", "--model", "vicuna-68m", "--layers", "1", "--batch", "1",
                 "--query", "1", "--kv", "8", "--warmup", "0", "--repeats", "1",
                 "--out", "prof.csv"]),
    ("capture", ["capture", "--draft", "pair/draft", "--target", "pair/target",
                 "--prompts", "default:2", "--max-new-tokens", "3", "--depth", "2",
                 "--out", "trace", "--no-progress"]),
    ("live", LIVE),
    ("validate", ["validate", "live", "--in-sample"]),
    ("zoo train", ["zoo", "train", "--out", "zoo", "--steps", "1"]),
    ("demo", ["demo", "--quick", "--out", "demo", "--workers", "1"]),
    ("tune", ["tune", "--out", "tune", "--max-num-seqs", "1", "--k-max", "1", "--requests", "4",
              "--rates", "0.5", "--prompt-len", "fixed:8", "--output-len", "fixed:8",
              "--workers", "1"]),
]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """The inputs every case reads, in one directory."""
    from tests.simulator.cost.measured.test_profiled import synthetic_profile

    root = tmp_path_factory.mktemp("json")
    (root / "spec.toml").write_text(SPEC)
    (root / "pair.json").write_text(json.dumps(PAIR))
    np.savetxt(root / "values.csv", np.array([[0.9, 0.5], [0.8, 0.1]]), delimiter=",")
    synthetic_profile().to_csv(root / "profile.csv", index=False)
    from tests.simulator.replay.test_profile_replay import COUNTERS

    (root / "metrics.prom").write_text(COUNTERS)
    return root


def _check_one_object(proc) -> dict:
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert proc.returncode == 0, proc.stderr[-3000:]
    obj = json.loads(proc.stdout)  # the whole of stdout: one object, nothing before or after
    assert isinstance(obj, dict) and proc.stdout.count("\n") == 1
    return obj


@pytest.mark.parametrize("argv", [c[1] for c in CASES], ids=[c[0] for c in CASES])
def test_json_stdout_is_exactly_one_object(workdir, argv):
    _check_one_object(run_cli([*argv, "--json"], workdir))


@pytest.mark.slow
@pytest.mark.parametrize("argv", [c[1] for c in SLOW_CASES], ids=[c[0] for c in SLOW_CASES])
def test_json_stdout_of_slow_commands_is_exactly_one_object(workdir, argv):
    pytest.importorskip("torch")
    if "pair/target" in argv and not (workdir / "pair").exists():
        from tests.live.helpers import save_pair

        save_pair(workdir / "pair")
    _check_one_object(run_cli([*argv, "--json"], workdir, timeout=300))


def test_a_solver_banner_goes_to_stderr_not_stdout(workdir):
    """HiGHS announces itself on descriptor 1 when a solver object is created."""
    proc = run_cli(["optimum", "verify", "--pair", "pair.json", "--gamma", "1", "--json"],
                   workdir)
    _check_one_object(proc)
    assert "HiGHS" not in proc.stdout


def _json_commands(parser, name=()):
    import argparse

    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for verb, sub in action.choices.items():
                yield from _json_commands(sub, (*name, verb))
        elif "--json" in getattr(action, "option_strings", ()):
            yield " ".join(name)


def test_every_json_command_is_in_the_list():
    covered = {c[0] for c in CASES + SLOW_CASES}
    missing = set(_json_commands(build_parser())) - covered
    # models get/convert/derive need published weights (a download): their JSON path is the
    # same emit() as models list
    assert missing <= {"models get", "models convert", "models derive"}, missing


def test_a_solver_banner_stays_off_stdout_in_text_mode_too(workdir):
    """Issue 46: text mode printed HiGHS's licence banner among prove's lines. Descriptor 1
    is stderr while any command runs; the command's own lines still reach stdout, in order."""
    proc = run_cli(["prove", "--instances", "2"], workdir)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "HiGHS" not in proc.stdout and "licence" not in proc.stdout
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("verdict") and all(line.strip() for line in lines[1:3])
