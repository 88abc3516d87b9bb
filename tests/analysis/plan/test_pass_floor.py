"""The floor under a tabulated target pass (analysis.plan.pass_floor) is a floor: any pass
carrying a request costs at least its step floor, and any chunking of its prompt into passes
shared with other requests costs at least its prefill floor; on random tables (no
monotonicity in the tokens, either attention composition) and on the calibrated and aic
models' own passes (dense and MoE targets). Its tables are brute-force minima."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specbatch.analysis.plan.pass_floor import (
    per_token_floor,
    split_floor,
    suffix_min,
    table_floor,
    target_floor,
)
from specbatch.simulator.config.sim_config import make_config
from specbatch.simulator.cost.features.draft_model_pass import DraftModelPasses
from specbatch.simulator.cost.tabulated import AttentionLaw, PassTable, table_time
from specbatch.simulator.run import build_cost


def brute_split(g: list[float], q: int) -> float:
    """The least Σ g[x_j] over every split of q into parts 1 <= x_j < len(g)."""
    if q == 0:
        return 0.0
    return min(g[x] + brute_split(g, q - x) for x in range(1, min(q, len(g) - 1) + 1))


def test_the_floor_tables_are_brute_force_minima():
    rng = np.random.default_rng(2)
    for _ in range(30):
        p = np.concatenate([[np.inf], rng.uniform(0.5, 3.0, int(rng.integers(1, 8)))])
        g = suffix_min(p)
        assert g.tolist() == [min(p[x:]) for x in range(p.shape[0])]
        h = split_floor(g, 9)
        assert np.allclose(h, [brute_split(g.tolist(), q) for q in range(10)], rtol=0, atol=0)


def test_the_per_token_floor_is_the_least_pass_of_at_least_x_tokens():
    # g[x] = min over x <= Q <= Q_max and 1 <= r <= Q of L[Q] + C[Q] + H[r]
    rng = np.random.default_rng(3)
    for _ in range(20):
        q_max = int(rng.integers(1, 12))
        lay, comm, head = (np.concatenate([[0.0], rng.uniform(0, 2, q_max)]) for _ in range(3))
        g = per_token_floor(lay, comm, head)
        want = [min(lay[q] + comm[q] + head[r] for q in range(x, q_max + 1)
                    for r in range(1, q + 1)) for x in range(1, q_max + 1)]
        assert g[1:].tolist() == pytest.approx(want, rel=1e-15)
        assert g[0] == g[1]


def random_table(rng: np.random.Generator, q_max: int) -> PassTable:
    """A PassTable with nonnegative parts that jump up and down in Q."""
    parts = [np.concatenate([[0.0], rng.uniform(0.1, 1.0, q_max) * 1e-3]) for _ in range(3)]
    law = AttentionLaw(flops=float(rng.uniform(1e5, 1e7)),
                       flops_rate=float(rng.uniform(1e13, 1e15)),
                       kv=float(rng.uniform(1e5, 1e7)),
                       kv_rate=float(rng.uniform(1e11, 1e13)),
                       overlap=bool(rng.integers(2)), floor=float(rng.uniform(0, 1e-3)),
                       per_request=float(rng.uniform(0, 1e-5)))
    return PassTable(layers=parts[0], allreduce=parts[1], head=parts[2], attention=law,
                     fixed=float(rng.uniform(0, 1e-3) * rng.integers(2)),
                     floor=float(rng.uniform(0, 5e-3) * rng.integers(2)))


def sums(query: list[int], kv: list[int]) -> tuple[float, ...]:
    q, c = np.array(query, dtype=np.float64), np.array(kv, dtype=np.float64)
    return float(q.size), float(q.sum()), float(c.sum()), float((q * c).sum()), float((q * q).sum())


BATCH = st.lists(st.tuples(st.integers(1, 40), st.integers(0, 3000)), max_size=5)


@settings(max_examples=80, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), prompt=st.integers(1, 200), extra=st.integers(0, 30),
       others=BATCH, row=st.floats(0.0, 1.0), overhead=st.floats(0.0, 1e-3))
def test_a_step_of_a_random_table_costs_at_least_its_floor(seed, prompt, extra, others, row,
                                                           overhead):
    # request i decodes (query 1 + speculated tokens) over a cache of at least its prompt
    rng = np.random.default_rng(seed)
    q_max = 400
    table = random_table(rng, q_max)
    floor = table_floor(table, overhead, q_max, 200)
    query = [1 + extra % 8] + [a for a, _ in others]
    kv = [prompt + extra] + [b for _, b in others]
    n, sq, skv, sqkv, sqq = sums(query, kv)
    rows = 1 + int(row * (sq - 1))
    _, step = floor.times(np.array([prompt]), np.array([prompt]))
    assert table_time(table, n, sq, skv, sqkv, sqq, rows) + overhead >= step[0]


@settings(max_examples=80, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), prompt=st.integers(1, 600),
       cuts=st.lists(st.integers(1, 599), max_size=6), others=BATCH, row=st.floats(0.0, 1.0),
       overhead=st.floats(0.0, 1e-3))
def test_a_chunked_prefill_of_a_random_table_costs_at_least_its_floor(seed, prompt, cuts,
                                                                      others, row, overhead):
    # the prompt cut into chunks of at most Q_max tokens, each pass shared with others
    rng = np.random.default_rng(seed)
    q_max = 400
    table = random_table(rng, q_max)
    floor = table_floor(table, overhead, q_max, 600)
    edges = sorted({0, prompt, *[x for x in cuts if x < prompt]})
    edges = sorted(set(edges) | set(range(0, prompt, 200)))  # chunks of at most 200
    total = 0.0
    for a, b in zip(edges, edges[1:]):
        query = [b - a] + [x for x, _ in others][:2]
        kv = [a] + [y for _, y in others][:2]
        n, sq, skv, sqkv, sqq = sums(query, kv)
        total += table_time(table, n, sq, skv, sqkv, sqq, 1 + int(row * (sq - 1))) + overhead
    prefill, _ = floor.times(np.array([prompt]), np.array([prompt]))
    assert total >= prefill[0]


MODELS = [  # (cost, target, tp, execution, hardware): dense, MoE (not monotone in Q), both
    # launch presets; the LLMServingSim GPUs' regime law and sampler (lss_table)
    ("calibrated", "vicuna-33b", 2, "eager", "h100"),
    ("calibrated", "vicuna-33b", 2, "cuda_graph", "h100"),
    ("calibrated", "qwen3-30b-a3b", 1, "cuda_graph", "h100"),
    ("aic", "vicuna-33b", 2, "cuda_graph", "h100"),
    ("aic", "vicuna-33b", 1, "eager", "h100"),
    ("aic", "qwen3-30b-a3b", 1, "cuda_graph", "h100"),
    ("aic", "mistral-7b-v0.1", 1, "cuda_graph", "h100"),  # sliding-window layers
    ("calibrated", "llama-3.1-8b", 1, "cuda_graph", "rtxpro6000"),
    ("calibrated", "qwen3-30b-a3b", 1, "eager", "rtxpro6000"),
    ("calibrated", "Qwen/Qwen3-32B", 4, "cuda_graph", "rtx4090"),
]
Q_MAX = 1024


@pytest.fixture(scope="module", params=MODELS, ids=lambda m: "-".join(map(str, m)))
def model(request):
    cost_name, target, tp, execution, hardware = request.param
    cost = build_cost(make_config({"target": target, "draft": "vicuna-68m", "hardware": hardware,
                                   "tp": tp, "cost": cost_name, "execution": execution}))
    base = cost.inner  # under vLLM's host terms, vLLM V1's draft-model passes (the target's)
    base = base.inner if isinstance(base, DraftModelPasses) else base
    floor = target_floor(base, float(cost.overhead), Q_MAX, 600)
    assert floor is not None
    return cost, floor


@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_a_models_step_costs_at_least_its_floor(model, data):
    cost, floor = model
    c = data.draw(st.integers(1, 4000))
    extra = data.draw(st.integers(0, 7))
    others = data.draw(st.lists(st.tuples(st.integers(1, 60), st.integers(0, 4000)),
                                max_size=6))
    query = np.array([1 + extra] + [a for a, _ in others])  # [n]
    kv = np.array([c] + [b for _, b in others])  # [n]
    rows = float(data.draw(st.integers(1, int(query.sum()))))
    _, step = floor.times(np.array([1]), np.array([c]))
    assert cost.step_time("target", query, kv, rows=rows) + cost.overhead >= step[0]


@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_a_models_chunked_prefill_costs_at_least_its_floor(model, data):
    cost, floor = model
    prompt = data.draw(st.integers(1, 600))
    cuts = data.draw(st.lists(st.integers(1, 599), max_size=5))
    others = data.draw(st.lists(st.tuples(st.integers(1, 60), st.integers(0, 4000)),
                                max_size=3))
    edges = sorted({0, prompt, *[x for x in cuts if x < prompt]})
    total = 0.0
    for a, b in zip(edges, edges[1:]):
        query = np.array([b - a] + [x for x, _ in others])  # [n]
        kv = np.array([a] + [y for _, y in others])  # [n]
        rows = float(data.draw(st.integers(1, int(query.sum()))))
        total += cost.step_time("target", query, kv, rows=rows) + cost.overhead
    prefill, _ = floor.times(np.array([prompt]), np.array([prompt]))
    assert total >= prefill[0]


def test_no_floor_for_a_table_the_proof_does_not_cover():
    rng = np.random.default_rng(5)
    table = random_table(rng, 8)
    assert table_floor(table, 0.0, 8, 8) is not None
    negative = PassTable(layers=table.layers - 1.0, allreduce=table.allreduce,
                         head=table.head, attention=table.attention)
    assert table_floor(negative, 0.0, 8, 8) is None
    law = AttentionLaw(flops=1.0, flops_rate=1.0, kv=1.0, kv_rate=1.0, per_request=-1e-6)
    assert table_floor(PassTable(table.layers, table.allreduce, table.head, law), 0.0, 8,
                       8) is None
    assert table_floor(table, 0.0, 9, 8) is None  # passes past the table


def test_no_floor_where_a_model_has_no_pass_table():
    # sliding-window layers on the LLMServingSim GPUs (no PassTable; window_floor takes the
    # Vidur-profiled GPUs' roles) and the roofline (its own floor, analysis.plan.bound)
    for cost_name, hardware, target in (("calibrated", "rtx4090", "mistral-7b-v0.1"),
                                        ("roofline", "h100", "vicuna-7b")):
        cost = build_cost(make_config({"target": target, "draft": "vicuna-68m",
                                       "hardware": hardware, "cost": cost_name}))
        assert target_floor(cost.inner, float(cost.overhead), 2048, 500) is None
