"""Path-trie replay (K i.i.d. draft paths of L tokens): SpecInfer, Traversal and GBV on each
position's whole trie, vectorised over rows whose tries differ, against the per-request twin
and against the exact law of τ."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from specbatch.simulator.tree_tables import tau_reference
from specbatch.simulator.trie_tables import TrieTables, tables_for
from specbatch.simulator.verify import request_keys, uniforms
from specbatch.theory.models import random_pair
from specbatch.theory.tree_shapes import parse_shape, tree_law
from specbatch.theory.tree_stats import tau_law_from_stats, tree_stats
from specbatch.traces.tree_nodes import TreeNodes

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


def test_tables_for_picks_the_trie_tables_and_the_rows_differ(tries):
    trace, stats = tries
    t = tables_for(trace)
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
