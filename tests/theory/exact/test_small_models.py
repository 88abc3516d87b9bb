"""theory/exact/small_models.py: model pairs for exact work (THEORY.md §1), read from JSON."""

from __future__ import annotations

import json
from fractions import Fraction

import numpy as np
import pytest

from specbatch.errors import SpecbatchError
from specbatch.theory.exact.small_models import (
    IidModel,
    MarkovModel,
    TableModel,
    one_hot_draft,
    pair_from_dict,
    random_pair,
    read_pair,
    sequence_prob,
    to_float,
    write_pair,
)

PAPER = {"vocab": 2, "draft": {"iid": ["2/3", "1/3"]}, "target": {"iid": ["1/3", "2/3"]}}


def test_string_probabilities_make_the_pair_exact():
    pair = pair_from_dict(PAPER)
    assert pair.exact
    assert pair.draft.row(()) == (Fraction(2, 3), Fraction(1, 3))
    assert sequence_prob(pair.target, (1, 1, 0)) == Fraction(4, 27)


def test_exact_mode_reads_decimals_as_decimals():
    pair = pair_from_dict({"vocab": 2, "draft": {"iid": ["1/2", 0.5]},
                           "target": {"iid": [0.1, 0.9]}})
    assert pair.exact and pair.target.row(()) == (Fraction(1, 10), Fraction(9, 10))


def test_float_pair_stays_float():
    pair = pair_from_dict({"vocab": 2, "draft": {"iid": [0.25, 0.75]},
                           "target": {"iid": [0.5, 0.5]}})
    assert not pair.exact and isinstance(pair.draft.row(())[0], float)


def test_three_forms_give_prefix_rows():
    raw = {
        "vocab": 2,
        "draft": {"markov": {"initial": ["1/2", "1/2"], "transition": [["1/4", "3/4"], [1, 0]]}},
        "target": {"table": {"": ["1/3", "2/3"], "0": [1, 0], "1": ["1/2", "1/2"]}},
    }
    pair = pair_from_dict(raw)
    assert isinstance(pair.draft, MarkovModel) and isinstance(pair.target, TableModel)
    assert pair.draft.row((1, 0)) == (Fraction(1, 4), Fraction(3, 4))
    assert pair.draft.row(()) == (Fraction(1, 2), Fraction(1, 2))
    assert pair.target.row((1,)) == (Fraction(1, 2), Fraction(1, 2))
    assert pair.target.depth == 1


def test_table_beyond_its_depth_is_an_error_naming_the_prefix():
    pair = pair_from_dict({"vocab": 2, "draft": {"iid": [0.5, 0.5]},
                           "target": {"table": {"": [0.5, 0.5]}}})
    with pytest.raises(SpecbatchError, match="table model 'target': missing prefix '1'"):
        pair.target.row((1,))


@pytest.mark.parametrize(
    "draft, message",
    [
        ({"iid": [-0.5, 1.5]}, "model 'draft' \\(iid\\): row: expected non-negative"),
        ({"iid": [float("nan"), 1.0]}, "model 'draft' \\(iid\\): row: expected finite"),
        ({"iid": [0.5, 0.4]}, "model 'draft' \\(iid\\): row: row must sum to 1"),
        ({"iid": [0.5, 0.25, 0.25]}, "model 'draft' \\(iid\\): row: expected 2 probabilities"),
        ({"iid": ["1/2", "1/3"]}, "exact row must sum to exactly 1"),
        ({"iid": ["1/0", "1"]}, "expected a probability like '1/3'"),
        ({"markov": {"initial": [0.5, 0.5], "transition": [[0.5, 0.5], [0.2, 0.7]]}},
         "model 'draft' \\(markov\\): transition row 1: row must sum to 1"),
        ({"markov": {"initial": [0.5, 0.5]}}, "expected keys 'initial' and 'transition'"),
        ({"table": {"": [0.5, 0.5], "0": [0.5, 0.5]}},
         "model 'draft' \\(table\\): missing prefix '1'"),
        ({"table": {"0": [0.5, 0.5]}}, "missing prefix ''"),
        ({"table": {"": [0.5, 0.5], "x": [0.5, 0.5]}}, "row 'x': expected comma-joined"),
        ({"table": {"": [0.5, 0.5], "2": [0.5, 0.5]}}, "row '2': token ids must lie in 0..1"),
        ({"gaussian": [0.5, 0.5]}, "model 'draft': expected an object with exactly one key"),
    ],
)
def test_invalid_models_are_one_line_errors_naming_model_and_row(draft, message):
    raw = {"vocab": 2, "draft": draft, "target": {"iid": [0.5, 0.5]}}
    with pytest.raises(SpecbatchError, match=message) as info:
        pair_from_dict(raw)
    assert "\n" not in str(info.value)


def test_missing_fields_and_bad_vocab():
    with pytest.raises(SpecbatchError, match="missing field 'target'"):
        pair_from_dict({"vocab": 2, "draft": {"iid": [1, 0]}})
    with pytest.raises(SpecbatchError, match="field vocab: expected a positive integer"):
        pair_from_dict({"vocab": "2", "draft": {"iid": [1, 0]}, "target": {"iid": [1, 0]}})


def test_read_pair_names_the_file(tmp_path):
    path = tmp_path / "pair.json"
    path.write_text("{not json")
    with pytest.raises(SpecbatchError, match=f"file {path}: invalid JSON"):
        read_pair(str(path))
    with pytest.raises(SpecbatchError, match="not found"):
        read_pair(str(tmp_path / "missing.json"))
    path.write_text(json.dumps({"vocab": 2, "draft": {"iid": [0.5, 0.6]},
                                "target": {"iid": [0.5, 0.5]}}))
    with pytest.raises(SpecbatchError, match=f"file {path}: model 'draft'"):
        read_pair(str(path))


@pytest.mark.parametrize("form", ["iid", "markov", "table"])
@pytest.mark.parametrize("exact", [False, True])
def test_random_pairs_are_seeded_valid_and_round_trip(tmp_path, form, exact):
    a = random_pair(7, 3, form, depth=2, exact=exact)
    b = random_pair(7, 3, form, depth=2, exact=exact)
    assert a.to_json() == b.to_json()
    assert a.to_json() != random_pair(8, 3, form, depth=2, exact=exact).to_json()
    path = tmp_path / "pair.json"
    write_pair(a, str(path))
    back = read_pair(str(path))
    assert back.exact == exact
    for prefix in [(), (0,), (2, 1)]:
        assert back.draft.row(prefix) == a.draft.row(prefix)
        assert back.target.row(prefix) == a.target.row(prefix)
        assert sum(a.target.row(prefix)) == pytest.approx(1.0, abs=1e-12)
    if exact:
        assert all(isinstance(v, Fraction) for v in a.draft.row(()))
        assert sum(a.draft.row((1,))) == 1


def test_to_float_and_one_hot_draft():
    pair = random_pair(3, 3, "markov", exact=True)
    f = to_float(pair)
    assert not f.exact
    assert np.allclose(f.target.row((2,)), [float(v) for v in pair.target.row((2,))])
    hot = one_hot_draft(pair, 0, depth=2)
    assert all(sorted(hot.draft.row(p)) == [0, 0, 1] for p in [(), (1,), (0, 2)])
    assert hot.target is pair.target
    assert isinstance(IidModel((0.5, 0.5)).row((1, 1)), tuple)
