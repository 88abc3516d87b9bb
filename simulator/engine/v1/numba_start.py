"""numba's start-up without importing scipy.linalg: its BLAS probe answered by the one
extension module the probe asks for.

The first call of any compiled function (a cached kernel too) refreshes numba's CPU target,
which imports ``numba.np.arraymath``; that module asks at import time whether BLAS is there
(``_HAVE_BLAS = _check_blas()``: ``import scipy.linalg.cython_blas``, then a look at
``scipy.__config__`` for the integer width), and importing that submodule runs
``scipy.linalg``'s package ``__init__``, which loads scipy.linalg's whole Python layer and,
through scipy's array-API shim, numpy.f2py, numpy.testing and numpy.fft: 0.1-0.4 CPU-s, the
largest single piece of a lean ``simulate`` run's start-up after numba itself (issue 45).
None of the kernels calls BLAS.

:func:`import_arraymath` loads ``scipy/linalg/cython_blas`` (the compiled module, the very
file ``import scipy.linalg.cython_blas`` would load) by its path, lets numba's probe find it in
``sys.modules`` while ``numba.np.arraymath`` is imported, and takes it out again, so a later
``import scipy.linalg`` (a fit, an LP) runs the package as usual and binds the module as its
attribute then. numba's answer is the same (``_HAVE_BLAS`` true; the width check reads the
same ``scipy.__config__``), and a compiled function that does call BLAS still resolves its
functions from the same module (numba imports it by name when it compiles one). Where
anything differs (no scipy, another layout, arraymath already imported, scipy.linalg already
imported), nothing is done and numba probes as it always does.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
from pathlib import Path

#: The module numba.np.linalg.ensure_blas imports.
BLAS = "scipy.linalg.cython_blas"


def import_arraymath() -> bool:
    """Import ``numba.np.arraymath`` with :data:`BLAS` loaded alone (module docstring); True
    when it was done that way, False when numba was left to probe as usual (or had already)."""
    if "numba.np.arraymath" in sys.modules or "scipy.linalg" in sys.modules:
        return False
    module = load_blas()
    if module is None:
        return False
    sys.modules[BLAS] = module
    try:
        import numba.np.arraymath  # noqa: F401 - its import runs the BLAS probe
    finally:
        if sys.modules.get(BLAS) is module and "scipy.linalg" not in sys.modules:
            del sys.modules[BLAS]
    return True


def load_blas():
    """scipy's ``linalg/cython_blas`` extension module loaded from its file, or None."""
    spec = importlib.util.find_spec("scipy")
    if spec is None or spec.origin is None:
        return None
    folder = Path(spec.origin).parent / "linalg"
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        path = folder / f"cython_blas{suffix}"
        if path.is_file():
            break
    else:
        return None
    try:
        blas = importlib.util.spec_from_file_location(BLAS, path)
        module = importlib.util.module_from_spec(blas)
        blas.loader.exec_module(module)
    except ImportError:
        return None
    return module
