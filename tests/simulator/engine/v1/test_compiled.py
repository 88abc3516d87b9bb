"""The compiled vllm-v1 loop (simulator.engine.v1.kernel) against its reference twin, the numpy
engine, and the choice between them (simulator.engine.v1.compiled).

Parity: on every configuration the compiled loop covers, its request and step tables equal the
numpy engine's bit for bit (float columns compared as their bits), on fixed configurations
(the golden ones it covers) and under hypothesis (random workloads, knobs and seeds). The
parity tests skip without numba; the choice and refusal tests run everywhere.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from specbatch.errors import SpecbatchError
from specbatch.simulator.config.sim_config import load_config
from specbatch.simulator.cost.features.host import CLIENT_TTFT_S
from specbatch.simulator.engine.v1 import compiled, driver, pack_costs
from specbatch.simulator.policies.registry import make_policy
from specbatch.simulator.run import build_cost, load_trace, simulate

HAS_NUMBA = compiled.numba_installed()
needs_numba = pytest.mark.skipif(not HAS_NUMBA, reason="numba not installed (the fast extra)")


@functools.cache
def default_trace():
    return load_trace(load_config(None))


def tables(engine: str, **knobs):
    config = load_config(None, engine=engine, **{**FIXED_HOST, **knobs})
    result = simulate(config, trace=default_trace())
    return result.requests, result.steps, result.summary


#: Most cases price the roofline (named: the default cost is auto) with the preset's flat
#: host overhead (host = "fixed"; under the default async_scheduling = auto overlapped by
#: AsyncOverheadCost, but for the n-gram drafter); HOST_COVERED and the hypothesis run add
#: vLLM's host share (the default host = "vllm", simulator.cost.features.host.HostCost), with
#: and without async scheduling; the calibrated and aic cases name their cost.
FIXED_HOST = {"host": "fixed", "cost": "roofline"}


def assert_bit_identical(a, b) -> None:
    """Same columns, dtypes and values; floats compared as their bit patterns."""
    assert list(a.columns) == list(b.columns)
    for name in a.columns:
        x, y = a[name].to_numpy(), b[name].to_numpy()
        assert x.dtype == y.dtype, name
        if x.dtype.kind == "f":
            x, y = x.view(np.int64), y.view(np.int64)
        diff = np.flatnonzero(x != y)
        assert not diff.shape[0], f"{name}: first difference at row {diff[:1]}"


def assert_parity(**knobs) -> None:
    req_n, steps_n, sum_n = tables("numpy", **knobs)
    req_c, steps_c, sum_c = tables("compiled", **knobs)
    assert (sum_n["engine_ran"], sum_c["engine_ran"]) == ("numpy", "compiled")
    assert_bit_identical(req_n, req_c)
    assert_bit_identical(steps_n, steps_c)


# ------------------------------------------------------------------ the choice


def parts(**knobs):
    config = load_config(None, **{**FIXED_HOST, **knobs})
    policy = make_policy(config, default_trace().K)
    return config, policy, build_cost(config)


def test_the_default_run_is_covered():
    assert compiled.compiled_gap(*parts()) is None
    assert compiled.compiled_gap(*parts(policy="fixed", k=3, verify="block")) is None


def test_vllms_host_terms_and_the_ngram_proposers_are_covered():
    assert compiled.compiled_gap(*parts(host="vllm")) is None
    assert compiled.compiled_gap(*parts(host="vllm", async_scheduling=True)) is None
    assert compiled.compiled_gap(*parts(host="vllm", trace="traces/data/smollm2-ngram",
                                        draft="ngram", policy="fixed", k=2)) is None


def test_padding_outside_the_host_terms_is_named():
    """simulate pads a ScaledCost(HostCost) from outside (graph_padding.pad_to_graphs looks
    for HostCost outermost only), so b·n would count the padding slots: not compiled."""
    from specbatch.analysis.sensitivity import ScaledCost
    from specbatch.simulator.cost.features.graph_padding import pad_to_graphs

    config, policy, cost = parts(host="vllm")
    assert compiled.compiled_gap(config, policy, ScaledCost(cost, 1.5)) is None
    gap = compiled.compiled_gap(config, policy, pad_to_graphs(ScaledCost(cost, 1.5), "64"))
    assert gap is not None and "padding outside vLLM's host terms" in gap


@needs_numba
def test_async_scheduling_under_the_fixed_host_is_the_host_terms_with_a_at_the_overhead():
    """host = "fixed" under async scheduling (AsyncOverheadCost: max(t, T_o) on a target
    pass, draft passes as they are), packed as pack_costs.pack_host packs it, is kernel.host_target
    / host_draft bit for bit: a = T_o, b = 0, overlapped, no proposer floor."""
    from specbatch.simulator.cost.features.async_overhead import AsyncOverheadCost

    class Seconds:  # an inner model whose every pass lasts ``t``
        overhead, t = 1e-3, 0.0

        def step_time(self, role, query, kv):
            return self.t

    kernel = compiled.load_kernel()
    inner = Seconds()
    cost = AsyncOverheadCost(inner)
    c = np.zeros(kernel.N_FLOATS)
    c[kernel.F_OUTER] = 1.0
    pack_costs.pack_host(kernel, c, cost)
    assert (c[kernel.F_HOST], c[kernel.F_OVERLAP], c[kernel.F_STEP_S]) == (1.0, 1.0, 1e-3)
    assert c[kernel.F_REQUEST_S] == c[kernel.F_FLOOR] == 0.0
    rng = np.random.default_rng(11)
    q, kv = np.ones(3, dtype=np.int64), np.full(3, 100)
    for t in np.concatenate([[0.0, 1e-9, 1e-3, np.nextafter(1e-3, 1.0), 0.05],
                             rng.uniform(0.0, 2e-3, 200)]):
        inner.t = float(t)
        for n in (1, 2, 64, 513):
            want = cost.step_time("target", q, kv)
            got = kernel.host_target(c, float(t), n)
            assert np.float64(got).view(np.int64) == np.float64(want).view(np.int64)
        assert kernel.host_draft(c, float(t)) == cost.step_time("draft", q, kv) == t


@needs_numba
@pytest.mark.parametrize("overlap", [False, True])
@pytest.mark.parametrize("layers, d2t", [(0, False), (2, False), (1, True), (32, False)])
def test_host_terms_are_host_costs_bit_for_bit(overlap, layers, d2t):
    """kernel.host_target / host_draft on the packed constants equal HostCost.target_seconds
    and its draft pass (simulator.cost.features.host) on the same inner seconds and n."""
    from specbatch.simulator.cost.features import host as hostmod

    kernel = compiled.load_kernel()
    model = hostmod.HostCost(None, overlap=overlap, draft_layers=layers, d2t=d2t)
    c = np.zeros(kernel.N_FLOATS)
    c[kernel.F_HOST], c[kernel.F_OVERLAP], c[kernel.F_OUTER] = 1.0, float(overlap), 1.0
    c[kernel.F_STEP_S], c[kernel.F_REQUEST_S] = hostmod.STEP_S, hostmod.REQUEST_S
    if layers:
        c[kernel.F_FLOOR] = 1.0
        c[kernel.F_KERNELS_S] = hostmod.proposer_kernels(d2t) * hostmod.SMALL_KERNEL_S
        c[kernel.F_OPS_S] = hostmod.proposer_ops(layers, d2t) * hostmod.OP_S
    rng = np.random.default_rng(layers + 7 * overlap)
    seconds = np.concatenate([[0.0, 1e-9, 1e-4, 3e-4, 1e-3, 0.05],
                              rng.uniform(0.0, 2e-3, 200)])
    for t in seconds:
        for n in (0, 1, 2, 7, 64, 513):
            want = model.target_seconds(float(t), n)
            got = kernel.host_target(c, float(t), n)
            assert np.float64(got).view(np.int64) == np.float64(want).view(np.int64)
        got = kernel.host_draft(c, float(t))
        assert np.float64(got).view(np.int64) == np.float64(model._draft(float(t))).view(
            np.int64)


@pytest.mark.parametrize("knobs, named", [
    ({"policy": "oracle", "k": 4, "extra": 1, "verify": "block"}, "oracle under BV"),
    ({"scheduler": "vllm-v0"}, "scheduler vllm-v0"),
    ({"replicas": 2, "router": "least_outstanding"}, "router least_outstanding"),
    ({"cost": "calibrated", "target": "gemma-3-270m", "draft": "gemma-3-270m"},
     "sliding-window"),
    ({"cost": "calibrated", "hardware": "rtx-pro-6000", "target": "mistral-7b-v0.1",
      "draft": "llama-3.2-1b"}, "sliding-window"),
    ({"target": "qwen3-30b-a3b", "draft": "qwen2.5-0.5b", "routing_skew": 0.5},
     "skewed routing"),
    ({"target": "gemma-3-270m", "draft": "gemma-3-270m"}, "sliding windows"),
])
def test_what_is_not_covered_is_named(knobs, named):
    gap = compiled.compiled_gap(*parts(**knobs))
    assert gap is not None and named in gap


def test_calibrated_runs_are_covered_and_auto_compiles_large_ones():
    """The calibrated model's passes run compiled from its PassTables on the Vidur-profiled
    GPUs (simulator.cost.measured.calibrated_table) and on the LLMServingSim ones (lss_table:
    the default cost there); auto takes them from AUTO_MIN_REQUESTS on."""
    assert compiled.compiled_gap(*parts(cost="calibrated")) is None
    assert compiled.compiled_gap(*parts(cost="auto", hardware="rtxpro6000",
                                        target="llama-3.1-8b", draft="llama-3.2-1b")) is None
    assert compiled.compiled_gap(*parts(cost="calibrated", hardware="a100", tp=2,
                                        host="vllm", policy="dsd")) is None
    large = SimpleNamespace(n=compiled.AUTO_MIN_REQUESTS, prefix_group=None)
    want = "compiled" if HAS_NUMBA else "numpy"
    assert compiled.choose_engine(*parts(cost="calibrated"), workload=large) == want


def test_q_max_covers_the_budget_the_batch_dsds_scan_and_the_graph_sizes():
    """max_pass_tokens: the token budget (a step's target pass), max_num_seqs (a draft pass
    of one token per request), a vLLM V1 draft model's pass 1 over the target's pass plus one
    token per request (budget + max_num_seqs), dsd's goodput scan at max_num_seqs ·
    (k_max + 1), the largest CUDA-graph size; the calibrated tables are refused past
    MAX_TABLE_TOKENS."""
    config, policy, _ = parts(policy="ar", max_num_batched_tokens=300, max_num_seqs=400)
    assert compiled.max_pass_tokens(config, policy, ()) == 400
    assert compiled.max_pass_tokens(config, policy, (8, 512)) == 512
    config, policy, _ = parts(max_num_batched_tokens=300, max_num_seqs=400)
    assert compiled.max_pass_tokens(config, policy, ()) == 700
    assert compiled.max_pass_tokens(config, policy, (8, 1024)) == 1024
    config, policy, _ = parts(max_num_batched_tokens=300, max_num_seqs=400,
                              scheduler="vllm-v0")
    assert compiled.max_pass_tokens(config, policy, ()) == 400
    config, policy, _ = parts(policy="dsd", max_num_batched_tokens=300, max_num_seqs=64)
    assert compiled.max_pass_tokens(config, policy, ()) == 64 * (policy.k_max + 1)
    config, policy, cost = parts(cost="calibrated", max_num_batched_tokens=(1 << 17) + 1)
    gap = compiled.compiled_gap(config, policy, cost)
    assert gap is not None and "compiled cost tables: up to 131072" in gap


def test_engine_compiled_refuses_an_uncovered_run_in_one_line():
    config, policy, cost = parts(engine="compiled", replicas=2, router="least_outstanding")
    with pytest.raises(SpecbatchError, match=r"^config: engine: .*router least_outst") as err:
        compiled.choose_engine(config, policy, cost)
    assert "\n" not in str(err.value)


def test_engine_numpy_and_uncovered_auto_run_on_numpy():
    assert compiled.choose_engine(*parts(engine="numpy")) == "numpy"
    assert compiled.choose_engine(*parts(engine="auto", policy="oracle", k=4,
                                         verify="block")) == "numpy"


def test_auto_runs_small_workloads_on_numpy():
    config, policy, cost = parts()
    small = SimpleNamespace(n=compiled.AUTO_MIN_REQUESTS - 1, prefix_group=None)
    large = SimpleNamespace(n=compiled.AUTO_MIN_REQUESTS, prefix_group=None)
    assert compiled.choose_engine(config, policy, cost, workload=small) == "numpy"
    want = "compiled" if HAS_NUMBA else "numpy"
    assert compiled.choose_engine(config, policy, cost, workload=large) == want


def test_auto_without_numba_runs_on_numpy_with_one_note(monkeypatch, capsys):
    monkeypatch.setattr(compiled, "numba_installed", lambda: False)
    monkeypatch.setattr(compiled, "_NOTED", set())
    assert compiled.choose_engine(*parts()) == "numpy"
    assert compiled.choose_engine(*parts()) == "numpy"
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "numba not installed" in err[0]
    with pytest.raises(SpecbatchError, match="^config: engine: expected numba installed"):
        compiled.choose_engine(*parts(engine="compiled"))


def test_the_engine_is_not_part_of_a_runs_identity():
    """Both engines' results are bit-identical: a rerun under the other may replace them."""
    from specbatch.simulator.sim_result import config_identity

    ids = {config_identity(load_config(None, engine=e)) for e in ("auto", "numpy", "compiled")}
    assert len(ids) == 1
    assert config_identity(load_config(None, seed=1)) not in ids


