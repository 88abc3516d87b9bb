"""Damaged inputs to the importers: a profile or one SpecbatchError, never another exception."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from specbatch.errors import SpecbatchError
from specbatch.traces.acceptance.modelopt import profile_from_modelopt
from specbatch.traces.acceptance.profile import from_dict
from specbatch.traces.acceptance.vllm_metrics import (
    counts_by_model,
    parse_counters,
    profile_from_counts,
)
from tests.simulator.replay.test_profile_replay import COUNTERS

LINES = COUNTERS.splitlines()


@settings(max_examples=150, deadline=None)
@given(st.lists(st.sampled_from(LINES) | st.text(max_size=60), max_size=10),
       st.lists(st.sampled_from(["1e3", "-1", "nan", "inf", "0", "12", "x", "800.0"]),
                max_size=10))
def test_prometheus_text_never_crashes(lines, values):
    lines = [line if not values else line.rsplit(" ", 1)[0] + " " + values[i % len(values)]
             for i, line in enumerate(lines)]
    try:
        model, counts = counts_by_model(parse_counters("\n".join(lines), "x"), None, "x")
        profile_from_counts(counts["num_drafts"], counts["num_draft_tokens"],
                            counts["num_accepted_tokens"], counts["num_accepted_tokens_per_pos"])
    except SpecbatchError as err:
        assert "\n" not in str(err)


JSONS = st.recursive(st.none() | st.booleans() | st.integers(-3, 9) | st.floats(-1, 2)
                     | st.text(max_size=4),
                     lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=4), c,
                                                                         max_size=4),
                     max_leaves=12)
KEYS = ["num_speculative_tokens", "conditional_accept_rates", "marginal_accept_rates",
        "acceptance_length_histogram", "measured", "measurement_conditions", "method"]


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.sampled_from(KEYS), JSONS, max_size=7))
def test_modelopt_json_never_crashes(obj):
    try:
        profile_from_modelopt(json.loads(json.dumps(obj)), "file p.json")
    except SpecbatchError as err:
        assert "\n" not in str(err)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.sampled_from(["format", "version", "rates", "histogram", "drafter",
                                        "conditions", "provenance", "notes", "K"]), JSONS,
                       max_size=9))
def test_profile_json_never_crashes(obj):
    obj = {"format": "specbatch-acceptance-profile", "version": 1, "rates": [0.5], **obj}
    try:
        from_dict(obj, "file p.json")
    except SpecbatchError as err:
        assert "\n" not in str(err)
