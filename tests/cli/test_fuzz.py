"""Fuzzing the CLI: damaged traces, wrong configs and sweep specs never crash it.

For every generated input the CLI either succeeds (exit 0 and, with ``--json``, one JSON
object on stdout) or refuses it (exit 2 and exactly one stderr line ``specbatch...: error:``);
never a traceback, never more than a few seconds. Most examples run in-process (fast); a few
fixed damaged inputs also run in a subprocess, where C-level output would show.
``max_examples`` comes from the active hypothesis profile (tests/conftest.py).
"""

from __future__ import annotations

import json
import math
import re
import shutil
import signal
import string
from contextlib import contextmanager
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from specbatch.cli import main
from tests.cli.oneline import assert_one_line_error, run_cli, run_main

#: Seconds one in-process example may take.
EXAMPLE_SECONDS = 10
ERROR_LINE = re.compile(r"^specbatch( [\w-]+)*: error: ")
SYNTH = ["--requests", "6", "--output-mean", "8", "--output-max", "16", "--prompt-mean", "8",
         "--prompt-max", "32", "--depth", "6"]
#: SimConfig fields worth perturbing, and the small requests count every run keeps.
FIELDS = ("requests", "sampling", "arrival", "rate", "cv", "synth_alpha", "max_num_seqs",
          "max_num_batched_tokens", "enable_chunked_prefill", "kv_capacity", "kv_mode",
          "block_size", "gpu_memory_utilization", "max_model_len", "replicas", "router",
          "policy", "num_speculative_tokens", "k", "extra", "budget", "verify", "threshold",
          "threshold_mode", "dsd_interval", "cost", "hardware", "target", "draft", "tp",
          "execution", "seed", "slo", "speedup", "trace", "workload")
FUZZ_SETTINGS = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                               HealthCheck.function_scoped_fixture])


@contextmanager
def time_limit(seconds: int):
    """Fail an example that runs longer than ``seconds`` (a hang is a bug too)."""
    def expire(signum, frame):
        raise TimeoutError(f"example ran longer than {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def run_in_process(capsys, argv: list[str]) -> tuple[int, str, str]:
    capsys.readouterr()
    with time_limit(EXAMPLE_SECONDS):
        return run_main(capsys, argv)


def assert_contract(code: int, out: str, err: str, json_mode: bool, partial_ok: bool = False):
    """Exit 0 with valid output, or exit 2 with one error line (1: a partial trace's verdict)."""
    event(f"exit {code}")
    if code == 0 or (partial_ok and code == 1):
        if json_mode:
            assert isinstance(json.loads(out), dict)
        assert "Traceback" not in err
        return
    assert code == 2, f"exit {code}: {err[-2000:]}"
    lines = err.splitlines()
    assert len(lines) == 1 and ERROR_LINE.match(lines[0]), err[-2000:]


@pytest.fixture(scope="module")
def trace_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("fuzz") / "trace"
    assert main(["trace", "synth", "--out", str(out), *SYNTH]) == 0
    return out


# ------------------------------------------------------------------ damaged traces

json_scalars = st.one_of(st.none(), st.booleans(), st.integers(-2**80, 2**80),
                         st.floats(allow_nan=True, allow_infinity=True),
                         st.text(string.printable, max_size=12))
json_values = st.recursive(json_scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.text(string.ascii_lowercase, max_size=8),
                                                 inner, max_size=3)), max_leaves=6)

file_damage = st.tuples(st.sampled_from(["positions-00000.parquet", "requests.parquet"]),
                        st.sampled_from(["truncate", "flip", "zero", "empty"]),
                        st.floats(0, 1), st.integers(0, 7))
meta_damage = st.one_of(
    st.tuples(st.just("set"), st.sampled_from(["format", "version", "temperature", "depth",
                                               "models", "completion", "seeds",
                                               "draft_samples_per_position"]), json_values),
    st.tuples(st.just("drop"), st.sampled_from(["format", "version", "temperature", "depth",
                                                "completion"]), st.none()),
    st.tuples(st.just("replace"), st.none(), json_values),
    st.tuples(st.just("garble"), st.none(), st.binary(max_size=64)),
)


def damage_file(path: Path, how: str, where: float, bit: int) -> None:
    data = bytearray(path.read_bytes())
    at = min(len(data) - 1, int(where * len(data)))
    if how == "truncate":
        data = data[:at]
    elif how == "flip":
        data[at] ^= 1 << bit
    elif how == "zero":
        data[at:at + 64] = bytes(len(data[at:at + 64]))
    else:
        data = bytearray()
    path.write_bytes(bytes(data))


def damage_meta(path: Path, how: str, key, value) -> None:
    if how == "garble":
        path.write_bytes(value)
        return
    meta = json.loads(path.read_text())
    if how == "set":
        meta[key] = value
    elif how == "drop":
        meta.pop(key, None)
    else:
        meta = value
    path.write_text(json.dumps(meta, allow_nan=True))


