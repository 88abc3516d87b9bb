"""Bring your own policy: ``policy = "module:Class"`` loads a Policy subclass from the user's
module (CLI, TOML, sweep specs, Python API), runs it through the same plan_step as the
built-in policies, and every way of breaking the contract is a one-line error naming it."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from specbatch.analysis.sweep.runner import run_sweep
from specbatch.analysis.sweep.spec import parse_spec
from specbatch.cli import main
from specbatch.errors import SpecbatchError
from specbatch.simulator.config.sim_config import load_config
from specbatch.simulator.policies.registry import POLICIES, Policy, resolve_policy
from specbatch.simulator.run import simulate
from tests.simulator.helpers import CHAIN_POLICIES, LinearCost, policy_settings

EXAMPLE = Path(__file__).resolve().parents[3] / "docs" / "examples" / "my_policy.py"
DOC = EXAMPLE.parents[1] / "policies.md"
COST = LinearCost()

BROKEN = '''
import numpy as np
from specbatch.simulator.policies.registry import Policy


class WrongShape(Policy):
    def decide(self, view):
        return np.zeros(view.n + 1, dtype=np.int64), np.zeros(view.n + 1, dtype=np.int64)


class VerifiesMore(Policy):
    def decide(self, view):
        d = np.ones(view.n, dtype=np.int64)
        return d, d + 1


class OverBudget(Policy):
    def decide(self, view):
        d = np.full(view.n, self.depth, dtype=np.int64)
        return d, d


class IgnoresBudget(OverBudget):
    budgeted = False


class TooDeep(Policy):
    def decide(self, view):
        d = np.full(view.n, self.depth + 1, dtype=np.int64)
        return d, d


class Floats(Policy):
    def decide(self, view):
        return np.ones(view.n), np.ones(view.n)


class OneArray(Policy):
    def decide(self, view):
        return np.ones(view.n, dtype=np.int64)


class Raises(Policy):
    def decide(self, view):
        raise ValueError("boom")


class NoSuper(Policy):
    def __init__(self, config, trace_k):
        self.threshold = 1


class BadInit(Policy):
    def __init__(self, config, trace_k):
        raise KeyError("needs a field")


class NotAPolicy:
    pass


class Exits(Policy):
    def decide(self, view):
        import sys
        sys.exit(0)


class ObserveRaises(Policy):
    def decide(self, view):
        d = np.ones(view.n, dtype=np.int64)
        return d, d

    def observe(self, verified, accepted):
        raise RuntimeError("feedback lost")


class ObserveExits(ObserveRaises):
    def observe(self, verified, accepted):
        raise SystemExit(3)


class DepthNaN(Policy):
    @classmethod
    def required_depth(cls, config):
        return float("nan")


class DepthHalf(Policy):
    @classmethod
    def required_depth(cls, config):
        return 2.5


class DepthExits(Policy):
    @classmethod
    def required_depth(cls, config):
        raise SystemExit(0)


class WidensBudget(Policy):
    def decide(self, view):
        view.budget = 10**9
        d = np.full(view.n, self.depth, dtype=np.int64)
        return d, d
'''


@pytest.fixture
def user_dir(tmp_path, monkeypatch):
    """A folder holding my_policy.py (the documented example) and broken_policies.py, on
    sys.path; the modules are forgotten afterwards."""
    shutil.copy(EXAMPLE, tmp_path / "my_policy.py")
    (tmp_path / "broken_policies.py").write_text(BROKEN)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    for name in ("my_policy", "broken_policies"):
        sys.modules.pop(name, None)


def run(policy: str, trace, **kw):
    kw.setdefault("requests", 16)
    return simulate(load_config(None, trace="synth", policy=policy, **kw), trace, cost_model=COST)


def test_the_documented_example_is_the_file_the_tests_run():
    code = EXAMPLE.read_text()
    assert f"```python\n{code}```" in DOC.read_text()
    assert len(code.splitlines()) <= 30


def test_the_example_runs_through_the_python_api_within_the_budget(user_dir, synth_trace_natural):
    result = run("my_policy:ConfidenceFloor", synth_trace_natural, extra=1, requests=24)
    assert result.summary["policy"] == "my_policy:ConfidenceFloor"
    decode = result.steps[result.steps.batch > 0]
    assert (decode.verified <= 3 * decode.batch).all()  # C = k per decoding request
    assert (decode.drafted == 4 * decode.batch).all()  # every request drafts K = k + e = 4
    assert 0 < result.summary["verified"] < result.summary["drafted"]
    again = run("my_policy:ConfidenceFloor", synth_trace_natural, extra=1, requests=24)
    assert again.steps.equals(result.steps) and again.requests.equals(result.requests)


def test_the_example_with_no_floor_is_tetris_under_tv(user_dir, synth_trace_natural,
                                                      monkeypatch):
    """FLOOR = 0 keeps every token, so the example verifies the C most confident prefixes:
    TETRIS's rule for token verification, the same run step for step."""
    cls = resolve_policy("my_policy:ConfidenceFloor")
    monkeypatch.setattr(cls, "FLOOR", 0.0)
    mine = run("my_policy:ConfidenceFloor", synth_trace_natural, extra=2, requests=24)
    tetris = run("tetris", synth_trace_natural, extra=2, requests=24)
    cols = [c for c in tetris.steps.columns]
    assert mine.steps[cols].equals(tetris.steps[cols])


