"""The chain policies beyond ar, fixed, tetris and dsd in the compiled vllm-v1 loop
(simulator.engine.v1.kernel with simulator.engine.v1.policy_arrays) against the numpy engine,
their reference twin.

batch-schedule (vLLM's ``num_speculative_tokens_per_batch_size``, TensorRT-LLM's
``draft_len_schedule``), vllm-dynamic, ema-adaptive (SGLang's ``--speculative-adaptive-config``),
vllm-adaptive (profiled tables, stale or fresh confidences), the row-wise threshold, specdec++
and entropy-stop, and the bounds hindsight and oracle (TV): request and step tables
bit-identical, under vLLM's host terms (the default ``host = "vllm"``) with and without async
scheduling, with chunked prefill cut by small budgets and paged KV that preempts; the policies'
state after a run; the catalogue's ``compiled`` trait; what stays on numpy is named. Skips the
parity tests without numba.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest

from specbatch.simulator.config.sim_config import load_config
from specbatch.simulator.engine.v1 import compiled
from specbatch.simulator.policies.catalogue import CATALOGUE, entry
from specbatch.simulator.policies.registry import make_policy
from specbatch.simulator.run import build_cost, load_trace, simulate
from tests.simulator.engine.v1.test_compiled import assert_bit_identical

needs_numba = pytest.mark.skipif(not compiled.numba_installed(),
                                 reason="numba not installed (the fast extra)")


@functools.cache
def default_trace():
    return load_trace(load_config(None))


def run(engine: str, **knobs):
    return simulate(load_config(None, engine=engine, **knobs), trace=default_trace())


#: SGLang slots that move within a short run: no warm-up, a re-plan every batch or two, a
#: ceiling, and a slot from 6 requests on (the default config's first re-plan comes after 15).
SGLANG_FAST = ('{"1": {"candidate_steps": [0, 1, 2, 4], "warmup_batches": 1, '
               '"update_interval": 1, "ceiling_coeff": 1.5}, '
               '"6": {"candidate_steps": [0, 2, 3], "warmup_batches": 0, "update_interval": 2, '
               '"down_hysteresis": 0.3, "up_hysteresis": -0.2, "ema_alpha": 0.5}}')
#: Small budgets cut decoding requests' drafts and chunk prompts; a small paged pool preempts.
CHUNKED = {"max_num_batched_tokens": 64, "max_num_seqs": 12}
PAGED = {"kv_mode": "paged", "kv_capacity": 3000, "max_num_batched_tokens": 256,
         "max_num_seqs": 32}

POLICY_COVERED = [
    # batch-schedule: vLLM's ranges (a gap inherits), TensorRT-LLM's keys (0 past the last)
    {"policy": "batch-schedule", "k": 4,
     "num_speculative_tokens_per_batch_size": "1-3:4,6-12:2,20-4096:1"},
    {"policy": "batch-schedule", "k": 4,
     "num_speculative_tokens_per_batch_size": "1-2:3,3-4096:1", **CHUNKED},
    {"policy": "batch-schedule", "k": 3, "draft_len_schedule": "2:3,8:2,16:1", **PAGED},
    {"policy": "batch-schedule", "k": 3, "draft_len_schedule": "4:3,40:1", "verify": "block",
     **CHUNKED},
    {"policy": "batch-schedule", "k": 2, "replicas": 2, "arrival": "poisson", "rate": 30.0},
    # vllm-dynamic: the goodput argmax of every batch size (calibration split 0.25)
    {"policy": "vllm-dynamic", "k": 4},
    {"policy": "vllm-dynamic", "k": 3, "verify_cost": "torch", **PAGED},
    # ema-adaptive: SGLang's default slots, and fast-moving ones
    {"policy": "ema-adaptive", "k": 3},
    {"policy": "ema-adaptive", "k": 2, "speculative_adaptive_config": SGLANG_FAST, **CHUNKED},
    {"policy": "ema-adaptive", "k": 1, "speculative_adaptive_config": SGLANG_FAST, **PAGED},
    {"policy": "ema-adaptive", "k": 2, "speculative_adaptive_config": SGLANG_FAST,
     "replicas": 2, "verify": "block"},
    # the row-wise policies: each request's lengths a table of its trace row
    {"policy": "threshold", "k": 3, "extra": 1, **CHUNKED},
    {"policy": "threshold", "k": 2, "extra": 2, "threshold": 0.6, "threshold_mode": "per_token",
     "verify": "block", **PAGED},
    {"policy": "specdec++", "k": 3, "extra": 1},
    {"policy": "specdec++", "k": 4, "specdec_threshold": 0.3, **PAGED},
    {"policy": "entropy-stop", "k": 3, "extra": 1, **CHUNKED},
    {"policy": "entropy-stop", "k": 4, "entropy_threshold": 1.0, "replicas": 2},
    {"policy": "threshold", "k": 4, "trace": "traces/data/smollm2-ngram"},
    # the bounds: hindsight (TV and BV), oracle under TV (top-C of the true survival)
    {"policy": "hindsight", "k": 3, "extra": 1, **CHUNKED},
    {"policy": "hindsight", "k": 3, "extra": 1, "verify": "block", **PAGED},
    {"policy": "hindsight", "k": 4, "trace": "traces/data/smollm2-ngram"},
    {"policy": "oracle", "k": 3, "extra": 1},
    {"policy": "oracle", "k": 2, "extra": 2, "budget": 0, **CHUNKED},
    {"policy": "oracle", "k": 3, "extra": 1, "budget": 7, **PAGED},
    # vllm-adaptive: profiled tables on stale (default) or fresh confidences
    {"policy": "vllm-adaptive", "k": 4},
    {"policy": "vllm-adaptive", "k": 3, "adaptive_confidences": "fresh", **CHUNKED},
    {"policy": "vllm-adaptive", "k": 3, "verify": "block", **PAGED},
    {"policy": "vllm-adaptive", "k": 4, "cuda_graph_sizes": "3,17,100", **CHUNKED},
    {"policy": "vllm-adaptive", "k": 3, "trace": "traces/data/smollm2-ngram"},
    {"policy": "vllm-adaptive", "k": 2, "replicas": 3, "arrival": "poisson", "rate": 40.0,
     "long_prefill_token_threshold": 48},
]


@needs_numba
@pytest.mark.parametrize("overlap", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("knobs", POLICY_COVERED,
                         ids=[str(i) for i in range(len(POLICY_COVERED))])
def test_engine_policies_compiled_equal_the_numpy_engines(knobs, overlap):
    knobs = {"requests": 80, "seed": 3, "host": "vllm", "async_scheduling": overlap, **knobs}
    numpy_run, compiled_run = run("numpy", **knobs), run("compiled", **knobs)
    assert compiled_run.summary["engine_ran"] == "compiled"
    assert_bit_identical(numpy_run.requests, compiled_run.requests)
    assert_bit_identical(numpy_run.steps, compiled_run.steps)


@needs_numba
def test_the_batch_size_tables_change_k_with_the_batch():
    """A table that drafts 4 at one request and 1 from two on: the steps of one decoding
    request draft 4 each, the larger ones 1 each (the cases above would pass with any K)."""
    knobs = {"requests": 30, "seed": 2, "host": "vllm", "policy": "batch-schedule", "k": 4,
             "num_speculative_tokens_per_batch_size": "1-1:4,2-4096:1", "arrival": "poisson",
             "rate": 3.0}
    steps = run("compiled", **knobs).steps
    decode = steps[steps.batch > 0]
    one = decode.batch == 1
    assert one.any() and (~one).any()
    assert (decode.drafted[one] == 4).all()
    assert (decode.drafted[~one] == decode.batch[~one]).all()


@needs_numba
def test_ema_adaptive_ends_in_the_state_the_numpy_engine_leaves_it():
    """Each slot's steps, EMA and batch count, and the slot routed to last: the same after
    either engine's run (replica 0's copy is the run's policy)."""
    from specbatch.simulator.engine_run import run_engine
    from specbatch.simulator.workload.arrivals import build_workload

    trace = default_trace()
    states = []
    for engine in ("numpy", "compiled"):
        config = load_config(None, engine=engine, requests=60, seed=8, policy="ema-adaptive",
                             num_speculative_tokens=2, speculative_adaptive_config=SGLANG_FAST,
                             max_num_seqs=12)
        policy = make_policy(config, trace.K)
        run_engine(config, trace, build_workload(config, trace), build_cost(config), policy,
                   None)
        states.append(([(s.steps, s.ema, s.batches) for s in policy.slots],
                       policy.slots.index(policy.current)))
    assert states[0] == states[1]
    assert all(batches > 0 for _, _, batches in states[0][0])


