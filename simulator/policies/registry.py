"""Draft/verify policies: how many tokens each running request drafts and verifies per step.

The policy registry and its public names. The base class is :class:`Policy`
(simulator.policies.base: what ``decide`` returns and when it is called), the project's own
policies (``ar``, ``fixed``, ``dsd``, ``tetris``, ``threshold``, ``oracle``, ``hindsight``) are
in simulator.policies.papers, the serving engines' in simulator.policies.engines and
simulator.policies.stops; all are importable from here.

Registry: :data:`POLICIES` maps a built-in name to its class, loaded from the policy catalogue
(simulator.policies.catalogue: one row per built-in, its class path, knobs and traits);
:func:`resolve_policy` also accepts ``package.module:Class``, a :class:`Policy` subclass in a user's
module (docs/policies.md). A class is built with ``cls(config, trace_k)`` and states the draft depth
it needs with :meth:`Policy.required_depth`. Budget: ``view.budget`` is C (``config.budget``,
default ``k × n``, THEORY.md §5); each class says whether it allocates under C (``budgeted``).
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import TYPE_CHECKING, Any

from specbatch.deadline import UserCallTimeout, call_limited
from specbatch.errors import SpecbatchError
from specbatch.simulator.policies.base import Policy, valid_depth
from specbatch.simulator.policies.catalogue import CATALOGUE
from specbatch.simulator.policies.papers import (
    AutoRegressive,
    DynamicSD,
    Fixed,
    Hindsight,
    Oracle,
    Tetris,
    Threshold,
)

if TYPE_CHECKING:
    from specbatch.simulator.config.sim_config import SimConfig

__all__ = [
    "POLICIES", "USER_POLICY_FORM", "AutoRegressive", "DynamicSD", "Fixed", "Hindsight",
    "Oracle", "Policy", "Tetris", "Threshold", "call_user", "import_user_module", "is_builtin",
    "make_policy", "policy_depth_of", "register", "resolve_policy",
]


#: The built-in policies by name: each catalogue row's class (simulator.policies.catalogue).
POLICIES: dict[str, type[Policy]] = {row.name: row.load() for row in CATALOGUE}


def register(*classes: type[Policy]) -> None:
    """Add policy classes to :data:`POLICIES` under their ``name`` (kept for callers of the
    old registry; a built-in is a row of simulator.policies.catalogue, a user's policy is named
    ``module:Class``)."""
    POLICIES.update({cls.name: cls for cls in classes})


def is_builtin(cls: type) -> bool:
    """``cls`` is the registry's class for its name (a user's subclass is not, whatever its
    ``name``)."""
    return POLICIES.get(getattr(cls, "name", None)) is cls

#: How a user's policy is named (``--policy``, TOML ``policy``, sweep specs).
USER_POLICY_FORM = "package.module:Class"


def resolve_policy(name: str, where: str = "policy") -> type[Policy]:
    """The policy class ``name`` names: a built-in (:data:`POLICIES`) or ``module:Class``, a
    :class:`Policy` subclass imported from ``module`` (found on sys.path, then in the current
    directory). A bad name is a one-line :class:`SpecbatchError` starting ``where: ``."""
    cls = POLICIES.get(name)
    if cls is not None:
        return cls
    if not isinstance(name, str) or name.count(":") != 1:
        raise SpecbatchError(f"{where}: expected one of {', '.join(sorted(POLICIES))} or "
                             f"{USER_POLICY_FORM} (a Policy subclass), got {name!r}")
    module_name, class_name = name.split(":")
    module = import_user_module(module_name, f"{where}: {name!r}")
    cls = getattr(module, class_name, None) if class_name.isidentifier() else None
    if cls is None:
        raise SpecbatchError(f"{where}: {name!r}: module {module_name} "
                             f"({getattr(module, '__file__', '?')}) has no class {class_name!r}")
    if not (isinstance(cls, type) and issubclass(cls, Policy)) or cls is Policy:
        got = (f"class {cls.__module__}.{cls.__qualname__}" if isinstance(cls, type)
               else f"a {type(cls).__name__}")
        raise SpecbatchError(f"{where}: {name!r}: expected a subclass of "
                             f"specbatch.simulator.policies.registry.Policy, got {got}")
    return cls


def import_user_module(module_name: str, where: str) -> Any:
    """``importlib.import_module(module_name)``, looking in the current directory too when
    sys.path does not have it (a console script's sys.path starts at its own folder); any
    failure is one line naming the module."""
    if not all(part.isidentifier() for part in module_name.split(".")):
        raise SpecbatchError(f"{where}: expected a dotted module name before ':', "
                             f"got {module_name!r}")
    cwd = os.getcwd()
    added = cwd not in sys.path and os.path.abspath(".") not in sys.path and "" not in sys.path
    if added:
        sys.path.append(cwd)
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        raise SpecbatchError(f"{where}: cannot import module {module_name} ({exc}; looked "
                             f"on sys.path and in {cwd})") from None
    except Exception as exc:  # noqa: BLE001 - any error in the user's module, in one line
        raise SpecbatchError(f"{where}: importing module {module_name} raised "
                             f"{type(exc).__name__}: {exc}") from None
    finally:
        if added:
            sys.path.remove(cwd)


def user_file(cls: type) -> str:
    """The file a user's policy class was imported from (``?`` when unknown)."""
    module = sys.modules.get(cls.__module__)
    return str(getattr(module, "__file__", None) or "?")


def call_user(cls: type, hook: str, fn: Any, *args: Any) -> Any:
    """``fn(*args)``, one hook of a user's policy class ``cls``: anything it raises, also
    ``SystemExit`` (a ``sys.exit`` in the hook) and other :class:`BaseException` subclasses but
    ``KeyboardInterrupt``, becomes a one-line :class:`SpecbatchError` naming the class, its file
    and the hook, so ``simulate --json`` never exits 0 with nothing printed. A call that runs
    past the limit on user code (specbatch.deadline, default 60 s) is one such error."""
    try:
        return call_limited(fn, *args)
    except (SpecbatchError, KeyboardInterrupt):
        raise
    except UserCallTimeout as exc:  # specbatch.deadline: a hook that never returns
        raise SpecbatchError(f"policy {cls.__module__}:{cls.__qualname__} ({user_file(cls)}): "
                             f"{hook} {exc} (the limit on a call into user code: "
                             "--user-timeout SECONDS, 0 for none)") from None
    except BaseException as exc:  # noqa: BLE001 - a user policy's bug, reported in one line
        raise SpecbatchError(f"policy {cls.__module__}:{cls.__qualname__} ({user_file(cls)}): "
                             f"{hook} raised {type(exc).__name__}: {exc}") from exc


def policy_depth_of(cls: type[Policy], config: SimConfig) -> int:
    """``cls.required_depth(config)``, checked (:func:`simulator.policies.base.valid_depth`);
    a user's class's errors in one line (:func:`call_user`)."""
    if is_builtin(cls):
        return valid_depth(cls, cls.required_depth(config))
    return valid_depth(cls, call_user(cls, "required_depth", cls.required_depth, config))


def make_policy(config: SimConfig, trace_k: int) -> Policy:
    """Instantiate ``config.policy`` (:func:`resolve_policy`) for a trace of depth ``trace_k``;
    a user's class that fails to build, or builds without the base attributes, is one line."""
    cls = resolve_policy(config.policy)
    if POLICIES.get(config.policy) is cls:
        return cls(config, trace_k)
    policy_depth_of(cls, config)  # its own one-line errors before __init__ calls it
    policy = call_user(cls, f"{cls.__name__}(config, trace_k)", cls, config, trace_k)
    missing = [a for a in ("k", "depth", "rule", "budget") if not hasattr(policy, a)]
    if missing:
        raise SpecbatchError(f"policy {config.policy}: the instance has no {', '.join(missing)} "
                             "(call super().__init__(config, trace_k) in its __init__)")
    return policy

