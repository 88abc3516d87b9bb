"""The MoE transfer (simulator.cost.measured.aic_moe_transfer): its law's two added terms and
the line rule by hand, the one-standard-error choice, the nested exclusion (a judged shape's
rows reach neither the choice nor the law), and the routed law kept in the cache's JSON."""

import math

import numpy as np
import pandas as pd
import pytest

from specbatch.simulator.cost.measured import aic_moe_transfer as mt
from specbatch.simulator.cost.measured.aic_curve import monotone
from specbatch.simulator.cost.measured.aic_laws import Law
from specbatch.simulator.cost.measured.aic_moe_transfer import (
    VARIANTS,
    MoeTransfer,
    Variant,
    moe_terms,
    monotone_rows,
)
from specbatch.simulator.cost.measured.aic_op_curves import curve_from_json, curve_json
from specbatch.simulator.cost.measured.aic_ops import ShapeCurves

#: (a, u, 1/π, 1/β, activations, per touched expert): floor 10 µs, 10 ns a token, 1e14 FLOP/s,
#: 1e12 B/s, 1e-13 s per activation element, 1 µs per touched expert.
COEF = np.array([1e-5, 1e-8, 1e-14, 1e-12, 1e-13, 1e-6])
TOKENS = np.array([1.0, 4.0, 16.0, 64.0, 256.0])
#: Two models, tp 1, 2, 4 (ep 1): (h, I, E, k) -> measured / law ratio per tp.
FACTORS = {(1024, 512, 16, 2): {1: 1.0, 2: 1.2, 4: 1.44},
           (2048, 512, 16, 2): {1: 0.9, 2: 0.9, 4: 0.9}}


def law_by_hand(h, inter, e, k, tp, ep, t) -> float:
    touched = (e / ep) * (1.0 - (1.0 - k / e) ** t)
    return (1e-5 + 1e-8 * t + 6.0 * t * k * h * inter / (tp * ep) * 1e-14
            + 3.0 * touched * h * inter * 2.0 / tp * 1e-12  # bf16: 2 bytes
            + t * k * h / ep * 1e-13 + touched * 1e-6)


def points(skip=()) -> dict:
    """shape -> (tokens, seconds): the routed law at COEF times each shape's factor."""
    out = {}
    for model, by_tp in FACTORS.items():
        for tp, f in by_tp.items():
            key = (*model, tp, 1)
            if key not in skip:
                out[key] = (TOKENS, f * np.array([law_by_hand(*key, t) for t in TOKENS]))
    return out


def test_the_routed_law_adds_activations_and_touched_experts():
    key = (1024, 512, 16, 2, 2, 1)
    x = moe_terms(np.array([key] * len(TOKENS)), TOKENS, "bfloat16", "moe_routed")
    assert x.shape == (5, 6)
    for t, got in zip(TOKENS, x @ COEF):
        assert got == pytest.approx(law_by_hand(*key, t), rel=1e-12)
    base = moe_terms(np.array([key]), TOKENS[:1], "bfloat16", "moe")
    assert base.shape == (1, 4) and (base == x[:1, :4]).all()


def test_the_line_rule_extrapolates_a_models_own_splits_by_hand():
    group = MoeTransfer(points(), "bfloat16")
    key = (1024, 512, 16, 2, 8, 1)  # tp 8: beyond tp 4 and 2 of its own model
    line = Variant("moe_routed", 0.02, 2, "line")
    grid, secs, near = group.predict(key, line, coef=COEF)
    assert near == [(1024, 512, 16, 2, 4, 1), (1024, 512, 16, 2, 2, 1)]
    # log2 tp: 3 from 2 (tp 4) and 1 (tp 2): r = r_4 + (3 - 2) / (2 - 1) (r_4 - r_2)
    want = math.exp(2 * math.log(1.44) - math.log(1.2))  # 1.728 = 1.2 ** 3
    for t, got in zip(grid, secs):
        assert got == pytest.approx(want * law_by_hand(*key, t), rel=1e-12)
    # every column alike: tp 4 (1 away in log2 tp) and the other model's tp 8 (1 in h)
    mean = Variant("moe_routed", 1.0, 2, "mean")
    grid, secs, near = group.predict(key, mean, coef=COEF)
    assert near == [(1024, 512, 16, 2, 4, 1), (2048, 512, 16, 2, 4, 1)]  # ties: sorted order
    assert secs[2] == pytest.approx(math.sqrt(1.44 * 0.9) * law_by_hand(*key, 16.0), rel=1e-12)


