"""The engine's declared state (simulator.engine.state) is the whole contract between its parts.

Every part of :class:`Engine` (each class of its MRO) reads ``self.<name>`` only for a name
:class:`EngineState` declares or a method of a part, checked on the parts' syntax trees; the
engine's ``__init__`` sets exactly the declared names that have no class default. So an
attribute added in one module and read in another cannot go undeclared.
"""

from __future__ import annotations

import ast
import inspect
import textwrap

import pytest

from specbatch.simulator.config.sim_config import load_config
from specbatch.simulator.engine.core import Engine
from specbatch.simulator.engine.state import EngineState, declared
from specbatch.simulator.policies.registry import make_policy
from specbatch.simulator.workload.arrivals import build_workload
from tests.simulator.helpers import LinearCost, const_trace

PARTS = [cls for cls in Engine.__mro__ if cls is not object]


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


def verbs() -> set[str]:
    """The methods (functions, static and class methods, properties) of every engine part."""
    return {name for cls in PARTS for name, value in vars(cls).items()
            if inspect.isfunction(value) or isinstance(value, (staticmethod, classmethod,
                                                               property))}


def undeclared(source: str) -> list[str]:
    """``method: name`` for each ``self.<name>`` read neither declared nor a verb."""
    allowed = declared() | verbs()
    return sorted(f"{method}: self.{name}" for method, names in self_reads(source).items()
                  for name in names - allowed)


def small_engine(**kw) -> Engine:
    trace = const_trace(n_requests=3, prompt_len=6, output_len=5)
    config = load_config(None, trace="synth", requests=3, **kw)
    return Engine(config, trace, build_workload(config, trace), LinearCost(),
                  make_policy(config, trace.K), capacity=config.kv_capacity)


@pytest.mark.parametrize("part", PARTS, ids=lambda cls: cls.__name__)
def test_every_part_reads_only_declared_state_and_verbs(part):
    assert issubclass(part, EngineState)
    assert undeclared(inspect.getsource(part)) == [], (
        f"{part.__module__}.{part.__name__} reads undeclared engine state: declare it in "
        "simulator/engine/state.py")


def test_the_check_catches_an_undeclared_read():
    source = """
    class Part(EngineState):
        def step(self, rep, time):
            return self.depth + self.undeclared_knob + self.admit(rep)
    """
    assert undeclared(source) == ["step: self.undeclared_knob"]


@pytest.mark.parametrize("kw", [{}, {"scheduler": "vllm-v0"},
                                {"kv_mode": "paged", "kv_capacity": 64, "block_size": 4}],
                         ids=["v1", "v0", "paged"])
def test_init_sets_exactly_the_declared_state(kw):
    engine = small_engine(**kw)
    with_default = {name for name in declared() if hasattr(EngineState, name)}
    assert set(vars(engine)) == declared() - with_default
    engine.run()
    assert set(vars(engine)) == declared() - with_default  # running adds no attribute


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
    assert list(inspect.signature(Engine.run_composed).parameters) == [
        "self", "rep", "time", "decoding", "prefill"]
    assert DecodeBatch._fields == ("keep", "d_idx", "planned", "sub")
    assert PrefillBatch._fields == ("tokens", "n_joined", "admit", "chunk")
