"""Lazy package attributes: a name loads its module on first read and is then cached; a
missing name is an AttributeError, never a half-imported package."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from specbatch.lazy import lazy_attributes


def test_a_name_is_loaded_once_then_cached_in_the_namespace():
    namespace: dict = {}
    getattr_ = lazy_attributes("specbatch", {"dumps": "specbatch.io"}, namespace)
    from specbatch.io import dumps

    assert getattr_("dumps") is dumps and namespace["dumps"] is dumps


def test_a_submodule_resolves_and_an_unknown_name_is_an_attribute_error():
    getattr_ = lazy_attributes("specbatch", {}, {})
    assert getattr_("errors").__name__ == "specbatch.errors"
    with pytest.raises(AttributeError, match="has no attribute 'nothing_here'"):
        getattr_("nothing_here")


def test_packages_using_it_stay_light_until_a_name_is_read():
    code = ("import sys, specbatch, specbatch.simulator, specbatch.traces; "
            "light = not {'numpy', 'pandas', 'torch'} & set(sys.modules); "
            "specbatch.simulator.SimConfig; specbatch.traces.read_trace; "
            "print(light, 'numpy' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=True).stdout.split()
    assert out == ["True", "True"]


def test_a_roofline_simulation_never_imports_scipy():
    """scipy.optimize (the calibrated laws' fits, ~0.5 CPU s to import) and scipy.sparse (the
    LPs) load where a fit or a program is built, not in every ``specbatch simulate``'s
    start-up (issue 35: a whole process is what users time against Vidur)."""
    code = ("import sys; from specbatch.cli import main; "
            "rc = main(['simulate', '--requests', '4', '--kv-mode', 'paged', "
            "'--cost', 'roofline', '--json']); "
            "print(rc, sorted(m for m in sys.modules if m.split('.')[0] == 'scipy')[:3], "
            "file=sys.stderr)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=True)
    assert proc.stderr.strip().splitlines()[-1] == "0 []"


def test_a_small_simulation_loads_only_what_it_uses(tmp_path):
    """Issue 45: a 10-request ``simulate --json`` (numpy engine, the default cost: ``auto``,
    which builds the aic model on the first run; the bundled trace and the built model read
    back from the cache folder on the second) imports none of pandas, pyarrow, scipy, sklearn,
    torch, matplotlib and numba: each is loaded where it is used (a written result, a Parquet
    read, a fit, a compiled run), and pandas alone was ~0.27 CPU s of the 0.65 s such a
    process cost."""
    heavy = ("pandas", "pyarrow", "scipy", "sklearn", "torch", "matplotlib", "numba")
    code = ("import sys; from specbatch.cli import main; "
            "rc = main(['simulate', '--requests', '10', '--json']); "
            f"print(rc, sorted(m for m in {heavy!r} if m in sys.modules), file=sys.stderr)")
    env = dict(os.environ, SPECBATCH_CACHE=str(tmp_path))  # a cold cache, then a warm one
    lines = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=120, check=True, env=env).stderr.strip().splitlines()[-1]
             for _ in range(2)]  # the first run keeps the trace in the cache folder
    assert lines[0] == "0 ['pandas', 'pyarrow', 'scipy']" and lines[1] == "0 []", lines


def test_an_aic_or_auto_simulation_with_a_warm_cache_loads_only_what_it_uses(tmp_path):
    """Issue 42 item 6: with the built aic model in the cache folder
    (simulator.cost.measured.aic_cache), ``--cost aic`` and ``--cost auto`` (which resolves to
    aic on the default H100) read no curve file and fit nothing: none of pandas, pyarrow,
    scipy, ... is imported, as for the roofline. The cold run builds the model and prints
    nothing but the one JSON object on stdout."""
    heavy = ("pandas", "pyarrow", "scipy", "sklearn", "torch", "matplotlib", "numba")

    def run(cost: str) -> tuple[dict, str]:
        code = ("import sys; from specbatch.cli import main; "
                f"rc = main(['simulate', '--requests', '10', '--json', '--cost', {cost!r}]); "
                f"print(rc, sorted(m for m in {heavy!r} if m in sys.modules), file=sys.stderr)")
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              timeout=180, check=True,
                              env=dict(os.environ, SPECBATCH_CACHE=str(tmp_path)))
        return json.loads(proc.stdout), proc.stderr.strip().splitlines()[-1]

    cold, loaded = run("aic")  # stdout is exactly one JSON object
    assert "pandas" in loaded and cold["cost_source"]["cost"]["ran"] == "aic"
    for cost in ("aic", "auto"):
        warm, loaded = run(cost)
        assert loaded == "0 []", (cost, loaded)
        assert warm["cost_source"]["cost"]["ran"] == "aic"
        assert {k: v for k, v in warm.items() if k != "cost_source"} == {
            k: v for k, v in cold.items() if k != "cost_source"}



def test_a_calibrated_a100_simulation_never_imports_pandas(tmp_path):
    """Issue 45: the calibrated cost reads its Vidur cell (A100, a Llama-2-7B shape: Vidur's
    own setting in benchmarks/vidur_side_by_side.py) through pyarrow's columns, not pandas
    (~0.35 CPU s of a lean run's start-up); the second run, with the bundled trace kept in
    the cache folder by the first, imports no pandas at all."""
    code = ("import sys; from specbatch.cli import main; "
            "rc = main(['simulate', '--requests', '4', '--hardware', 'a100', '--target', "
            "'vicuna-7b', '--kv-mode', 'paged', '--engine', 'numpy', '--json']); "
            "print(rc, 'pandas' in sys.modules, file=sys.stderr)")
    env = dict(os.environ, SPECBATCH_CACHE=str(tmp_path))
    runs = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           timeout=120, check=True, env=env) for _ in range(2)]
    target = json.loads(runs[1].stdout)["cost_source"]["target"]
    assert target["summary"] == "vidur a100 meta-llama/Llama-2-7b-hf tp 1"
    assert runs[1].stderr.strip().splitlines()[-1] == "0 False"
