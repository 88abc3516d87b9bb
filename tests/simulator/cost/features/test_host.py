"""vLLM's host share of a step (simulator.cost.features.host): each term by hand."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pytest

from specbatch.simulator.cost.features import host
from specbatch.simulator.cost.features.host import HostCost, with_host
from specbatch.simulator.cost.registry import build_cost_model


@dataclass(frozen=True)
class Flat:
    """A stand-in model: every target pass ``t`` seconds, every draft pass ``d``."""

    t: float = 5e-3
    d: float = 1e-4
    overhead: float = 1e-3

    def step_time(self, role, query, kv):
        return (self.t if role == "target" else self.d) if np.size(query) else 0.0

    def time_from_sums(self, role, n, sq, skv, sqkv, sqq):
        return (self.t if role == "target" else self.d) if n else 0.0


def test_the_step_law_is_the_least_squares_fit_of_vidurs_tp1_rows():
    # Vidur a100 cpu_overheads.csv, tp 1: schedule + prepare_inputs_e2e medians, 26 rows
    a, b, mape = host.fit_step_law()
    assert a == pytest.approx(host.STEP_S, rel=1e-6)
    assert b == pytest.approx(host.REQUEST_S, rel=1e-6)
    assert mape == pytest.approx(0.02135, abs=1e-4)


def test_without_async_scheduling_a_step_adds_a_plus_b_n():
    # engine step = overhead + target pass: a + (t + b n)
    cost = HostCost(Flat(), overlap=False)
    n = 64
    assert cost.overhead == host.STEP_S
    t = cost.step_time("target", np.ones(n, dtype=np.int64), np.zeros(n, dtype=np.int64))
    assert t == pytest.approx(5e-3 + 64 * 2.126564e-5)
    assert cost.overhead + t == pytest.approx(5e-3 + 2.8665156e-4 + 64 * 2.126564e-5)


def test_with_async_scheduling_the_host_time_hides_under_the_pass_unless_longer():
    cost = HostCost(Flat(t=2e-3), overlap=True)
    assert cost.overhead == 0.0
    # n = 8: a + 8 b = 0.4568 ms < 2 ms: the pass
    assert cost.time_from_sums("target", 8, 8.0, 0.0, 0.0, 8.0) == 2e-3
    # n = 256: a + 256 b = 5.7307 ms > 2 ms: the host
    assert cost.time_from_sums("target", 256, 256.0, 0.0, 0.0, 256.0) == pytest.approx(
        2.8665156e-4 + 256 * 2.126564e-5)
    assert cost.time_from_sums("target", 0, 0.0, 0.0, 0.0, 0.0) == 0.0


def test_the_proposer_loop_counts_vllm_eagle_ops():
    # EAGLE-3 (1 layer, d2t): loop 18 + graphs 2 + attention 2 + head + argmax 2 + scatter 3
    assert host.proposer_ops(1, True) == 27
    assert host.proposer_ops(1, False) == 24
    # a 16-layer draft model: 18 + 17 + 32 + 2
    assert host.proposer_ops(16, False) == 69
    assert host.proposer_kernels(True) == 19 and host.proposer_kernels(False) == 16


def test_a_draft_pass_is_the_larger_of_gpu_plus_small_kernels_and_the_host_loop():
    op = 1.07e-3 / 41
    # host-bound: 0.1 ms + 16 x 2 us < 24 ops x 26.1 us
    assert host.draft_pass_floor(1e-4, 1, False) == pytest.approx(24 * op)
    # GPU-bound: 2 ms + 16 x 2 us > 0.63 ms
    assert host.draft_pass_floor(2e-3, 1, False) == pytest.approx(2e-3 + 16 * 2e-6)
    assert host.draft_pass_floor(0.0, 1, False) == 0.0  # no requests drafting


def test_head_passes_first_and_later_get_the_floor():
    model = build_cost_model("roofline", "h100", "llama-3.1-8b", "eagle3")
    cost = with_host(model, "eagle3", overlap=False)
    assert (cost.draft_layers, cost.d2t, cost.ngram) == (1, True, False)
    one = np.ones(1, dtype=np.int64)
    kv = np.full(1, 512, dtype=np.int64)
    raw = model.step_time("draft", one, kv)
    assert cost.step_time("draft", one, kv) == pytest.approx(max(raw + 19 * 2e-6,
                                                                 27 * 1.07e-3 / 41))
    first = model.first_pass_time(1, 5.0, 512.0, 2560.0, 25.0)
    assert cost.first_pass_time(1, 5.0, 512.0, 2560.0, 25.0) == pytest.approx(
        max(first + 19 * 2e-6, 27 * 1.07e-3 / 41))


def test_eagle_shares_the_target_vocabulary_so_no_scatter():
    cost = with_host(build_cost_model("roofline", "h100", "llama-3.1-8b", "eagle"), "eagle",
                     overlap=False)
    assert (cost.draft_layers, cost.d2t) == (1, False)


def test_ngram_is_priced_once_per_step_on_the_context():
    model = build_cost_model("roofline", "h100", "llama-3.1-8b", "ngram")
    cost = with_host(model, "ngram", overlap=True)
    assert cost.ngram
    # 4 requests, Σc = 4000 cached + Σq = 4: 10.12 µs + 4 x 1.306 µs + 4004 x 1.309 ns
    # + 16 x 5.214 ns = 10.12 + 5.224 + 5.241236 + 0.083424 µs
    assert cost.first_pass_time(4, 4.0, 4000.0, 4000.0, 4.0) == pytest.approx(20.66866e-6)
    q = np.ones(4, dtype=np.int64)
    kv = np.full(4, 1000, dtype=np.int64)
    assert cost.first_pass_step(q, kv) == cost.first_pass_time(4, 4.0, 4000.0, 4000.0, 4.0)
    assert cost.step_time("draft", q, kv) == 0.0  # later passes: nothing on the GPU
    assert host.ngram_seconds(0, 0.0) == 0.0


def test_a_model_drafter_gets_its_layer_count():
    cost = with_host(build_cost_model("roofline", "h100", "llama-3.1-8b", "llama-3.2-1b"),
                     "llama-3.2-1b", overlap=False)
    assert cost.draft_layers == 16 and not cost.d2t


def test_every_term_names_its_source_and_whether_it_was_fitted():
    for name, term in host.HOST_TERMS.items():
        assert term["source"] and isinstance(term["fitted"], bool), name
        assert math.isfinite(term["value"]) and term["value"] >= 0, name
    srcs = HostCost(Flat(), draft_layers=1, d2t=True).sources()
    assert {"step_s", "request_s", "draft_op_s", "client_ttft_s"} <= set(srcs)
    assert srcs["draft_pass"]["ops"] == 27


def test_the_small_kernel_floor_is_vidurs_h100_one_token_median():
    from importlib.resources import files

    d = pd.read_parquet(files("specbatch.traces") / "data" / "profiles" / "vidur" /
                        "compute.parquet")
    t = d[(d.gpu == "h100") & (d.num_tokens == 1) & (d.tp == 1)]
    g = float(np.median(np.concatenate([t.add_ms, t.emb_ms]))) * 1e-3
    assert g == pytest.approx(host.SMALL_KERNEL_S)


def test_graph_padding_goes_inside_the_host_share():
    """simulate pads the GPU passes to the captured sizes (graph_padding.pad_to_graphs); the
    host's b n counts the scheduled requests, not the padding slots."""
    from specbatch.simulator.cost.features.graph_padding import pad_to_graphs

    cost = pad_to_graphs(HostCost(Flat()), "8")
    assert isinstance(cost, HostCost) and type(cost.inner).__name__ == "PaddedSumsCost"
    # 3 requests padded to 8 on the GPU: the pass is Flat's t, the host adds 3 b
    assert cost.time_from_sums("target", 3, 3.0, 0.0, 0.0, 3.0) == pytest.approx(
        5e-3 + 3 * host.REQUEST_S)


