"""The optional ``proposed`` column of the trace format: round trip, absent in older traces,
range and filler checks with one-line errors, and kept by subsets."""

from __future__ import annotations

import numpy as np
import pyarrow.parquet as pq
import pytest

from specbatch.errors import SpecbatchError
from specbatch.theory.verify.path_stats import block_weights
from specbatch.traces.format.files import read_trace, write_positions, write_trace
from specbatch.traces.format.trace import make_trace
from specbatch.traces.synth import SynthConfig, synth_trace


@pytest.fixture(scope="module")
def plain():
    return synth_trace(SynthConfig(requests=5, depth=4, output_mean=10, vocab=8, seed=1))


def with_fillers(trace, proposed: np.ndarray):
    """``trace`` with ``proposed`` and fillers (q = 1, pt = 0, z = p before the filler)."""
    cols = {name: np.array(arr) for name, arr in trace.columns().items()}
    filler = np.arange(trace.K)[None, :] >= proposed[:, None]
    cols["q"][filler], cols["pt"][filler] = 1.0, 0.0
    cols["draft_conf"][filler] = cols["top1"][filler] = cols["entropy"][filler] = 0.0
    p = block_weights(cols["q"], cols["pt"])
    p_prev = np.concatenate([np.ones((trace.n_rows, 1)), p[:, :-1]], axis=1)
    cols["z"][filler] = p_prev[filler]  # one-hot draft, pt = 0: Z = p_i (1 - 0)
    cols["proposed"] = proposed
    return make_trace(dict(trace.meta), trace.requests(), cols)


def test_round_trip_keeps_the_column_and_older_traces_have_none(plain, tmp_path):
    proposed = np.random.default_rng(0).integers(0, plain.K + 1, plain.n_rows)
    trace = with_fillers(plain, proposed)
    write_trace(trace, tmp_path / "t", float_dtype="float32")
    back = read_trace(tmp_path / "t")
    np.testing.assert_array_equal(back.proposed, proposed)
    assert back.proposed.dtype == np.int64 and not back.proposed.flags.writeable
    assert "proposed" in pq.read_table(next((tmp_path / "t").glob("positions-*"))).column_names
    write_trace(plain, tmp_path / "p")
    assert read_trace(tmp_path / "p").proposed is None and "proposed" not in plain.columns()
    sub = trace.subset(np.array([3, 1]))
    np.testing.assert_array_equal(sub.proposed, np.concatenate(
        [proposed[trace.rows(3)], proposed[trace.rows(1)]]))


@pytest.mark.parametrize("bad, match", [
    (-1, r"field proposed: expected integers in 0..K = 4, got -1 at row 3"),
    (5, r"field proposed: expected integers in 0..K = 4, got 5 at row 3"),
])
def test_values_outside_zero_to_k_are_errors(plain, bad, match):
    proposed = np.full(plain.n_rows, plain.K)
    trace = with_fillers(plain, proposed)
    cols = dict(trace.columns())
    cols["proposed"] = proposed.copy()
    cols["proposed"][3] = bad
    with pytest.raises(SpecbatchError, match=match):
        make_trace(dict(plain.meta), plain.requests(), cols)


def test_a_filler_the_target_could_accept_is_an_error(plain, tmp_path):
    trace = with_fillers(plain, np.full(plain.n_rows, 2))
    cols = {name: np.array(arr) for name, arr in trace.columns().items()}
    cols["pt"][4, 3] = 0.25
    with pytest.raises(SpecbatchError, match=r"field proposed: expected q = 1 and pt = 0 on the "
                       r"filler past 2 proposed tokens, got q = 1.0, pt = 0.25 at row 4, draft "
                       r"position 4"):
        make_trace(dict(plain.meta), plain.requests(), cols)
    # on disk the error names the positions files
    write_trace(plain, tmp_path / "t")
    write_positions(tmp_path / "t", 0, np.repeat(plain.request_id, plain.output_len),
                    np.concatenate([np.arange(n) for n in plain.output_len]), cols)
    with pytest.raises(SpecbatchError, match=r"positions-\*\.parquet: field proposed"):
        read_trace(tmp_path / "t")


def test_positions_files_must_all_have_the_column_or_none(plain, tmp_path):
    trace = with_fillers(plain, np.full(plain.n_rows, 1))
    write_trace(trace, tmp_path / "t")
    first = trace.subset(np.arange(2))
    cols = {k: v for k, v in first.columns().items() if k != "proposed"}
    (tmp_path / "t" / "positions-00000.parquet").unlink()
    write_positions(tmp_path / "t", 0, np.repeat(first.request_id, first.output_len),
                    np.concatenate([np.arange(n) for n in first.output_len]), cols)
    rest = trace.subset(np.arange(2, 5))
    write_positions(tmp_path / "t", 1, np.repeat(rest.request_id, rest.output_len),
                    np.concatenate([np.arange(n) for n in rest.output_len]), rest.columns())
    with pytest.raises(SpecbatchError, match=r"positions-00001.parquet: field proposed: "
                       "expected the column in every positions file or in none, got a mix"):
        read_trace(tmp_path / "t")
