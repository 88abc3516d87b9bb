"""Package attributes loaded on first use, so importing a package stays light.

``import specbatch`` and a sub-command's ``--help`` must not import numpy, pandas or torch,
yet ``specbatch.simulate`` and ``specbatch.simulator.SimConfig`` should work as names. A
package lists its public names with the module that defines each and sets
``__getattr__ = lazy_attributes(__name__, exports, globals())``: the defining module is
imported when a name is first read, and the value is then cached in the package's namespace
(later reads are plain attribute lookups). A subpackage or submodule not imported yet
(``specbatch.traces.format.files``) resolves the same way.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib import import_module
from typing import Any


def lazy_attributes(package: str, exports: dict[str, str],
                    namespace: dict[str, Any]) -> Callable[[str], Any]:
    """A module-level ``__getattr__`` for ``package``.

    exports:   public name -> absolute name of the module that defines it
    namespace: the package's ``globals()``, where each loaded name is cached
    """

    def __getattr__(name: str) -> Any:  # noqa: N807 (the module protocol's name)
        module = exports.get(name)
        if module is not None:
            value = getattr(import_module(module), name)
            namespace[name] = value
            return value
        try:
            return import_module(f"{package}.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"{package}.{name}":
                raise
            raise AttributeError(f"module {package!r} has no attribute {name!r}") from None

    return __getattr__
