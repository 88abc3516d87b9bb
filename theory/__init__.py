"""Exact mathematics of speculative decoding: verification rules, enumeration, LPs, optima.

See ../shared/THEORY.md (copied into the README's theory section) for every formula.
Imports only numpy, scipy, cvxpy and torch.
"""

from theory.errors import SpecbatchError
from theory.exact import expected_tau, iteration_law, loop_law, validity_residual
from theory.lp import solve_lp_a, solve_lp_b
from theory.models import ModelPair, pair_from_dict, random_pair, read_pair
from theory.stats import accept_from_stats, block_weights, position_stats, token_weights

__all__ = [
    "ModelPair",
    "SpecbatchError",
    "expected_tau",
    "iteration_law",
    "loop_law",
    "pair_from_dict",
    "random_pair",
    "read_pair",
    "solve_lp_a",
    "solve_lp_b",
    "validity_residual",
    "accept_from_stats",
    "block_weights",
    "position_stats",
    "token_weights",
]
