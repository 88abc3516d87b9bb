"""Verification rules on full rows: token-level (TV) and block verification (BV), THEORY.md §2-§3.

Reading order: ``path_stats`` (per-position statistics of drafted paths, numpy), ``reference``
(the batched numpy reference of TV and BV), then the fast tiers with parity tests against it:
``torch_path_stats``, ``torch_residual``, ``torch_batched``, ``torch_sync_free``, ``triton_fused``.
"""