COMMANDS = [
    ["trace", "validate", "TRACE", "--json"],
    ["trace", "info", "TRACE", "--json"],
    ["simulate", "--trace", "TRACE", "--requests", "4", "--json"],
]


def _fresh_copy(trace_dir: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "damaged"
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(trace_dir, copy)
    return copy


@FUZZ_SETTINGS
@given(damage=st.one_of(file_damage.map(lambda d: ("file", d)),
                        meta_damage.map(lambda d: ("meta", d))),
       command=st.sampled_from(COMMANDS))
def test_a_damaged_trace_is_read_or_refused_in_one_line(trace_dir, tmp_path, capsys, damage,
                                                        command):
    copy = _fresh_copy(trace_dir, tmp_path)
    kind, args = damage
    if kind == "file":
        name, how, where, bit = args
        damage_file(copy / name, how, where, bit)
    else:
        damage_meta(copy / "meta.json", *args)
    argv = [str(copy) if a == "TRACE" else a for a in command]
    code, out, err = run_in_process(capsys, argv)
    assert_contract(code, out, err, json_mode=True, partial_ok=command[1] == "validate")


# ------------------------------------------------------------------ configs

toml_scalars = st.one_of(st.booleans(), st.integers(-2**63, 2**63 - 1),
                         st.floats(allow_nan=True, allow_infinity=True, width=64),
                         st.text(string.ascii_letters + string.digits + "-_.:/ ", max_size=10))
toml_values = st.one_of(toml_scalars, st.lists(toml_scalars, max_size=3))

#: Plausible values per SimConfig field, so most examples get past the type checks and reach
#: the simulator; the wrong-typed ``toml_values`` are drawn too.
CHOICES = {
    "sampling": ["auto", "in_order", "resample"], "arrival": ["burst", "poisson", "gamma"],
    "router": ["round_robin", "least_outstanding"],
    "policy": ["ar", "dsd", "fixed", "hindsight", "oracle", "tetris", "threshold"],
    "verify": ["token", "block"], "threshold_mode": ["cumulative", "per_token"],
    "cost": ["roofline", "profiled"], "execution": ["cuda_graph", "eager"],
    "kv_mode": ["reserve", "paged"], "hardware": ["a100", "h100", "h200", "l40s"],
    "target": ["vicuna-33b", "llama-3.1-8b", "llama-3.1-70b"],
    "draft": ["vicuna-68m", "llama-3.2-1b", "ngram"],
}
INT_FIELDS = ("max_num_seqs", "max_num_batched_tokens", "kv_capacity", "block_size",
              "max_model_len", "replicas", "num_speculative_tokens", "k", "extra", "budget",
              "dsd_interval", "tp", "seed")
FLOAT_FIELDS = ("rate", "cv", "synth_alpha", "gpu_memory_utilization", "threshold", "slo")
edge_ints = st.sampled_from([0, 1, 2, 3, 8, 64, -1, 2**31, 2**62, 2**63 - 1])
edge_floats = st.sampled_from([0.0, 1.0, 0.5, 1e-9, 1e21, -1.0, math.inf, math.nan])


def field_value(name: str) -> st.SearchStrategy:
    if name in CHOICES:
        good = st.sampled_from(CHOICES[name])
    elif name in INT_FIELDS:
        good = st.one_of(st.integers(1, 8), edge_ints)
    elif name in FLOAT_FIELDS:
        good = st.one_of(st.floats(0.01, 1), edge_floats)
    elif name in ("enable_chunked_prefill", "speedup"):
        good = st.booleans()
    elif name == "async_scheduling":
        good = st.sampled_from(["auto", True, False])
    else:
        good = toml_values
    # one draw in ten is any TOML value (hypothesis favours 0 and the bounds, so 5 marks it)
    return st.integers(0, 9).flatmap(lambda roll: toml_values if roll == 5 else good)


def config_tables(max_size: int) -> st.SearchStrategy:
    names = st.lists(st.sampled_from(FIELDS), max_size=max_size, unique=True)
    return names.flatmap(lambda ns: st.fixed_dictionaries({n: field_value(n) for n in ns}))


def toml_literal(value) -> str:
    """A TOML literal for ``value`` (inf/nan spelled as TOML does)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value)
    return "[" + ", ".join(toml_literal(v) for v in value) + "]"


def toml_text(table: dict) -> str:
    return "".join(f"{key} = {toml_literal(value)}\n" for key, value in table.items())


@FUZZ_SETTINGS
@given(fields=config_tables(5))
def test_a_wrong_config_is_simulated_or_refused_in_one_line(trace_dir, tmp_path, capsys, fields):
    fields = {k: v for k, v in fields.items() if k not in ("requests", "trace", "workload")}
    config = tmp_path / "sim.toml"
    config.write_text(toml_text(fields))
    code, out, err = run_in_process(capsys, ["simulate", "--config", str(config), "--trace",
                                             str(trace_dir), "--requests", "4", "--json"])
    assert_contract(code, out, err, json_mode=True)


# ------------------------------------------------------------------ sweep specs

spec_tables = st.fixed_dictionaries({
    "base": config_tables(3),
    "axes": config_tables(2).map(lambda t: {k: v if isinstance(v, list) else [v]
                                            for k, v in t.items()}),
}, optional={"seeds": st.one_of(st.lists(st.integers(-1, 3), max_size=3), toml_values),
             "name": st.one_of(st.just("fuzz"), toml_scalars),
             "store_requests": st.one_of(st.booleans(), toml_scalars)})


@FUZZ_SETTINGS
@given(spec=spec_tables)
def test_a_wrong_sweep_spec_is_run_or_refused_in_one_line(trace_dir, tmp_path, capsys, spec):
    base = {k: v for k, v in spec["base"].items() if k not in ("requests", "trace", "workload")}
    base.update(trace=str(trace_dir), requests=2)
    axes = {k: v for k, v in spec["axes"].items() if k not in ("requests", "trace", "workload")}
    top = {k: v for k, v in spec.items() if k not in ("base", "axes")}
    text = toml_text(top) + "[base]\n" + toml_text(base) + "[axes]\n" + toml_text(axes)
    path = tmp_path / "spec.toml"
    path.write_text(text)
    out_dir = tmp_path / "sweep"
    shutil.rmtree(out_dir, ignore_errors=True)
    code, out, err = run_in_process(capsys, ["sweep", str(path), "--out", str(out_dir),
                                             "--workers", "1", "--json"])
    assert_contract(code, out, err, json_mode=True)


# ------------------------------------------------------------------ subprocess cases

SUBPROCESS_CASES = [
    ("truncated positions", "positions-00000.parquet", "truncate", 0.5, ["trace", "validate"]),
    ("bit-flipped positions", "positions-00000.parquet", "flip", 0.3, ["simulate", "--trace"]),
    ("garbage requests", "requests.parquet", "zero", 0.1, ["trace", "info"]),
    ("empty requests", "requests.parquet", "empty", 0.0, ["simulate", "--trace"]),
]


@pytest.mark.parametrize("name, how, where, command", [c[1:] for c in SUBPROCESS_CASES],
                         ids=[c[0] for c in SUBPROCESS_CASES])
def test_a_damaged_trace_in_a_subprocess(trace_dir, tmp_path, name, how, where, command):
    copy = _fresh_copy(trace_dir, tmp_path)
    damage_file(copy / name, how, where, 5)
    proc = run_cli([*command, str(copy), "--json"], tmp_path, timeout=60)
    if proc.returncode == 0 or (command[1] == "validate" and proc.returncode == 1):
        assert isinstance(json.loads(proc.stdout), dict) and "Traceback" not in proc.stderr
    else:
        assert_one_line_error(proc.returncode, proc.stderr)


# ------------------------------------------------------------------ plan

#: Per flag of ``specbatch plan``: plausible values (small, so a valid search is a few
#: seconds) and the edges users hit (issue 31: 1e9 GPUs, tp above the GPUs, 1e308 prices).
PLAN_FLAGS = {
    "--rate": ["4", "0.5", "0", "-1", "nan", "inf", "1e300", "x"],
    "--arrival": ["poisson", "burst", "trace", "gamma"],
    "--requests": ["4", "1", "0", "-3", "1e9", "2.5"],
    "--prompt-len": ["fixed:20", "uniform:1,40", "lognormal:20,0.5", "trace", "fixed:0",
                     "uniform:5,2", "fixed:1e30", "gauss:3", ""],
    "--output-len": ["fixed:8", "uniform:1,12", "lognormal:6,0.3", "trace", "fixed:-1",
                     "lognormal:5,nan"],
    "--slo-ttft": ["2", "0.001", "0", "-1", "inf", "nan"],
    "--slo-tpot": ["0.1", "0.01", "0", "1e-300", "nan"],
    "--slo-e2e": ["20", "0.5", "-2"],
    "--percentile": ["99", "50", "100", "0", "101", "nan"],
    "--goodput": ["0.99", "1", "0", "1.5"],
    "--hardware": ["h100", "h100,h200", "a100", "l40s", "tpu", ","],
    "--tp": ["1", "2", "1,2", "3", "0", "x", "8"],
    "--max-gpus": ["1", "2", "0", "1000000000", "-1"],
    "--policies": ["ar", "ar,fixed", "tetris", "dsd", "magic", ""],
    "--k": ["1", "2", "1,2", "0", "9", "6"],
    "--extra": ["1", "0", "2,3"],
    "--verify": ["token", "block", "bv,tv", "maybe"],
    "--price": ["h100=2.5", "h100=2.5,h200=3.9", "h100=1e308", "h100=0", "h100=-1",
                "h100=nan", "h200=1"],
    "--levels-after": ["0", "1", "-1", "1000"],
    "--acceptance-band": ["0.5,0.9", "0.9,0.5", "1,1", "x"],
    "--max-num-seqs": ["4", "1", "0"],
    "--gpu-memory-utilization": ["0.9", "0.5", "0", "1.5", "nan"],
    "--target": ["vicuna-33b", "vicuna-7b", "llama-3.1-8b", "no-such-model"],
    "--draft": ["vicuna-68m", "ngram", "missing/config.json"],
}
#: Seconds one plan example may take.
PLAN_SECONDS = 30
plan_flags = st.lists(st.sampled_from(sorted(PLAN_FLAGS)), max_size=6, unique=True).flatmap(
    lambda names: st.fixed_dictionaries({n: st.sampled_from(PLAN_FLAGS[n]) for n in names}))


@settings(FUZZ_SETTINGS, max_examples=min(8, settings().max_examples))
@given(flags=plan_flags)
def test_a_plan_question_is_answered_or_refused_in_one_line(trace_dir, tmp_path, capsys, flags):
    base = {"--trace": str(trace_dir), "--requests": "4", "--prompt-len": "fixed:20",
            "--output-len": "fixed:8", "--rate": "4", "--tp": "1", "--max-gpus": "1",
            "--policies": "ar,fixed", "--k": "2", "--verify": "token", "--slo-tpot": "0.1"}
    flags = {**base, **flags}
    if flags.get("--arrival", "poisson") != "poisson" and "--rate" not in flags:
        flags.pop("--rate", None)
    out = Path(tempfile_dir(tmp_path)) / "plan"
    argv = ["plan", "--out", str(out), "--workers", "1", "--no-progress", "--json"]
    argv += [x for item in flags.items() for x in item]
    capsys.readouterr()
    with time_limit(PLAN_SECONDS):  # a plan is a search: several runs and a figure
        code, stdout, err = run_main(capsys, argv)
    assert_contract(code, stdout, err, json_mode=True)
    if code == 2 and out.exists():  # refused after claiming: only the plan's own files
        assert {p.name for p in out.iterdir()} <= {".specbatch-plan.json", ".specbatch.lock",
                                                   "workload.csv", "runs"}


def tempfile_dir(tmp_path: Path) -> str:
    import tempfile

    return tempfile.mkdtemp(dir=tmp_path)


# ------------------------------------------------------------------ user policies

#: What one hook of a generated user policy does: return a value, or raise.
HOOK_RETURNS = {"depth": ["3", "2", "0", "2.5", "float('nan')", "-1", "True", "'3'", "None",
                          "2**70", "numpy.int64(2)"],
                "lengths": ["d, d", "d, d + 1", "d * 1.0, d", "d", "None", "(d, d, d)",
                            "d[:-1], d[:-1]", "d * 0, d * 0", "d * 99, d * 99"]}
HOOK_RAISES = [
    "ValueError('boom')",
    "SystemExit(0)",
    "SystemExit('bye')",
    "SystemExit(3)",
    "GeneratorExit()",
    "RecursionError()",
    "MemoryError()",
    "StopIteration()",
    "ZeroDivisionError()",
    "__import__('specbatch.errors').errors.SpecbatchError('mine')",
]
hook_action = st.one_of(st.tuples(st.just("return"), st.integers(0, 99)),
                        st.tuples(st.just("raise"), st.sampled_from(HOOK_RAISES)))


def policy_source(depth, decide, observe, widen_budget: bool, budgeted: bool) -> str:
    """A user's policy module whose required_depth, decide and observe do what was drawn."""
    def body(action, kind, indent="        "):
        if action[0] == "raise":
            return f"{indent}raise {action[1]}\n"
        menu = HOOK_RETURNS[kind]
        return f"{indent}return {menu[action[1] % len(menu)]}\n"

    text = ("import numpy\nfrom specbatch.simulator.policies.registry import Policy\n\n\n"
            "class P(Policy):\n"
            f"    budgeted = {budgeted}\n\n"
            "    @classmethod\n    def required_depth(cls, config):\n" + body(depth, "depth") +
            "\n    def decide(self, view):\n"
            "        d = numpy.full(view.n, min(self.depth, 1), dtype=numpy.int64)\n")
    if widen_budget:
        text += "        view.budget = 10**9\n"
    text += body(decide, "lengths")
    if observe is not None:
        text += "\n    def observe(self, verified, accepted):\n" + body(observe, "lengths")
    return text


_MODULES = iter(range(10**9))


@FUZZ_SETTINGS
@given(depth=hook_action, decide=hook_action, observe=st.one_of(st.none(), hook_action),
       widen_budget=st.booleans(), budgeted=st.booleans(), budget=st.sampled_from([None, 1]))
def test_a_misbehaving_user_policy_is_run_or_refused_in_one_line(trace_dir, tmp_path, capsys,
                                                                 monkeypatch, depth, decide,
                                                                 observe, widen_budget,
                                                                 budgeted, budget):
    """Whatever a user's hooks return or raise (sys.exit included), simulate --json prints one
    JSON object (exit 0) or one error line (exit 2), and a budgeted policy never passes the
    budget check by widening view.budget."""
    import sys

    name = f"fuzz_policy_{next(_MODULES)}"
    (tmp_path / f"{name}.py").write_text(policy_source(depth, decide, observe, widen_budget,
                                                       budgeted))
    monkeypatch.syspath_prepend(str(tmp_path))
    argv = ["simulate", "--trace", str(trace_dir), "--requests", "3", "--max-num-seqs", "3",
            "--policy", f"{name}:P", "--json"]
    if budget is not None:
        argv += ["--budget", str(budget)]
    try:
        code, out, err = run_in_process(capsys, argv)
    finally:
        sys.modules.pop(name, None)
    assert_contract(code, out, err, json_mode=True)
    if code == 0 and budgeted and budget is not None:
        assert json.loads(out)["verified"] <= json.loads(out)["steps"] * budget


# ------------------------------------------------------------------ the Python API

api_values = st.one_of(
    st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=True,
                                                                    allow_infinity=True),
    st.text(max_size=8), st.sampled_from(["fixed", "token", "burst", "h100", "none", "3",
                                          "auto", "AUTO"]),
    st.lists(st.integers(0, 3), max_size=2), st.builds(lambda v: __import__("numpy").int64(v),
                                                       st.integers(-5, 5)),
    st.builds(lambda v: __import__("numpy").float64(v), st.floats(allow_nan=True)))


