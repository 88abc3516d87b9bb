"""The verification-rule catalogue as a specification: one row per rule, every replay class
conforms to its kind's interface and replays exactly the rules that name it, an unknown rule
is an error at the replay level (never block), and each row's properties hold of its theory."""

from __future__ import annotations

import inspect
from types import SimpleNamespace

import numpy as np
import pytest

from specbatch.errors import SpecbatchError
from specbatch.simulator.cost.verify_cost import verify_cost_for
from specbatch.simulator.replay import rules
from specbatch.simulator.replay.chain import (
    VerifyTables,
    request_keys,
    true_accept_probs,
    true_gains,
    uniforms,
)
from specbatch.simulator.replay.protocols import ChainReplay, TreeReplay
from specbatch.simulator.replay.replay_tables import tables_for
from specbatch.simulator.replay.rules import CATALOGUE, SAMPLER_COSTS, names, rule_entry
from specbatch.simulator.replay.tree import TreeTables, tau_reference
from specbatch.simulator.replay.trie import TrieTables
from specbatch.theory.exact import enumeration as exact
from specbatch.theory.exact.small_models import random_pair
from specbatch.theory.trees import tree_shapes
from specbatch.theory.trees import verifiers as tree_verifiers
from specbatch.theory.verify import reference
from tests.simulator.replay.test_tree import hand_trace
from tests.simulator.replay.test_trie import nodes_of

PROTOCOL = {"chain": ChainReplay, "tree": TreeReplay}
KNOWN = "token, block, specinfer, traversal, gbv"


@pytest.fixture(scope="module")
def trie_trace() -> SimpleNamespace:
    from specbatch.theory.trees.stats import tree_stats

    shape = tree_shapes.parse_shape("2x2")
    pair = random_pair(4, 3, "table", depth=2, concentration=0.7)
    roots = list(tree_shapes.tree_law(pair, shape))
    return SimpleNamespace(tree=nodes_of([tree_stats(pair, r, shape) for r in roots], shape))


@pytest.fixture(scope="module")
def traces(synth_trace_natural, trie_trace) -> dict:
    """One trace per replay class: a chain, a branching tree (shape 2,1), a path trie (2x2)."""
    return {VerifyTables: synth_trace_natural, TreeTables: hand_trace(), TrieTables: trie_trace}


def test_one_row_per_rule_with_its_kind_cost_and_scan():
    assert names() == ("token", "block", "specinfer", "traversal", "gbv")
    assert names(kind="chain") == reference.RULES  # theory's verify functions take these
    assert len(set(names())) == len(CATALOGUE)
    assert names(kind="chain") == ("token", "block") and names(tree=True) == names(kind="tree")
    for row in CATALOGUE:
        assert row.kind in PROTOCOL and row.sampler_cost in SAMPLER_COSTS and row.doc
        chain = row.kind == "chain"
        assert (row.scan in ("leading", "last")) == chain and bool(row.accept_column) == chain
        assert not (chain and (row.subtree or not row.branching))
    assert names(additive=True) == ("token",) and names(subtree=True) == ("specinfer",)


@pytest.mark.parametrize("row", CATALOGUE, ids=lambda r: r.name)
def test_every_replay_class_conforms_to_its_kinds_protocol(row, traces):
    """Members by isinstance on a built instance (runtime-checkable protocols check data
    members too), ``tau``'s parameters and defaults by signature."""
    protocol = PROTOCOL[row.kind]
    wanted = inspect.signature(protocol.tau).parameters
    for cls in row.replay_classes():
        assert isinstance(tables_for(traces[cls], row.name), protocol), cls.__name__
        got = inspect.signature(cls.tau).parameters
        assert list(got) == list(wanted), f"{cls.__name__}.tau{tuple(got)}"
        assert [p.default for p in got.values()] == [p.default for p in wanted.values()]


@pytest.mark.parametrize("cls", [VerifyTables, TreeTables, TrieTables], ids=lambda c: c.__name__)
def test_each_class_replays_exactly_the_rules_that_name_it(cls, traces):
    trace = traces[cls]
    mine = [row for row in CATALOGUE if cls in row.replay_classes()]
    assert mine, f"no row names {cls.__name__}"
    if cls is not VerifyTables:
        assert list(cls.REPLAYS) == [row.name for row in mine]
    for row in CATALOGUE:
        if row in mine:
            tables = tables_for(trace, row.name)
            assert type(tables) is cls and isinstance(tables, PROTOCOL[row.kind])
            tau = _tau(tables, row.name, trace)
            assert tau.dtype == np.int64 and (tau >= 0).all()
        elif row.kind == "tree" and cls is not VerifyTables:
            with pytest.raises(SpecbatchError, match=f"^verify: .*got '{row.name}'"):
                tables_for(trace, row.name)  # gbv on a branching tree
            with pytest.raises(SpecbatchError, match="^verify: "):
                _tau(tables_for(trace, mine[0].name), row.name, trace)