def test_the_kernel_cache_lives_under_specbatch_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("SPECBATCH_CACHE", str(tmp_path))
    assert compiled.cache_dir() == tmp_path / "numba"


@needs_numba
def test_a_changed_kernel_module_drops_every_cached_kernel(monkeypatch, tmp_path, capsys):
    """numba checks a cached function against its own file only: when any module of the kernel
    package changed since its kernels were cached (kernel_stamp differs), load_kernel drops the
    package's cache indexes, so run_steps is compiled again with its callees, and says so; an
    unchanged stamp keeps them and says nothing."""
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(compiled, "_NOTED", set())
    here = compiled.kernel_cache(tmp_path)
    here.mkdir(parents=True)
    loop, callee = here / "loop.run_steps-100.py311.nbi", here / "pricing.role_time-50.py311.nbi"
    for index in (loop, callee):
        index.write_bytes(b"")
    (here / "sources.sha256").write_text("the package before an edit")
    compiled.load_kernel()
    assert not loop.exists() and not callee.exists()
    assert (here / "sources.sha256").read_text() == compiled.kernel_stamp()
    assert "compiling the vllm-v1 kernel" in capsys.readouterr().err
    loop.write_bytes(b"")
    monkeypatch.setattr(compiled, "_NOTED", set())
    compiled.load_kernel()
    assert loop.exists() and capsys.readouterr().err == ""


