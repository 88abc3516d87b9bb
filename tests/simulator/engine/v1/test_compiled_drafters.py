"""The compiled vllm-v1 loop with drafters that have a pass on the target's pass: EAGLE /
EAGLE-3 heads (simulator.cost.features.draft_head: pass 1 over the target's pass, later passes
at c_i + τ_i + j), a draft model as vLLM V1's proposer runs it (simulator.cost.features.
draft_model_pass: pass 1 over the target's pass + one token per request), vLLM's n-gram
proposer under vLLM's host terms (its host seconds once per step on the target pass,
simulator.cost.features.host.ngram_seconds) and a free drafter without them (every draft
pass 0 s). The kernel's pricing equals the cost models' bit for bit
(kernel.head_time, ngram_time, draft_time, first_pass, on the constants pack_costs.pack_drafter
packs), and whole runs' request and step tables equal the numpy engine's (its reference
twin) on fixed configurations; the hypothesis run of test_compiled.py draws these drafters too.
"""

from __future__ import annotations

import numpy as np
import pytest

from specbatch.simulator.config.sim_config import load_config
from specbatch.simulator.engine.v1 import compiled, pack_costs
from specbatch.simulator.run import build_cost, load_trace, simulate
from tests.simulator.engine.v1.test_compiled import assert_bit_identical, parts

needs_numba = pytest.mark.skipif(not compiled.numba_installed(),
                                 reason="numba not installed (the fast extra)")


def same(got: float, want: float) -> bool:
    return np.float64(got).view(np.int64) == np.float64(want).view(np.int64)


def packed(kn, cost, sizes=()):
    """The kernel's floats for ``cost`` as the driver packs the drafter and the host terms."""
    floats = np.zeros(kn.N_FLOATS + len(sizes))
    ints = np.zeros(kn.N_INTS, dtype=np.int64)
    floats[kn.F_SCALE], floats[kn.F_OUTER] = 1.0, 1.0
    floats[kn.F_NSIZES] = len(sizes)
    floats[kn.F_SIZES:] = sizes
    pack_costs.pack_drafter(kn, ints, floats, cost, True)
    pack_costs.pack_host(kn, floats, compiled.host_layer(cost)[0])
    return floats, ints


def random_sums(rng, query_max):
    n = int(rng.integers(1, 300))
    q = rng.integers(1, query_max + 1, n)
    kv = rng.integers(0, 9000, n)
    return n, (float(q.sum()), float(kv.sum()), float(q @ kv), float(q @ q))


@needs_numba
@pytest.mark.parametrize("draft", ["eagle3", "eagle"])
@pytest.mark.parametrize("host, sizes", [("fixed", ()), ("vllm", ()), ("vllm", (8, 24, 64))])
def test_head_passes_are_the_heads_cost_bit_for_bit(draft, host, sizes):
    """kernel.draft_time (a later head pass, after CUDA-graph padding, with the host's draft
    floor) and kernel.first_pass (pass 1, unpadded, with the floor) equal the built cost's
    time_from_sums("draft", ...) and first_pass_time on random exact-integer sums."""
    from specbatch.simulator.cost.features.graph_padding import pad_to_graphs

    kn = compiled.load_kernel()
    config = load_config(None, host=host, draft=draft, target="llama-3.1-8b",
                         cost="roofline", policy="fixed", k=3)
    cost = build_cost(config)
    if sizes:
        cost = pad_to_graphs(cost, ",".join(str(v) for v in sizes))
    floats, ints = packed(kn, cost, sizes)
    assert floats[kn.F_DRAFTER] == kn.DRAFT_HEAD and not ints[kn.I_DRAFTS_CHUNKS]
    tab, tlaw = np.zeros((6, 1)), np.zeros((2, kn.N_TLAW))
    rng = np.random.default_rng(len(sizes) + 3 * (host == "vllm"))
    for _ in range(150):
        n, sums = random_sums(rng, int(rng.choice([1, 4, 600])))
        want = cost.time_from_sums("draft", n, *sums)
        assert same(kn.draft_time(floats, float(n), *sums, -1.0, tab, tlaw), want)
        assert same(kn.first_pass(floats, float(n), *sums, tab, tlaw),
                    cost.first_pass_time(n, *sums))
    assert kn.first_pass(floats, 0.0, 0.0, 0.0, 0.0, 0.0, tab, tlaw) == cost.first_pass_time(
        0, 0., 0., 0., 0.)


