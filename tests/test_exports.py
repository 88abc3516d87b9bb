"""Package exports load on first use: every exported name resolves, and importing a light
submodule (the config, for a ``--help``) does not import the engine or numpy; and a concept
split out of a module stays importable from the module it left."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

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

    assert specbatch.traces.models.shapes.get_shape("vicuna-68m").name


def test_the_config_modules_import_without_numpy():
    code = ("import sys, specbatch.simulator.config.sim_config, specbatch.live.config; "
            "print(sorted(m for m in ('numpy', 'pandas', 'torch') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


#: (module, the module it re-exports): concepts split out of a module stay importable from it.
SPLIT_MODULES = [
    ("specbatch.simulator.config.sim_config", "specbatch.simulator.config.checks"),
    ("specbatch.simulator.cost.measured.profiled", "specbatch.simulator.cost.measured.role_fit"),
    ("specbatch.theory.allocate.budget", "specbatch.theory.allocate.gains"),
    ("specbatch.traces.models.zoo", "specbatch.traces.models.zoo_parts"),
]


def defined_names(module) -> list[str]:
    """The public names a module's own top level defines (def, class, assignment)."""
    tree = ast.parse(Path(module.__file__).read_text(encoding="utf-8"))
    names = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.append(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names += [t.id for t in targets if isinstance(t, ast.Name)]
    return [name for name in names if not name.startswith("_")]


@pytest.mark.parametrize(("module", "part"), SPLIT_MODULES)
def test_a_split_out_module_s_public_names_are_importable_from_the_original(module, part):
    whole, piece = importlib.import_module(module), importlib.import_module(part)
    public = defined_names(piece)
    assert public, part
    for name in public:
        assert getattr(whole, name, None) is getattr(piece, name), f"{module}.{name}"


def test_the_engine_runs_the_vllm_v0_step_from_its_own_module():
    from specbatch.simulator.config.sim_config import load_config
    from specbatch.simulator.engine.v0 import V0Step

    assert load_config(None, scheduler="vllm-v0").scheduler_row.load() is V0Step
    for name in ("prefill_step", "decode_step", "prefill_chunks"):
        assert name in vars(V0Step)