@needs_numba
def test_the_driver_calls_the_kernel_with_one_signature():
    """numba compiles run_steps once per signature of its arguments (~20 CPU-s each, cached
    beside the first), an array's layout and writability included: one replica or several
    (each replica's arrivals a strided slice of the order), a trace with proposed tokens (the
    n-gram trace's column, read-only) or without, all reach the kernel as one signature."""
    kernel = compiled.load_kernel()
    ngram = {"trace": "traces/data/smollm2-ngram", "draft": "ngram", "policy": "fixed", "k": 2}
    for knobs in ({}, {"replicas": 3}, ngram, {**ngram, "replicas": 2}):
        config = load_config(None, engine="compiled", requests=12, seed=2,
                             **{**FIXED_HOST, **knobs})
        assert simulate(config).summary["engine_ran"] == "compiled"
    assert len(kernel.run_steps.signatures) == 1, kernel.run_steps.signatures


@needs_numba
def test_the_kernel_stamp_is_checked_once_per_cache_folder_in_a_process(monkeypatch, tmp_path):
    """numba reads a cached kernel once per process, so load_kernel compares the sources'
    stamp once per cache folder; a folder not yet checked is checked."""
    monkeypatch.setattr(compiled, "_STAMPED", set())
    stamp = compiled.kernel_stamp
    for name in ("a", "b"):
        monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path / name))
        monkeypatch.setattr(compiled, "kernel_stamp", stamp)
        compiled.load_kernel()
        mark = compiled.kernel_cache(tmp_path / name) / "sources.sha256"
        assert mark.read_text() == stamp()
        mark.write_text("edited after the check")
        monkeypatch.setattr(compiled, "kernel_stamp", lambda: pytest.fail("checked again"))
        compiled.load_kernel()
        assert mark.read_text() == "edited after the check"


# ------------------------------------------------------------------ the kernel's pieces


@needs_numba
@pytest.mark.parametrize("shape", [{}, {"target": "qwen3-30b-a3b", "draft": "qwen2.5-0.5b"},
                                   {"target": "llama-3.1-8b", "draft": "llama-3.2-1b",
                                    "quantization": "fp8"}], ids=["dense", "moe", "fp8"])
def test_pass_time_is_the_roofline_sums_formula_bit_for_bit(shape):
    """kernel.pass_time on the constants the driver packs (pack_costs.pack_roofline) equals
    RooflineCost.time_from_sums (the same expressions in the same order) on random
    exact-integer sums: dense, uniform-routing experts (E (1 − (1 − k/E)^Σq) touched) and W8A8
    FP8 GEMMs."""
    kernel = compiled.load_kernel()
    _, _, cost = parts(**shape)
    rng = np.random.default_rng(0)
    consts = np.zeros(kernel.N_FLOATS)
    consts[kernel.F_SCALE] = 1.0
    pack_costs.pack_roofline(kernel, consts, cost)
    for off, role in ((0, "target"), (10, "draft")):
        for _ in range(200):
            n = int(rng.integers(0, 300))
            q = rng.integers(1, 600, n)
            kv = rng.integers(0, 9000, n)
            sums = (float(q.sum()), float(kv.sum()), float(q @ kv), float(q @ q))
            want = cost.time_from_sums(role, n, *sums)
            got = kernel.pass_time(consts, off, *sums, -1.0)
            assert np.float64(got).view(np.int64) == np.float64(want).view(np.int64)
            rows = float(rng.integers(0, n + 1))  # the LM head at the sampled rows only
            want = cost.time_from_sums(role, n, *sums, rows=rows)
            got = kernel.pass_time(consts, off, *sums, rows)
            assert np.float64(got).view(np.int64) == np.float64(want).view(np.int64)


#: Deployments of role_time's parity: a Vidur-profiled GPU at tp 2 (a table cell, the NCCL
#: curve), the LLMServingSim GPUs (the regime law and the sampler): a dense and a MoE cell.
ROLE_DEPLOYMENTS = [
    {"hardware": "a100", "tp": 2},
    {"hardware": "rtx-pro-6000", "target": "llama-3.1-8b", "draft": "llama-3.2-1b"},
    {"hardware": "rtx-pro-6000", "target": "qwen3-30b-a3b", "draft": "qwen2.5-0.5b"},
]


@needs_numba
@pytest.mark.parametrize("sizes", [(), (8, 24, 64)])
@pytest.mark.parametrize("deployment", ROLE_DEPLOYMENTS,
                         ids=[d["hardware"] + "-" + d.get("target", "default")
                              for d in ROLE_DEPLOYMENTS])
def test_role_time_is_table_time_bit_for_bit(sizes, deployment):
    """kernel.role_time on the packed PassTables (compiled.pass_tables) equals
    simulator.cost.tabulated.table_time, and so CalibratedCost.time_from_sums, on random
    exact-integer sums, rows None / 0 / fewer than Σq, after CUDA-graph padding as
    PaddedSumsCost pads (n, Σq and Σq² grow by the padding)."""
    from specbatch.simulator.cost.features.graph_padding import PaddedSumsCost

    kernel = compiled.load_kernel()
    config, policy, cost = parts(cost="calibrated", policy="fixed", k=3,
                                 max_num_batched_tokens=700, **deployment)
    # the model (build_cost wraps it in the vLLM V1 draft model's pass 1, drafter_layer
    # takes that off)
    cost = compiled.drafter_layer(compiled.cost_layers(cost)[2])[2]
    tab, tlaw = compiled.pass_tables(config, policy, cost, sizes)
    model = PaddedSumsCost(cost, sizes) if sizes else cost
    c = np.zeros(kernel.N_FLOATS + len(sizes))
    c[kernel.F_SCALE], c[kernel.F_NSIZES] = 1.0, len(sizes)
    c[kernel.F_SIZES:] = sizes
    rng = np.random.default_rng(len(sizes))
    for off, role in ((0, "target"), (10, "draft")):
        for _ in range(300):
            n = int(rng.integers(1, 40))
            q = rng.integers(1, int(rng.choice([2, 4, 30])), n)
            kv = rng.integers(0, 9000, n)
            sums = (float(q.sum()), float(kv.sum()), float(q @ kv), float(q @ q))
            for rows in (None, 0.0, float(rng.integers(0, q.sum() + 1))):
                want = model.time_from_sums(role, n, *sums, rows=rows)
                got = kernel.role_time(c, off, float(n), *sums, -1.0 if rows is None else rows,
                                       tab, tlaw)
                assert np.float64(got).view(np.int64) == np.float64(want).view(np.int64)


@needs_numba
@pytest.mark.parametrize("host, overlap", [("fixed", False), ("fixed", True),
                                           ("vllm", False), ("vllm", True)])
def test_a_scaled_cost_runs_compiled_with_the_same_tables(host, overlap):
    """analysis.sensitivity's ScaledCost (the CLI's ±5 % step-time runs of an open-loop
    workload) prices factor · time, around vLLM's host terms too (factor · the host-adjusted
    pass): the compiled loop multiplies the same way."""
    from specbatch.analysis.sensitivity import ScaledCost

    runs = {}
    for engine in ("numpy", "compiled"):
        config = load_config(None, host=host, async_scheduling=overlap, engine=engine,
                             requests=40, seed=2, policy="fixed", k=2,
                             arrival="poisson", rate=20.0)
        runs[engine] = simulate(config, trace=default_trace(),
                                cost_model=ScaledCost(build_cost(config), 1.05))
    assert runs["compiled"].summary["engine_ran"] == "compiled"
    assert_bit_identical(runs["numpy"].requests, runs["compiled"].requests)
    assert_bit_identical(runs["numpy"].steps, runs["compiled"].steps)


