"""Which draft tokens to verify in a batch: allocation under a budget (THEORY.md §5).

Reading order: ``budget`` (greedy top-c, DP and MILP optima of the prefix allocation),
``gains`` (the exact optimum for any per-request gain tables).
"""