@FUZZ_SETTINGS
@given(values=st.dictionaries(st.sampled_from(sorted(__import__(
    "specbatch.simulator.config.sim_config", fromlist=["specs"]).specs())), api_values, max_size=3))
def test_the_python_api_builds_exact_configs_or_raises_a_clear_error(values):
    """SimConfig(**fields) either holds every field exactly as declared (int, finite float,
    bool, str or None where optional; in range) or raises SpecbatchError naming a field:
    never a silent conversion (2.5 -> 2, True -> 1, NaN kept) and never another exception."""
    import dataclasses

    from specbatch.errors import SpecbatchError
    from specbatch.fields import AUTO, AutoBool
    from specbatch.simulator.config.sim_config import SimConfig, specs

    try:
        config = SimConfig(**values)
    except SpecbatchError as exc:
        assert re.match(r"^SimConfig: field \w+: expected ", str(exc)), str(exc)
        assert "\n" not in str(exc)
        return
    for name, spec in specs().items():
        value = getattr(config, name)
        if value is None:
            assert spec.optional
            continue
        if spec.kind is AutoBool:  # "auto", true or false (specbatch.fields.AutoBool)
            assert value == AUTO or type(value) is bool, (name, value)
        else:
            assert type(value) is spec.kind, (name, value)
        if spec.kind is float:
            assert math.isfinite(value)
        if name in values:
            assert value == values[name]  # kept, not converted with a loss
    assert dataclasses.replace(config) == config


