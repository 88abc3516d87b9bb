"""Command-line flags declared as data: a command's options are a tuple of :class:`Flag` records
and :func:`add_flags` is the one place that turns them into argparse arguments.

A command declares its flags once, in ``--help`` order, grouped into the sections its
``--help`` prints (:func:`grouped`); a command that shares a flag with another reuses the
declaration (``tune`` takes ``plan``'s workload and model flags) and changes only what
differs (:func:`dataclasses.replace` on the record, e.g. its help). ``simulate`` goes one step
further and generates its flags from the SimConfig fields (specbatch.cli.simulate).
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass


class _NotGiven:
    """The default of a flag that declares none (argparse's own default applies)."""

    def __repr__(self) -> str:
        return "NOT_GIVEN"


NOT_GIVEN = _NotGiven()


@dataclass(frozen=True)
class Flag:
    """One option or positional argument: its spellings and the argparse keywords it sets.

    names: ``("--out",)``, ``("--k", "-k")`` or a positional's name ``("profile",)``.
    group: the ``--help`` section it is listed in (None: the command's own options).
    The other fields are argparse's ``add_argument`` keywords; one left at its default is not
    passed, so argparse's own default applies (``store_true`` -> False, others -> None).
    """

    names: tuple[str, ...]
    help: str | None = None
    group: str | None = None
    type: Callable[[str], object] | None = None
    default: object = NOT_GIVEN
    choices: Iterable[object] | None = None
    metavar: str | None = None
    action: str | None = None
    nargs: str | int | None = None
    const: object = None
    required: bool = False

    def keywords(self) -> dict[str, object]:
        """The argparse keywords this flag sets, and only those."""
        given = {"help": self.help, "type": self.type, "choices": self.choices,
                 "metavar": self.metavar, "action": self.action, "nargs": self.nargs,
                 "const": self.const}
        out = {key: value for key, value in given.items() if value is not None}
        if self.default is not NOT_GIVEN:
            out["default"] = self.default
        if self.required:
            out["required"] = True
        return out


def flag(*names: str, **fields: object) -> Flag:
    """A :class:`Flag` named ``names`` with ``fields`` set by keyword."""
    return Flag(names=names, **fields)  # type: ignore[arg-type]


def grouped(title: str, *flags: Flag) -> tuple[Flag, ...]:
    """``flags`` listed under the ``--help`` section ``title``."""
    return tuple(dataclasses.replace(f, group=title) for f in flags)


def add_flags(parser: argparse.ArgumentParser, flags: Sequence[Flag]) -> None:
    """Add ``flags`` to ``parser`` in order, each section created where its first flag is."""
    sections: dict[str, argparse._ArgumentGroup] = {}
    for f in flags:
        target: argparse.ArgumentParser | argparse._ArgumentGroup = parser
        if f.group is not None:
            if f.group not in sections:
                sections[f.group] = parser.add_argument_group(f.group)
            target = sections[f.group]
        target.add_argument(*f.names, **f.keywords())  # type: ignore[arg-type]


def pick(flags: Sequence[Flag], name: str, **changes: object) -> Flag:
    """The flag of ``flags`` spelled ``name``, with ``changes`` (e.g. its own help): one
    declaration of a flag two commands share."""
    found = [f for f in flags if name in f.names]
    if not found:
        raise KeyError(f"no flag {name} among {[f.names[0] for f in flags]}")
    return dataclasses.replace(found[0], **changes)  # type: ignore[arg-type]
