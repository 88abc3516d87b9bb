"""theory/trees/tree_shapes.py, tree.py and tree_lp.py: draft-tree laws, verifiers, the best valid
one."""

from __future__ import annotations

import itertools
from fractions import Fraction as F

import numpy as np
import pytest

from specbatch.errors import SpecbatchError
from specbatch.theory.exact import enumeration as exact
from specbatch.theory.exact.lp import solve_lp_b
from specbatch.theory.exact.small_models import pair_from_dict, random_pair, sequence_prob
from specbatch.theory.trees import multidraft
from specbatch.theory.trees import tree_shapes as S
from specbatch.theory.trees import verifiers as T
from specbatch.theory.trees.lp import solve_tree_lp, tree_report

PAPER = pair_from_dict({"vocab": 2, "draft": {"iid": ["2/3", "1/3"]},
                        "target": {"iid": ["1/3", "2/3"]}})

#: (shape, sampling) pairs small enough for exact enumeration in milliseconds at V = 3.
SHAPES = [("2", "iid"), ("3", "distinct"), ("2,1", "iid"), ("1,2", "distinct"),
          ("2,2", "distinct"), ("2x1", "iid"), ("2x2", "iid"), ("1x2", "iid"),
          ("3,2,1", "topk"), ("2,2", "topk")]


def pair_for(seed: int, shape: S.Shape, vocab: int = 3):
    form = ("iid", "markov", "table")[seed % 3]
    return random_pair(seed, vocab, form, depth=shape.depth, concentration=0.7, exact=True)


def laws_by_tau(law: dict) -> dict:
    out: dict = {}
    for (path, y), mass in law.items():
        if mass:
            key = (len(path), path + (y,))
            out[key] = out.get(key, 0) + mass
    return out


@pytest.mark.parametrize("spec, sampling", SHAPES)
def test_tree_laws_sum_to_one(spec, sampling):
    shape = S.parse_shape(spec, sampling)
    trees = S.tree_law(pair_for(0, shape), shape)
    assert sum(trees.values()) == 1


def test_paths_trie_keeps_one_draw_per_path():
    shape = S.parse_shape("3x2")
    for root in S.tree_law(pair_for(1, shape, 2), shape):
        assert len(root.draws) == 3
        assert sorted(set(root.draws)) == list(range(len(root.children)))
        assert sum(len(c.draws) for c in root.children) == 3


@pytest.mark.parametrize("spec, sampling", SHAPES)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_every_tree_verifier_is_lossless(spec, sampling, seed):
    shape = S.parse_shape(spec, sampling)
    pair = pair_for(seed, shape)
    trees = S.tree_law(pair, shape)
    for name in T.verifiers_for(shape):
        law = T.iteration_law(pair, shape, name, trees=trees)
        assert sum(law.values()) == 1
        assert T.validity_residual(pair, law, shape.depth) == 0, name


@pytest.mark.parametrize("gamma", [1, 2, 3])
@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_traversal_on_a_chain_is_block_verification(gamma, seed):
    shape = S.parse_shape(",".join(["1"] * gamma))
    pair = pair_for(seed, shape, vocab=2 if gamma == 3 else 3)
    block = {k: v for k, v in exact.iteration_law(pair, gamma, "block").items() if v}
    assert laws_by_tau(T.iteration_law(pair, shape, "traversal")) == block
    # one i.i.d. path is the same chain; GBV with K = 1 is block verification too
    paths = S.parse_shape(f"1x{gamma}")
    assert laws_by_tau(T.iteration_law(pair, paths, "gbv")) == block


def test_depth_one_trees_are_the_multidraft_setting():
    for seed in range(3):
        shape = S.parse_shape("2")
        pair = pair_for(seed, shape)
        p, q = pair.target.row(()), pair.draft.row(())
        law = T.iteration_law(pair, shape, "specinfer")
        assert T.expected_accepted(law) == multidraft.verifier_law(p, q, 2, "specinfer")[0]
        assert solve_tree_lp(pair, shape).value == pytest.approx(
            float(multidraft.alpha_star(p, q, 2)), abs=1e-9)


def test_chain_lp_is_lp_b():
    for seed in range(3):
        shape = S.parse_shape("1,1")
        pair = pair_for(seed, shape)
        assert solve_tree_lp(pair, shape).value == pytest.approx(solve_lp_b(pair, 2).value,
                                                                 abs=1e-9)


@pytest.mark.parametrize("spec, sampling", [("2,1", "iid"), ("2,2", "distinct"), ("2x2", "iid")])
def test_verifiers_never_beat_the_tree_lp(spec, sampling):
    shape = S.parse_shape(spec, sampling)
    for seed in range(3):
        report = tree_report(pair_for(seed, shape), shape)
        for name, row in report["verifiers"].items():
            assert row["gap_to_lp"] >= -1e-7, name
            assert row["residual"] == 0.0
            tails = row["depth_acceptance"]
            assert row["expected_accepted"] == pytest.approx(sum(tails))


