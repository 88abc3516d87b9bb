"""The bundled engines comparison (analysis/specs/engines.toml): it covers every engine policy
beside fixed k, TETRIS and the bounds on one shared calibration split, and a CI-size slice of
it runs."""

from __future__ import annotations

from specbatch.analysis.specs import spec_path
from specbatch.analysis.sweep.spec import expand, load_spec
from specbatch.simulator.config import sim_config as config
from specbatch.simulator.policies.knobs import ENGINE_POLICY_NAMES
from specbatch.simulator.run import load_trace, simulate


def runs():
    return expand(load_spec(spec_path("engines"), config.SimConfig), config.SimConfig)


def test_the_spec_compares_every_engine_policy_with_tetris_fixed_and_the_bounds():
    grid = runs()
    policies = {r["policy"] for r in grid}
    assert set(ENGINE_POLICY_NAMES) | {"ar", "fixed", "tetris", "oracle", "hindsight"} <= policies
    assert {r["calibration_split"] for r in grid} == {0.25}  # one replay set for all: paired
    assert {r["trace"] for r in grid} == {"smollm2", "smollm2-drop2", "smollm2-drop4", "smollm2-q4"}
    tables = {(r["num_speculative_tokens_per_batch_size"], r["draft_len_schedule"])
              for r in grid if r["policy"] == "batch-schedule"}
    assert len(tables) == 2  # vLLM's and TensorRT-LLM's


def test_a_ci_size_slice_of_the_spec_runs():
    """One setting of each policy on one trace and seed, 16 requests at batch 4."""
    seen = {}
    for run in runs():
        if run["trace"] == "smollm2-drop2" and run["seed"] == 0 and run["policy"] not in seen:
            seen[run["policy"]] = run
    trace = load_trace(config.make_config(seen["ar"]))
    for run in seen.values():
        cfg = config.make_config({**run, "requests": 16, "max_num_seqs": 4})
        summary = simulate(cfg, trace).summary
        assert summary["tokens"] > 0 and summary["throughput"] > 0, run["policy"]