@needs_numba
def test_vllm_dynamic_table_is_filled_as_decide_would():
    """The compiled run asks best_k of every batch size up front: the entries the numpy run
    filled lazily are the same numbers."""
    from specbatch.simulator.engine_run import run_engine
    from specbatch.simulator.policies.calibration import calibrate_policy
    from specbatch.simulator.run import attach_verify_cost
    from specbatch.simulator.workload.arrivals import build_workload

    trace = default_trace()
    tables = []
    for engine in ("numpy", "compiled"):
        config = load_config(None, engine=engine, requests=30, seed=4, policy="vllm-dynamic",
                             num_speculative_tokens=3, max_num_seqs=8)
        policy = make_policy(config, trace.K)
        calibrate_policy(policy, trace, config)
        attach_verify_cost(policy, config, trace)
        run_engine(config, trace, build_workload(config, trace), build_cost(config), policy,
                   None)
        tables.append(dict(policy.table))
    assert tables[0] and all(tables[1][n] == k for n, k in tables[0].items())
    assert sorted(tables[1]) == list(range(1, 9))


@pytest.mark.parametrize("knobs, named", [
    ({"policy": "vllm-adaptive", "k": 3, "adaptive_cost_tables": "exact"}, "exact"),
    ({"policy": "vllm-adaptive", "k": 3, "adaptive_survival": "truth"}, "truth"),
    ({"policy": "vllm-adaptive", "k": 3, "predictor": "logistic"},
     "vllm-adaptive with predictor logistic"),
    ({"policy": "oracle", "k": 3, "verify": "block"}, "oracle under BV"),
])
def test_what_stays_on_numpy_is_named(knobs, named):
    config = load_config(None, **knobs)
    gap = compiled.compiled_gap(config, make_policy(config, default_trace().K),
                                build_cost(config))
    assert gap is not None and named in gap


