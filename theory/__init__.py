"""Exact mathematics of speculative decoding: verification rules, enumeration, LPs, optima.

See docs/THEORY.md for every formula.
Imports only numpy, scipy, cvxpy and torch.
"""

from specbatch.errors import SpecbatchError
from specbatch.theory.allocate import (
    allocation_value,
    gains_value,
    greedy_heap,
    greedy_topc,
    optimal_dp,
    optimal_dp_gains,
    optimal_milp,
    prefix_gains,
)
from specbatch.theory.exact import expected_tau, iteration_law, loop_law, validity_residual
from specbatch.theory.lp import solve_lp_a, solve_lp_b
from specbatch.theory.models import ModelPair, pair_from_dict, random_pair, read_pair
from specbatch.theory.stats import accept_from_stats, block_weights, position_stats, token_weights
from specbatch.theory.verify import (
    expected_accepted,
    extra_token_law,
    tau_law,
    verify_block,
    verify_token,
)

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
    "allocation_value",
    "greedy_heap",
    "greedy_topc",
    "optimal_dp",
    "optimal_milp",
    "gains_value",
    "optimal_dp_gains",
    "prefix_gains",
    "expected_accepted",
    "extra_token_law",
    "tau_law",
    "verify_block",
    "verify_token",
]
