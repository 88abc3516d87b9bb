"""The acceptance profile: checks, survival and MAL, the JSON round trip."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specbatch.errors import SpecbatchError
from specbatch.traces.acceptance.profile import (
    AcceptanceProfile,
    histogram_survival,
    mean_accepted_length,
    rates_from_survival,
    read_profile,
    scaled,
    write_profile,
)


def test_mal_of_the_chain():
    p = AcceptanceProfile(rates=(0.8, 0.7, 0.7))
    assert [mean_accepted_length(p, k) for k in range(4)] == pytest.approx(
        [1.0, 1.8, 2.36, 2.752])
    with pytest.raises(SpecbatchError, match="k: expected 0 <= k <= the profile's K = 3"):
        mean_accepted_length(p, 4)


def test_round_trip_is_exact(tmp_path):
    p = AcceptanceProfile(rates=(0.8, 0.7, 0.7), histogram=(0.2, 0.24, 0.168, 0.392),
                          drafter="ngram", target="t", conditions={"temperature": 0.0},
                          provenance={"source": "published", "citation": "c"},
                          notes=("n",), name="x")
    path = write_profile(p, tmp_path / "p.json")
    assert read_profile(path) == p
    assert json.loads(path.read_text())["format"] == "specbatch-acceptance-profile"


@pytest.mark.parametrize("fields, needle", [
    ({"rates": ()}, "at least one position"),
    ({"rates": (1.2,)}, "probabilities in \\[0, 1\\]"),
    ({"rates": (0.5,), "drafter": "medusa"}, "drafter"),
    ({"rates": (0.5,), "histogram": (0.5, 0.4)}, "summing to 1"),
    ({"rates": (0.5,), "histogram": (0.3, 0.7)}, "chain of the histogram"),
    ({"rates": (0.5,), "conditions": {"gpu": "h100"}}, "conditions"),
])
def test_bad_profiles_name_the_field(fields, needle):
    with pytest.raises(SpecbatchError, match=needle):
        AcceptanceProfile(**fields)


@pytest.mark.parametrize("text, needle", [
    ("{", "expected JSON"), ('{"format": "x"}', "field format"),
    ('{"format": "specbatch-acceptance-profile", "version": 1, "rates": "a"}', "field rates"),
])
def test_bad_files_name_the_file(tmp_path, text, needle):
    path = tmp_path / "p.json"
    path.write_text(text)
    with pytest.raises(SpecbatchError, match=needle):
        read_profile(path)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(0.01, 1.0), min_size=2, max_size=9))
def test_rates_and_histogram_say_the_same_survival(weights):
    hist = [w / sum(weights) for w in weights]
    surv = histogram_survival(hist)
    p = AcceptanceProfile(rates=rates_from_survival(surv), histogram=tuple(hist))
    expected = 1 + sum(n * h for n, h in enumerate(hist))  # E[tau] + 1
    assert mean_accepted_length(p) == pytest.approx(expected, abs=1e-9)
    chain = AcceptanceProfile(rates=p.rates)
    assert mean_accepted_length(chain) == pytest.approx(expected, abs=1e-9)


def test_scaled_profile_drops_the_histogram():
    p = AcceptanceProfile(rates=(0.8, 0.5), histogram=(0.2, 0.4, 0.4), name="p")
    s = scaled(p, 0.5)
    assert s.rates == pytest.approx((0.4, 0.25)) and s.histogram is None
    assert scaled(p, 2.0).rates == (1.0, 1.0)
