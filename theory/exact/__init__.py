"""Exact work on small vocabularies: model pairs, enumeration of the loop, and LPs (THEORY.md
§1-§4).

Reading order: ``small_models`` (autoregressive pairs over a small vocabulary), ``enumeration``
(exact laws of one iteration and of the whole loop), ``lp`` (the two LPs of THEORY.md §4).
"""
