"""Model-Optimizer's speculation_profile.json in and out (layout of its PRs #2247/#2313/
#2315/#2316; the numbers of its own tests: lengths count the bonus token)."""

from __future__ import annotations

import json

import pytest

from specbatch.errors import SpecbatchError
from specbatch.traces.acceptance.modelopt import profile_from_modelopt, read_modelopt, to_modelopt
from specbatch.traces.acceptance.profile import AcceptanceProfile, mean_accepted_length, survival


def test_histogram_with_bonus_offset():
    # 100 steps: 40 emitted 1 token, 30 emitted 2, 30 emitted 3 (K = 3): marginal
    # (0.6, 0.3, 0), conditional (0.6, 0.5, 0), MAL 1.9
    obj = {"schema_version": "1.0", "measured": True, "method": "eagle3",
           "num_speculative_tokens": 3,
           "acceptance_length_histogram": {"1": 40, "2": 30, "3": 30}}
    p = profile_from_modelopt(obj, "x")
    assert p.rates == pytest.approx((0.6, 0.5, 0.0))
    assert survival(p) == pytest.approx([0.6, 0.3, 0.0])
    assert p.histogram == pytest.approx((0.4, 0.3, 0.3, 0.0))
    assert mean_accepted_length(p) == pytest.approx(1.9)
    assert p.drafter == "eagle3"


def test_a_gap_in_the_histogram_keeps_the_survival():
    obj = {"num_speculative_tokens": 3, "acceptance_length_histogram": {"1": 50, "3": 50}}
    p = profile_from_modelopt(obj, "x")
    assert survival(p) == pytest.approx([0.5, 0.5, 0.0])
    assert mean_accepted_length(p) == pytest.approx(2.0)


def test_vectors_only_and_their_consistency():
    cond = {"num_speculative_tokens": 3, "conditional_accept_rates": [0.816082, 0.776577,
                                                                      0.749591]}
    assert profile_from_modelopt(cond, "x").rates == pytest.approx(
        (0.816082, 0.776577, 0.749591))
    marg = {"num_speculative_tokens": 2, "marginal_accept_rates": [0.8, 0.56]}
    assert profile_from_modelopt(marg, "x").rates == pytest.approx((0.8, 0.7))
    bad = {**marg, "conditional_accept_rates": [0.8, 0.5]}
    with pytest.raises(SpecbatchError, match="marginal_accept_rates"):
        profile_from_modelopt(bad, "x")


@pytest.mark.parametrize("obj, needle", [
    ({"measured": False, "num_speculative_tokens": 3}, "measured"),
    ({"num_speculative_tokens": 0}, "num_speculative_tokens"),
    ({"num_speculative_tokens": 2}, "expected acceptance_length_histogram"),
    ({"num_speculative_tokens": 2, "acceptance_length_histogram": {"4": 1}}, "lengths 1..K"),
    ({"num_speculative_tokens": 2, "conditional_accept_rates": [0.5]}, "2 probabilities"),
])
def test_bad_files_are_one_line_errors(obj, needle):
    with pytest.raises(SpecbatchError, match=needle):
        profile_from_modelopt(obj, "file p.json")


def test_export_then_import_is_the_same_law(tmp_path):
    p = AcceptanceProfile(rates=(0.8, 0.7, 0.7), drafter="eagle3", target="t", draft="d",
                          histogram=(0.2, 0.24, 0.168, 0.392),
                          conditions={"dataset": "mt-bench", "temperature": 0.0})
    exported = to_modelopt(p)
    assert exported["marginal_accept_rates"] == [0.8, 0.56, 0.392]
    assert exported["mean_accept_length"] == pytest.approx(2.752)
    path = tmp_path / "speculation_profile.json"
    path.write_text(json.dumps(exported))
    back = read_modelopt(path)
    assert back.rates == pytest.approx(p.rates, abs=1e-6)
    assert back.histogram == pytest.approx(p.histogram, abs=1e-8)
    assert (back.drafter, back.target, back.draft) == ("eagle3", "t", "d")
    assert back.conditions == {"dataset": "mt-bench", "temperature": 0.0}
