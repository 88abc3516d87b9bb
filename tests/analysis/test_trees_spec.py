"""The bundled chains-vs-trees comparison (analysis/specs/trees.toml): every tree policy and
rule beside the chain verifiers at the same k, and a CI-size slice of it runs."""

from __future__ import annotations

from specbatch.analysis.specs import spec_path
from specbatch.analysis.sweep.spec import expand, load_spec
from specbatch.simulator.config import sim_config as config
from specbatch.simulator.run import load_trace, simulate


def runs():
    return expand(load_spec(spec_path("trees"), config.SimConfig), config.SimConfig)


def test_the_spec_pairs_chains_and_trees_at_equal_k():
    grid = runs()
    pairs = {(r["policy"], r["verify"]) for r in grid}
    assert {
        ("fixed", "token"),
        ("fixed", "block"),
        ("static-tree", "specinfer"),
        ("static-tree", "traversal"),
        ("tetris-tree", "specinfer"),
        ("tree-optimum", "specinfer"),
        ("ar", "token"),
        ("static-tree", "gbv"),
    } == pairs
    tries = {(r["policy"], r["verify"], r["num_speculative_tokens"]) for r in grid
             if r["trace"] == "smollm2-drop2-trie" and r["policy"] == "static-tree"}
    assert tries == {("static-tree", v, 9) for v in ("specinfer", "traversal", "gbv")}
    grid = [r for r in grid if r["trace"] == "smollm2-drop2-tree"]
    ks = {p: {r["num_speculative_tokens"] for r in grid if r["policy"] == p}
          for p in ("fixed", "static-tree", "tetris-tree", "tree-optimum")}
    assert ks["fixed"] <= ks["static-tree"] and ks["tetris-tree"] <= ks["static-tree"]
    assert ks["tree-optimum"] == ks["tetris-tree"]
    # TETRIS may give one request the whole tree
    assert all(r["num_speculative_tokens"] + r["extra"] == 10 for r in grid
               if r["policy"] in ("tetris-tree", "tree-optimum"))


def test_a_ci_size_slice_of_the_spec_runs():
    seen = {}
    for run in runs():
        key = (run["trace"], run["policy"], run["verify"])
        if run["seed"] == 0 and run["max_num_seqs"] == 8 and key not in seen:
            seen[key] = run
    traces = {}
    for key, run in seen.items():
        cfg = config.make_config({**run, "requests": 12})
        if run["trace"] not in traces:
            traces[run["trace"]] = load_trace(cfg)
        summary = simulate(cfg, traces[run["trace"]]).summary
        assert summary["tokens"] > 0 and summary["throughput"] > 0, key
