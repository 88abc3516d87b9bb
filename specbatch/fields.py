"""Config fields that describe themselves: type, default, choices, range and help on the field.

A config dataclass declares each field with :func:`knob` (a ``dataclasses.field`` whose
``metadata`` holds the help text, the allowed values and the range, as Vidur's configs do).
Everything else is generated from those declarations: the type of each field
(:func:`field_kind`), the checks of values from TOML files (:func:`check_toml_value`: exact
TOML types), from command-line strings and from Python (:func:`coerce`), the range and choice
checks (:func:`check_ranges`), the ``--help`` of each flag (:func:`flag_help`) and the
Markdown table of the docs (:func:`markdown_table`).

Every failure is one line: ``WHERE: field NAME: expected WHAT, got VALUE``.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from specbatch.errors import SpecbatchError
from specbatch.limits import INT64_MAX

#: The range of a 64-bit signed integer: every integer field is stored in int64 columns.
INT64_MIN = -INT64_MAX - 1
INT64_WORDS = "an integer within the int64 range (|n| < 2^63)"


class AutoBool:
    """The kind of a switch a user may leave to the engine: ``"auto"``, true or false (a field
    annotated ``bool | Literal["auto"]``). "auto" is the engine's own rule for the unset flag,
    resolved per run by the code that reads the field (vLLM's ``--async-scheduling``:
    simulator.cost.features.async_overhead.resolve_async)."""


#: The string an :class:`AutoBool` field holds for "left to the engine".
AUTO = "auto"
#: How an error message names the value a field of each type expects.
KIND_WORDS = {int: "an integer", float: "a number", bool: "true or false", str: "a string",
              AutoBool: "auto, true or false"}
#: How the docs' table and a flag's metavar name each type.
KIND_NAMES = {AutoBool: "auto or bool"}
#: Command-line spellings of booleans.
TRUE_WORDS, FALSE_WORDS = ("true", "1", "yes"), ("false", "0", "no")


@dataclass(frozen=True)
class Range:
    """An interval of allowed numbers, and how an error message names its values."""

    low: float = -math.inf
    high: float = math.inf
    low_open: bool = False
    high_open: bool = False
    what: str = "a number"

    def contains(self, value: float) -> bool:
        if not math.isfinite(value):
            return False
        above = value > self.low if self.low_open else value >= self.low
        below = value < self.high if self.high_open else value <= self.high
        return above and below

    def text(self) -> str:
        """``a number >= 1``, ``a fraction in (0, 1]``, ``seconds > 0``."""
        if math.isinf(self.high):
            return f"{self.what} {'>' if self.low_open else '>='} {self.low:g}"
        return (f"{self.what} in {'(' if self.low_open else '['}{self.low:g}, "
                f"{self.high:g}{')' if self.high_open else ']'}")


def at_least(low: float, what: str = "a number") -> Range:
    return Range(low, what=what)


def above(low: float, what: str = "a number") -> Range:
    return Range(low, low_open=True, what=what)


def knob(default: object, help: str, choices: tuple[str, ...] | Callable[[], tuple[str, ...]] = (),
         range: Range | None = None, names: Callable[[], tuple[str, ...]] | None = None,
         every_name: bool = False, flags: tuple[str, ...] = (), none: str = "",
         flag: bool = True) -> typing.Any:
    """A dataclass field carrying its own description.

    help: what the field means (one sentence, no default: that is added where shown).
    choices: the allowed strings (or a function returning them, looked up when needed).
    range: the allowed numbers. names: known values listed in help, not checked here (model
    shape names: a profile may name others); every_name: they are all the allowed values (checked by
    the config's own lookup, e.g. case-insensitive hardware presets). flags: extra command-line
    spellings (``--k``). none: what None means, for an optional field. flag: whether the command
    line offers this field as a flag.
    """
    meta = {"help": help, "choices": choices, "range": range, "names": names,
            "every_name": every_name, "flags": flags, "none": none, "flag": flag}
    return dataclasses.field(default=default, metadata=meta)


@dataclass(frozen=True)
class FieldSpec:
    """One field's declaration, resolved: name, base type, optionality, default, metadata."""

    name: str
    kind: type
    optional: bool
    default: object
    help: str
    choices: tuple[str, ...]
    range: Range | None
    names: tuple[str, ...]
    every_name: bool
    flags: tuple[str, ...]
    none: str
    flag: bool

    @property
    def option(self) -> str:
        """The command-line flag: ``max_num_seqs`` -> ``--max-num-seqs``."""
        return "--" + self.name.replace("_", "-")


def like(cls: type, name: str, default: object, **changes: object) -> typing.Any:
    """A field declared as ``cls``'s field ``name`` (its help, choices, range), with its own
    default and ``changes``: one description for a setting two configs share."""
    base = next(f for f in dataclasses.fields(cls) if f.name == name)
    meta = {**base.metadata, **changes}
    return dataclasses.field(default=default, metadata=meta)


def field_kind(hint: object) -> tuple[type, bool]:
    """(base type, whether None is allowed) of a field annotation such as ``int | None``;
    ``bool | Literal["auto"]`` is :class:`AutoBool`."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if set(args) == {bool, typing.Literal[AUTO]}:
            return AutoBool, len(args) < len(typing.get_args(hint))
        if len(args) != 1:
            raise TypeError(f"unsupported config annotation {hint!r}")
        return args[0], True
    if not isinstance(hint, type):
        raise TypeError(f"unsupported config annotation {hint!r}")
    return hint, False


@functools.lru_cache(maxsize=64)
def type_hints(cls: type) -> dict:
    """``typing.get_type_hints(cls)``, once per class: evaluating the annotation strings is
    most of a config's validation (~2 ms; a plan validates thousands of configs). Read only."""
    return typing.get_type_hints(cls)


def field_specs(cls: type) -> dict[str, FieldSpec]:
    """Every field of the config dataclass ``cls``, in declaration order (the ``names`` and
    ``choices`` callables are asked each time: a catalogue may grow)."""
    hints = type_hints(cls)
    specs = {}
    for f in dataclasses.fields(cls):
        kind, optional = field_kind(hints[f.name])
        meta = f.metadata
        choices = meta.get("choices", ())
        names = meta.get("names")
        specs[f.name] = FieldSpec(
            name=f.name, kind=kind, optional=optional, default=f.default,
            help=meta.get("help", ""), choices=tuple(choices() if callable(choices) else choices),
            range=meta.get("range"), names=tuple(names()) if names else (),
            every_name=meta.get("every_name", False),
            flags=tuple(meta.get("flags", ())), none=meta.get("none", ""),
            flag=meta.get("flag", True))
    return specs


#: The most characters of a refused value an error line quotes (a 2,000-character JSON
#: string stays one readable line).
GOT_CHARS = 120


def fail(where: str, name: str, expected: str, got: object) -> typing.NoReturn:
    shown = repr(got)
    if len(shown) > GOT_CHARS:
        shown = f"{shown[:GOT_CHARS]}... ({len(shown)} characters)"
    raise SpecbatchError(f"{where}: field {name}: expected {expected}, got {shown}")


def _expected(spec: FieldSpec) -> str:
    words = KIND_WORDS[spec.kind]
    return f"{words} or none" if spec.optional else words


def _int64(spec: FieldSpec, value: int, where: str) -> int:
    if not INT64_MIN <= value <= INT64_MAX:
        fail(where, spec.name, INT64_WORDS, value)
    return value


def check_toml_value(spec: FieldSpec, value: object, where: str) -> object:
    """A value read from a TOML file, with TOML's own type exactly: ``"64"`` is not an
    integer, ``true`` is not 1, ``64.0`` is not an integer; a float field takes an integer."""
    kind = spec.kind
    if kind is bool:
        ok = isinstance(value, bool)
    elif kind is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif kind is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    elif kind is AutoBool:
        ok = isinstance(value, bool) or (isinstance(value, str) and value == AUTO)
    else:
        ok = isinstance(value, str)
    if not ok:
        fail(where, spec.name, KIND_WORDS[kind], value)
    if kind is int:
        return _int64(spec, value, where)  # type: ignore[arg-type]
    return float(value) if kind is float else value  # type: ignore[arg-type]


def coerce(spec: FieldSpec, value: object, where: str) -> object:
    """A value from the command line (a string) or from Python, converted to the field's
    type (:func:`convert`); a mismatch is ``WHERE: field NAME: expected ...``."""
    try:
        return convert(spec, value)
    except ValueError as exc:
        raise SpecbatchError(f"{where}: field {spec.name}: {exc}") from None


def convert(spec: FieldSpec, value: object) -> object:
    """``value`` as the field's type: ``"none"`` for an optional field, ``"true"``/``"false"``
    for a flag (and ``"auto"`` for an :class:`AutoBool` one), integral floats and numpy
    integers for an integer. Raises ValueError ``expected WHAT, got VALUE`` (the argparse
    ``type=`` of generated flags uses it)."""
    if value is None or (spec.optional and isinstance(value, str) and value.lower() == "none"):
        if spec.optional:
            return None
        raise ValueError(f"expected {KIND_WORDS[spec.kind]}, got 'none'")
    try:
        converted = _convert(spec.kind, value)
    except (TypeError, ValueError, OverflowError):
        words = _expected(spec) if isinstance(value, str) else KIND_WORDS[spec.kind]
        raise ValueError(f"expected {words}, got {value!r}") from None
    if spec.kind is int and not INT64_MIN <= converted <= INT64_MAX:  # type: ignore[operator]
        raise ValueError(f"expected {INT64_WORDS}, got {converted!r}")
    return converted


def _convert(kind: type, value: object) -> object:
    if kind is AutoBool:
        if isinstance(value, str) and value.lower() == AUTO:
            return AUTO
        return _convert(bool, value)
    if kind is bool:
        if isinstance(value, str):
            low = value.lower()
            if low not in TRUE_WORDS + FALSE_WORDS:
                raise ValueError(value)
            return low in TRUE_WORDS
        if not isinstance(value, (bool, int)):
            raise ValueError(value)
        return bool(value)
    if kind is int:
        if isinstance(value, bool):
            raise ValueError(value)
        if isinstance(value, float) and not value.is_integer():
            raise ValueError(value)
        return int(value)  # type: ignore[call-overload]
    if kind is float:
        if isinstance(value, bool):
            raise ValueError(value)
        return float(value)  # type: ignore[arg-type]
    if not isinstance(value, str):
        raise ValueError(value)
    return value


def exact_value(spec: FieldSpec, value: object, where: str) -> object:
    """``value`` as stored in a config built from Python (``SimConfig(requests=2.5)``): of the
    field's type exactly, never converted with a loss. An integer field takes an integral
    number that is not a bool (numpy integers become ``int``); a float field a finite real
    that is not a bool (becomes ``float``); a bool field a bool (numpy's too); an
    :class:`AutoBool` field a bool or ``"auto"``; a string field a string; None only where
    optional. Anything else is ``WHERE: field NAME: expected ..., got
    ...``."""
    import numbers

    import numpy as np

    if value is None:
        if spec.optional:
            return None
        fail(where, spec.name, KIND_WORDS[spec.kind], value)
    boolean = isinstance(value, (bool, np.bool_))
    kind = spec.kind
    if kind in (bool, AutoBool) and boolean:
        return bool(value)
    if kind is AutoBool and isinstance(value, str) and value == AUTO:
        return AUTO
    if kind is int and isinstance(value, numbers.Integral) and not boolean:
        return _int64(spec, int(value), where)
    if kind is float and isinstance(value, numbers.Real) and not boolean:
        number = float(value)
        if not math.isfinite(number):
            fail(where, spec.name, "a finite number", value)
        return number
    if kind is str and isinstance(value, str):
        return value
    fail(where, spec.name, _expected(spec), value)


def check_ranges(config: object, specs: Mapping[str, FieldSpec], where: str,
                 by_flag: bool = False) -> None:
    """Every field's declared range and choices (None passes: it means the default rule).

    by_flag: name each field by its command-line flag (``--dtype: expected ...``) instead of
    ``WHERE: field dtype: expected ...``.
    """
    for spec in specs.values():
        value = getattr(config, spec.name)
        if value is None:
            continue
        expected = None
        if spec.range is not None and not spec.range.contains(value):
            expected = spec.range.text()
        elif spec.choices and value not in spec.choices:
            expected = f"one of {', '.join(spec.choices)}"
        if expected is None:
            continue
        if by_flag:
            raise SpecbatchError(f"{spec.option}: expected {expected}, got {value!r}")
        fail(where, spec.name, expected, value)


def resolve_aliases(values: Mapping[str, object], aliases: Mapping[str, str],
                    where: str) -> dict[str, object]:
    """``values`` with each alias spelled as its field (``k`` -> ``num_speculative_tokens``);
    a field given under two spellings (``k`` and ``num_speculative_tokens``) is a one-line
    error rather than a silent choice of the last."""
    out: dict[str, object] = {}
    spelled: dict[str, str] = {}
    for key, value in values.items():
        name = aliases.get(key, key)
        if name in out:
            raise SpecbatchError(f"{where} field '{name}': given twice (as '{spelled[name]}' "
                                 f"and '{key}'); keep one spelling")
        out[name], spelled[name] = value, key
    return out


def kind_name(spec: FieldSpec) -> str:
    """The field's type as the docs' table names it: ``int``, ``bool``, ``auto or bool``."""
    return KIND_NAMES.get(spec.kind, spec.kind.__name__)


def metavar(spec: FieldSpec) -> str:
    """The field's command-line metavar: ``INT``, ``BOOL``, ``AUTO|BOOL``."""
    return kind_name(spec).replace(" or ", "|").upper()


def show_default(spec: FieldSpec) -> str:
    """The default as a user writes it: ``64``, ``fixed``, ``false``, ``none``."""
    if spec.default is None:
        return "none"
    if isinstance(spec.default, bool):
        return "true" if spec.default else "false"
    return str(spec.default)


def allowed(spec: FieldSpec) -> str:
    """The allowed values in words: ``one of a, b``, a range, known names, or the type."""
    parts = []
    if spec.choices:
        parts.append(f"one of {', '.join(spec.choices)}")
    if spec.names:
        parts.append(f"{_names_word(spec)} {', '.join(spec.names)}")
    if spec.range is not None:
        parts.append(spec.range.text())
    if not parts:
        parts.append(KIND_WORDS[spec.kind])
    return "; ".join(parts) + (" or none" if spec.optional else "")


def _names_word(spec: FieldSpec) -> str:
    return "one of" if spec.every_name else "e.g."


def flag_help(spec: FieldSpec) -> str:
    """A flag's ``--help``: meaning; allowed values (default: X, or what none means)."""
    text = spec.help
    if spec.choices:
        text += f"; one of {', '.join(spec.choices)}"
    elif spec.names:
        text += f"; {_names_word(spec)} {', '.join(spec.names)}"
    default = spec.none if spec.default is None and spec.none else show_default(spec)
    return f"{text} (default: {default})"


def markdown_table(cls: type, aliases: Mapping[str, str] | None = None) -> str:
    """The fields of ``cls`` as a Markdown table: name (and aliases), type, default, allowed
    values, meaning."""
    spelled: dict[str, list[str]] = {}
    for alias, name in (aliases or {}).items():
        spelled.setdefault(name, []).append(alias)
    rows = ["| field | type | default | allowed | meaning |", "|---|---|---|---|---|"]
    for spec in field_specs(cls).values():
        name = f"`{spec.name}`" + "".join(f" (`{a}`)" for a in spelled.get(spec.name, ()))
        kind = kind_name(spec) + (" or none" if spec.optional else "")
        meaning = spec.help + (f" (none: {spec.none})" if spec.none else "")
        cells = (name, kind, f"`{show_default(spec)}`", allowed(spec), meaning)
        rows.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(rows) + "\n"