# ------------------------------------------------------------------ conform

#: Per flag of ``specbatch conform``: plausible values and the edges users hit (issue 31: a
#: 10^12-sample request, the largest int64 seed, Triton on a CPU, a verifier that is not one).
CONFORM_FLAGS = {
    "--samples": ["20", "2", "1", "0", "-5", "2.5", "1000000000000", "x"],
    "--detect": ["0.5", "0.3", "0", "1.5", "nan", "-0.1"],
    "--seed": ["0", "1", "9223372036854775807", "9223372036854775808", "-1", "x"],
    "--draft": ["probabilistic", "greedy", "maybe"],
    "--interface": ["padded", "ragged", "flat"],
    "--target": ["sample", "greedy", "hot"],
    "--alpha": ["0.001", "0.5", "0", "1", "nan"],
    "--only": ["iid", "paper", "ties", "nope"],
}
CONFORM_VERIFIERS = ["tv-numpy", "bv-numpy", "vllm-v1", "sglang-single-0.5", "tv-triton",
                     "no-such-verifier", "os:getcwd", "math:nope", ""]
#: Seconds one conform example may take (small sample counts; large ones are refused).
CONFORM_SECONDS = 30
conform_flags = st.lists(st.sampled_from(sorted(CONFORM_FLAGS)), max_size=4,
                         unique=True).flatmap(
    lambda names: st.fixed_dictionaries({n: st.sampled_from(CONFORM_FLAGS[n]) for n in names}))


