"""The decode-step contract: plan_step applies the budget rule and the proposal cap, a Plan
counts its draft passes, and whole-trace tables are built once per run."""

from __future__ import annotations

import numpy as np

from specbatch.simulator.config.sim_config import load_config
from specbatch.simulator.policies.registry import make_policy
from specbatch.simulator.policies.step_plan import Plan, plan_step, step_budget
from specbatch.simulator.policies.view import StepView, TraceTables, make_view


def test_the_budget_is_k_per_decoding_request_unless_set():
    assert step_budget(3, None, 5) == 15
    assert step_budget(3, 7, 5) == 7 and step_budget(3, 0, 5) == 0


def test_plan_step_sets_the_budget_then_caps_at_the_proposed_counts():
    tetris = make_policy(load_config(None, trace="synth", policy="tetris", k=2, extra=1), 8)
    view = StepView.from_signals(np.zeros(3, dtype=np.int64), -1, 3,
                                 conf=np.full((3, 3), 0.9), proposed=np.array([3, 1, 0]))
    plan = plan_step(tetris, view)
    assert view.budget == 6  # k · n, whatever the view was built with
    # tetris verifies the 6 best of 9 equal-confidence tokens, 2 per request; then the cap
    assert plan.drafted.tolist() == [3, 1, 0] and plan.verified.tolist() == [2, 1, 0]
    assert plan.depth == 3 and plan.tree is None  # chains
    budgeted = make_policy(load_config(None, trace="synth", policy="tetris", k=2, extra=1,
                                       budget=2), 8)
    assert plan_step(budgeted, view).verified.sum() == 2 and view.budget == 2


def test_draft_passes_are_the_longest_draft():
    chain = Plan(np.array([2, 4, 1]), np.array([1, 1, 1]), 4)
    assert chain.draft_passes() == chain.draft_passes(7) == 4
    full = Plan(np.array([4, 4]), np.array([0, 4]), 4)
    assert full.draft_passes() == full.draft_passes(8) == 4
    short = Plan(np.array([1, 2]), np.array([1, 2]), 4)
    assert short.draft_passes() == short.draft_passes(3) == 2
    assert Plan(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), 4).draft_passes(0) == 0


def test_trace_tables_build_each_table_once(synth_trace_natural):
    tables, built = TraceTables(synth_trace_natural), []

    def build(x):
        built.append(x)
        return np.arange(synth_trace_natural.n_rows)[:, None] * x

    for rows in (np.arange(5), np.arange(3, 9)):
        view = StepView(synth_trace_natural, rows, np.zeros(rows.size, dtype=np.int64), 1, 2,
                        None, tables=tables)
        assert view.row_table(("k", 1), lambda conf: conf * 2, "conf").shape == (rows.size, 2)
        assert tables.get(("x",), build, 3)[rows, 0].tolist() == (3 * rows).tolist()
    assert built == [3] and len(tables.built) == 2  # ("x",) and (("k", 1), depth 2)
    gathered = make_view(synth_trace_natural, np.arange(4), 4, 2).cum_conf
    np.testing.assert_array_equal(gathered, tables.confidence(2)[:4])
