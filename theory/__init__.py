"""Exact mathematics of speculative decoding: verification rules, enumeration, LPs, optima.

See docs/THEORY.md for every formula.
Imports only numpy, scipy, cvxpy and torch.

The names are loaded on first use, so a caller of one light submodule (the simulator's hot path uses
``theory.allocate.budget`` and ``theory.verify.path_stats``) does not import scipy's LP stack.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from specbatch.errors import SpecbatchError
from specbatch.lazy import lazy_attributes

if TYPE_CHECKING:
    from specbatch.theory.allocate.budget import (
        allocation_value,
        gains_value,
        greedy_heap,
        greedy_topc,
        optimal_dp,
        optimal_dp_gains,
        optimal_milp,
        prefix_gains,
    )
    from specbatch.theory.exact.enumeration import (
        expected_tau,
        iteration_law,
        loop_law,
        validity_residual,
    )
    from specbatch.theory.exact.lp import solve_lp_a, solve_lp_b
    from specbatch.theory.exact.small_models import (
        ModelPair,
        pair_from_dict,
        random_pair,
        read_pair,
    )
    from specbatch.theory.verify.path_stats import (
        accept_from_stats,
        block_weights,
        position_stats,
        token_weights,
    )
    from specbatch.theory.verify.reference import (
        expected_accepted,
        extra_token_law,
        tau_law,
        verify_block,
        verify_token,
    )

#: Submodule -> the names it exports.
_MODULES = {
    "allocate.budget": ("allocation_value", "gains_value", "greedy_heap", "greedy_topc",
                        "optimal_dp", "optimal_dp_gains", "optimal_milp", "prefix_gains"),
    "exact.enumerate": ("expected_tau", "iteration_law", "loop_law", "validity_residual"),
    "exact.lp": ("solve_lp_a", "solve_lp_b"),
    "exact.small_models": ("ModelPair", "pair_from_dict", "random_pair", "read_pair"),
    "verify.path_stats": ("accept_from_stats", "block_weights", "position_stats", "token_weights"),
    "verify.reference": ("expected_accepted", "extra_token_law", "tau_law", "verify_block",
               "verify_token"),
}

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

__getattr__ = lazy_attributes(
    __name__, {name: f"{__name__}.{module}" for module, names in _MODULES.items()
               for name in names}, globals())
