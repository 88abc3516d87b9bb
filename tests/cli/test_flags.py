"""specbatch.cli.flags: a declared flag adds exactly the argparse argument it names."""

from __future__ import annotations

import argparse

import pytest

from specbatch.cli.flags import NOT_GIVEN, add_flags, flag, grouped, pick


def by_hand() -> argparse.ArgumentParser:
    """The reference: the same arguments added one add_argument call at a time."""
    p = argparse.ArgumentParser(prog="x")
    p.add_argument("path", metavar="PATH", help="a positional")
    p.add_argument("--out", required=True, help="where")
    work = p.add_argument_group("workload")
    work.add_argument("--rate", type=float, default=None, help="offered load")
    work.add_argument("--arrival", choices=("poisson", "burst"), default="poisson")
    models = p.add_argument_group("models")
    models.add_argument("--batch", type=int, nargs="+", default=[1, 8], metavar="B")
    p.add_argument("--json", action="store_true", help="one JSON object")
    return p


DECLARED = (
    flag("path", metavar="PATH", help="a positional"),
    flag("--out", required=True, help="where"),
    *grouped("workload",
             flag("--rate", type=float, default=None, help="offered load"),
             flag("--arrival", choices=("poisson", "burst"), default="poisson")),
    *grouped("models", flag("--batch", type=int, nargs="+", default=[1, 8], metavar="B")),
    flag("--json", action="store_true", help="one JSON object"),
)


def declared() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="x")
    add_flags(p, DECLARED)
    return p


def test_declared_flags_print_the_same_help_as_add_argument_calls():
    assert declared().format_help() == by_hand().format_help()


@pytest.mark.parametrize("argv", [
    ["a", "--out", "o"],
    ["a", "--out", "o", "--rate", "2.5", "--arrival", "burst", "--batch", "3", "4", "--json"],
])
def test_declared_flags_parse_the_same_namespace(argv):
    assert vars(declared().parse_args(argv)) == vars(by_hand().parse_args(argv))


def test_a_field_left_unset_is_not_passed_to_argparse():
    assert flag("--json", action="store_true").keywords() == {"action": "store_true"}
    assert flag("--x", default=None).keywords() == {"default": None}
    assert flag("--x").default is NOT_GIVEN


def test_pick_reuses_a_declaration_with_changes():
    shared = pick(DECLARED, "--rate", help="another meaning")
    assert (shared.names, shared.type, shared.group, shared.help) == (
        ("--rate",), float, "workload", "another meaning")
    with pytest.raises(KeyError, match="--absent"):
        pick(DECLARED, "--absent")
