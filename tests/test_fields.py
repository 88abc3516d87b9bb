"""Self-describing config fields: the declaration on each field drives types, checks, help
and docs (specbatch/fields.py), for any frozen config dataclass."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import pytest

from specbatch.errors import SpecbatchError
from specbatch.fields import (
    AUTO,
    AutoBool,
    Range,
    above,
    at_least,
    check_ranges,
    check_toml_value,
    coerce,
    exact_value,
    field_specs,
    flag_help,
    knob,
    like,
    markdown_table,
    metavar,
    resolve_aliases,
)


@dataclass(frozen=True)
class Toy:
    size: int = knob(4, "how many", range=at_least(1))
    share: float = knob(0.5, "a part", range=Range(0, 1, low_open=True, what="a fraction"))
    mode: str = knob("fast", "how", choices=("fast", "slow"))
    limit: int | None = knob(None, "an upper bound", range=at_least(1), none="no limit")
    loud: bool = knob(False, "say more")


@dataclass(frozen=True)
class Other:
    size: int = like(Toy, "size", 8, help="how many others")


SPECS = field_specs(Toy)


def test_types_and_optionality_come_from_the_annotations():
    assert [(s.name, s.kind, s.optional) for s in SPECS.values()] == [
        ("size", int, False), ("share", float, False), ("mode", str, False),
        ("limit", int, True), ("loud", bool, False)]
    assert SPECS["size"].option == "--size" and Toy().size == 4


def test_ranges_say_their_values_in_words():
    assert at_least(1).text() == "a number >= 1"
    assert above(0, "seconds").text() == "seconds > 0"
    assert SPECS["share"].range.text() == "a fraction in (0, 1]"
    assert not SPECS["share"].range.contains(float("nan"))


@pytest.mark.parametrize("name, value", [("size", "4"), ("size", True), ("size", 4.0),
                                         ("loud", 1), ("share", "0.5"), ("mode", 3)])
def test_toml_values_need_their_exact_type(name, value):
    with pytest.raises(SpecbatchError, match=f"^here: field {name}: expected "):
        check_toml_value(SPECS[name], value, "here")


def test_toml_integers_widen_to_floats_and_stay_within_int64():
    assert check_toml_value(SPECS["share"], 1, "here") == 1.0
    with pytest.raises(SpecbatchError, match="within the int64 range"):
        check_toml_value(SPECS["size"], 2 ** 63, "here")


def test_command_line_strings_are_converted():
    assert coerce(SPECS["size"], "12", "x") == 12
    assert coerce(SPECS["limit"], "none", "x") is None
    assert coerce(SPECS["loud"], "yes", "x") is True
    with pytest.raises(SpecbatchError, match="field size: expected an integer, got 'none'"):
        coerce(SPECS["size"], "none", "x")
    with pytest.raises(SpecbatchError, match="field limit: expected an integer or none"):
        coerce(SPECS["limit"], "lots", "x")


def test_ranges_and_choices_are_checked_naming_the_field_or_the_flag():
    check_ranges(Toy(), SPECS, "toy")
    with pytest.raises(SpecbatchError, match="^toy: field size: expected a number >= 1, got 0$"):
        check_ranges(Toy(size=0), SPECS, "toy")
    with pytest.raises(SpecbatchError, match="^--mode: expected one of fast, slow, got 'warp'$"):
        check_ranges(Toy(mode="warp"), SPECS, "toy", by_flag=True)


def test_a_field_may_have_one_spelling_only():
    assert resolve_aliases({"n": 3}, {"n": "size"}, "toy:") == {"size": 3}
    with pytest.raises(SpecbatchError, match="toy: field 'size': given twice \\(as 'n' and "
                                             "'size'\\)"):
        resolve_aliases({"n": 3, "size": 4}, {"n": "size"}, "toy:")


def test_help_and_docs_come_from_the_declaration():
    assert flag_help(SPECS["mode"]) == "how; one of fast, slow (default: fast)"
    assert flag_help(SPECS["limit"]) == "an upper bound (default: no limit)"
    table = markdown_table(Toy, {"n": "size"})
    assert "| `size` (`n`) | int | `4` | a number >= 1 | how many |" in table
    assert "| `limit` | int or none | `none` | a number >= 1 or none | an upper bound " \
           "(none: no limit) |" in table
    assert "| `loud` | bool | `false` | true or false | say more |" in table


def test_a_shared_field_keeps_its_description_with_its_own_default():
    spec = field_specs(Other)["size"]
    assert (spec.default, spec.help, spec.range) == (8, "how many others", at_least(1))


@dataclass(frozen=True)
class Switch:
    overlap: bool | Literal["auto"] = knob("auto", "left to the engine unless given")


def test_a_switch_the_engine_may_resolve_takes_auto_true_or_false():
    """``bool | Literal["auto"]`` is the AutoBool kind: "auto", True or False from Python,
    TOML (exact types: the string "auto", a boolean) and the command line (auto, true/false
    spellings); anything else names the field."""
    spec = field_specs(Switch)["overlap"]
    assert (spec.kind, spec.optional, spec.default) == (AutoBool, False, AUTO)
    for value in (AUTO, True, False):
        assert exact_value(spec, value, "T") is value or exact_value(spec, value, "T") == value
        assert check_toml_value(spec, value, "T") == value
    for text, want in (("auto", AUTO), ("AUTO", AUTO), ("true", True), ("no", False),
                       ("1", True)):
        assert coerce(spec, text, "T") == want
    for bad in ("on", 1, None, 0.5):
        with pytest.raises(SpecbatchError, match="field overlap: expected auto, true or false"):
            exact_value(spec, bad, "T")
        with pytest.raises(SpecbatchError, match="field overlap: expected auto, true or false"):
            check_toml_value(spec, bad, "T")
    with pytest.raises(SpecbatchError, match="T: field overlap: expected auto, true or false, "
                                             "got 'maybe'"):
        coerce(spec, "maybe", "T")
    assert metavar(spec) == "AUTO|BOOL"
    assert "| `overlap` | auto or bool | `auto` | auto, true or false |" in markdown_table(Switch)
    assert flag_help(spec).endswith("(default: auto)")