def test_the_example_runs_through_the_cli_from_the_current_directory(tmp_path, monkeypatch,
                                                                     capsys):
    """A console script's sys.path does not hold the working directory; the loader looks
    there too."""
    shutil.copy(EXAMPLE, tmp_path / "cwd_policy.py")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", ".", str(tmp_path))])
    try:
        code = main(["simulate", "--trace", "synth", "--requests", "12", "--extra", "1",
                     "--policy", "cwd_policy:ConfidenceFloor", "--json"])
    finally:
        sys.modules.pop("cwd_policy", None)
    out = capsys.readouterr().out
    assert code == 0
    summary = json.loads(out)
    assert summary["policy"] == "cwd_policy:ConfidenceFloor" and summary["requests"] == 12
    assert str(tmp_path) not in sys.path  # looked up, not left behind


def test_toml_config_and_sweep_spec_name_a_user_policy(user_dir):
    toml = user_dir / "sim.toml"
    toml.write_text('trace = "synth"\npolicy = "my_policy:ConfidenceFloor"\nextra = 1\n')
    assert load_config(toml).policy == "my_policy:ConfidenceFloor"
    spec = parse_spec({"name": "mine", "seeds": [0],
                       "base": {"trace": "synth", "requests": 8, "extra": 1},
                       "axes": {"policy": ["tetris", "my_policy:ConfidenceFloor"]}}, "spec.toml")
    outcome = run_sweep(spec, user_dir / "sweep", progress=False)
    assert outcome.total == outcome.computed == 2


@pytest.mark.parametrize("name, needle", [
    ("nope", "expected one of ar, batch-schedule, dsd, ema-adaptive, entropy-stop, fixed, "
             "hindsight, oracle, specdec++, static-tree, tetris, tetris-tree, threshold, "
             "tree-optimum, vllm-adaptive, vllm-dynamic or "
             "package.module:Class"),
    ("a:b:c", "expected one of"),
    ("no_such_module_xyz:Policy", "cannot import module no_such_module_xyz"),
    ("bad module:X", "expected a dotted module name"),
    ("my_policy:Missing", "has no class 'Missing'"),
    ("broken_policies:NotAPolicy", "expected a subclass of "
                                   "specbatch.simulator.policies.registry.Policy"),
    ("my_policy:Policy", "expected a subclass"),
    ("json:JSONDecoder", "expected a subclass of specbatch.simulator.policies.registry.Policy, got "
                         "class json.decoder.JSONDecoder"),
    ("os.path:join", "got a function"),
])
def test_a_bad_policy_name_is_a_one_line_config_error(user_dir, name, needle):
    with pytest.raises(SpecbatchError, match="config: field policy: ") as err:
        load_config(None, policy=name)
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_a_module_that_fails_to_import_is_named(user_dir):
    (user_dir / "crashes_on_import.py").write_text("raise RuntimeError('half-written')\n")
    with pytest.raises(SpecbatchError, match="importing module crashes_on_import raised "
                                             "RuntimeError: half-written"):
        resolve_policy("crashes_on_import:X")