def test_gbv_skew_rows_are_the_law_of_the_best_of_k_paths():
    """The skew rows multiply to P(best of K i.i.d. paths = x), by brute force over K-tuples."""
    pair = pair_for(4, S.parse_shape("3x2"), vocab=3)
    k, length = 3, 2
    singles = [(x, sequence_prob(pair.draft, x)) for x in itertools.product(range(3), repeat=2)]
    best_law: dict = {}
    for combo in itertools.product(singles, repeat=k):
        prob = combo[0][1] * combo[1][1] * combo[2][1]
        if not prob:
            continue
        root = S.trie([x for x, _ in combo], length)
        path, skews, _ = T.best_path(pair, root, k)
        best_law[path] = best_law.get(path, 0) + prob
    for root in S.tree_law(pair, S.parse_shape("3x2")):
        path, skews, _ = T.best_path(pair, root, k)
        assert skews[0][path[0]] * skews[1][path[1]] == best_law[path]
    assert sum(best_law.values()) == 1


def test_paper_pair_depth_one_by_hand():
    law = T.iteration_law(PAPER, S.parse_shape("2"), "specinfer")
    assert T.expected_accepted(law) == F(7, 9)  # as test_multidraft.test_paper_pair_by_hand


def test_topk_trees_by_hand():
    """Deterministic children (EAGLE's top-k): one realised tree, each child a point mass."""
    both = S.parse_shape("2", "topk")  # children a and b: RRS accepts a w.p. 1/3, else b surely
    assert list(S.tree_law(PAPER, both).values()) == [1]
    for name in T.verifiers_for(both):
        assert T.expected_accepted(T.iteration_law(PAPER, both, name)) == 1
    chain = S.parse_shape("1,1", "topk")  # draft aa: accept a w.p. 1/3, then a w.p. 1/3
    for name in T.verifiers_for(chain):
        law = T.iteration_law(PAPER, chain, name)
        assert T.expected_accepted(law) == F(1, 3) + F(1, 9)
        assert T.validity_residual(PAPER, law, 2) == 0
    assert solve_tree_lp(PAPER, chain).value == pytest.approx(4 / 9, abs=1e-9)


def test_removal_rule_matters():
    """Traversal without removing a deleted child's token from Ms, on children drawn without
    replacement, is lossy on some pair: the residual check has the power to see it."""
    shape, wrong = S.parse_shape("2,1", "distinct"), S.parse_shape("2,1", "iid")
    worst = 0
    for seed in range(6):
        pair = pair_for(seed, shape)
        law: dict = {}
        for root, prob in S.tree_law(pair, shape).items():
            for key, mass in T.traversal(pair, root, wrong).items():
                law[key] = law.get(key, 0) + prob * mass
        worst = max(worst, T.validity_residual(pair, law, shape.depth))
    assert worst > 0


@pytest.mark.parametrize("text", ["", "0", "2,a", "2x", "9", "1,1,1,1,1,1,1", "3x0"])
def test_bad_shapes_are_one_line_errors(text):
    with pytest.raises(SpecbatchError, match="--tree: expected"):
        S.parse_shape(text)


def test_enumeration_limit_is_checked_before_enumerating():
    with pytest.raises(SpecbatchError, match="exact-enumeration limit"):
        S.tree_law(random_pair(0, 4, "iid", exact=True), S.parse_shape("8,8"))
    with pytest.raises(SpecbatchError, match="gbv: needs a 'paths' tree"):
        T.gbv(PAPER, S.Node(-1), S.parse_shape("2"))


def test_table_models_need_draft_depth_d_minus_1_and_target_depth_d():
    from specbatch.theory.exact.small_models import ModelPair, random_model

    shape = S.parse_shape("2,2", "distinct")
    draft = random_model(np.random.default_rng(0), 2, "table", depth=1, exact=True, name="draft")
    target = random_model(np.random.default_rng(1), 2, "table", depth=2, exact=True,
                          name="target")
    pair = ModelPair(2, draft, target, True)
    for name in T.verifiers_for(shape):
        law = T.iteration_law(pair, shape, name)
        assert T.validity_residual(pair, law, 2) == 0
    short = ModelPair(2, draft, random_model(np.random.default_rng(1), 2, "table", depth=1,
                                             exact=True, name="target"), True)
    with pytest.raises(SpecbatchError, match="table model 'target': missing prefix"):
        T.iteration_law(short, shape, "traversal")
