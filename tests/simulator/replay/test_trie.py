"""Path-trie replay (K i.i.d. draft paths of L tokens): SpecInfer, Traversal and GBV on each
position's whole trie, vectorised over rows whose tries differ, against the per-request twin
and against the exact law of τ."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from specbatch.simulator.replay.chain import request_keys, uniforms
from specbatch.simulator.replay.tree import tau_reference
from specbatch.simulator.replay.trie import TrieTables, tree_tables_for
from specbatch.theory.exact.small_models import random_pair
from specbatch.theory.trees.stats import tau_law_from_stats, tree_stats
from specbatch.theory.trees.tree_shapes import parse_shape, tree_law
from specbatch.traces.format.tree_nodes import TreeNodes

RULES = ("specinfer", "traversal", "gbv")


def nodes_of(stats_list: list, shape) -> TreeNodes:
    """Flatten TreeStats (one per row) into a TreeNodes table, as a trie trace stores it."""
    cols: dict = {k: [] for k in ("parent", "depth", "token", "q", "pt", "trv_accept", "gbv_h")}
    counts, draw_counts, draws, rrs = [], [], [], []
    for st in stats_list:
        counts.append(len(st.parent))
        for name in cols:
            values = getattr(st, name)
            cols[name].extend(np.nan if v is None else float(v) if name in (
                "q", "pt", "trv_accept", "gbv_h") else v for v in values)
        for d, a in zip(st.draws, st.rrs_accept):
            draw_counts.append(len(d))
            draws.extend(d)
            rrs.extend(float(x) for x in a)
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    draw_offsets = np.concatenate([[0], np.cumsum(draw_counts)]).astype(np.int64)
    arr = {k: np.asarray(v) for k, v in cols.items()}
    return TreeNodes(shape, offsets, arr["parent"].astype(np.int32), arr["depth"].astype(np.int8),
                     arr["token"].astype(np.int32), arr["q"], arr["pt"], arr["q"],
                     arr["trv_accept"], arr["gbv_h"], draw_offsets,
                     np.asarray(draws, dtype=np.int32), np.asarray(rrs))


@pytest.fixture(scope="module")
def tries():
    """Every realised trie of 2 paths of 2 tokens over V = 3 (a table pair), with its exact
    probability and replay numbers: tries of 3, 4 and 5 nodes in one trace."""
    shape = parse_shape("2x2")
    pair = random_pair(4, 3, "table", depth=2, concentration=0.7)
    law = tree_law(pair, shape)
    roots = sorted(law, key=lambda r: -law[r])
    stats = [tree_stats(pair, root, shape) for root in roots]
    return SimpleNamespace(tree=nodes_of(stats, shape)), stats


def test_tree_tables_for_picks_the_trie_tables_and_the_rows_differ(tries):
    trace, stats = tries
    t = tree_tables_for(trace)
    assert isinstance(t, TrieTables)
    assert set(t.sizes.tolist()) == {3, 4, 5} and t.n_nodes == 5
    assert t.drafted == 4 and t.widths.tolist() == [1, 2] and t.width == 2
    assert t.uniforms_needed("gbv") == 3 and t.uniforms_needed("specinfer") == 4
    rows = np.arange(t.n_rows)
    mask = t.prefix_mask(rows, t.nodes(rows))
    assert (mask.sum(axis=1) == t.sizes).all()


@pytest.mark.parametrize("rule", RULES)
def test_vectorised_trie_replay_matches_the_twin(tries, rule):
    trace, stats = tries
    t = TrieTables(trace)
    rng = np.random.default_rng(5)
    rows = rng.integers(0, t.n_rows, 400)
    mask = t.prefix_mask(rows, t.nodes(rows))
    eta = uniforms(request_keys(9, np.arange(400)), rng.integers(0, 30, 400),
                   t.uniforms_needed(rule))
    fast = t.tau(rule, rows, mask, eta)
    for i, row in enumerate(rows.tolist()):
        kept = set(range(int(t.sizes[row])))
        assert fast[i] == tau_reference(stats[row], rule, kept, eta[i].tolist()), (rule, row)


@pytest.mark.parametrize("rule", RULES)
def test_replayed_mean_is_the_exact_expected_accepted_length(tries, rule):
    """Per trie, 20,000 coins: the mean τ is E[τ] of tau_law_from_stats within 4 SE."""
    trace, stats = tries
    t = TrieTables(trace)
    rng = np.random.default_rng(1)
    for row in range(min(t.n_rows, 6)):
        rows = np.full(20_000, row)
        mask = t.prefix_mask(rows, t.nodes(rows))
        tau = t.tau(rule, rows, mask, rng.random((rows.size, t.uniforms_needed(rule))))
        law = tau_law_from_stats(stats[row], rule)
        exact = sum(d * float(p) for d, p in enumerate(law))
        se = max(tau.std(), 1e-3) / np.sqrt(tau.size)
        assert abs(tau.mean() - exact) < 4 * se, (rule, row, tau.mean(), exact)


@pytest.mark.parametrize("rule", RULES)
def test_trie_runs_match_the_per_request_reference(rule):
    """The bundled real trie trace (3 paths of 3 tokens): the vectorised whole-trie replay and
    the reference engine (TreeStats per row, scalar hash, one step_time per pass) give equal
    tables; every decode step verifies each request's whole trie."""
    from specbatch.simulator.config.sim_config import load_config
    from specbatch.simulator.run import build_cost, load_trace, simulate
    from tests.simulator.helpers import StepTimeOnly

    config = load_config(None, trace="smollm2-drop2-trie", requests=16, policy="static-tree",
                         num_speculative_tokens=9, verify=rule, max_num_seqs=6)
    trace = load_trace(config)
    roofline = build_cost(config)
    fast = simulate(config, trace, cost_model=roofline)
    slow = simulate(config, trace, cost_model=StepTimeOnly(roofline), reference=True)
    pd.testing.assert_frame_equal(fast.requests, slow.requests, check_exact=True)
    pd.testing.assert_frame_equal(fast.steps, slow.steps, check_exact=True)
    decode = fast.steps[fast.steps["decode_requests"] > 0]
    assert (decode["drafted"] == 9 * decode["decode_requests"]).all()
    assert (decode["verified"] <= 9 * decode["decode_requests"]).all()
    assert (decode["verified"] >= 3 * decode["decode_requests"]).all()  # ≥ one path of L = 3


@pytest.mark.parametrize("kw, field", [
    (dict(policy="tetris-tree", num_speculative_tokens=3, extra=6, verify="specinfer"), "policy"),
    (dict(policy="static-tree", num_speculative_tokens=4, verify="gbv"),
     "num_speculative_tokens"),
])
def test_a_trie_replays_whole_only(kw, field):
    from specbatch.errors import SpecbatchError
    from specbatch.simulator.config.sim_config import load_config
    from specbatch.simulator.run import simulate

    with pytest.raises(SpecbatchError, match=f"field {field}: expected"):
        simulate(load_config(None, trace="smollm2-drop2-trie", requests=4, **kw))


def test_gbv_on_a_branching_tree_is_refused():
    from specbatch.errors import SpecbatchError
    from specbatch.simulator.config.sim_config import load_config
    from specbatch.simulator.run import simulate

    config = load_config(None, trace="smollm2-drop2-tree", requests=4, policy="static-tree",
                         num_speculative_tokens=10, verify="gbv")
    with pytest.raises(SpecbatchError, match="field verify: expected specinfer or traversal"):
        simulate(config)