@pytest.mark.parametrize("knobs", [
    {"policy": "batch-schedule", "k": 3, "draft_len_schedule": "4:3,8:1"},
    {"policy": "vllm-dynamic", "k": 3},
    {"policy": "ema-adaptive", "k": 3},
    {"policy": "vllm-adaptive", "k": 3, "adaptive_confidences": "fresh"},
])
def test_the_engine_policies_are_covered(knobs):
    config = load_config(None, **knobs)
    policy = make_policy(config, default_trace().K)
    assert compiled.compiled_gap(config, policy, build_cost(config)) is None


@pytest.mark.parametrize("name", [row.name for row in CATALOGUE if not row.tree])
def test_the_catalogues_compiled_trait_is_what_compiled_gap_covers(name):
    """A chain policy's ``compiled`` trait (simulator.policies.catalogue) says whether
    compiled_gap lets its default run (k = 3) through; a refusal names the policy."""
    knobs = {"policy": name} if name in ("ar", "dsd") else {"policy": name, "k": 3}
    config = load_config(None, **knobs)
    gap = compiled.compiled_gap(config, make_policy(config, default_trace().K),
                                build_cost(config))
    if entry(name).compiled:
        assert gap is None
    else:
        assert gap is not None and f"policy {name}" in gap


@needs_numba
def test_ema_observe_is_adaptive_slots_update_bit_for_bit():
    """kernel.ema_observe on the packed slot equals AdaptiveSlot.update (EMA, batch count,
    re-plans with hysteresis and ceiling) over random batches of accepted lengths."""
    from specbatch.simulator.policies.engines import AdaptiveSlot

    kernel = compiled.load_kernel()
    rng = np.random.default_rng(5)
    for trial in range(60):
        cands = sorted({int(c) for c in rng.integers(0, 7, int(rng.integers(1, 5)))})
        settings = {"candidate_steps": cands, "ema_alpha": float(rng.uniform(0.05, 1.0)),
                    "update_interval": int(rng.integers(1, 4)),
                    "warmup_batches": int(rng.integers(0, 3)),
                    "down_hysteresis": float(rng.uniform(-0.5, 0.5)),
                    "up_hysteresis": float(rng.uniform(-0.5, 0.5)),
                    "ceiling_coeff": float(rng.choice([0.0, 0.7, 1.5]))}
        slot = AdaptiveSlot(int(rng.integers(0, 7)), settings)
        slot_i = np.zeros((1, kernel.SL_CANDS + len(cands)), dtype=np.int64)
        slot_i[0, :kernel.SL_CANDS] = (1, slot.interval, slot.warmup, len(cands), slot.steps, 0)
        slot_i[0, kernel.SL_CANDS:] = cands
        slot_f = np.array([[slot.alpha, slot.down, slot.up, slot.ceiling_coeff, slot.ema]])
        for _ in range(40):
            accepted = rng.integers(0, slot.steps + 1, int(rng.integers(1, 9)))
            slot.update(accepted)
            kernel.ema_observe(slot_i, slot_f, 0, int(accepted.sum()), accepted.shape[0])
            assert (int(slot_i[0, kernel.SL_STEPS]), int(slot_i[0, kernel.SL_BATCHES])) == (
                slot.steps, slot.batches), trial
            assert slot_f[0, kernel.SF_EMA] == slot.ema, trial


