"""The policy catalogue (simulator/policies/catalogue.py) is the single source of a built-in
policy's
identity: every row names a real class and real config fields, its traits agree with the
class, the CLI and every derived list read it, and no other module spells a list of names."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

from specbatch.simulator.config.sim_config import SimConfig
from specbatch.simulator.policies import catalogue
from specbatch.simulator.policies.base import HOOKS, Policy, defines
from specbatch.simulator.policies.catalogue import BY_NAME, CATALOGUE, KNOB_POLICY, names
from specbatch.simulator.policies.registry import POLICIES, resolve_policy

ROOT = Path(__file__).resolve().parents[3]
ROWS = [pytest.param(row, id=row.name) for row in CATALOGUE]
#: Name collections outside the catalogue that are an analysis's choice of arms to compare
#: (not a policy's identity): the file and the names, so a new list is caught.
ARMS = {("analysis/report/demo.py", ("tetris", "oracle", "hindsight")),
        ("analysis/plan/space.py", ("ar", "fixed", "tetris", "dsd")),
        ("analysis/report/predictor_quality.py", ("tetris", "fixed")),
        ("analysis/report/predictor_quality.py", ("fixed", "oracle")),
        ("analysis/report/replication.py", ("tetris", "fixed")),
        ("analysis/report/sweep_report.py", ("tetris", "fixed"))}


def test_rows_are_frozen_unique_and_sorted():
    assert [row.name for row in CATALOGUE] == sorted(BY_NAME) == list(names())
    with pytest.raises(dataclasses.FrozenInstanceError):
        CATALOGUE[0].name = "x"  # type: ignore[misc]


def test_the_registry_is_the_catalogue_and_every_name_resolves_to_its_row_s_class():
    assert list(POLICIES) == list(names())
    for row in CATALOGUE:
        cls = resolve_policy(row.name)
        assert cls is row.load() and cls.name == row.name and issubclass(cls, Policy)


@pytest.mark.parametrize("row", ROWS)
def test_a_row_s_traits_agree_with_its_class(row):
    cls = row.load()
    assert row.tree == cls.tree and not hasattr(cls, "live")  # the row is live's one home
    assert row.verifies == cls.speculates  # ar alone neither drafts nor verifies
    # a policy that calibrates, always (row.calibrates) or with a fitted predictor
    # (row.predictor), defines the hook on its class; the row decides when it is called
    # (tree-optimum inherits the tree policies' hook and reads no predictor: never called)
    if row.calibrates or row.predictor:
        assert cls.calibrate is not Policy.calibrate
    assert not row.whole_tree or row.tree
    assert row.min_draft in ("", "k", "depth")


@pytest.mark.parametrize("row", ROWS)
@pytest.mark.parametrize("predictor", ["confidence", "logistic"])
def test_no_policy_object_rewrites_its_traits(row, predictor):
    """Traits live on the row and the class: building a policy sets no instance attribute
    named like a trait or a hook (TETRIS once set ``live``, ``reads`` and ``calibrate`` on
    itself), and whether a run calibrates it is the row's answer."""
    from specbatch.simulator.config.sim_config import load_config
    from specbatch.simulator.policies.calibration import calibrates
    from specbatch.simulator.policies.registry import make_policy

    if predictor != "confidence" and not row.predictor:
        pytest.skip("only a row that reads the predictor takes a fitted one")
    settings = {"verify": "specinfer", "num_speculative_tokens": 3} if row.tree else {}
    config = load_config(None, policy=row.name, predictor=predictor, extra=0, **settings)
    policy = make_policy(config, 8)
    assert not set(vars(policy)) & {"live", "reads", "calibrate", "tree", *HOOKS}
    assert calibrates(config, policy) == (row.calibrates or predictor != "confidence")


@pytest.mark.parametrize("row", ROWS)
def test_a_row_s_knobs_are_config_fields_read_by_it_alone(row):
    fields = {f.name for f in dataclasses.fields(SimConfig)}
    assert set(row.knobs) <= fields
    assert all(KNOB_POLICY[knob] == row.name for knob in row.knobs)


@pytest.mark.parametrize("row", [p for p in ROWS if not p.values[0].uses_extra])
def test_a_policy_that_ignores_extra_asks_the_same_depth_with_or_without_it(row):
    base = SimConfig(policy=row.name, num_speculative_tokens=3, predictor="confidence")
    cls = row.load()
    assert cls.required_depth(base.replace(extra=2)) == cls.required_depth(base)


def test_the_cli_lists_exactly_the_catalogue_s_names(capsys):
    from specbatch.cli import main

    assert main(["simulate", "--trace", "synth", "--policy", "nope"]) == 2
    err = capsys.readouterr().err
    listed = err.split("expected one of ")[1].split(" or package.module:Class")[0]
    assert tuple(listed.split(", ")) == names()
    policy = next(f for f in dataclasses.fields(SimConfig) if f.name == "policy")
    assert ", ".join(names()) in str(policy.metadata)


def test_hooks_are_declared_on_the_base_and_found_only_where_overridden():
    class Plain(Policy):
        name = "plain"

    class Priced(Policy):
        name = "priced"

        def price_verification(self, sampler):
            self.sampler = sampler

    config = SimConfig(policy="fixed", num_speculative_tokens=2)
    plain, priced = Plain(config, 4), Priced(config, 4)
    for hook in HOOKS:
        assert getattr(Policy, hook).__doc__, hook
        assert not defines(plain, hook)
    assert defines(priced, "price_verification") and not defines(priced, "calibrate")
    plain.calibrate = lambda trace: None  # set on the instance, as tetris does when fitted
    assert defines(plain, "calibrate")
    assert plain.run_notes(config, None) == ()


def test_no_module_but_the_catalogue_spells_a_list_of_policy_names():
    found = set()
    for folder in ("simulator", "live", "analysis", "specbatch", "traces", "theory"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            if path.name == "catalogue.py" and path.parent.name == "simulator":
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, (ast.Tuple, ast.List, ast.Set)) and len(node.elts) >= 2:
                    values = [e.value for e in node.elts if isinstance(e, ast.Constant)]
                    if len(values) == len(node.elts) and all(v in BY_NAME for v in values):
                        found.add((path.relative_to(ROOT).as_posix(), tuple(values)))
    assert found <= ARMS, sorted(found - ARMS)
    assert catalogue.__doc__