@needs_numba
def test_the_ngram_proposers_host_seconds_are_ngram_seconds_bit_for_bit():
    """kernel.first_pass under the n-gram proposer is HostCost's ngram first pass
    (c0 + c1 n + c2 Σ(c + q) + c3 n², here pinned at n = 2, Σ = 100 too); its draft passes
    are 0 s; a free drafter without host terms has no first pass and drafts chunks at 0 s."""
    from specbatch.simulator.cost.features import host as hostmod

    kn = compiled.load_kernel()
    config = load_config(None, host="vllm", draft="ngram", cost="roofline", policy="fixed",
                         k=2)
    cost = build_cost(config)
    floats, ints = packed(kn, cost)
    assert floats[kn.F_DRAFTER] == kn.DRAFT_NGRAM and not ints[kn.I_DRAFTS_CHUNKS]
    tab, tlaw = np.zeros((6, 1)), np.zeros((2, kn.N_TLAW))
    rng = np.random.default_rng(5)
    for _ in range(200):
        n, sums = random_sums(rng, 600)
        assert same(kn.first_pass(floats, float(n), *sums, tab, tlaw),
                    cost.first_pass_time(n, *sums))
        assert kn.draft_time(floats, float(n), *sums, -1.0, tab, tlaw) == 0.0
    by_hand = (hostmod.NGRAM_CALL_S + 2 * hostmod.NGRAM_REQUEST_S + 100 * hostmod.NGRAM_TOKEN_S
               + 4 * hostmod.NGRAM_PAIR_S)
    assert same(kn.first_pass(floats, 2.0, 3.0, 97.0, 0.0, 0.0, tab, tlaw), by_hand)
    assert abs(by_hand - 12.883756e-6) < 1e-15  # 10.12 + 2.612 + 0.1309 + 0.020856 µs
    free = build_cost(load_config(None, host="fixed", draft="ngram", cost="roofline",
                                  policy="fixed", k=2))
    floats, ints = packed(kn, free)
    assert floats[kn.F_DRAFTER] == kn.DRAFT_FREE and ints[kn.I_DRAFTS_CHUNKS] == 1
    assert kn.first_pass(floats, 5.0, 9.0, 900.0, 0.0, 0.0, tab, tlaw) == 0.0


@needs_numba
@pytest.mark.parametrize("cost_name", ["roofline", "calibrated"])
@pytest.mark.parametrize("host, sizes", [("fixed", ()), ("vllm", (8, 24, 64))])
def test_a_vllm_v1_draft_models_pass_one_is_its_cost_bit_for_bit(cost_name, host, sizes):
    """A draft model under vllm-v1 is packed as DRAFT_MODEL_V1 without a chunk pass;
    kernel.first_pass (pass 1 over the target pass + one token per request, padded, with the
    host's draft floor) and kernel.draft_time (a one-token pass) equal DraftModelPasses'
    first_pass_time and time_from_sums("draft", ...) on random exact-integer sums; pass 1 of
    the target pass n = 3, Σq = 58, Σc = 300, Σq·c = 1,200, Σq² = 2,532 is the draft role's
    pass at Σq' = 61, Σq'·c = 1,500, Σq'² = 2,651 and 3 logit rows."""
    from specbatch.simulator.cost.features.graph_padding import pad_to_graphs
    from specbatch.simulator.cost.interface import takes_logit_rows
    from specbatch.simulator.engine.v1.pass_tables import tabulated

    kn = compiled.load_kernel()
    config, policy, cost = parts(host=host, cost=cost_name, hardware="a100", tp=2,
                                 policy="fixed", k=3, max_num_batched_tokens=700)
    if sizes:
        cost = pad_to_graphs(cost, ",".join(str(v) for v in sizes))
    floats, ints = packed(kn, cost, sizes)
    assert floats[kn.F_DRAFTER] == kn.DRAFT_MODEL_V1 and not ints[kn.I_DRAFTS_CHUNKS]
    kind, _, base = compiled.drafter_layer(compiled.cost_layers(cost)[2])
    assert kind == "model-v1" and compiled.compiled_gap(config, policy, cost) is None
    tab, tlaw = compiled.pass_tables(config, policy, base, sizes)
    if not tabulated(base):
        pack_costs.pack_roofline(kn, floats, base)
    floats[kn.F_ROWS] = float(takes_logit_rows(cost))
    rng = np.random.default_rng(len(sizes) + 3 * (host == "vllm"))
    for _ in range(150):
        n = int(rng.integers(1, 40))
        q = rng.integers(1, int(rng.choice([2, 5, 17])), n)
        kv = rng.integers(0, 9000, n)
        sums = (float(q.sum()), float(kv.sum()), float(q @ kv), float(q @ q))
        assert same(kn.first_pass(floats, float(n), *sums, tab, tlaw),
                    cost.first_pass_time(n, *sums))
        assert same(kn.draft_time(floats, float(n), *sums, -1.0, tab, tlaw),
                    cost.time_from_sums("draft", n, *sums))
    rows = 3.0 if floats[kn.F_ROWS] else -1.0
    by_hand = kn.host_draft(floats, kn.role_time(floats, 10, 3.0, 61.0, 300.0, 1500.0, 2651.0,
                                                 rows, tab, tlaw))
    assert same(kn.first_pass(floats, 3.0, 58.0, 300.0, 1200.0, 2532.0, tab, tlaw), by_hand)