@pytest.mark.parametrize("cls, kw, needle", [
    ("WrongShape", {}, "returned drafted of shape (9,), expected (8,)"),
    ("VerifiesMore", {}, "returned verified > drafted for 8 of 8 requests"),
    ("OverBudget", {"budget": 5}, "verified 24 tokens, over the step's budget C = 5"),
    ("TooDeep", {}, "returned drafted > depth = 3"),
    ("Floats", {}, "returned drafted of dtype float64, expected integers"),
    ("OneArray", {}, "returned ndarray, expected a pair (drafted, verified)"),
    ("Raises", {}, "decide raised ValueError: boom"),
    ("NoSuper", {}, "the instance has no k, depth, rule, budget"),
    ("BadInit", {}, "BadInit(config, trace_k) raised KeyError"),
    ("Exits", {}, "broken_policies.py): decide raised SystemExit: 0"),
    ("ObserveRaises", {}, "broken_policies.py): observe raised RuntimeError: feedback lost"),
    ("ObserveExits", {}, "broken_policies.py): observe raised SystemExit: 3"),
    ("DepthNaN", {}, "required_depth returned nan, expected an integer >= 0"),
    ("DepthHalf", {}, "required_depth returned 2.5, expected an integer >= 0"),
    ("DepthExits", {}, "broken_policies.py): required_depth raised SystemExit: 0"),
    ("WidensBudget", {"budget": 5}, "verified 24 tokens, over the step's budget C = 5"),
])
def test_a_policy_breaking_the_contract_is_a_one_line_error_naming_it(
        user_dir, synth_trace_natural, cls, kw, needle):
    with pytest.raises(SpecbatchError, match="policy broken_policies:") as err:
        run(f"broken_policies:{cls}", synth_trace_natural, requests=8, max_num_seqs=8, **kw)
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_a_policy_may_declare_that_it_ignores_the_budget(user_dir, synth_trace_natural):
    result = run("broken_policies:IgnoresBudget", synth_trace_natural, budget=5, requests=8)
    assert result.summary["verified"] == result.summary["drafted"] > 5


def test_contract_errors_reach_the_cli_as_one_line_with_exit_code_2(user_dir, capsys):
    code = main(["simulate", "--trace", "synth", "--requests", "8",
                 "--policy", "broken_policies:VerifiesMore"])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("specbatch: error: policy broken_policies:VerifiesMore")
    assert err.count("\n") == 1


def test_a_policy_that_exits_makes_simulate_json_fail_in_one_line(user_dir):
    """sys.exit(0) inside decide used to end ``simulate --json`` with exit 0 and no output."""
    import subprocess

    done = subprocess.run([sys.executable, "-m", "specbatch", "simulate", "--trace", "synth",
                           "--requests", "8", "--policy", "broken_policies:Exits", "--json"],
                          cwd=user_dir, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1
    assert done.stderr.startswith("specbatch: error: policy broken_policies:Exits (")
    assert "decide raised SystemExit: 0" in done.stderr


@pytest.mark.parametrize("name", CHAIN_POLICIES)
def test_every_built_in_policy_keeps_the_contract_in_the_checked_reference_engine(
        name, synth_trace_natural):
    config = load_config(None, trace="synth", policy=name, extra=0 if name in (
        "ar", "fixed", "dsd") else 1, budget=None if name != "tetris" else 7, requests=10,
        max_num_seqs=5, **policy_settings(name))
    simulate(config, synth_trace_natural, cost_model=COST, reference=True)  # raises on a breach
    assert issubclass(POLICIES[name], Policy) and POLICIES[name].name == name