@settings(FUZZ_SETTINGS, max_examples=min(12, settings().max_examples))
@given(verifier=st.sampled_from(CONFORM_VERIFIERS), flags=conform_flags)
def test_a_conform_run_reports_or_refuses_in_one_line(capsys, monkeypatch, verifier, flags):
    monkeypatch.delenv("SPECBATCH_ALLOW_LARGE", raising=False)
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    flags = {"--samples": "20", **flags}
    if "--detect" in flags and flags["--detect"] in {"0.5", "0.3"}:
        flags.pop("--samples")  # --detect chooses the draws
    argv = ["conform", verifier, "--json", *[x for item in flags.items() for x in item]]
    capsys.readouterr()
    with time_limit(CONFORM_SECONDS):
        code, stdout, err = run_main(capsys, argv)
    # exit 1 is conform's verdict "shown lossy": still one JSON report, no traceback
    if code == 1:
        assert isinstance(json.loads(stdout), dict) and "Traceback" not in err
        return
    assert_contract(code, stdout, err, json_mode=True)


# ------------------------------------------------------------------ validate --vllm (issue 46)

#: The reproduction base: a bundled run, copied to tmp with one field changed.
RUN = "rtx4090-llama-3.1-8b"


def damaged_run(tmp_path: Path, meta: dict | None = None, kwargs: dict | None = None,
                kv: dict | None = None, line=None, series: str | None = None) -> Path:
    """A copy of RUN: meta.json with ``meta`` (top level), ``kwargs`` (engine_kwargs) and
    ``kv`` (kv_cache) set; ``line(lines)`` rewrites requests.jsonl's lines (uncompressed);
    ``series`` replaces timeseries.csv."""
    import gzip

    from specbatch.traces.public.vllm_runs import BUNDLED_DIR

    run = tmp_path / "run"
    shutil.copytree(BUNDLED_DIR / RUN, run)
    data = json.loads((run / "meta.json").read_text())
    data.update(meta or {})
    data["engine_kwargs"].update(kwargs or {})
    data["kv_cache"].update(kv or {})
    (run / "meta.json").write_text(json.dumps(data))
    if line is not None:
        with gzip.open(run / "requests.jsonl.gz", "rt") as fh:
            lines = fh.read().splitlines()
        (run / "requests.jsonl.gz").unlink()
        (run / "requests.jsonl").write_text("\n".join(line(lines)) + "\n")
    if series is not None:
        (run / "timeseries.csv").write_text(series)
    return run


