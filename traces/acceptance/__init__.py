"""Acceptance profiles: how one drafter's tokens are accepted on one pair, without a trace.

Read in this order: profile.py (the profile, its survival and MAL, the JSON file),
vllm_metrics.py (from vLLM's Prometheus spec-decode counters, THEORY.md §13), modelopt.py
(NVIDIA Model-Optimizer's ``speculation_profile.json``, both ways), from_trace.py (a trace's
pooled law under TV), library.py (the bundled published profiles, with citations).
"""