@needs_numba
def test_select_and_topc_are_numpys_partition_and_monotone_topc():
    """kernel.select is np.partition's k-th value; kernel.monotone_topc equals
    theory.allocate.budget.monotone_topc, ties included (values drawn from a few levels), and
    with ``positive_only`` its monotone_optimum (TETRIS under BV)."""
    from specbatch.theory.allocate.budget import monotone_optimum, monotone_topc

    kernel = compiled.load_kernel()
    rng = np.random.default_rng(1)
    for _ in range(300):
        n, k = int(rng.integers(1, 12)), int(rng.integers(1, 6))
        levels = rng.choice([0.1, 0.25, 0.5, 0.9, 1.0], size=(n, k))
        values = np.sort(levels, axis=1)[:, ::-1].copy()  # non-increasing rows, many ties
        flat = values.ravel().copy()
        kth = int(rng.integers(0, n * k))
        assert kernel.select(flat.copy(), n * k, kth) == np.partition(flat, kth)[kth]
        budget = int(rng.integers(0, n * k + 3))
        got = np.zeros(n, dtype=np.int64)
        kernel.monotone_topc(values, n, k, budget, np.zeros(n * k), got)
        assert got.tolist() == monotone_topc(values, budget).tolist()
        zeroed = np.where(rng.random((n, 1)) < 0.3, 0.0, values)  # rows of zeros: BV's cap
        kernel.monotone_topc(zeroed, n, k, budget, np.zeros(n * k), got, True)
        assert got.tolist() == monotone_optimum(zeroed, budget).tolist()


@needs_numba
def test_eta_is_the_replays_uniform_stream():
    """kernel.eta(key, t, j) equals simulator.replay.chain.uniforms bit for bit."""
    from specbatch.simulator.replay.chain import request_keys, uniforms

    kernel = compiled.load_kernel()
    keys = request_keys(7, np.arange(50))
    pos = np.arange(50) * 37
    want = uniforms(keys, pos, 6)
    for i in range(50):
        for j in range(6):
            assert kernel.eta(keys[i], int(pos[i]), j) == want[i, j]


# ------------------------------------------------------------------ a hand-checked run


@needs_numba
def test_a_lone_request_prefills_then_decodes_one_token_a_step():
    """One request under ``ar`` (simulator.engine.v1.step.V1Step.run_composed with
    emit_completed): step 0 prefills the whole prompt (budget 8192) and emits the first token
    at its end; each later step decodes one token; L steps for L output tokens; each step
    starts when the last ended (time + duration, the engine's STEP_END event)."""
    req, steps, summary = tables("compiled", requests=1, seed=9, policy="ar")
    assert summary["engine_ran"] == "compiled"
    out, prompt = int(req.output_len[0]), int(req.prompt_len[0])
    assert len(steps) == out
    assert (steps.prefill_tokens[0], steps.batch[0], steps.emitted[0]) == (prompt, 0, 1)
    assert (steps.prefill_tokens[1:] == 0).all() and (steps.batch[1:] == 1).all()
    assert (steps.emitted[1:] == 1).all() and (steps.depth == 0).all()
    c = CLIENT_TTFT_S  # the client sees each stamp c after the step's end (the default)
    assert req.first_token[0] == steps.end[0] + c and req.finish[0] == steps.end.iloc[-1] + c
    time, end = steps.time.to_numpy(), steps.end.to_numpy()
    assert (time[1:] == time[:-1] + (end[:-1] - time[:-1])).all()
    assert int(req.tokens[0]) == out and int(req.steps[0]) == out - 1


# ------------------------------------------------------------------ parity


#: The golden configurations the compiled loop covers (/work/tools/golden.sh: v1default,
#: fixedbv, tetris, chunked, example, ngram), plus budget cuts, a KV capacity, prefill
#: without chunks, the torch sampler's floors, TETRIS's budget C (0 included), paged KV,
#: replicas, CUDA-graph padding, dsd and long_prefill_token_threshold.
COVERED = [
    {"requests": 96, "seed": 3},
    {"requests": 96, "seed": 3, "policy": "fixed", "k": 3, "verify": "block"},
    {"requests": 96, "seed": 3, "arrival": "poisson", "rate": 20.0,
     "max_num_batched_tokens": 256, "policy": "fixed", "k": 2},
    {"requests": 96, "seed": 3, "workload": "example", "arrival": "trace", "policy": "fixed",
     "k": 2},
    {"requests": 60, "seed": 5, "policy": "fixed", "k": 4, "max_num_batched_tokens": 64,
     "max_num_seqs": 8},
    {"requests": 60, "seed": 5, "policy": "fixed", "k": 4, "kv_capacity": 20000,
     "arrival": "poisson", "rate": 50.0},
    {"requests": 40, "seed": 1, "policy": "fixed", "k": 3, "enable_chunked_prefill": False,
     "max_num_batched_tokens": 4096},
    {"requests": 40, "seed": 1, "policy": "ar", "max_num_batched_tokens": 100,
     "max_num_seqs": 5},
    {"requests": 40, "seed": 2, "policy": "fixed", "k": 2, "verify_cost": "torch",
     "verify": "block"},
    {"requests": 96, "seed": 3, "policy": "tetris", "k": 3, "extra": 1},
    {"requests": 60, "seed": 3, "policy": "tetris", "k": 2, "extra": 2, "budget": 5,
     "max_num_batched_tokens": 128, "max_num_seqs": 16},
    {"requests": 40, "seed": 4, "policy": "tetris", "k": 3, "extra": 1, "budget": 0},
    {"requests": 96, "seed": 3, "policy": "tetris", "k": 3, "extra": 1, "verify": "block"},
    {"requests": 60, "seed": 5, "policy": "tetris", "k": 2, "extra": 2, "budget": 50,
     "verify": "block", "max_num_batched_tokens": 128},
    {"requests": 60, "seed": 3, "policy": "tetris", "k": 3, "extra": 1,
     "trace": "traces/data/smollm2-ngram"},
    # paged KV (golden "paged"): preemption by recompute, the counting prefix cache's hits
    {"requests": 96, "seed": 3, "kv_mode": "paged", "kv_capacity": 6000, "policy": "fixed",
     "k": 2},
    {"requests": 96, "seed": 3, "kv_mode": "paged", "kv_capacity": 6000, "policy": "fixed",
     "k": 2, "enable_prefix_caching": False},
    {"requests": 100, "seed": 4, "kv_mode": "paged", "kv_capacity": 3000, "policy": "tetris",
     "k": 3, "extra": 1, "max_num_batched_tokens": 512, "max_num_seqs": 64},
    {"requests": 100, "seed": 5, "kv_mode": "paged", "kv_capacity": 2500, "policy": "fixed",
     "k": 4, "block_size": 8, "enable_chunked_prefill": False},
    {"requests": 60, "seed": 3, "kv_mode": "paged", "workload": "example", "arrival": "trace",
     "kv_capacity": 4000, "policy": "ar"},
    # replicas behind round_robin (golden "replicas"): independent runs merged in event order
    {"requests": 96, "seed": 3, "replicas": 2, "arrival": "poisson", "rate": 30.0,
     "policy": "fixed", "k": 2},
    {"requests": 96, "seed": 3, "replicas": 3},
    {"requests": 100, "seed": 4, "replicas": 2, "policy": "dsd", "kv_mode": "paged",
     "kv_capacity": 3000},
    {"requests": 100, "seed": 4, "replicas": 4, "policy": "tetris", "k": 3, "extra": 1,
     "max_num_seqs": 4},
    # CUDA-graph padding (simulator.cost.features.graph_padding.PaddedSumsCost)
    {"requests": 60, "seed": 3, "cuda_graph_sizes": "64"},
    {"requests": 60, "seed": 3, "cuda_graph_sizes": "3,17,100", "policy": "tetris", "k": 3,
     "extra": 1, "arrival": "poisson", "rate": 20.0},
    {"requests": 60, "seed": 3, "cuda_graph_sizes": "256", "policy": "dsd", "replicas": 2},
    # dsd (golden "dsd"): its goodput scan every interval, the k = 0 probe, α from each τ
    {"requests": 96, "seed": 3, "policy": "dsd"},
    {"requests": 96, "seed": 3, "policy": "dsd", "dsd_interval": 1, "verify": "block"},
    {"requests": 100, "seed": 4, "policy": "dsd", "kv_mode": "paged", "kv_capacity": 3000,
     "max_num_batched_tokens": 256, "max_num_seqs": 32},
    {"requests": 60, "seed": 5, "policy": "dsd", "verify_cost": "torch",
     "max_num_batched_tokens": 40},
    # long_prefill_token_threshold caps every running request, decoding ones too
    {"requests": 60, "seed": 7, "policy": "fixed", "k": 4, "long_prefill_token_threshold": 3},
    {"requests": 60, "seed": 7, "kv_mode": "paged", "kv_capacity": 3000, "policy": "tetris",
     "k": 3, "extra": 1, "long_prefill_token_threshold": 48},
    # the roofline's uniform-routing experts (E_touched(Σq)) and W8A8 FP8 GEMMs
    {"requests": 60, "seed": 4, "policy": "fixed", "k": 3, "target": "qwen3-30b-a3b",
     "draft": "qwen2.5-0.5b", "max_num_batched_tokens": 512},
    {"requests": 60, "seed": 4, "policy": "dsd", "target": "qwen3-30b-a3b",
     "draft": "qwen2.5-0.5b", "cuda_graph_sizes": "3,17,100"},
    {"requests": 60, "seed": 4, "policy": "fixed", "k": 3, "target": "llama-3.1-8b",
     "draft": "llama-3.2-1b", "quantization": "fp8"},
]


