"""Package exports load on first use: every exported name resolves, and importing a light
submodule (the config, for a ``--help``) does not import the engine or numpy."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest


@pytest.mark.parametrize("package", ["specbatch.simulator", "specbatch.traces"])
def test_every_exported_name_resolves(package):
    module = importlib.import_module(package)
    for name in module.__all__:
        assert getattr(module, name) is not None, name
    with pytest.raises(AttributeError):
        module.no_such_name  # noqa: B018


def test_submodules_are_attributes_once_asked_for():
    import specbatch.traces

    assert specbatch.traces.shapes.get_shape("vicuna-68m").name


def test_the_config_modules_import_without_numpy():
    code = ("import sys, specbatch.simulator.config, specbatch.live.config; "
            "print(sorted(m for m in ('numpy', 'pandas', 'torch') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
