"""theory/exact/lp.py: LP A (idealised coupling) and LP B (best valid verifier), THEORY.md §4."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import specbatch.theory.exact.enumeration as exact
from specbatch.errors import SpecbatchError
from specbatch.theory.exact.lp import lp_a_program, lp_b_program, lp_b_size, solve_lp_a, solve_lp_b
from specbatch.theory.exact.small_models import pair_from_dict, random_pair, sequence_prob

PAPER = pair_from_dict({"vocab": 2, "draft": {"iid": ["2/3", "1/3"]},
                        "target": {"iid": ["1/3", "2/3"]}})


def test_paper_example_optima():
    a = solve_lp_a(PAPER, 2)
    b = solve_lp_b(PAPER, 2)
    assert a.value == pytest.approx(12 / 9, abs=1e-9)
    assert b.value == pytest.approx(11 / 9, abs=1e-9)
    assert a.solver == b.solver == "HIGHS"


def test_lp_b_size_matches_theory():
    # V = 3, γ = 3: 324 variables, 108 equalities (THEORY.md §4)
    program = lp_b_program(random_pair(0, 3, "iid"), 3)
    assert program.c.shape == (324,) and program.a_eq.shape == (108, 324)
    assert lp_b_size(3, 3) == 324


def test_lp_a_solution_is_a_coupling():
    pair = random_pair(1, 3, "markov")
    result = solve_lp_a(pair, 2)
    pi = result.solution
    assert pi.shape == (9, 9) and pi.min() > -1e-9
    ms = [float(sequence_prob(pair.draft, x)) for x in np.ndindex(3, 3)]
    mb = [float(sequence_prob(pair.target, x)) for x in np.ndindex(3, 3)]
    assert np.allclose(pi.sum(axis=1), ms, atol=1e-9)
    assert np.allclose(pi.sum(axis=0), mb, atol=1e-9)


def test_block_verifier_is_feasible_for_lp_b():
    """BV's own law P[x, k, y] satisfies LP B's constraints (so LP B >= E[τ_BV])."""
    pair = random_pair(2, 3, "table", depth=2)
    gamma = 2
    program = lp_b_program(pair, gamma)
    point = np.zeros(program.shape)
    for path in exact.draft_paths(pair, gamma, "block"):
        xi = sum(t * 3 ** (gamma - 1 - i) for i, t in enumerate(path.draft))
        for k, pk in enumerate(path.tau):
            if pk > 0:
                point[xi, k] = path.prob * pk * np.array(exact.extra_token_law_exact(pair, path, k))
    v = point.ravel()
    assert np.allclose(program.a_eq @ v, program.b_eq, atol=1e-12)
    assert program.c @ v == pytest.approx(float(exact.expected_tau(pair, gamma, "block")))


@settings(max_examples=12)
@given(st.integers(2, 4), st.integers(1, 3), st.sampled_from(["iid", "markov", "table"]),
       st.integers(0, 2**32 - 1))
def test_lp_b_equals_block_verification_and_lp_a_the_joint_bound(vocab, gamma, form, seed):
    pair = random_pair(seed, vocab, form, depth=gamma, exact=True)
    bv = float(exact.expected_tau(pair, gamma, "block"))
    assert solve_lp_b(pair, gamma).value == pytest.approx(bv, abs=1e-7)
    assert solve_lp_a(pair, gamma).value == pytest.approx(
        float(exact.lp_joint_formula(pair, gamma)), abs=1e-7)


def test_solver_is_selectable():
    b = solve_lp_b(PAPER, 2, solver="clarabel")
    assert b.solver == "CLARABEL" and b.value == pytest.approx(11 / 9, abs=1e-6)
    with pytest.raises(SpecbatchError, match="solver: expected one of"):
        solve_lp_b(PAPER, 2, solver="nonexistent")


def test_instances_above_the_size_limit_are_refused_naming_limit_and_size():
    pair = random_pair(0, 4, "iid")
    with pytest.raises(SpecbatchError, match=r"LP A: instance has 65536 variables \(V=4, γ=4\), "
                                             r"above the limit of 20000 variables"):
        lp_a_program(pair, 4)
    with pytest.raises(SpecbatchError, match="LP B: instance has 1024 variables .* limit of 1000"):
        solve_lp_b(pair, 3, max_variables=1000)
