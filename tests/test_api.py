"""The public API of ``specbatch`` itself (docs/api.md): every exported name resolves to the
object its module defines, and importing the package loads neither pandas nor torch."""

from __future__ import annotations

import subprocess
import sys

import pytest

import specbatch


def test_every_public_name_is_the_defining_modules_object():
    from specbatch.analysis.sweep.runner import run_sweep
    from specbatch.simulator.config.sim_config import SimConfig
    from specbatch.simulator.run import simulate
    from specbatch.traces.format.files import read_trace

    assert specbatch.simulate is simulate
    assert specbatch.SimConfig is SimConfig
    assert specbatch.read_trace is read_trace
    assert specbatch.run_sweep is run_sweep
    for name in specbatch.__all__:
        assert getattr(specbatch, name) is not None, name


def test_all_lists_exactly_the_lazy_exports():
    assert set(specbatch.__all__) == set(specbatch._EXPORTS) | {"__version__"}
    assert set(specbatch.__all__) <= set(dir(specbatch))


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'simulat'"):
        specbatch.simulat  # noqa: B018


def test_importing_the_package_loads_no_heavy_library():
    code = ("import sys, specbatch; "
            "print(sorted(m for m in ('pandas', 'torch', 'numpy') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_submodules_still_import_through_the_package():
    from specbatch import errors

    assert errors.SpecbatchError is specbatch.SpecbatchError


def test_a_subpackage_is_an_attribute_once_asked_for():
    code = "import specbatch; print(specbatch.theory.exact.__name__)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "specbatch.theory.exact"


# The API's argument types (issue 46): a wrong type is a SpecbatchError naming the argument,
# never an AttributeError or IndexError from deep inside the run.

@pytest.mark.parametrize("config", ["x", None, {}, 5])
def test_simulate_refuses_a_config_that_is_not_a_simconfig(config):
    with pytest.raises(specbatch.SpecbatchError, match=r"^simulate: argument config: expected "
                       r"a SimConfig"):
        specbatch.simulate(config)


@pytest.mark.parametrize("trace, hint", [("tiny", "read_trace('tiny')"), (5, "got int 5")])
def test_simulate_refuses_a_trace_that_is_not_a_trace(trace, hint):
    config = specbatch.load_config(requests=4)
    with pytest.raises(specbatch.SpecbatchError, match=r"^simulate: argument trace: ") as err:
        specbatch.simulate(config, trace=trace)
    assert hint in str(err.value)


def test_simulate_to_refuses_a_wrong_config_before_touching_the_folder(tmp_path):
    from specbatch.simulator.run import simulate_to

    with pytest.raises(specbatch.SpecbatchError, match="argument config"):
        simulate_to(tmp_path / "out", {"requests": 4})
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("indices, expected", [
    ([240], r"in \[0, 240\), got 240"),  # one past the end would read the CSR sentinel
    ([-1], r"in \[0, 240\), got -1"),  # would wrap around
    ([], "non-empty 1-D"),
    ([[1]], "non-empty 1-D"),
    ([0.5], "integer request indices"),
    ([True], "integer request indices"),
])
def test_trace_subset_refuses_indices_outside_the_trace(indices, expected):
    trace = specbatch.read_trace("tiny")
    assert trace.n_requests == 240
    with pytest.raises(specbatch.SpecbatchError, match=r"^Trace.subset: argument indices: .*"
                       + expected):
        trace.subset(indices)


def test_trace_subset_keeps_the_given_order():
    trace = specbatch.read_trace("tiny")
    sub = trace.subset([3, 0])
    assert list(sub.request_id) == [trace.request_id[3], trace.request_id[0]]


@pytest.mark.parametrize("call, expected", [
    (lambda: specbatch.run_sweep("x", "out"), "run_sweep: argument spec"),
    (lambda: specbatch.read_results(5), "read_results: argument out"),
])
def test_the_sweep_calls_name_a_wrong_argument(call, expected):
    with pytest.raises(specbatch.SpecbatchError, match=expected):
        call()


@pytest.mark.parametrize("argument", ["config", "trace"])
def test_any_wrong_type_is_a_specbatch_error_naming_the_argument(argument):
    """A fuzz of the two arguments' types: whatever is passed, the error names it."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    config = specbatch.load_config(requests=4)
    junk = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=8),
                     st.binary(max_size=8), st.lists(st.integers(), max_size=3),
                     st.dictionaries(st.text(max_size=3), st.integers(), max_size=2))

    @settings(max_examples=40, deadline=None)
    @given(junk)
    def check(value):
        call = (lambda: specbatch.simulate(value)) if argument == "config" else \
            (lambda: specbatch.simulate(config, trace=value))
        if argument == "trace" and value is None:
            return  # None: the trace the config names
        with pytest.raises(specbatch.SpecbatchError, match=f"argument {argument}: expected"):
            call()

    check()
