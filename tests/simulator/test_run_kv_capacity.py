"""Specification of simulator.run.run_kv_capacity: a run that does not speculate (``ar``, the
AR arm of ``speedup_vs_ar``) is a vLLM deployment without a speculative config, so its paged
KV pool is the target's alone, not what is left next to a draft it does not load."""

from __future__ import annotations

import specbatch as sb

# H100 at gpu_memory_utilization 0.9, Llama-3.1-8B: 426,784 KV tokens alone, 326,341 next to
# a Llama-3.2-1B draft's weights and KV (docs/simulate.md, "EAGLE, EAGLE-3 and MTP drafters")
ALONE, WITH_1B = 426_784, 326_341


def summary(**knobs):
    config = sb.load_config(None, **{"trace": "synth", "synth_alpha": 0.7, "requests": 8,
                                     "target": "llama-3.1-8b", "draft": "llama-3.2-1b",
                                     "kv_mode": "paged", "engine": "numpy", **knobs})
    return sb.simulate(config).summary


def test_ar_holds_the_targets_pool_and_speculation_shares_it_with_the_draft():
    assert summary(policy="ar")["kv_capacity"] == ALONE
    assert summary(policy="fixed", k=3)["kv_capacity"] == WITH_1B


def test_the_speedups_ar_arm_runs_on_the_targets_pool():
    """At gpu_memory_utilization 0.235 the 1B draft leaves 1,634 KV tokens, so the speculative
    run preempts; the target alone has 20,900 and ar preempts nobody. The AR arm of the
    speedup is that ar run (its makespan over the speculative run's), not ar squeezed into
    the draft's leftovers."""
    spec = summary(policy="fixed", k=3, speedup=True, gpu_memory_utilization=0.235)
    ar = summary(policy="ar", gpu_memory_utilization=0.235)
    assert (spec["kv_capacity"], ar["kv_capacity"]) == (1634, 20900)
    assert spec["preemptions"] > 0 and ar["preemptions"] == 0
    assert spec["speedup_vs_ar"] == ar["makespan"] / spec["makespan"]


def test_an_explicit_capacity_or_reserve_mode_is_kept():
    assert summary(policy="ar", kv_capacity=4096)["kv_capacity"] == 4096
    assert summary(policy="ar", kv_mode="reserve")["kv_capacity"] is None
