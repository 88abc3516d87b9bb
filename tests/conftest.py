"""Shared pytest configuration.

Hypothesis profiles: ``ci`` (derandomised, bounded; selected when the ``CI`` environment
variable is set) and ``dev`` (more examples, random). Heavy tests carry ``@pytest.mark.slow``
and are excluded from the default run (``pytest -m slow`` selects them).
"""

from __future__ import annotations

import os
import sys

from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci",
    max_examples=30,
    derandomize=True,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "dev",
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev"))


def pytest_configure(config):
    """Every test run gets its own cache folder (``$SPECBATCH_CACHE``): parallel workers and
    subprocesses share it within a run, and nothing reaches the user's ~/.cache/specbatch.
    numba's cache is pointed into it too (``$NUMBA_CACHE_DIR``, where load_kernel would point
    it): a test process has imported numba before its first load_kernel, so without it the
    workers' kernels went next to the sources, and every worker and every test subprocess with
    a private ``$SPECBATCH_CACHE`` compiled its own (~1 CPU-minute each; one such test ran
    past its 120 s timeout on a loaded machine)."""
    if "SPECBATCH_CACHE" not in os.environ:
        import tempfile

        os.environ["SPECBATCH_CACHE"] = tempfile.mkdtemp(prefix="specbatch-test-cache-")
    os.environ.setdefault("NUMBA_CACHE_DIR", os.path.join(os.environ["SPECBATCH_CACHE"], "numba"))
    cache_bytecode()


def cache_bytecode() -> None:
    """Under ``PYTHONDONTWRITEBYTECODE`` (set in some shells, this machine's) no process
    caches the bytecode of specbatch's own modules, so every worker and every CLI subprocess
    of a run compiled each one it imported from source again (~6 CPU-s for a process that
    imports the package and the tests, ~0.2 for a lean CLI run; a run starts hundreds). The
    bytecode goes to one folder under the temporary directory instead (``PYTHONPYCACHEPREFIX``,
    inherited by the workers and subprocesses): nothing lands beside the sources, as the
    variable asked. A prefix is read instead of every ``__pycache__``, so the installed
    packages' modules are compiled into it once too (~8 CPU-s, ~150 MB); the folder outlives
    the run so later runs start warm. Python checks each cached file against its source's
    mtime and size, as in ``__pycache__``; the prefix mirrors each source's absolute path, so
    checkouts do not collide. A ``PYTHONPYCACHEPREFIX`` already set is kept as it is."""
    if not os.environ.get("PYTHONDONTWRITEBYTECODE") or os.environ.get("PYTHONPYCACHEPREFIX"):
        return
    import tempfile

    prefix = os.path.join(tempfile.gettempdir(), f"specbatch-test-pycache-{os.getuid()}")
    del os.environ["PYTHONDONTWRITEBYTECODE"]
    os.environ["PYTHONPYCACHEPREFIX"] = prefix
    sys.pycache_prefix = prefix  # this process's later imports (and pytest's rewritten tests)
    sys.dont_write_bytecode = False
