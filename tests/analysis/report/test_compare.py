"""Paired comparisons: t-intervals on per-seed differences, best settings, headline table."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from specbatch.analysis.report.compare import (
    best_settings,
    compare_best,
    headline,
    paired_difference,
    same_budget,
    t_interval,
)
from specbatch.analysis.sweep.points import run_key, setting_key
from specbatch.errors import SpecbatchError
from specbatch.simulator.config.sim_config import SimConfig

SEEDS = range(5)


def seed_effect(seed: int) -> float:
    """A large per-seed workload effect shared by every setting (common random numbers)."""
    return [0.0, 40.0, -25.0, 60.0, -10.0][seed]


def throughput_of(policy: str, k: int, e: int, verify: str, seed: int) -> float:
    base = {"ar": 100.0, "fixed": 150.0 + 12 * k - 3 * k * k, "dsd": 160.0,
            "tetris": 165.0 + 12 * k - 3 * k * k + 2 * e}[policy]
    if verify == "block" and policy != "ar":
        base *= 1.02
    noise = 0.5 * ((seed * 7 + k) % 3 - 1)  # small setting-specific noise
    return base + seed_effect(seed) + noise


def make_table(settings, seeds=SEEDS, **context) -> pd.DataFrame:
    rows = []
    for policy, k, e, verify in settings:
        for seed in seeds:
            config = dataclasses.asdict(SimConfig(policy=policy, num_speculative_tokens=k,
                                                  extra=e, verify=verify, seed=seed, **context))
            tput = throughput_of(policy, k, e, verify, seed)
            rows.append({**config, "throughput": tput, "e2e_mean": 1e4 / tput,
                         "e2e_p99": 2e4 / tput, "vsr": 0.5, "mal": 1.0 + 0.3 * k,
                         "run": run_key(config), "setting": setting_key(config)})
    return pd.DataFrame(rows)


SETTINGS = ([("ar", 0, 0, "token")]
            + [("fixed", k, 0, v) for k in (1, 2, 3) for v in ("token", "block")]
            + [("tetris", k, e, v) for k in (1, 2, 3) for e in (1, 2) for v in ("token", "block")]
            + [("dsd", 3, 0, "token")])


def test_t_interval_is_student_t_on_the_values():
    x = np.array([1.0, 2.0, 4.0, 7.0])
    mean, low, high = t_interval(x, 0.9)
    half = stats.t.ppf(0.95, 3) * x.std(ddof=1) / 2
    assert mean == pytest.approx(3.5) and (low, high) == pytest.approx((3.5 - half, 3.5 + half))
    assert math.isnan(t_interval([3.0])[1])


def test_paired_difference_cancels_the_shared_seed_effect():
    df = make_table(SETTINGS)
    a = {"policy": "tetris", "num_speculative_tokens": 2, "extra": 1, "verify": "token"}
    b = {"policy": "fixed", "num_speculative_tokens": 2, "extra": 0, "verify": "token"}
    diff = paired_difference(df, a, b, "throughput")
    assert diff.n == 5
    assert diff.diff == pytest.approx(17.0, abs=1e-9)  # 15 + 2e, the noise is setting-keyed
    # the per-seed spread (±40 tokens/s) would swamp an unpaired comparison; paired it vanishes
    assert diff.diff_high - diff.diff_low < 1e-6
    assert diff.rel_low < diff.rel < diff.rel_high
    assert diff.rel_text().startswith("+")


def test_paired_difference_rejects_ambiguous_or_empty_selectors():
    df = make_table(SETTINGS)
    with pytest.raises(SpecbatchError, match="several runs per seed"):
        paired_difference(df, {"policy": "tetris"}, {"policy": "ar"}, "throughput")
    with pytest.raises(SpecbatchError, match="matches no runs"):
        paired_difference(df, {"policy": "medusa"}, {"policy": "ar"}, "throughput")


def test_best_settings_pick_the_best_mean_per_policy_and_verifier():
    best = best_settings(make_table(SETTINGS), "throughput")
    chosen = {(r.policy, r.verify): (r.num_speculative_tokens, r.extra) for r in best.itertuples()}
    # 12k - 3k^2 peaks at k = 2; tetris prefers the larger e
    assert chosen[("fixed", "token")] == (2, 0) and chosen[("fixed", "block")] == (2, 0)
    assert chosen[("tetris", "token")] == (2, 2)
    assert set(chosen) == {("ar", "token"), ("fixed", "token"), ("fixed", "block"),
                           ("tetris", "token"), ("tetris", "block"), ("dsd", "token")}
    assert (best.n_seeds == 5).all()
    latency = best_settings(make_table(SETTINGS), "e2e_mean")  # lower is better
    assert (
        latency.set_index(["policy", "verify"]).loc[("fixed", "token")].num_speculative_tokens == 2
    )


def test_headline_speedup_is_the_paired_throughput_ratio_to_ar():
    df = make_table(SETTINGS)
    table = headline(df)
    assert table.throughput.is_monotonic_decreasing
    ar = table[table.policy == "ar"].iloc[0]
    assert ar.speedup == pytest.approx(1.0)
    row = table[(table.policy == "fixed") & (table.verify == "token")].iloc[0]
    expected = np.mean(
        [
            throughput_of("fixed", 2, 0, "token", s) / throughput_of("ar", 0, 0, "token", s)
            for s in SEEDS
        ]
    )
    assert row.speedup == pytest.approx(expected)
    assert row.speedup_low < row.speedup < row.speedup_high
    assert {"e2e_mean", "e2e_p99", "vsr", "mal", "k", "e"} <= set(table.columns)


def test_headline_pairs_each_context_with_its_own_baseline():
    df = pd.concat([make_table(SETTINGS, max_num_seqs=32), make_table(SETTINGS, max_num_seqs=64)])
    table = headline(df)
    assert len(table) == 2 * 6 and "max_num_seqs" in table.columns
    assert table[table.policy == "ar"].speedup.tolist() == pytest.approx([1.0, 1.0])


def test_compare_best_and_same_budget():
    df = make_table(SETTINGS)
    tput, lat = compare_best(df, {"policy": "tetris", "verify": "token"},
                             {"policy": "fixed", "verify": "token"})
    assert tput.diff == pytest.approx(19.0)  # best tetris (k=2, e=2) - best fixed (k=2)
    assert lat.rel < 0  # lower latency
    per_k = same_budget(df, {"policy": "tetris", "verify": "token"},
                        {"policy": "fixed", "verify": "token"})
    assert per_k.k.tolist() == [1, 2, 3] and per_k.e.tolist() == [2, 2, 2]
    assert (per_k.rel > 0).all()
    mixed = pd.concat([make_table(SETTINGS, max_num_seqs=32), make_table(SETTINGS)])
    with pytest.raises(SpecbatchError, match="context varies"):
        compare_best(mixed, {"policy": "tetris"}, {"policy": "fixed"})