def set_field(field: str, value, index: int = 5):
    """A line rewriter setting ``field`` of line ``index + 1`` to ``value``."""
    def rewrite(lines: list[str]) -> list[str]:
        row = json.loads(lines[index])
        row[field] = value
        return [*lines[:index], json.dumps(row), *lines[index + 1:]]
    return rewrite


def every_stamp_at(value: float):
    def rewrite(lines: list[str]) -> list[str]:
        rows = [json.loads(text) for text in lines]
        for row in rows:
            row.update(queued_ts=value, scheduled_ts=value, first_token_ts=value,
                       last_token_ts=value)
        return [json.dumps(row) for row in rows]
    return rewrite


#: (id, damaged_run keywords, the words the one error line must hold: file and field).
DAMAGED_RUNS = [
    ("max_num_seqs true", {"kwargs": {"max_num_seqs": True}},
     "meta.json: field engine_kwargs.max_num_seqs: expected an integer >= 1, got True"),
    ("max_num_seqs 2.5", {"kwargs": {"max_num_seqs": 2.5}}, "max_num_seqs: expected an integer"),
    ("max_num_seqs NaN", {"kwargs": {"max_num_seqs": math.nan}}, "got nan"),
    ("max_num_batched_tokens x", {"kwargs": {"max_num_batched_tokens": "x"}},
     "field engine_kwargs.max_num_batched_tokens: expected an integer >= 1, got 'x'"),
    ("tensor_parallel_size 0", {"kwargs": {"tensor_parallel_size": 0}},
     "field engine_kwargs.tensor_parallel_size: expected an integer >= 1 or null, got 0"),
    ("data_parallel_size 0", {"kwargs": {"data_parallel_size": 0}},
     "field engine_kwargs.data_parallel_size: expected an integer >= 1"),
    ("enable_expert_parallel yes", {"kwargs": {"enable_expert_parallel": "yes"}},
     "field engine_kwargs.enable_expert_parallel: expected true or false, got 'yes'"),
    ("max_model_len 0", {"kwargs": {"max_model_len": 0}},
     "field engine_kwargs.max_model_len: expected an integer >= 1 or null, got 0"),
    ("num_gpu_blocks 0", {"kv": {"num_gpu_blocks": 0}}, "field kv_cache.num_gpu_blocks: "
     "expected an integer >= 1 or null, got 0"),
    ("num_gpu_blocks 1e15", {"kv": {"num_gpu_blocks": 1e15}}, "field kv_cache.num_gpu_blocks"),
    ("num_gpu_blocks 10^15", {"kv": {"num_gpu_blocks": 10**15}},
     "field kv_cache.num_gpu_blocks: expected at most"),
    ("num_gpu_blocks string", {"kv": {"num_gpu_blocks": "2588"}}, "got '2588'"),
    ("num_gpu_blocks 2588.5", {"kv": {"num_gpu_blocks": 2588.5}}, "got 2588.5"),
    ("schema_version 99", {"meta": {"schema_version": 99}},
     "meta.json: field schema_version: expected 1"),
    ("quantization unknown", {"kwargs": {"quantization": "bitsandbytes"}},
     "field engine_kwargs.quantization: expected null or one of fp8"),
    ("kv_cache_dtype unknown", {"kwargs": {"kv_cache_dtype": "int8"}},
     "field engine_kwargs.kv_cache_dtype: expected one of auto"),
    ("started_at not a time", {"meta": {"started_at": "yesterday"}}, "field started_at"),
    ("queued_ts -5", {"line": set_field("queued_ts", -5)},
     "requests.jsonl line 6: field queued_ts: expected seconds"),
    ("queued_ts before the run", {"line": set_field("queued_ts", 10.0)},
     "requests.jsonl line 6: field queued_ts: expected a stamp within the run"),
    ("last_token_ts 1e300", {"line": set_field("last_token_ts", 1e300)},
     "requests.jsonl line 6: field last_token_ts: expected a stamp within the run"),
    ("input_toks 1e300", {"line": set_field("input_toks", 1e300)},
     "requests.jsonl line 6: field input_toks: expected an integer from 1"),
    ("output_toks 1e300", {"line": set_field("output_toks", 1e300)},
     "line 6: field output_toks"),
    ("longer than max_model_len", {"line": set_field("input_toks", 40000)},
     "line 6: field input_toks: expected input_toks + output_toks <= max_model_len 32768"),
    ("scheduled before queued", {"line": set_field("scheduled_ts", 1.0)},
     "line 6: field scheduled_ts: expected queued_ts <= scheduled_ts"),
    ("every stamp equal", {"line": every_stamp_at(100.0)},
     "requests.jsonl: field last_token_ts: expected the run to span a positive time"),
    ("a duplicated line", {"line": lambda lines: [*lines, lines[7]]},
     "requests.jsonl line 301: field request_id: expected each request once"),
    ("header-only timeseries", {"series": "t,prompt_throughput,gen_throughput,running,"
                                          "waiting,kv_cache_pct\n"},
     "timeseries.csv: expected at least one tick row"),
]