@needs_numba
def test_adaptive_plan_is_budget_scan_then_split_budget():
    """kernel.adaptive_plan (fresh survival) equals VllmAdaptive's B* (budget_scan on the
    ranked slots, D(n) + V(n + B) from the tables) and its split (split_budget), drafter caps
    and ties included."""
    from specbatch.simulator.policies.adaptive import budget_scan, ranked_slots, split_budget
    from specbatch.simulator.policies.adaptive_tables import CostTables

    kernel = compiled.load_kernel()
    rng = np.random.default_rng(9)
    for _ in range(200):
        n, k = int(rng.integers(1, 10)), int(rng.integers(1, 6))
        levels = rng.choice([0.05, 0.3, 0.5, 0.8, 1.0], size=(n, k))
        conf = np.sort(levels, axis=1)[:, ::-1].copy()  # non-increasing survival, ties
        caps = rng.integers(0, k + 1, n)
        draft = np.sort(rng.uniform(0.1, 2.0, 12))
        verify = np.sort(rng.uniform(1.0, 9.0, int(rng.integers(2, 60))))
        tables = CostTables(draft, verify)
        rows, positions = ranked_slots(conf, caps)
        scores = conf[rows, positions]
        cost = tables.draft[min(n, draft.shape[0] - 1)] + tables.verify_at(
            np.arange(n, n + scores.shape[0] + 1))
        want_b = budget_scan(scores, n, cost)
        want = split_budget(conf, caps, want_b)
        topc = np.zeros(n, dtype=np.int64)
        got_b = kernel.adaptive_plan(
            n, k, np.arange(n), conf, caps, 1, False, np.zeros(1, dtype=np.int64),
            np.full(1, -1, dtype=np.int64), 0, draft, verify, np.zeros((n, k)),
            np.zeros(n * k), np.zeros(n * k), topc)
        assert got_b == want_b
        assert topc.tolist() == want.tolist()
