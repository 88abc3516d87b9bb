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