@needs_numba
@pytest.mark.parametrize("asked", ["auto", False], ids=["auto", "sync"])
@pytest.mark.parametrize("knobs", COVERED, ids=[str(i) for i in range(len(COVERED))])
def test_compiled_tables_equal_the_numpy_engines(knobs, asked):
    """Under the default async_scheduling (auto: overlapped and lagged but for the n-gram
    drafter, AsyncOverheadCost around the preset's flat overhead) and synchronous."""
    assert_parity(async_scheduling=asked, **knobs)


#: vLLM's host terms (host = "vllm", the default; simulator.cost.features.host.HostCost):
#: a + b·n per step (async scheduling: max(target pass, a + b·n)) and the proposer loop's
#: floor on every draft pass, across the policies, chunked prefill, paged KV, padding and
#: replicas (each run with and without async scheduling).
HOST_COVERED = [
    {"requests": 60, "seed": 3},
    {"requests": 60, "seed": 3, "policy": "fixed", "k": 3, "verify": "block"},
    {"requests": 60, "seed": 5, "policy": "tetris", "k": 3, "extra": 1,
     "max_num_batched_tokens": 128},
    {"requests": 60, "seed": 3, "policy": "dsd"},
    {"requests": 60, "seed": 5, "policy": "dsd", "dsd_interval": 1, "verify_cost": "torch",
     "max_num_batched_tokens": 40},
    {"requests": 60, "seed": 4, "policy": "fixed", "k": 2, "enable_chunked_prefill": False},
    {"requests": 96, "seed": 3, "kv_mode": "paged", "kv_capacity": 3000, "policy": "tetris",
     "k": 3, "extra": 1, "max_num_batched_tokens": 512},
    {"requests": 60, "seed": 3, "cuda_graph_sizes": "3,17,100", "policy": "fixed", "k": 4},
    {"requests": 96, "seed": 4, "replicas": 2, "policy": "dsd", "kv_mode": "paged",
     "kv_capacity": 3000, "arrival": "poisson", "rate": 30.0},
    {"requests": 60, "seed": 7, "policy": "ar", "long_prefill_token_threshold": 3},
    # a 1B drafter: its pass over a prefill chunk outlasts the proposer floor (t + k_small g)
    {"requests": 60, "seed": 3, "policy": "fixed", "k": 3, "target": "llama-3.1-8b",
     "draft": "llama-3.2-1b"},
    # small targets: under async scheduling most steps are host-bound (a + b n > the pass)
    {"requests": 60, "seed": 3, "policy": "fixed", "k": 2, "target": "smollm2-135m",
     "draft": "vicuna-68m"},
    {"requests": 60, "seed": 3, "policy": "dsd", "target": "qwen2.5-0.5b",
     "draft": "smollm2-135m"},
]