@pytest.mark.parametrize("damage, words", [c[1:] for c in DAMAGED_RUNS],
                         ids=[c[0] for c in DAMAGED_RUNS])
def test_a_damaged_vllm_run_is_one_error_line_naming_file_and_field(tmp_path, damage, words):
    run = damaged_run(tmp_path, **damage)
    out = tmp_path / "res"
    proc = run_cli(["validate", "--vllm", str(run), "--json", "--out", str(out)], tmp_path,
                   timeout=60)
    assert_one_line_error(proc.returncode, proc.stderr, words)
    assert str(run) in proc.stderr  # the file is named
    assert proc.stdout == "" and not out.exists()  # nothing printed, nothing written


def test_quantization_and_kv_cache_dtype_reach_the_simulator(tmp_path, capsys):
    """An fp8 run is simulated at fp8 (weights, then KV), not at bf16 with the gap reported
    as simulator error; the recorded num_gpu_blocks still sizes the pool."""
    base = json.loads(run_main(capsys, ["validate", "--vllm", RUN, "--json"])[1])
    reports = {}
    for name, kwargs in (("weights", {"quantization": "fp8"}),
                         ("kv", {"kv_cache_dtype": "fp8"})):
        run = damaged_run(tmp_path / name, kwargs=kwargs)
        code, text, err = run_main(capsys, ["validate", "--vllm", str(run), "--json"])
        assert code == 0, err
        reports[name] = json.loads(text)
    mapped = {row[0]: row[2] for row in reports["weights"]["settings"]["mapped"]}
    assert mapped["engine_kwargs.quantization"].startswith("quantization = fp8")
    mapped = {row[0]: row[2] for row in reports["kv"]["settings"]["mapped"]}
    assert mapped["engine_kwargs.kv_cache_dtype"].startswith("kv_cache_dtype = fp8")
    tpot = base["metrics"]["tpot_mean"]["simulated"]
    for report in reports.values():
        assert report["metrics"]["tpot_mean"]["simulated"] < tpot  # fewer bytes per pass
        assert report["simulated_kv_capacity"] == base["simulated_kv_capacity"] == 2588 * 16


