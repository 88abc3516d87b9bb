"""The engine's declared state (simulator.engine.state) is the whole contract between its parts.

The engine and every part (each :class:`EnginePart` class) read ``self.<name>`` only for a name
:class:`EngineState` declares or a method of their own class, checked on the parts' syntax
trees; building the engine sets every declared name that has no class default and nothing
undeclared. So an attribute added in one module and read in another cannot go undeclared, and
a part reaches another only through a declared name. The engine is composed, not assembled
from mixins: no class of simulator/engine has more than two bases.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from pathlib import Path

import pytest

from specbatch.simulator.config.sim_config import load_config
from specbatch.simulator.engine import state as engine_state
from specbatch.simulator.engine.admission import Admission
from specbatch.simulator.engine.core import Engine
from specbatch.simulator.engine.decode import Decode
from specbatch.simulator.engine.state import EnginePart, EngineState, declared
from specbatch.simulator.engine.v0 import V0Step
from specbatch.simulator.engine.v1.compose import V1Composer
from specbatch.simulator.engine.v1.fast import V1Fast
from specbatch.simulator.engine.v1.reference import V1Reference
from specbatch.simulator.engine.v1.runs import V1Run
from specbatch.simulator.engine.v1.step import V1Step
from specbatch.simulator.policies.registry import make_policy
from specbatch.simulator.workload.arrivals import build_workload
from tests.simulator.helpers import LinearCost, const_trace

PARTS = [Engine, Decode, Admission, V0Step, V1Composer, V1Step, V1Run, V1Fast, V1Reference]


def self_reads(source: str) -> dict[str, set[str]]:
    """``{method: names}`` of every ``self.<name>`` in the methods of the one class defined in
    ``source`` (nested functions included: they close over the method's ``self``)."""
    cls = next(n for n in ast.parse(textwrap.dedent(source)).body if isinstance(n, ast.ClassDef))
    reads: dict[str, set[str]] = {}
    for fn in cls.body:
        if not isinstance(fn, ast.FunctionDef) or not fn.args.args:
            continue
        me = fn.args.args[0].arg
        if me != "self":
            continue
        reads[fn.name] = {node.attr for node in ast.walk(fn)
                          if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                          and node.value.id == me}
    return reads


def verbs(part: type) -> set[str]:
    """The methods (functions, static and class methods, properties) of ``part`` and its
    bases."""
    return {name for cls in part.__mro__ for name, value in vars(cls).items()
            if inspect.isfunction(value) or isinstance(value, (staticmethod, classmethod,
                                                               property))}


def undeclared(source: str, part: type = EngineState) -> list[str]:
    """``method: name`` for each ``self.<name>`` read neither declared nor a verb of ``part``."""
    allowed = declared() | verbs(part)
    return sorted(f"{method}: self.{name}" for method, names in self_reads(source).items()
                  for name in names - allowed)


def small_engine(**kw) -> Engine:
    trace = const_trace(n_requests=3, prompt_len=6, output_len=5)
    config = load_config(None, trace="synth", requests=3, **kw)
    return Engine(config, trace, build_workload(config, trace), LinearCost(),
                  make_policy(config, trace.K), capacity=config.kv_capacity)


@pytest.mark.parametrize("part", PARTS, ids=lambda cls: cls.__name__)
def test_every_part_reads_only_declared_state_and_its_own_verbs(part):
    assert issubclass(part, EnginePart) or part is Engine
    assert undeclared(inspect.getsource(part), part) == [], (
        f"{part.__module__}.{part.__name__} reads undeclared engine state: declare it in "
        "simulator/engine/state.py")


def test_the_check_catches_an_undeclared_read():
    source = """
    class Part(EngineState):
        def step(self, rep, time):
            return self.depth + self.undeclared_knob + self.admit(rep)
    """
    assert undeclared(source, Admission) == ["step: self.undeclared_knob"]
    assert undeclared(source) == ["step: self.admit", "step: self.undeclared_knob"]


@pytest.mark.parametrize("kw", [{}, {"scheduler": "vllm-v0"},
                                {"kv_mode": "paged", "kv_capacity": 64, "block_size": 4}],
                         ids=["v1", "v0", "paged"])
def test_init_sets_exactly_the_declared_state(kw):
    engine = small_engine(**kw)
    with_default = {name for name in declared() if hasattr(EngineState, name)}
    built = set(vars(engine))
    assert declared() - with_default <= built <= declared()
    engine.run()
    assert set(vars(engine)) == built  # running adds no attribute


@pytest.mark.parametrize("scheduler", ["vllm-v1", "vllm-v0"])
def test_the_composer_is_a_view_of_the_engine_s_state(scheduler):
    engine = small_engine(scheduler=scheduler)
    parts = [engine.composer] + [p for p in (engine.runs, engine.fast, engine.twin) if p]
    assert all(vars(part) is vars(engine) for part in parts)
    engine.depth = 7  # a write through the engine is the parts' too
    assert {part.depth for part in parts} == {7}


def test_no_class_of_the_engine_has_more_than_two_bases():
    folder = Path(engine_state.__file__).parent
    wide = [f"{path.name}:{node.name}" for path in sorted(folder.rglob("*.py"))
            for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.ClassDef) and len(node.bases) > 2]
    assert wide == []


def test_every_declared_name_has_a_one_line_comment():
    lines = inspect.getsource(EngineState).splitlines()
    for name in declared():
        line = next(text for text in lines if text.strip().startswith(f"{name}:"))
        assert "  # " in line, f"EngineState.{name} has no comment"


def test_no_engine_verb_takes_a_long_positional_list():
    """Data crosses the parts as named records (PlannedDecode, DecodeBatch, PrefillBatch, ...):
    no method but ``__init__`` takes more than six parameters (``run_composed`` took 13)."""
    long = [f"{cls.__name__}.{name}" for cls in PARTS for name, value in vars(cls).items()
            if name != "__init__" and inspect.isfunction(getattr(value, "__func__", value))
            and len(inspect.signature(getattr(value, "__func__", value)).parameters) > 6]
    assert long == []


def test_a_composed_step_runs_named_records():
    from specbatch.simulator.engine.decode import PlannedDecode, PricedDecode
    from specbatch.simulator.engine.v1.batch import DecodeBatch, PrefillBatch

    assert PlannedDecode._fields == ("m", "plan", "view", "eta")
    assert PricedDecode._fields[:4] == ("emitted", "drafted", "verified", "accepted")
    assert list(inspect.signature(V1Step.run_composed).parameters) == [
        "self", "rep", "time", "decoding", "prefill"]
    assert DecodeBatch._fields == ("keep", "d_idx", "planned", "sub")
    assert PrefillBatch._fields == ("tokens", "n_joined", "admit", "chunk")