@needs_numba
@pytest.mark.parametrize("overlap", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("knobs", HOST_COVERED, ids=[str(i) for i in range(len(HOST_COVERED))])
def test_compiled_tables_equal_the_numpy_engines_with_vllms_host_terms(knobs, overlap):
    assert_parity(host="vllm", async_scheduling=overlap, **knobs)


#: vLLM's async scheduling lag (simulator.engine.async_lag: arrivals seen at the last step's
#: start, finished requests freed one step late, an empty lagged schedule made again): open
#: arrivals into a few slots, paged KV with the prefix cache and preemption, reserve mode under
#: a capacity, priority admission, prefill-first steps, replicas, each policy family.
LAG_COVERED = [
    {"requests": 80, "seed": 3, "max_num_seqs": 4, "arrival": "poisson", "rate": 40.0},
    {"requests": 80, "seed": 4, "policy": "fixed", "k": 3, "kv_mode": "paged",
     "kv_capacity": 2000, "enable_prefix_caching": True, "max_num_seqs": 8,
     "arrival": "poisson", "rate": 30.0},
    {"requests": 80, "seed": 5, "policy": "fixed", "k": 2, "scheduling_policy": "priority",
     "kv_capacity": 6000, "max_num_seqs": 6, "arrival": "poisson", "rate": 25.0},
    {"requests": 60, "seed": 6, "policy": "ar", "kv_capacity": 3000, "max_num_seqs": 5},
    {"requests": 90, "seed": 7, "policy": "dsd", "replicas": 3, "max_num_seqs": 3,
     "arrival": "poisson", "rate": 50.0},
    {"requests": 60, "seed": 8, "policy": "tetris", "k": 3, "extra": 1, "max_num_seqs": 4,
     "enable_chunked_prefill": False, "arrival": "poisson", "rate": 30.0},
    {"requests": 60, "seed": 9, "policy": "vllm-adaptive", "k": 4, "max_num_seqs": 6,
     "max_num_batched_tokens": 64, "arrival": "poisson", "rate": 60.0},
    {"requests": 40, "seed": 2, "policy": "ar", "max_num_seqs": 2, "arrival": "poisson",
     "rate": 2.0},
]


@needs_numba
@pytest.mark.parametrize("knobs", LAG_COVERED, ids=[str(i) for i in range(len(LAG_COVERED))])
def test_compiled_tables_equal_the_numpy_engines_under_the_async_scheduling_lag(knobs):
    assert_parity(host="vllm", async_scheduling=True, **knobs)


#: The calibrated model (cost = "calibrated": PassTables of both roles, kernel.role_time) with
#: vLLM's host terms (the default host): h100 vicuna-33b / vicuna-68m (the default shapes;
#: law-priced), a100 tp 2 (a table cell and the measured NCCL curve), a MoE target, a
#: quantised target, paged KV with the prefix cache, async scheduling, CUDA-graph padding,
#: the eager preset's host floor, and the policies fixed, tetris, dsd and ar.
CALIBRATED_COVERED = [
    {"requests": 60, "seed": 3, "policy": "fixed", "k": 2},
    {"requests": 60, "seed": 3, "policy": "fixed", "k": 2, "hardware": "a100", "tp": 2},
    {"requests": 60, "seed": 4, "policy": "fixed", "k": 3, "target": "qwen3-30b-a3b",
     "draft": "qwen2.5-0.5b", "max_num_batched_tokens": 512},
    {"requests": 60, "seed": 4, "policy": "fixed", "k": 3, "target": "llama-3.1-8b",
     "draft": "llama-3.2-1b", "quantization": "fp8", "max_num_batched_tokens": 1024},
    {"requests": 96, "seed": 3, "kv_mode": "paged", "kv_capacity": 3000, "policy": "tetris",
     "k": 3, "extra": 1, "enable_prefix_caching": True, "max_num_batched_tokens": 512},
    {"requests": 60, "seed": 5, "policy": "fixed", "k": 3, "async_scheduling": True,
     "arrival": "poisson", "rate": 20.0},
    {"requests": 60, "seed": 3, "policy": "dsd", "hardware": "a100", "tp": 2},
    {"requests": 60, "seed": 3, "policy": "dsd", "cuda_graph_sizes": "64",
     "max_num_batched_tokens": 256},
    {"requests": 60, "seed": 7, "policy": "ar", "execution": "eager"},
    {"requests": 60, "seed": 7, "policy": "tetris", "k": 2, "extra": 2,
     "cuda_graph_sizes": "3,17,100", "verify": "block"},
]


@needs_numba
@pytest.mark.parametrize("knobs", CALIBRATED_COVERED,
                         ids=[str(i) for i in range(len(CALIBRATED_COVERED))])
def test_compiled_tables_equal_the_numpy_engines_under_the_calibrated_cost(knobs):
    assert_parity(cost="calibrated", host="vllm", **knobs)


#: The calibrated model on the LLMServingSim-profiled GPUs (the default cost there:
#: simulator.cost.measured.lss_table, the two-regime attention law and the sampler at n
#: requests): RTX PRO 6000 Llama-3.1-8B with chunks beside decodes and drafts, the MoE cell,
#: Qwen3-32B tp 2 (the PCIe all-reduce) under dsd's scan, RTX 4090 with paged KV that preempts,
#: a transferred tp 4 cell, an EAGLE-3 head, the n-gram proposer, CUDA-graph padding, BV and
#: the eager preset's host floor, async scheduling.
LSS_COVERED = [
    {"requests": 60, "seed": 3, "policy": "fixed", "k": 3, "hardware": "rtx-pro-6000",
     "target": "llama-3.1-8b", "draft": "llama-3.2-1b", "max_num_batched_tokens": 512},
    {"requests": 60, "seed": 4, "policy": "tetris", "k": 3, "extra": 1,
     "hardware": "rtx-pro-6000", "target": "qwen3-30b-a3b", "draft": "qwen2.5-0.5b",
     "max_num_batched_tokens": 256},
    {"requests": 60, "seed": 5, "policy": "dsd", "hardware": "rtx-pro-6000",
     "target": "Qwen/Qwen3-32B", "draft": "llama-3.2-1b", "tp": 2},
    {"requests": 96, "seed": 3, "policy": "ar", "hardware": "rtx4090", "target": "llama-3.1-8b",
     "draft": "llama-3.2-1b", "kv_mode": "paged", "kv_capacity": 3000,
     "enable_prefix_caching": True, "max_num_batched_tokens": 512},
    {"requests": 60, "seed": 6, "policy": "fixed", "k": 2, "hardware": "rtx4090",
     "target": "Qwen/Qwen3-32B", "draft": "vicuna-68m", "tp": 4, "async_scheduling": True,
     "arrival": "poisson", "rate": 20.0},
    {"requests": 60, "seed": 7, "policy": "fixed", "k": 3, "hardware": "rtx-pro-6000",
     "target": "llama-3.1-8b", "draft": "eagle3", "cuda_graph_sizes": "3,17,100"},
    {"requests": 60, "seed": 8, "policy": "threshold", "k": 3, "hardware": "rtx4090",
     "target": "llama-3.1-8b", "draft": "ngram"},
    {"requests": 60, "seed": 9, "policy": "tetris", "k": 2, "extra": 2, "verify": "block",
     "hardware": "rtx4090", "target": "llama-3.1-8b", "draft": "llama-3.2-1b",
     "execution": "eager", "max_num_batched_tokens": 128},
]


@needs_numba
@pytest.mark.parametrize("knobs", LSS_COVERED, ids=[str(i) for i in range(len(LSS_COVERED))])
def test_compiled_tables_equal_the_numpy_engines_on_the_llmservingsim_gpus(knobs):
    assert_parity(cost="calibrated", host="vllm", **knobs)


#: The aic model (cost = "aic": AIConfigurator's measured curves as PassTables of both roles,
#: the grid attention law): the h100 default shapes, a100 tp 2 (the measured all-reduce curve;
#: FA2's unpacked mixed calls), a MoE target on h200, fp8 KV, paged KV with the prefix cache,
#: async scheduling, CUDA-graph padding, dsd and tetris; RTX PRO 6000 bf16 (FA2's mixed calls)
#: and fp8 KV and B200 (FlashInfer's two launches) with chunks beside decodes and drafts; MLA
#: (DeepSeek-V2-Lite on H100 bf16: FLASH_ATTN_MLA's decode launch for queries <= 512 tokens).
AIC_COVERED = [
    {"requests": 60, "seed": 3, "policy": "fixed", "k": 2},
    {"requests": 60, "seed": 3, "policy": "ar", "hardware": "a100", "tp": 2,
     "target": "llama-3.1-8b", "draft": "llama-3.1-8b"},
    {"requests": 60, "seed": 4, "policy": "fixed", "k": 3, "hardware": "h200",
     "target": "qwen3-30b-a3b", "draft": "qwen2.5-0.5b", "max_num_batched_tokens": 512},
    {"requests": 60, "seed": 4, "policy": "fixed", "k": 3, "target": "llama-3.1-8b",
     "draft": "llama-3.2-1b", "kv_cache_dtype": "fp8", "max_num_batched_tokens": 1024},
    {"requests": 96, "seed": 3, "kv_mode": "paged", "kv_capacity": 3000, "policy": "tetris",
     "k": 3, "extra": 1, "enable_prefix_caching": True, "max_num_batched_tokens": 512},
    {"requests": 60, "seed": 5, "policy": "fixed", "k": 3, "async_scheduling": True,
     "arrival": "poisson", "rate": 20.0},
    {"requests": 60, "seed": 3, "policy": "dsd", "cuda_graph_sizes": "64",
     "max_num_batched_tokens": 256},
    {"requests": 60, "seed": 6, "policy": "fixed", "k": 3, "hardware": "rtx-pro-6000",
     "target": "llama-3.1-8b", "draft": "llama-3.2-1b", "max_num_batched_tokens": 512},
    {"requests": 60, "seed": 7, "policy": "fixed", "k": 2, "hardware": "rtx-pro-6000",
     "target": "llama-3.1-8b", "draft": "llama-3.2-1b", "kv_cache_dtype": "fp8",
     "max_num_batched_tokens": 384},
    {"requests": 60, "seed": 8, "policy": "ar", "hardware": "b200", "target": "llama-3.1-8b",
     "draft": "llama-3.2-1b", "max_num_batched_tokens": 256},
    {"requests": 60, "seed": 9, "policy": "tetris", "k": 3, "extra": 1,
     "target": "deepseek-v2-lite", "draft": "llama-3.2-1b", "max_num_batched_tokens": 512},
]


@needs_numba
@pytest.mark.parametrize("knobs", AIC_COVERED, ids=[str(i) for i in range(len(AIC_COVERED))])
def test_compiled_tables_equal_the_numpy_engines_under_the_aic_cost(knobs):
    assert_parity(cost="aic", host="vllm", **knobs)


@needs_numba
@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(requests=st.integers(1, 40), seed=st.integers(0, 2**31 - 1),
       policy=st.sampled_from(["ar", "fixed", "tetris", "dsd", "batch-schedule",
                               "vllm-dynamic", "ema-adaptive", "vllm-adaptive", "threshold",
                               "specdec++", "entropy-stop", "oracle", "hindsight"]),
       k=st.integers(1, 5),
       extra=st.integers(0, 2), budget_c=st.one_of(st.none(), st.integers(0, 40)),
       verify=st.sampled_from(["token", "block"]), budget=st.integers(8, 600),
       seqs=st.integers(1, 24), chunked=st.booleans(),
       arrival=st.sampled_from(["burst", "poisson"]), rate=st.floats(1.0, 200.0),
       capacity=st.sampled_from([None, 2500, 6000, 40000]), paged=st.booleans(),
       block_size=st.sampled_from([4, 16]), prefix=st.booleans(),
       threshold=st.sampled_from([0, 0, 2, 40]), replicas=st.sampled_from([1, 1, 2, 3]),
       graphs=st.sampled_from([None, None, "64", "3,17,100"]),
       host=st.sampled_from(["fixed", "vllm"]), overlap=st.booleans(),
       cost=st.sampled_from(["roofline", "roofline", "calibrated", "calibrated-rtx", "aic"]),
       drafter=st.sampled_from(["model", "model", "model", "eagle3", "eagle", "ngram"]),
       shape=st.sampled_from(["default", "default", "moe", "fp8"]))
def test_compiled_tables_equal_the_numpy_engines_on_random_runs(
        requests, seed, policy, k, extra, budget_c, verify, budget, seqs, chunked, arrival,
        rate, capacity, paged, block_size, prefix, threshold, replicas, graphs, host,
        overlap, cost, drafter, shape):
    knobs = dict(requests=requests, seed=seed, policy=policy, verify=verify,
                 max_num_batched_tokens=budget if chunked else budget + 4096,
                 max_num_seqs=seqs, enable_chunked_prefill=chunked, arrival=arrival,
                 kv_capacity=None if capacity is None else 4 * capacity,
                 long_prefill_token_threshold=threshold, replicas=replicas,
                 cuda_graph_sizes=graphs, host=host,
                 async_scheduling=overlap, cost=cost)
    if drafter != "model":  # a head on llama-3.1-8b (its pass 1 over the target pass) or
        # the n-gram proposer (0 s passes; with host = vllm its host seconds once per step)
        knobs.update(draft=drafter, target="llama-3.1-8b")
    elif shape != "default" and cost == "roofline":  # uniform-routing experts, FP8 GEMMs
        knobs.update({"moe": {"target": "qwen3-30b-a3b", "draft": "qwen2.5-0.5b"},
                      "fp8": {"target": "llama-3.1-8b", "draft": "llama-3.2-1b",
                              "quantization": "fp8"}}[shape])
    if cost == "calibrated-rtx":  # the LLMServingSim GPUs (lss_table): a draft model on the
        # 8B, or the MoE cell, or the head / n-gram proposer drawn above on the 8B
        knobs.update(cost="calibrated", hardware=("rtx-pro-6000", "rtx4090")[seed % 2],
                     **({"target": "llama-3.1-8b"} if drafter != "model" else
                        {"target": "llama-3.1-8b", "draft": "llama-3.2-1b"}))
        if drafter == "model" and shape == "moe":
            knobs.update(hardware="rtx-pro-6000", target="qwen3-30b-a3b",
                         draft="qwen2.5-0.5b")
    if paged:  # a small pool preempts; the prefix cache counts and finds parked blocks
        knobs.update(kv_mode="paged", kv_capacity=capacity or 3000, block_size=block_size,
                     enable_prefix_caching=prefix)
    if policy == "fixed":
        knobs["k"] = k
    if policy == "tetris":  # TETRIS: top-C under TV, monotone_optimum under BV
        knobs.update(k=k, extra=extra, budget=budget_c)
    if policy == "dsd":  # its re-planning interval from the same draw
        knobs.update(k=k, dsd_interval=1 + extra * 3)
    if policy == "batch-schedule":  # K = k, vLLM's ranges or TensorRT-LLM's keys
        half = max(1, seqs // 2)
        knobs.update(k=k, **({}, {"num_speculative_tokens_per_batch_size":
                                  f"1-{half}:{k},{half + 1}-4096:{k // 2}"},
                             {"draft_len_schedule": f"2:{k},{half + 2}:1"})[extra])
    if policy == "vllm-dynamic":
        knobs["k"] = k
    if policy == "ema-adaptive":  # SGLang's default slots, or ones that re-plan every batch
        knobs["k"] = k
        if extra:
            knobs["speculative_adaptive_config"] = json.dumps(
                {"1": {"candidate_steps": sorted({0, 1, k}), "warmup_batches": 1,
                       "update_interval": extra, "ceiling_coeff": 0.5 * extra},
                 "4": {"candidate_steps": [1, k]}})
    if policy == "vllm-adaptive":  # profiled tables on stale or fresh confidences
        knobs.update(k=k, adaptive_confidences="fresh" if extra == 2 else "stale")
    if policy in ("threshold", "specdec++", "entropy-stop", "hindsight"):  # K = k + e
        knobs.update(k=k, extra=extra)
    if policy == "oracle":  # top-C of the true survival: TV only
        knobs.update(k=k, extra=extra, budget=budget_c, verify="token")
    if arrival == "poisson":
        knobs["rate"] = rate
    try:
        req_n, steps_n, _ = tables("numpy", **knobs)
    except SpecbatchError:  # a pool the workload's largest request cannot run in alone
        assume(False)
    req_c, steps_c, summary = tables("compiled", **knobs)
    assert summary["engine_ran"] == "compiled"
    assert_bit_identical(req_n, req_c)
    assert_bit_identical(steps_n, steps_c)


@needs_numba
def test_progress_is_told_every_finished_request_once():
    from specbatch.simulator.workload.arrivals import build_workload

    config = load_config(None, host="fixed", engine="compiled", requests=300, max_num_seqs=4,
                         seed=6)
    trace = default_trace()
    seen: list[int] = []
    engine = driver.CompiledEngine(config, trace, build_workload(config, trace),
                                   build_cost(config), make_policy(config, trace.K),
                                   capacity=None, progress=seen.append)
    rec = engine.run()
    assert sum(seen) == 300 and np.isfinite(rec.finish).all()


@needs_numba
@pytest.mark.parametrize("policy, seqs", [("fixed", 4), ("tetris", 16), ("ar", 2)])
def test_priority_admission_is_bit_identical(tmp_path, policy, seqs):
    """scheduling_policy = "priority" (reserve mode): the waiting queue by (priority,
    arrival, uid), simulator.engine.admission.PriorityWaiting, as a heap in the kernel."""
    import pandas as pd

    rng = np.random.default_rng(seqs)
    n = 80
    path = tmp_path / "workload.csv"
    pd.DataFrame({"prompt_len": rng.integers(4, 300, n), "output_len": rng.integers(1, 90, n),
                  "arrival": np.round(np.sort(rng.exponential(0.02, n).cumsum()), 3),
                  "priority": rng.integers(0, 4, n)}).to_csv(path, index=False)
    knobs = dict(requests=n, workload=str(path), arrival="trace", policy=policy,
                 scheduling_policy="priority", max_num_seqs=seqs, max_num_batched_tokens=256)
    if policy != "ar":
        knobs["k"] = 3
    assert_parity(**knobs)


@needs_numba
def test_dsd_ends_in_the_state_the_numpy_engine_leaves_it():
    """DynamicSD's k_now, steps and α after a run: the same under both engines."""
    from specbatch.simulator.engine_run import run_engine
    from specbatch.simulator.workload.arrivals import build_workload

    trace = default_trace()
    states = []
    for engine in ("numpy", "compiled"):
        config = load_config(None, host="fixed", engine=engine, requests=60, seed=8, policy="dsd",
                             dsd_interval=3)
        policy = make_policy(config, trace.K)
        run_engine(config, trace, build_workload(config, trace), build_cost(config), policy,
                   None)
        states.append((policy.k_now, policy.steps, policy.alpha))
    assert states[0] == states[1] and states[0][1] > 0


@needs_numba
def test_streamed_steps_equal_the_held_table(tmp_path):
    """simulate_to streams the step table while the kernel runs (blocks of StepLog's CHUNK
    rows): the file equals the numpy engine's."""
    import pandas as pd

    from specbatch.simulator.run import simulate_to

    for engine in ("numpy", "compiled"):
        simulate_to(tmp_path / engine, load_config(None, host="fixed", engine=engine, requests=300,
                                                   max_num_seqs=4, seed=4),
                    trace=default_trace())
    assert_bit_identical(pd.read_parquet(tmp_path / "numpy" / "steps.parquet"),
                         pd.read_parquet(tmp_path / "compiled" / "steps.parquet"))


def test_cli_engine_compiled_behind_least_outstanding_is_one_line_exit_2(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "specbatch", "simulate", "--host", "fixed", "--requests", "4",
         "--engine",
         "compiled", "--replicas", "2", "--router", "least_outstanding", "--json"],
        capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 2 and proc.stdout == ""
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "engine" in lines[0]


@needs_numba
def test_cli_json_says_which_engine_ran(tmp_path):
    """``--engine compiled`` runs the kernel; ``auto`` leaves a run of fewer than
    AUTO_MIN_REQUESTS requests on numpy (the kernel's load would cost more than it saves)."""
    for engine, ran in (("compiled", "compiled"), ("auto", "numpy")):
        proc = subprocess.run(
            [sys.executable, "-m", "specbatch", "simulate", "--host", "fixed", "--requests", "4",
         "--engine",
             engine, "--json"], capture_output=True, text=True, cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout)["engine_ran"] == ran


@needs_numba
def test_a_fresh_process_points_numbas_cache_under_specbatch_cache(tmp_path):
    """An empty $SPECBATCH_CACHE and no NUMBA_CACHE_DIR: load_kernel points numba's cache at
    $SPECBATCH_CACHE/numba before numba is imported, and says once (one stderr line naming
    it) that the first call will compile. No kernel is compiled here (the slow
    test_a_cold_compile_... runs the whole cold round trip)."""
    env = {**os.environ, "SPECBATCH_CACHE": str(tmp_path / "cache")}
    env.pop("NUMBA_CACHE_DIR", None)
    code = ("from specbatch.simulator.engine.v1 import compiled\n"
            "compiled.load_kernel()\ncompiled.load_kernel()\n"
            "import numba\nprint(numba.config.CACHE_DIR)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(tmp_path / "cache" / "numba")
    cold = [line for line in proc.stderr.splitlines() if "compiling the vllm-v1 kernel" in line]
    assert len(cold) == 1 and str(tmp_path / "cache" / "numba") in cold[0], proc.stderr


@needs_numba
def test_a_second_process_loads_the_cached_kernel_instead_of_compiling(tmp_path):
    """Once this process has run the kernel (compiled, or loaded, and cached under
    NUMBA_CACHE_DIR either way), a fresh process on the same cache loads run_steps from it
    (numba's NUMBA_DEBUG_CACHE lines: its data loaded, nothing compiled and saved) and
    reports what this process computed."""
    here = simulate(load_config(None, host="fixed", engine="compiled", requests=5, seed=1))
    assert here.summary["engine_ran"] == "compiled"
    argv = [sys.executable, "-m", "specbatch", "simulate", "--host", "fixed", "--requests", "5",
            "--seed", "1", "--engine", "compiled", "--json"]
    proc = subprocess.run(argv, capture_output=True, text=True, cwd=tmp_path,
                          env={**os.environ, "NUMBA_DEBUG_CACHE": "1"})
    assert proc.returncode == 0, proc.stderr
    cache = [line for line in proc.stderr.splitlines() if line.startswith("[cache]")]
    assert any(line.startswith("[cache] data loaded") and "loop.run_steps" in line
               for line in cache), proc.stderr  # numba prints on stdout: --json moves it
    assert not any("saved" in line for line in cache), cache
    assert "compiling" not in proc.stderr
    there = json.loads(proc.stdout)
    assert json.dumps({k: there[k] for k in here.summary}) == json.dumps(here.summary)


@pytest.mark.slow
@needs_numba
def test_a_cold_compile_says_so_once_and_the_cache_is_under_specbatch_cache(tmp_path):
    """An empty $SPECBATCH_CACHE: the first run compiles (one stderr line naming the cache)
    and writes the kernel there; the second loads it and says nothing. Slow (a cold compile,
    ~20 CPU-s); the default run covers its parts: the cache's place and the one line in a
    fresh process (test_a_fresh_process_points_...), a second process loading instead of
    compiling (test_a_second_process_loads_...), the line only when no kernel is cached
    (test_a_changed_kernel_module_drops_every_cached_kernel)."""
    env = {**os.environ, "SPECBATCH_CACHE": str(tmp_path / "cache")}
    env.pop("NUMBA_CACHE_DIR", None)
    argv = [sys.executable, "-m", "specbatch", "simulate", "--host", "fixed", "--requests", "3",
            "--engine",
            "compiled", "--json"]
    first = subprocess.run(argv, capture_output=True, text=True, cwd=tmp_path, env=env)
    second = subprocess.run(argv, capture_output=True, text=True, cwd=tmp_path, env=env)
    assert first.returncode == second.returncode == 0, first.stderr
    cold = [line for line in first.stderr.splitlines() if "compiling the vllm-v1 kernel" in line]
    assert len(cold) == 1 and str(tmp_path / "cache" / "numba") in cold[0]
    assert "compiling" not in second.stderr
    assert any((tmp_path / "cache" / "numba").rglob("*.nbi"))
    assert json.loads(first.stdout) == json.loads(second.stdout)