def test_validate_out_config_reruns_with_simulate_config(tmp_path):
    """--out D holds its workload and a config.toml that simulate --config re-runs to the same
    request table (no k for policy ar, no workload in a deleted temporary folder)."""
    import pandas as pd

    done = run_cli(["validate", "--vllm", RUN, "--out", "d", "--json"], tmp_path, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    config = (tmp_path / "d" / "config.toml").read_text()
    assert f'workload = "{tmp_path / "d" / "workload.csv"}"' in config
    assert "num_speculative_tokens" not in config and 'policy = "ar"' in config
    again = run_cli(["simulate", "--config", "d/config.toml", "--out", "e"], tmp_path,
                    timeout=120)
    assert again.returncode == 0, again.stderr[-2000:]
    first = pd.read_parquet(tmp_path / "d" / "requests.parquet")
    assert first.equals(pd.read_parquet(tmp_path / "e" / "requests.parquet"))


def test_validate_figure_never_replaces_a_file_it_did_not_write(tmp_path):
    notes = tmp_path / "notes.png"
    notes.write_bytes(b"my own picture")
    proc = run_cli(["validate", "--vllm", RUN, "--figure", str(notes), "--out", "d"], tmp_path,
                   timeout=60)
    assert_one_line_error(proc.returncode, proc.stderr, f"--figure {notes}: exists and is not "
                          "a figure validate --vllm wrote (pass --force")
    assert proc.stdout == "" and notes.read_bytes() == b"my own picture"
    assert not (tmp_path / "d").exists()



def test_validate_figure_replaces_its_own_figure_or_any_file_with_force(tmp_path, capsys):
    """The PNG's text chunk, not its name, says an earlier validate --vllm wrote it."""
    from specbatch.analysis.validate.vllm_run import is_latency_figure, latency_figure
    from tests.analysis.validate.test_vllm_metrics import THREE

    fig = latency_figure("three", THREE, THREE, tmp_path / "fig.png")
    plain = tmp_path / "plain.png"  # a valid PNG without the mark: someone else's
    from PIL import Image

    Image.new("RGB", (2, 2)).save(plain)
    assert is_latency_figure(fig) and not is_latency_figure(plain)
    before = fig.read_bytes()
    done = run_cli(["validate", "--vllm", RUN, "--figure", str(fig)], tmp_path, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert fig.read_bytes() != before and is_latency_figure(fig)
    code, _, err = run_main(capsys, ["validate", "--vllm", RUN, "--figure", str(plain)])
    assert_one_line_error(code, err, "is not a figure validate --vllm wrote")
    code, _, err = run_main(capsys, ["validate", "--vllm", RUN, "--figure", str(plain),
                                     "--force"])
    assert code == 0, err
    assert is_latency_figure(plain)


# ------------------------------------------------------------------ tune (issue 46)

TUNE_TINY = ["--acceptance", "0.8", "--k-max", "1", "--rates", "0.5", "--prompt-len", "fixed:8",
             "--output-len", "fixed:8", "--workers", "1"]


def test_tune_out_refuses_a_folder_of_files_it_did_not_write(tmp_path):
    """Files named like tune's are not tune's: the marker decides (docs/tune.md)."""
    out = tmp_path / "d"
    out.mkdir()
    (out / "tune.json").write_text("my notes\n")
    (out / "settings.txt").write_text("mine\n")
    proc = run_cli(["tune", "--out", str(out), "--max-num-seqs", "2", "--requests", "4",
                    *TUNE_TINY, "--json"], tmp_path, timeout=60)
    assert_one_line_error(proc.returncode, proc.stderr, "holds files that are not a tune result")
    assert proc.stdout == ""
    assert (out / "tune.json").read_text() == "my notes\n"
    assert (out / "settings.txt").read_text() == "mine\n"
    assert sorted(p.name for p in out.iterdir()) == ["settings.txt", "tune.json"]


def test_tune_out_replaces_an_earlier_tune_and_refuses_another_kind(tmp_path):
    out = tmp_path / "d"
    for cap in ("1", "2"):  # an earlier tune result (another question) is replaced
        done = run_cli(["tune", "--out", str(out), "--max-num-seqs", cap, "--requests", "4",
                        *TUNE_TINY, "--json"], tmp_path, timeout=120)
        assert done.returncode == 0, done.stderr[-2000:]
        assert json.loads(done.stdout)["question"]["max_num_seqs"] == int(cap)
    assert json.loads((out / "tune.json").read_text())["question"]["workload"] == \
        str(out / "workload.csv")
    sim = tmp_path / "sim"
    assert run_cli(["simulate", "--requests", "2", "--out", str(sim)], tmp_path,
                   timeout=60).returncode == 0
    before = sorted(p.name for p in sim.iterdir())
    proc = run_cli(["tune", "--out", str(sim), "--max-num-seqs", "1", "--requests", "4",
                    *TUNE_TINY], tmp_path, timeout=60)
    assert_one_line_error(proc.returncode, proc.stderr, "holds a specbatch simulate result")
    assert proc.stdout == "" and sorted(p.name for p in sim.iterdir()) == before


def test_tune_names_the_buckets_its_burst_never_reaches(tmp_path):
    done = run_cli(["tune", "--out", "d", "--max-num-seqs", "8", "--requests", "2",
                    *TUNE_TINY, "--json"], tmp_path, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout)
    assert report["unreached"] == [[3, 4], [5, 8]]
    assert report["notes"][0].startswith("batch sizes 3-8 were never reached")
    text = run_cli(["tune", "--out", "d", "--max-num-seqs", "8", "--requests", "2",
                    *TUNE_TINY], tmp_path, timeout=120)
    assert "note: batch sizes 3-8 were never reached" in text.stdout


@pytest.mark.parametrize("command", [
    ["tune", "--out", "d", "--max-num-seqs", "2", "--requests", "4", "--acceptance", "0.8"],
    ["plan", "--rate", "1", "--out", "d"],
])
@pytest.mark.parametrize("flag", ["--prompt-len", "--output-len"])
def test_an_empty_length_distribution_is_not_the_trace(tmp_path, command, flag):
    proc = run_cli([*command, flag, ""], tmp_path, timeout=60)
    assert_one_line_error(proc.returncode, proc.stderr, f"{flag}: expected fixed:N")
    assert proc.stdout == "" and not (tmp_path / "d").exists()