def test_a_draft_models_pass_one_outside_the_padding_runs_on_numpy():
    """analysis.sensitivity's ScaledCost around build_cost's model, padded by simulate, leaves
    DraftModelPasses inside the padding, whose forwarding prices pass 1 unpadded: the compiled
    loop (which pads every draft-model pass) refuses it; inside the padding it runs."""
    from specbatch.analysis.sensitivity import ScaledCost
    from specbatch.simulator.cost.features.graph_padding import pad_to_graphs

    config, policy, cost = parts(cuda_graph_sizes="8,64", async_scheduling=False)  # no
    # host layer: the padding's own place decides
    scaled = pad_to_graphs(ScaledCost(cost, 1.05), config.cuda_graph_sizes)
    assert "pass 1 outside CUDA-graph padding" in compiled.compiled_gap(config, policy, scaled)
    padded = pad_to_graphs(cost, config.cuda_graph_sizes)
    assert compiled.compiled_gap(config, policy, padded) is None


def run_tables(engine: str, **knobs):
    config = load_config(None, engine=engine, **knobs)
    result = simulate(config, trace=load_trace(config))
    return result


#: Fixed configurations, each with its own trace (the n-gram ones: smollm2-ngram, whose rows
#: carry the proposer's proposed lengths): EAGLE-3 on llama-3.1-8b under the roofline, the
#: calibrated and the aic models (sync and async scheduling, CUDA-graph padding, paged KV with
#: the prefix cache, dsd's goodput scan over the head's later passes, tetris), EAGLE with the
#: preset's fixed host, the n-gram proposer with vLLM's host terms (roofline, calibrated,
#: priority admission, two replicas) and without (a free drafter), and an MTP head.
DRAFTER_COVERED = [
    {"draft": "eagle3", "cost": "roofline", "policy": "fixed", "k": 3},
    {"draft": "eagle3", "cost": "calibrated", "policy": "fixed", "k": 3,
     "async_scheduling": True, "arrival": "poisson", "rate": 20.0},
    {"draft": "eagle3", "cost": "aic", "policy": "tetris", "k": 3, "extra": 1,
     "cuda_graph_sizes": "3,17,100", "verify": "block"},
    {"draft": "eagle3", "cost": "calibrated", "policy": "dsd", "cuda_graph_sizes": "64",
     "max_num_batched_tokens": 256},
    {"draft": "eagle3", "cost": "roofline", "policy": "fixed", "k": 2, "kv_mode": "paged",
     "kv_capacity": 3000, "enable_prefix_caching": True, "max_num_batched_tokens": 512},
    {"draft": "eagle", "cost": "roofline", "policy": "vllm-adaptive", "k": 4, "host": "fixed"},
    {"draft": "ngram", "cost": "roofline", "policy": "fixed", "k": 3,
     "trace": "traces/data/smollm2-ngram"},
    {"draft": "ngram", "cost": "calibrated", "policy": "threshold", "k": 4,
     "trace": "traces/data/smollm2-ngram", "replicas": 2},
    {"draft": "ngram", "cost": "roofline", "policy": "fixed", "k": 2, "host": "fixed",
     "trace": "traces/data/smollm2-ngram", "scheduling_policy": "priority"},
    # an MTP head of a MoE + MLA target (its layer's experts), FP8 GEMMs, 8 x h200
    {"draft": "mtp", "target": "deepseek-v3", "cost": "roofline", "policy": "fixed", "k": 3,
     "tp": 8, "hardware": "h200", "quantization": "fp8", "cuda_graph_sizes": "8,64",
     "requests": 40},
]


@needs_numba
@pytest.mark.parametrize("knobs", DRAFTER_COVERED,
                         ids=[str(i) for i in range(len(DRAFTER_COVERED))])
def test_compiled_tables_equal_the_numpy_engines_with_heads_and_ngram(knobs):
    knobs = {"requests": 60, "seed": 3, "host": "vllm", **knobs}
    if knobs["draft"] in ("eagle", "eagle3"):
        knobs["target"] = "llama-3.1-8b"
    numpy_run = run_tables("numpy", **knobs)
    compiled_run = run_tables("compiled", **knobs)
    assert compiled_run.summary["engine_ran"] == "compiled"
    assert_bit_identical(numpy_run.requests, compiled_run.requests)
    assert_bit_identical(numpy_run.steps, compiled_run.steps)
    assert float(compiled_run.steps["draft_time"].sum()) > 0.0 or knobs["host"] == "fixed"
