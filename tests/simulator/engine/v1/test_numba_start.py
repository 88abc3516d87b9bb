"""simulator.engine.v1.numba_start: loading the kernel answers numba's BLAS probe with scipy's
cython_blas module alone, so scipy.linalg is not imported, and leaves nothing behind that a
later ``import scipy.linalg`` or a BLAS-calling compiled function would notice."""

from __future__ import annotations

import subprocess
import sys

import pytest

from specbatch.simulator.engine.v1 import compiled

pytestmark = pytest.mark.skipif(not compiled.numba_installed(),
                                reason="numba not installed (the fast extra)")


def run(code: str) -> list[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300, check=True).stdout.split()


def test_loading_the_kernel_does_not_import_scipy_linalg_and_numba_still_sees_blas():
    out = run(
        "import sys\n"
        "from specbatch.simulator.engine.v1.compiled import load_kernel\n"
        "load_kernel()\n"
        "import numba.np.arraymath as am\n"
        "print('scipy.linalg' in sys.modules, 'scipy.linalg.cython_blas' in sys.modules,"
        " am._HAVE_BLAS)\n")
    assert out == ["False", "False", "True"]


def test_scipy_linalg_and_numba_blas_work_afterwards():
    """The package imports as usual (its cython_blas attribute bound), and a compiled
    function calling BLAS (a matrix product) gives numpy's answer."""
    out = run(
        "import numpy as np\n"
        "from specbatch.simulator.engine.v1.compiled import load_kernel\n"
        "load_kernel()\n"
        "import scipy.linalg\n"
        "from numba import njit\n"
        "a = np.arange(9.0).reshape(3, 3) / 7\n"
        "f = njit(lambda x, y: x @ y)\n"
        "print(hasattr(scipy.linalg, 'cython_blas'), np.allclose(f(a, a), a @ a),"
        " np.allclose(scipy.linalg.inv(a + np.eye(3)) @ (a + np.eye(3)), np.eye(3)))\n")
    assert out == ["True", "True", "True"]


def test_nothing_is_done_where_numba_would_not_probe_from_scratch():
    """With scipy.linalg already imported (or arraymath already loaded), numba probes as it
    always does."""
    out = run(
        "import scipy.linalg\n"
        "from specbatch.simulator.engine.v1.numba_start import import_arraymath\n"
        "first = import_arraymath()\n"
        "import numba.np.arraymath\n"
        "print(first, import_arraymath())\n")
    assert out == ["False", "False"]
    out = run(
        "import sys\n"
        "from specbatch.simulator.engine.v1.numba_start import import_arraymath\n"
        "print(import_arraymath(), import_arraymath(), 'scipy.linalg' in sys.modules)\n")
    assert out == ["True", "False", "False"]