def test_the_bundled_cpu_profile_is_vidurs_file_byte_for_byte():
    """traces/data/profiles/vidur_cpu/PROVENANCE.json names the source file's git blob; the
    bundled bytes hash to it (git's blob hash: sha1 of 'blob <size>\\0' + content)."""
    import hashlib
    import json
    from importlib.resources import files

    folder = files("specbatch.traces") / "data" / "profiles" / "vidur_cpu"
    prov = json.loads((folder / "PROVENANCE.json").read_text())
    for entry in prov["files"]:
        data = (folder / entry["path"]).read_bytes()
        blob = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
        assert blob == entry["git_blob"]


def test_the_host_share_keeps_the_lm_head_at_the_rows_vllm_samples():
    """The default cost (host = vllm around the roofline) still takes the engine's logit rows
    (simulator.cost.analytic.roofline): the wrapper declares them and passes them through."""
    import numpy as np

    from specbatch.simulator.config.sim_config import load_config
    from specbatch.simulator.cost.interface import takes_logit_rows
    from specbatch.simulator.run import build_cost

    cost = build_cost(load_config(None))
    assert takes_logit_rows(cost)
    q, kv = np.array([512]), np.array([0])
    assert cost.step_time("target", q, kv, rows=1.0) < cost.step_time("target", q, kv)
    sums = ("target", 1, 512.0, 0.0, 0.0, 512.0 ** 2)
    assert cost.time_from_sums(*sums, rows=1.0) == cost.step_time("target", q, kv, rows=1.0)


def test_the_ngram_constants_are_our_twins_measurement_and_say_so():
    for name in ("ngram_call_s", "ngram_request_s", "ngram_token_s", "ngram_pair_s"):
        term = host.HOST_TERMS[name]
        assert term["fitted"] is True
        assert term["source"].startswith("measured on our numba twin of vLLM's NgramProposer "
                                         "(benchmarks/ngram_host_bench.py) on this repo's AMD "
                                         "EPYC CPU, 1 numba thread"), name
        assert "not a measurement of vLLM itself" in term["source"], name
    assert set(HostCost(Flat(), ngram=True).sources()) >= {"ngram_pair_s", "ngram_token_s"}
    # 256 requests of 2048 tokens: 10.12 µs + 256 x 1.306 µs + 524288 x 1.309 ns
    # + 65536 x 5.214 ns = 10.12 + 334.336 + 686.292992 + 341.704704 µs
    assert host.ngram_seconds(256, 524288.0) == pytest.approx(1372.453696e-6)
