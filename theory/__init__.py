"""Exact mathematics of speculative decoding: verification rules, enumeration, LPs, optima.

See ../shared/THEORY.md (copied into the README's theory section) for every formula.
Imports only numpy, scipy, cvxpy and torch.
"""

from theory.errors import SpecbatchError
from theory.stats import accept_from_stats, block_weights, position_stats, token_weights

__all__ = [
    "SpecbatchError",
    "accept_from_stats",
    "block_weights",
    "position_stats",
    "token_weights",
]
