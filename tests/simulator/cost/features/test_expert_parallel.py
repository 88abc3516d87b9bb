"""vLLM data + expert parallelism (simulator.cost.features.expert_parallel, theory.moe's EP forms)
against hand computation: local experts, (token, expert) pairs and touched experts per rank, the
all-gather / reduce-scatter bytes of one MoE layer, the per-rank pass of both cost models,
and the config refusals."""

from __future__ import annotations

import itertools
import re
import subprocess
import sys
from fractions import Fraction

import numpy as np
import pandas as pd
import pytest

from specbatch.errors import SpecbatchError
from specbatch.simulator.config.sim_config import make_config
from specbatch.simulator.cost.analytic.all2all import dispatch_bytes, dispatch_seconds
from specbatch.simulator.cost.analytic.roofline import RooflineCost
from specbatch.simulator.cost.features.expert_parallel import with_expert_parallel
from specbatch.simulator.cost.gpus.hardware import get_hardware
from specbatch.simulator.cost.measured.calibrated import CalibratedCost
from specbatch.simulator.cost.measured.lss import PCIE_LINK
from specbatch.simulator.run import build_cost
from specbatch.theory.moe import ep_local_experts, ep_local_touched, ep_pairs
from specbatch.traces.models.model_shape import ModelShape
from specbatch.traces.models.shapes import SHAPES
from specbatch.traces.public.vllm_runs import BUNDLED_DIR

# 1 MoE layer, h = 8, 4 experts of width 4, 2 per token
TINY = ModelShape("tiny-moe", 1, 8, 2, 2, 16, 10, experts=4, top_k=2, expert_intermediate=4,
                  moe_layers=1)
QWEN = SHAPES["qwen3-30b-a3b"]  # 48 MoE layers, E = 128, k = 8, h = 2048


def test_tiny_shape_local_experts_pairs_and_touched_by_hand():
    assert ep_local_experts(4, 2) == 2  # ranks hold experts {0, 1} and {2, 3}
    assert ep_pairs(3, top_k=2, ep_size=2) == 3.0  # 3 tokens x 2 picks / 2 ranks
    # each local expert is missed by a token with p = 1 - 2/4: 2 (1 - (1/2)^3) = 1.75
    assert ep_local_touched(3, 4, 2, 2) == 1.75
    with pytest.raises(SpecbatchError, match="ep_size 3: expected a divisor of the 4"):
        ep_local_experts(4, 3)


def test_local_touched_equals_exact_enumeration_of_uniform_top2_of_4():
    subsets = list(itertools.combinations(range(4), 2))  # every top-2 set, p = 1/6 each
    for tokens in (1, 2, 3):
        total, pairs = Fraction(0), Fraction(0)
        for joint in itertools.product(subsets, repeat=tokens):
            p = Fraction(1, 6) ** tokens
            total += p * len({e for s in joint for e in s if e < 2})  # rank 0's experts
            pairs += p * sum(e < 2 for s in joint for e in s)
        assert ep_local_touched(tokens, 4, 2, 2) == pytest.approx(float(total), abs=1e-15)
        assert ep_pairs(tokens, 2, 2) == float(pairs)


def test_dispatch_bytes_and_seconds_of_one_layer_by_hand():
    # 2 ranks, T = 256 tokens: half of them cross the link, each b (h + E) out, b h back
    assert dispatch_bytes(256, 2048, 128, 2) == 0.5 * 256 * 2 * (2048 + 128 + 2048) == 1081344
    t = dispatch_seconds(256, 2048, 128, 2, 16e9, 20e-6)
    assert t == pytest.approx(2 * 20e-6 + 1081344 / 16e9, rel=1e-15)  # 107.584 µs
    assert dispatch_seconds(256, 2048, 128, 1, 16e9, 20e-6) == 0.0


def test_roofline_rank_reads_its_half_of_the_experts_and_pays_the_dispatch():
    hw = get_hardware("rtxpro6000")
    base = RooflineCost(hw, QWEN, QWEN)
    ep = with_expert_parallel(base, 2, 1)
    c0, c = base.consts["target"], ep.consts["target"]
    q = 64.0
    assert c.experts_touched(q) == pytest.approx(64 * (1 - (1 - 8 / 128) ** 128), rel=1e-14)
    assert c0.experts_touched(q) == pytest.approx(128 * (1 - (1 - 8 / 128) ** 64), rel=1e-14)
    # memory-bound decode: the time difference is the expert bytes and the dispatch alone
    t0 = base.time_from_sums("target", 64, q, 64 * 500.0, 64 * 500.0, q)
    t1 = ep.time_from_sums("target", 64, q, 64 * 500.0, 64 * 500.0, q)
    assert base.breakdown("target", np.ones(64), np.full(64, 500.0))["bound"] == "memory"
    expert_s = c0.expert_bytes * (c.experts_touched(q) - c0.experts_touched(q)) * c0.inv_memory
    comm = 48 * dispatch_seconds(2 * q, 2048, 128, 2, hw.link_bw, hw.allreduce_latency)
    assert t1 - t0 == pytest.approx(expert_s + comm, rel=1e-9)
    # one DP rank with EP: the same layout as without it
    one = with_expert_parallel(base, 1, 1)
    assert one.time_from_sums("target", 4, 4.0, 40.0, 40.0, 4.0) == base.time_from_sums(
        "target", 4, 4.0, 40.0, 40.0, 4.0)