def _tau(tables, rule: str, trace) -> np.ndarray:
    rows = np.array([0, 0, 0])
    keys = request_keys(5, np.arange(3))
    if isinstance(tables, VerifyTables):
        return tables.tau(rows, np.array([0, 1, 3]), uniforms(keys, np.zeros(3, np.int64), 3))
    eta = uniforms(keys, np.zeros(3, np.int64), tables.uniforms_needed(rule))
    mask = tables.prefix_mask(rows, tables.nodes(rows))
    return tables.tau(rule, rows, mask, eta)


def test_an_unknown_rule_is_an_error_at_the_replay_level_never_block(traces):
    chain, tree, trie = traces[VerifyTables], traces[TreeTables], traces[TrieTables]
    for trace in (chain, tree, trie):
        with pytest.raises(SpecbatchError, match=f"^verify: expected one of {KNOWN}, got 'bock'$"):
            tables_for(trace, "bock")
    with pytest.raises(SpecbatchError, match=f"^verify: expected one of {KNOWN}"):
        VerifyTables(chain, "bock")
    with pytest.raises(SpecbatchError, match="^verify: expected a chain rule \\(token, block\\)"):
        VerifyTables(chain, "specinfer")
    with pytest.raises(SpecbatchError, match="^verify: expected a chain rule"):
        true_accept_probs(chain, np.array([0]), 2, "traversal")
    with pytest.raises(SpecbatchError, match="^verify: a tree rule"):
        tables_for(chain, "specinfer")  # a chain trace records no trees
    rows = np.array([0])
    for tables in (tables_for(tree, "specinfer"), tables_for(trie, "gbv")):
        with pytest.raises(SpecbatchError, match="replays .*got 'bock'"):
            tables.uniforms_needed("bock")
        with pytest.raises(SpecbatchError, match="replays .*got 'bock'"):
            tables.tau("bock", rows, tables.prefix_mask(rows, tables.nodes(rows)),
                       np.zeros((1, 8)))
    with pytest.raises(SpecbatchError, match="got 'bock'"):
        tau_reference(None, "bock", {0}, [0.5])


@pytest.mark.parametrize("row", CATALOGUE, ids=lambda r: r.name)
def test_lossless_is_what_exact_enumeration_of_its_theory_verifier_says(row):
    """THEORY.md §4's residual, exactly 0 iff the rule is lossless, on random exact pairs."""
    verifier = row.theory_function()
    if row.kind == "chain":
        assert verifier is {"token": reference.verify_token, "block": reference.verify_block}[
            row.name]
        residuals = [exact.validity_residual(random_pair(seed, 3, "markov", depth=3, exact=True),
                                             2, row.name) for seed in range(3)]
    else:
        assert verifier is tree_verifiers.VERIFIERS[row.name]
        shape = tree_shapes.parse_shape("2x2" if not row.branching else "2,1", "iid")
        residuals = []
        for seed in range(3):
            pair = random_pair(seed, 3, "markov", depth=shape.depth, exact=True)
            law = tree_verifiers.iteration_law(pair, shape, row.name)
            residuals.append(tree_verifiers.validity_residual(pair, law, shape.depth))
    assert all(r == 0 for r in residuals) == row.lossless


@pytest.mark.parametrize("row", [r for r in CATALOGUE if r.kind == "chain"], ids=lambda r: r.name)
def test_additive_and_accept_column_hold_on_a_trace(row, synth_trace_natural):
    """``additive``: E[τ | X^s] is the prefix sum of P(τ ≥ j | X^j) from ``accept_column``;
    a non-additive rule's gains differ from that sum somewhere (BV on a T = 1 trace)."""
    trace, rows, depth = synth_trace_natural, np.arange(200), 4
    probs = true_accept_probs(trace, rows, depth, row.name)  # [n, depth]
    assert np.array_equal(probs, getattr(trace, row.accept_column)[rows, :depth])
    summed = np.concatenate([np.zeros((rows.size, 1)), np.cumsum(probs, axis=1)], axis=1)
    gains = true_gains(trace, rows, depth, row.name)  # [n, depth + 1]
    assert np.allclose(gains, summed) == row.additive


@pytest.mark.parametrize("row", CATALOGUE, ids=lambda r: r.name)
def test_a_run_prices_its_sampler_with_the_rows_cost_key(row):
    config = SimpleNamespace(verify=row.name, verify_cost="fused", hardware="h100",
                             target="recorded")
    models = {"target": {"vocab": 32000}}
    trace = SimpleNamespace(meta={"temperature": 1.0, "models": models}, q=np.array([[0.5]]))
    assert verify_cost_for(config, trace, free_draft=False).rule == row.sampler_cost
    greedy = SimpleNamespace(meta={"temperature": 0.0, "models": models}, q=trace.q)
    assert verify_cost_for(config, greedy, free_draft=False).rule == "token"  # T = 0: BV is TV


def test_rule_entry_names_the_verify_field_and_the_module_stays_light():
    with pytest.raises(SpecbatchError, match=f"^verify: expected one of {KNOWN}, got 'TOKEN'$"):
        rule_entry("TOKEN")
    source = inspect.getsource(rules)
    assert "import numpy" not in source and "from specbatch.simulator.replay." not in source
