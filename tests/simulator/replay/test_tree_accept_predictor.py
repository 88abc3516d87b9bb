"""tetris-tree's learned per-node acceptance predictor (simulator/replay/tree_accept_predictor.py):
fitted on held-out calibration trees from draft-side signals only, ranked as a capped frontier
greedy on the predicted reach."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest

from specbatch.cli import main
from specbatch.errors import SpecbatchError
from specbatch.simulator.config.sim_config import load_config
from specbatch.simulator.policies.calibration import split_trace
from specbatch.simulator.policies.registry import make_policy
from specbatch.simulator.policies.view import StepView
from specbatch.simulator.replay import tree_accept_predictor as TP
from specbatch.simulator.replay.tree import TreeTables
from specbatch.simulator.run import build_cost, simulate
from specbatch.theory.trees import alloc as A
from specbatch.theory.trees import reach as R
from specbatch.traces.format.files import read_trace
from tests.cli.oneline import assert_one_line_error
from tests.simulator.helpers import StepTimeOnly
from tests.simulator.replay.test_tree import ROOT

IID = "smollm2-drop2-tree-iid"
TOPK = "smollm2-drop2-tree"


@pytest.fixture(scope="module")
def iid():
    return read_trace(ROOT / "traces" / "data" / IID)


@pytest.fixture(scope="module")
def split(iid):
    """(calibration trace, replay trace) as a run with calibration_split 0.25, seed 0 makes."""
    calibration, replay, _ = split_trace(iid, 0.25, 0)
    return calibration, replay


def fitted_policy(calibration, kind="learned", k=3, extra=7):
    config = load_config(None, trace=IID, verify="specinfer", policy="tetris-tree",
                         num_speculative_tokens=k, extra=extra, predictor=kind,
                         calibration_split=0.25)
    policy = make_policy(config, 3)
    policy.calibrate(calibration)
    return policy


def decide(policy, trace, rows, budget):
    rows = np.asarray(rows, dtype=np.int64)
    view = StepView(trace, rows, np.zeros(rows.size, dtype=np.int64), int(budget), 10, None)
    return view, policy.decide_tree(view)


def perturbed(trace, seed):
    """The trace with every target-side and replay number of its trees redrawn: q, pt,
    trv_accept, rrs_accept (what the predictor must not read)."""
    rng = np.random.default_rng(seed)
    t = trace.tree
    tree = dataclasses.replace(t, q=rng.uniform(0.01, 1, t.q.size),
                               pt=rng.uniform(0, 1, t.pt.size),
                               trv_accept=rng.uniform(0, 1, t.trv_accept.size),
                               rrs_accept=rng.uniform(0, 1, t.rrs_accept.size))
    return dataclasses.replace(trace, tree=tree)


def test_the_reach_formula_on_true_acceptance_is_the_recorded_reach(iid):
    tables = TreeTables(iid)
    reach = tables.reach_for(tables.accept)
    np.testing.assert_allclose(reach, tables.reach, rtol=0, atol=1e-12)


def test_features_are_per_node_draft_signals_by_hand():
    """One 2,1 tree (root, a, a's child, b): b repeats a's token."""
    parent, pred, depth = np.array([-1, 0, 1, 0]), np.array([-1, 0, 1, 1]), np.array([0, 1, 2, 1])
    conf = np.array([[1.0, 0.5, 0.2, 0.5]])
    token = np.array([[-1, 7, 3, 7]])
    x = TP.node_features(conf, token, parent, pred, depth, iid=True)[0]
    col = {name: x[:, j] for j, name in enumerate(TP.FEATURES)}
    assert col["depth"].tolist() == [1, 2, 1] and col["draw_index"].tolist() == [0, 0, 1]
    assert col["parent_conf"].tolist() == [1.0, 0.5, 1.0]
    np.testing.assert_allclose(col["log_path_conf"], np.log([0.5, 0.1, 0.5]))
    assert col["repeat"].tolist() == [0, 0, 1]
    assert col["siblings_conf_before"].tolist() == [0, 0, 0.5]
    assert col["iid"].tolist() == [1, 1, 1]


def test_each_rows_order_is_its_own_frontier_greedy_with_monotone_scores(split):
    _, replay = split
    tables = TreeTables(replay)
    rng = np.random.default_rng(0)
    score = rng.uniform(0, 1, (50, tables.n_nodes))
    ranking = TP.rank_nodes(score, tables.pred)
    assert (np.diff(ranking.score, axis=1) <= 0).all()
    for row in range(50):
        for c in range(tables.n_nodes):
            greedy = A.frontier_greedy(tables.pred, score[row:row + 1], c)[0]
            assert (ranking.prefix_mask(np.array([row]), np.array([c]))[0] == greedy).all()


@pytest.mark.parametrize("kind", ["learned", "logistic"])
def test_decisions_are_closed_budgeted_capped_and_the_capped_frontier_greedy(split, kind):
    calibration, replay = split
    policy = fitted_policy(calibration, kind, k=2, extra=2)  # cap k + e = 4
    tables = TreeTables(replay)
    probs = policy.predictor.node_probs(replay, tables)
    reach = tables.reach_for(probs)
    rng = np.random.default_rng(1)
    for _ in range(25):
        n = int(rng.integers(1, 17))
        rows = rng.choice(replay.n_rows, n, replace=False)
        budget = int(rng.integers(0, 6 * n))
        _, (drafted, verified, mask) = decide(policy, replay, rows, budget)
        assert tables.check_closed(mask).all() and R.is_closed(tables.pred, mask).all()
        assert verified.sum() <= budget and (verified <= 4).all()
        assert (mask[:, 1:].sum(axis=1) == verified).all() and (drafted == 10).all()
        assert (mask == A.frontier_greedy(tables.pred, reach[rows], budget, limit=4)).all()


def test_decisions_read_no_target_side_number_of_the_evaluated_rows(split):
    calibration, replay = split
    policy = fitted_policy(calibration)
    other = perturbed(replay, 3)
    rng = np.random.default_rng(2)
    for _ in range(10):
        rows = rng.choice(replay.n_rows, 8, replace=False)
        _, got = decide(policy, replay, rows, 24)
        _, again = decide(policy, other, rows, 24)
        for a, b in zip(got, again):
            assert (a == b).all()


def test_the_fit_reads_the_calibration_rows_acceptance_and_nothing_of_the_replayed(split):
    calibration, replay = split
    tables = TreeTables(replay)
    base = TP.fit_tree_predictor(calibration).node_probs(replay, tables)
    moved = TP.fit_tree_predictor(perturbed(calibration, 4)).node_probs(replay, tables)
    assert not np.array_equal(base, moved)  # the labels come from the calibration rows


def test_a_run_fits_on_exactly_the_calibration_requests(iid, split, monkeypatch):
    seen = []
    fit = TP.fit_tree_predictor
    monkeypatch.setattr(TP, "fit_tree_predictor", lambda trace, kind: seen.append(trace)
                        or fit(trace, kind))
    config = load_config(None, trace=IID, verify="specinfer", policy="tetris-tree",
                         num_speculative_tokens=2, extra=2, predictor="learned",
                         calibration_split=0.25, requests=4)
    simulate(config, trace=iid)
    calibration, _ = split
    assert len(seen) == 1 and seen[0].n_requests == calibration.n_requests
    assert np.array_equal(seen[0].tree.draft_conf, calibration.tree.draft_conf)


def test_fitting_is_deterministic(split):
    calibration, replay = split
    tables = TreeTables(replay)
    first = TP.fit_tree_predictor(calibration, "learned")
    TP._CACHE.clear()
    second = TP.fit_tree_predictor(calibration, "learned")
    assert first is not second and first.key == second.key
    assert np.array_equal(first.node_probs(replay, tables), second.node_probs(replay, tables))


def test_repeated_sibling_tokens_are_predicted_rejected(split):
    calibration, replay = split
    tables = TreeTables(replay)
    probs = TP.fit_tree_predictor(calibration).node_probs(replay, tables)
    repeat = TP.trace_features(replay, tables)[..., TP.FEATURES.index("repeat")] > 0
    assert repeat.any() and (probs[:, 1:][repeat] == 0).all()
    assert ((probs >= 0) & (probs <= 1)).all() and (probs[:, 0] == 1).all()


def test_on_sampled_trees_the_learned_score_beats_path_confidence_in_expectation(split):
    """The claim of docs/trees.md's table: on the i.i.d. trace, E[τ] of the batch's C nodes by
    predicted reach exceeds the top-C by path confidence (same batches, same C, no cap)."""
    calibration, replay = split
    tables = TreeTables(replay)
    policy = fitted_policy(calibration, k=3, extra=7)  # cap 10: the whole tree
    rng = np.random.default_rng(5)
    learned = conf = 0.0
    for _ in range(20):
        rows = rng.choice(replay.n_rows, 8, replace=False)
        _, (_, _, mask) = decide(policy, replay, rows, 16)
        learned += tables.expected(rows, mask).sum()
        conf += tables.expected(rows, A.top_nodes(tables.conf[rows], 16)).sum()
    assert learned > 1.1 * conf


def test_a_missing_predictor_fit_and_a_chain_or_trie_trace_are_one_line_errors(split):
    calibration, replay = split
    config = load_config(None, trace=IID, verify="specinfer", policy="tetris-tree",
                         num_speculative_tokens=3, predictor="learned", calibration_split=0.25)
    with pytest.raises(SpecbatchError, match="calibration"):
        decide(make_policy(config, 3), replay, [0, 1], 6)
    with pytest.raises(SpecbatchError, match="branching tree trace"):
        TP.fit_tree_predictor(read_trace(ROOT / "traces" / "data" / "smollm2-drop2-trie"))
    with pytest.raises(SpecbatchError, match="predictor"):
        TP.fit_tree_predictor(calibration, "confidence")


@pytest.mark.parametrize("argv, needle", [
    (["--policy", "tree-optimum", "--predictor", "logistic", "--calibration-split", "0.25"],
     "field predictor"),
])
def test_bad_tree_predictor_settings_are_one_line_errors(argv, needle, capsys):
    code = main(["simulate", "--trace", IID, "--verify", "specinfer", "--k", "3",
                 "--requests", "4", *argv])
    assert_one_line_error(code, capsys.readouterr().err, needle)


def test_a_learned_run_matches_the_reference_engine_and_repeats_bit_for_bit(iid):
    """Chunked prefill cuts a request's learned subtree (a closed set's pre-order prefix);
    the vectorised replay and the per-request reference twin still agree exactly."""
    config = load_config(None, trace=IID, requests=16, policy="tetris-tree", verify="specinfer",
                         num_speculative_tokens=3, extra=4, predictor="logistic",
                         calibration_split=0.25, enable_chunked_prefill=True,
                         max_num_batched_tokens=96)
    roofline = build_cost(config)
    fast = simulate(config, iid, cost_model=roofline)
    slow = simulate(config, iid, cost_model=StepTimeOnly(roofline), reference=True)
    pd.testing.assert_frame_equal(fast.requests, slow.requests, check_exact=True)
    pd.testing.assert_frame_equal(fast.steps, slow.steps, check_exact=True)
    again = simulate(config, iid, cost_model=roofline)
    pd.testing.assert_frame_equal(fast.steps, again.steps, check_exact=True)


def test_a_learned_static_tree_takes_the_k_first_of_each_rows_learned_order(iid, split):
    """static-tree --predictor: k nodes per request, a closed prefix of the row's own
    frontier-greedy order on r̂ (the same order tetris-tree's batch top-C ranks), and a run
    equals the reference engine's."""
    config = load_config(None, trace=IID, requests=16, policy="static-tree", verify="specinfer",
                         num_speculative_tokens=3, predictor="logistic", calibration_split=0.25)
    roofline = build_cost(config)
    fast = simulate(config, iid, cost_model=roofline)
    slow = simulate(config, iid, cost_model=StepTimeOnly(roofline), reference=True)
    pd.testing.assert_frame_equal(fast.steps, slow.steps, check_exact=True)
    decode = fast.steps[fast.steps["decode_requests"] > 0]
    assert (decode["verified"] == 3 * decode["decode_requests"]).all()
    plain = simulate(config.replace(predictor="confidence", calibration_split=0.25), iid)
    assert not plain.steps["accepted"].equals(fast.steps["accepted"])  # another ranking
    calibration, replay = split
    policy = make_policy(config, 3)
    policy.calibrate(calibration)
    view, (_, verified, mask) = decide(policy, replay, np.arange(40), 120)
    ranking = policy.learned_ranking(view)
    assert (verified == 3).all() and view.tree.check_closed(mask).all()
    assert (mask[:, 1:].sum(axis=1) == 3).all()
    np.testing.assert_array_equal(mask, ranking.prefix_mask(np.arange(40), verified))
