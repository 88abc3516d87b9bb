"""A run's entry (analysis.plan.entry.judge_entry) from its request table as the planner's runs
hand it over, the table's columns (no DataFrame built), is the entry of the same table as a
DataFrame (the slow twin), bit for bit: whole runs, runs an early stop ended (judged on the
requests arrived by then), and the Parquet bytes the runner stores."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

from specbatch.analysis.plan.entry import judge_entry
from specbatch.analysis.plan.runner import STOP_FIELD, Runner, simulate_point
from specbatch.analysis.plan.slo import Slos, StopRule
from specbatch.analysis.plan.space import Deployment, Speculation
from specbatch.analysis.sweep.points import request_writer
from specbatch.analysis.sweep.spec import resolve_config
from specbatch.simulator.config.sim_config import SimConfig
from specbatch.simulator.metrics import frame

BASE = {"trace": "default", "requests": 24, "arrival": "poisson", "rate": 8.0,
        "target": "vicuna-33b", "draft": "vicuna-68m", "max_num_seqs": 64, "kv_mode": "paged",
        "cost": "calibrated", "seed": 0}


@pytest.mark.parametrize("spec", [Speculation("ar"), Speculation("fixed", 2, 0, "block"),
                                  Speculation("tetris", 2, 1, "token")])
@pytest.mark.parametrize("rule", [None, StopRule(Slos(tpot=0.002)),
                                  StopRule(Slos(tpot=1.0), beat=0.5, beat_label="a run")])
def test_the_entry_of_the_columns_is_the_entry_of_the_frame(tmp_path, spec, rule):
    d = Deployment("h100", 2, 1)
    config = resolve_config(Runner(BASE, tmp_path).fields(d, spec), SimConfig, "plan")
    summary, columns = simulate_point({**config, STOP_FIELD: rule} if rule else config)
    assert isinstance(columns, dict)  # the runner builds no DataFrame
    slos = rule.slos if rule else Slos(tpot=0.05)
    got = judge_entry(d, spec, config, summary, columns, slos, rule)
    want = judge_entry(d, spec, config, summary, frame(columns), slos, rule)
    assert got == want
    assert ("stopped_at" in summary) == (rule is not None)  # both kinds of run are covered


def test_the_stored_table_of_the_columns_is_the_stored_table_of_the_frame(tmp_path):
    _, columns = simulate_point(dict(BASE, policy="fixed", num_speculative_tokens=2))
    request_writer(columns)(tmp_path / "a.parquet")
    request_writer(frame(columns))(tmp_path / "b.parquet")
    assert (tmp_path / "a.parquet").read_bytes() == (tmp_path / "b.parquet").read_bytes()
    assert pq.read_table(tmp_path / "a.parquet").num_rows == 24