def test_calibrated_moe_block_is_read_at_the_ranks_tokens_and_local_experts():
    hw = get_hardware("rtxpro6000")
    ep = with_expert_parallel(CalibratedCost(hw, QWEN, QWEN), 2, 1)
    pricer = ep.roles["target"]
    rows = pd.read_csv(BUNDLED_DIR / "profiles" / "rtxpro6000-qwen3-30b-a3b-tp1-moe.csv")
    at = rows[rows.tokens == 128].set_index("activated_experts")["time_us"] * 1e-6
    touched = 64 * (1 - (1 - 8 / 128) ** 256)  # 63.99...: between the 32 and 64 columns
    want = at[32] + (at[64] - at[32]) * (touched - 32) / 32
    assert pricer.moe_block(128.0) == pytest.approx(want, rel=1e-12)
    assert pricer.allreduce(128.0) == pytest.approx(
        48 * dispatch_seconds(256, 2048, 128, 2, *PCIE_LINK), rel=1e-12)


def test_a_cost_model_without_ep_pricing_is_refused():
    with pytest.raises(SpecbatchError, match="enable_expert_parallel: priced by cost roofline"):
        with_expert_parallel(CalibratedCost(get_hardware("h100"), QWEN, QWEN), 2, 1)


BASE = {"trace": "synth", "target": "qwen3-30b-a3b", "draft": "ngram", "policy": "ar",
        "requests": 4, "num_speculative_tokens": 0,
        "cost": "roofline"}  # the model docs/simulate.md's rank-pass table is priced with


@pytest.mark.parametrize("changes, needle", [
    ({"target": "llama-3.1-8b", "enable_expert_parallel": True},
     "field enable_expert_parallel: expected false (target llama-3.1-8b is not a mixture"),
    ({"data_parallel_size": 2}, "field enable_expert_parallel: expected true for MoE target"),
    ({"data_parallel_size": 2, "enable_expert_parallel": True, "replicas": 2},
     "field replicas: expected 1 when data_parallel_size > 1"),
    ({"enable_expert_parallel": True, "routing_skew": 1.0}, "field routing_skew: expected 0"),
])
def test_config_refusals_are_one_line(changes, needle):
    with pytest.raises(SpecbatchError, match=re.escape(needle)) as err:
        make_config({**BASE, **changes}, "config x.toml")
    assert "\n" not in str(err.value)


def test_defaults_build_the_same_cost_and_dp_builds_one_replica_per_rank():
    plain = make_config(BASE)
    assert (plain.data_parallel_size, plain.enable_expert_parallel) == (1, False)
    cost = build_cost(plain)  # vLLM's host share around the n-gram drafter's model
    assert (type(cost).__name__, type(cost.inner).__name__) == ("HostCost", "FreeDraftCost")
    ep = build_cost(make_config({**BASE, "data_parallel_size": 2, "enable_expert_parallel": True,
                                 "hardware": "rtxpro6000"}))
    assert ep.inner.inner.consts["target"].ep_size == 2


def test_cli_refuses_expert_parallel_on_a_dense_target_with_exit_2(tmp_path):
    run = subprocess.run([sys.executable, "-m", "specbatch", "simulate", "--trace", "synth",
                          "--target", "llama-3.1-8b", "--enable-expert-parallel", "true",
                          "--requests", "2", "--out", str(tmp_path / "o"), "--json"],
                         capture_output=True, text=True)
    assert run.returncode == 2 and run.stdout == "", run.stderr
    assert run.stderr.count("\n") == 1 and "field enable_expert_parallel" in run.stderr
    assert not (tmp_path / "o").exists()


def test_the_docs_rank_pass_table_is_what_the_cost_model_prints():
    from pathlib import Path

    from specbatch.simulator.cost.features.expert_parallel import rank_pass_seconds

    page = (Path(__file__).resolve().parents[4] / "docs" / "simulate.md").read_text()
    section = page.split("### Data and expert parallelism")[1].split("\n## ")[0]
    rows = {"H100": "h100", "RTX PRO 6000": "rtxpro6000"}
    lines = [line for line in section.splitlines() if line.startswith("| ")
             and line.split("|")[1].strip() in rows]
    assert len(lines) == 2
    for line in lines:
        cells = [c.strip() for c in line.strip("|").split("|")]
        hw = rows[cells[0]]
        base = {**BASE, "hardware": hw, "host": "fixed"}  # the GPU passes alone
        plain = build_cost(make_config(base))
        ep = build_cost(make_config({**base, "data_parallel_size": 2,
                                     "enable_expert_parallel": True}))
        link = get_hardware(hw)
        for b, cell in zip((1, 16, 64, 256), cells[1:]):
            s = (b, float(b), b * 512.0, b * 512.0, float(b))
            got = [plain.time_from_sums("target", *s), rank_pass_seconds(ep, s, 2 * b),
                   rank_pass_seconds(ep, s, b + 1),
                   48 * dispatch_seconds(2 * b, 2048, 128, 2, link.link_bw,
                                         link.allreduce_latency)]
            assert cell == " / ".join(f"{1e3 * t:.2f}" for t in got)