def test_the_line_rule_interpolates_between_splits_as_the_mean():
    group = MoeTransfer(points(skip={(1024, 512, 16, 2, 2, 1)}), "bfloat16")
    key = (1024, 512, 16, 2, 2, 1)
    line = Variant("moe_routed", 0.02, 2, "line")
    _, secs, near = group.predict(key, line, coef=COEF)
    assert set(near) == {(1024, 512, 16, 2, 1, 1), (1024, 512, 16, 2, 4, 1)}
    assert secs[0] == pytest.approx(1.2 * law_by_hand(*key, 1.0), rel=1e-12)


def test_choose_keeps_the_first_variant_unless_it_loses_by_a_standard_error(monkeypatch):
    keys = {(h, 512, 16, 2, tp, 1): (TOKENS, np.ones(5)) for h in (1024, 2048, 4096, 8192)
            for tp in (1, 2)}
    group = MoeTransfer(keys, "bfloat16")
    n = len(group.keys)

    def given(sums):
        monkeypatch.setattr(group, "scores", lambda excluded, unit: np.array(sums, float))

    base = [[1.0] * n] + [[1.0] * n] * (len(VARIANTS) - 1)
    given(base)
    assert group.choose() is VARIANTS[0]  # a tie: the first
    better = [row[:] for row in base]
    better[3] = [0.5, 0.6, 0.5, 0.7, 0.4, 0.5, 0.6, 0.5]  # each model saves 0.08-0.11 a row
    given(better)  # mean saving 0.0925, its standard error 0.0063
    assert group.choose() is VARIANTS[3]
    lucky = [row[:] for row in base]
    lucky[3] = [0.0, 0.0, 1.1, 1.1, 1.1, 1.1, 1.1, 1.1]  # one model saves much, 3 lose
    given(lucky)  # lowest total (6.6 < 8.0), but the mean saving 0.035 < its error 0.055
    assert group.choose() is VARIANTS[0]
    monkeypatch.setattr(mt, "MIN_MODELS", 5)  # four models: too few to judge a spread by
    given(better)
    assert group.choose() is VARIANTS[0]


def frame_of(pts: dict) -> pd.DataFrame:
    rows = [dict(zip(mt.COLUMNS, key), tokens=int(t), latency_s=s, dtype="bfloat16",
                 kernel="k") for key, (grid, secs) in pts.items() for t, s in zip(grid, secs)]
    return pd.DataFrame(rows)


def test_a_judged_shape_reaches_neither_the_choice_nor_the_law():
    law = Law("moe", {"dtype": "bfloat16", "kernel": "k"}, ("floor", "per_token", "flops",
              "weight_bytes"), tuple(COEF[:4]), 0, 0, 0.0, 0.0, 0.0)
    pts = points()
    judged = (1024, 512, 16, 2, 2, 1)
    changed = dict(pts)
    changed[judged] = (TOKENS, pts[judged][1] * np.array([1.0, 3.0, 9.0, 27.0, 81.0]))
    one = ShapeCurves("moe", frame_of(pts), law, {"dtype": "bfloat16"})
    two = ShapeCurves("moe", frame_of(changed), law, {"dtype": "bfloat16"})
    a, b = one.curve(judged, exclude=True), two.curve(judged, exclude=True)
    assert a.source.startswith("transfer to moe") and a.source == b.source
    assert a.grid.tobytes() == b.grid.tobytes() and a.seconds.tobytes() == b.seconds.tobytes()
    assert one.curve(judged).source.startswith("measured")


def test_an_untimed_model_is_chosen_for_by_leaving_models_out(monkeypatch):
    law = Law("moe", {"dtype": "bfloat16", "kernel": "k"}, ("floor",), (1.0,), 0, 0, 0.0,
              0.0, 0.0)
    sc = ShapeCurves("moe", frame_of(points()), law, {"dtype": "bfloat16"})
    asked = []
    monkeypatch.setattr(MoeTransfer, "choose", lambda self, ex, unit: asked.append(unit)
                        or VARIANTS[0])
    sc.curve((1024, 512, 16, 2, 8, 1))  # its model is timed at tp 1, 2, 4
    sc.curve((3072, 512, 16, 2, 1, 1))  # no split of its model is
    assert asked == ["shape", "model"]


def test_the_routed_law_is_kept_in_the_cache_json():
    group = MoeTransfer(points(), "bfloat16")
    curve = group.curve((1024, 512, 16, 2, 8, 1), VARIANTS[-1])
    back = curve_from_json(curve_json(curve))
    assert back.law == curve.law and back.law.family == "moe_routed"
    assert back.at(1024.0) == curve.at(1024.0)  # beyond the grid: the routed law's growth


def test_monotone_rows_is_monotone_per_row():
    rng = np.random.default_rng(0)
    secs = np.exp(rng.normal(size=(50, 27)).cumsum(axis=1) * 0.1)
    got = monotone_rows(secs)
    for row, want in zip(got, secs):
        assert np.allclose(row, monotone(want), rtol=1e-15, atol=0.0)
