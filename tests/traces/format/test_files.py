"""traces/format/files.py: the trace directory round-trips bit for bit, and every way a file can be
wrong is a one-line SpecbatchError naming the file and the field."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specbatch.errors import SpecbatchError
from specbatch.theory.verify.path_stats import block_weights, token_weights
from specbatch.traces.format.files import (
    read_trace,
    resolve_trace,
    validate_trace,
    write_positions,
    write_trace,
)
from specbatch.traces.format.trace import (
    FORMAT_NAME,
    FORMAT_VERSION,
    LIST_COLUMNS,
    SLACK,
    Trace,
    make_trace,
)
from specbatch.traces.synth import SynthConfig, synth_trace


@pytest.fixture(scope="module")
def small() -> Trace:
    return synth_trace(SynthConfig(requests=6, depth=4, output_mean=12, vocab=8, seed=3))


@pytest.fixture
def written(tmp_path, small) -> Path:
    path = tmp_path / "trace"
    write_trace(small, path)
    return path


def assert_same(a: Trace, b: Trace) -> None:
    for name, arr in {**a.requests(), **a.columns(), "offsets": a.offsets}.items():
        other = getattr(b, name)
        assert arr.dtype == other.dtype, name
        if arr.dtype == object:
            assert arr.tolist() == other.tolist(), name
        else:
            assert np.array_equal(arr, other, equal_nan=True), name
            assert arr.tobytes() == other.tobytes(), name  # bit-identical, NaN payloads too


# ---------------------------------------------------------------- round trip and layout


def test_round_trip_is_bit_identical(small, written):
    loaded = read_trace(written)
    assert_same(small, loaded)
    assert loaded.meta == json.loads(json.dumps(small.meta))
    assert loaded.path == str(written)


def test_layout_and_header(written):
    names = sorted(p.name for p in written.iterdir())
    assert names == ["meta.json", "positions-00000.parquet", "requests.parquet"]
    meta = json.loads((written / "meta.json").read_text())
    assert meta["format"] == FORMAT_NAME and meta["version"] == FORMAT_VERSION
    assert meta["depth"] == 4
    for key in ("models", "tokenizer", "temperature", "draft_samples_per_position",
                "prompt_source", "seeds", "device", "library_versions", "capture_time",
                "completion"):
        assert key in meta
    schema = pq.read_schema(written / "positions-00000.parquet")
    for name in LIST_COLUMNS:
        assert pa.types.is_fixed_size_list(schema.field(name).type)
        assert schema.field(name).type.list_size == 4


def test_arrays_are_contiguous_readonly_with_contract_dtypes(written):
    trace = read_trace(written)
    assert trace.draft_token.dtype == np.int32
    for name in ("q", "pt", "z", "draft_conf", "entropy", "top1"):
        arr = getattr(trace, name)
        assert arr.dtype == np.float64 and arr.flags.c_contiguous and not arr.flags.writeable
        assert arr.shape == (trace.n_rows, trace.K)
    assert trace.offsets[0] == 0 and trace.offsets[-1] == trace.n_rows
    assert np.array_equal(np.diff(trace.offsets), trace.output_len)
    assert trace.category.dtype == object


def test_properties_use_theory_weights(small):
    assert np.array_equal(small.p, block_weights(small.q, small.pt))
    assert np.array_equal(small.accept_tv, token_weights(small.q, small.pt))
    assert small.K == 4 and small.temperature == 1.0
    assert small.n_requests == 6 and small.n_rows == int(small.output_len.sum())
    r = 2
    assert small.rows(r) == slice(int(small.offsets[2]), int(small.offsets[3]))
    assert np.array_equal(small.row_request[small.rows(r)], np.full(small.output_len[r], r))


def test_rewrite_removes_stale_position_files(small, written):
    (written / "positions-99999.parquet").write_bytes(
        (written / "positions-00000.parquet").read_bytes()
    )
    write_trace(small, written)
    assert sorted(p.name for p in written.glob("positions-*")) == ["positions-00000.parquet"]


def test_float32_storage_is_read_back_as_float64(small, tmp_path):
    write_trace(small, tmp_path / "t32", float_dtype="float32")
    loaded = read_trace(tmp_path / "t32")
    assert loaded.q.dtype == np.float64
    assert np.allclose(loaded.q, small.q, rtol=1e-6)


def test_no_temporary_files_left(written):
    assert not [p for p in written.iterdir() if p.name.startswith(".")]


def _split_into_chunks(trace: Trace, directory: Path, order: list[list[int]]) -> None:
    """Rewrite the positions as several files, each holding the given requests' rows in
    reversed row order (the reader must sort them)."""
    for f in directory.glob("positions-*.parquet"):
        f.unlink()
    for chunk, reqs in enumerate(order):
        rows = np.concatenate([np.arange(trace.offsets[r], trace.offsets[r + 1])
                               for r in reqs])[::-1]
        rid = trace.row_request[rows]
        pos = rows - trace.offsets[rid]
        write_positions(directory, chunk, trace.request_id[rid], pos,
                        {n: a[rows] for n, a in trace.columns().items()})


def test_multiple_position_files_are_concatenated_in_request_order(small, written):
    _split_into_chunks(small, written, [[5, 1], [0, 3], [2, 4]])
    assert len(list(written.glob("positions-*.parquet"))) == 3
    assert_same(small, read_trace(written))


def test_subset_keeps_rows_of_chosen_requests(small):
    part = small.subset(np.array([4, 1]))
    assert part.request_id.tolist() == [small.request_id[4], small.request_id[1]]
    assert np.array_equal(part.q, np.concatenate([small.q[small.rows(4)], small.q[small.rows(1)]]))


def test_resolve_trace(tmp_path, written):
    assert resolve_trace(str(written)) == str(written)
    with pytest.raises(SpecbatchError, match="no-such-trace"):
        resolve_trace("no-such-trace")
    with pytest.raises(SpecbatchError, match="expected a trace directory"):
        read_trace(tmp_path / "missing")


def test_temperature_zero_semantics_are_checked(tmp_path):
    greedy = synth_trace(SynthConfig(requests=3, depth=3, output_mean=8, temperature=0.0))
    assert np.all(greedy.q == 1.0)
    assert set(np.unique(greedy.pt)) <= {0.0, 1.0}
    meta = dict(greedy.meta)
    cols = greedy.columns()
    with pytest.raises(SpecbatchError, match=r"field q: expected 1 at temperature 0"):
        make_trace(meta, greedy.requests(), {**cols, "q": np.full_like(greedy.q, 0.5)})
    with pytest.raises(SpecbatchError, match=r"field pt: expected 0 or 1 at temperature 0"):
        make_trace(meta, greedy.requests(), {**cols, "pt": np.full_like(greedy.pt, 0.5)})


# ---------------------------------------------------------------- every validation error


def _one_line(exc: pytest.ExceptionInfo) -> str:
    msg = str(exc.value)
    assert "\n" not in msg
    return msg


def _rewrite_meta(directory: Path, **changes) -> None:
    meta = json.loads((directory / "meta.json").read_text())
    for key, value in changes.items():
        if value is _DELETE:
            del meta[key]
        else:
            meta[key] = value
    (directory / "meta.json").write_text(json.dumps(meta))


_DELETE = object()


def _rewrite_table(path: Path, name: str, array: pa.Array | None) -> None:
    table = pq.read_table(path)
    i = table.column_names.index(name)
    table = table.remove_column(i) if array is None else table.set_column(i, name, array)
    pq.write_table(table, path)


POS = "positions-00000.parquet"


@pytest.mark.parametrize("missing", ["meta.json", "requests.parquet", POS])
def test_missing_file(written, missing):
    (written / missing).unlink()
    with pytest.raises(SpecbatchError) as exc:
        validate_trace(written)
    msg = _one_line(exc)
    assert missing.split("-")[0] in msg and "expected" in msg


@pytest.mark.parametrize(
    "change, field",
    [
        ({"format": "other-trace"}, "format"),
        ({"format": _DELETE}, "format"),
        ({"version": 3}, "version"),
        ({"version": 2}, "tree"),  # a tree trace records its tree
        ({"version": _DELETE}, "version"),
        ({"temperature": -1}, "temperature"),
        ({"temperature": "hot"}, "temperature"),
        ({"depth": 0}, "depth"),
        ({"depth": 3}, "draft_token"),  # files hold lists of length 4
    ],
)
def test_bad_meta(written, change, field):
    _rewrite_meta(written, **change)
    with pytest.raises(SpecbatchError) as exc:
        validate_trace(written)
    msg = _one_line(exc)
    assert f"field {field}:" in msg and "expected" in msg


def test_meta_not_json(written):
    (written / "meta.json").write_text("{not json")
    with pytest.raises(SpecbatchError, match=r"meta\.json: expected the trace's meta\.json, got "
                                             r"invalid JSON"):
        validate_trace(written)


def test_unreadable_parquet(written):
    (written / "requests.parquet").write_text("garbage")
    with pytest.raises(SpecbatchError, match=r"requests\.parquet: expected a Parquet file"):
        validate_trace(written)


@pytest.mark.parametrize("name", ["request_id", "prompt_len", "output_len", "category", "arrival"])
def test_missing_request_column(written, name):
    _rewrite_table(written / "requests.parquet", name, None)
    with pytest.raises(SpecbatchError) as exc:
        validate_trace(written)
    msg = _one_line(exc)
    assert "requests.parquet" in msg and f"field {name}: expected" in msg


@pytest.mark.parametrize("name", ["request_id", "position", *LIST_COLUMNS])
def test_missing_position_column(written, name):
    _rewrite_table(written / POS, name, None)
    with pytest.raises(SpecbatchError) as exc:
        validate_trace(written)
    msg = _one_line(exc)
    assert POS in msg and f"field {name}: expected" in msg


def test_mistyped_columns(written, small):
    n = small.n_requests
    _rewrite_table(written / "requests.parquet", "prompt_len", pa.array(["x"] * n))
    with pytest.raises(SpecbatchError, match=r"requests\.parquet: field prompt_len: expected "
                                             r"integer"):
        validate_trace(written)


def test_mistyped_list_column(written, small):
    _rewrite_table(written / POS, "q", pa.array(["a"] * small.n_rows))
    with pytest.raises(SpecbatchError, match=r"field q: expected a list column"):
        validate_trace(written)


def test_list_of_wrong_value_type(written, small):
    flat = pa.array(np.zeros(small.n_rows * small.K, dtype=np.int64))
    _rewrite_table(written / POS, "pt", pa.FixedSizeListArray.from_arrays(flat, small.K))
    with pytest.raises(SpecbatchError, match=r"field pt: expected lists of float64"):
        validate_trace(written)


def test_variable_lists_of_wrong_length(written, small):
    k = small.K
    values = small.z.ravel().tolist()
    lists = [values[i * k:(i + 1) * k] for i in range(small.n_rows)]
    lists[3] = lists[3][:-1]
    _rewrite_table(written / POS, "z", pa.array(lists, type=pa.list_(pa.float64())))
    with pytest.raises(SpecbatchError, match=r"field z: expected lists of length K = 4 .*got 3 at "
                                             r"row 3"):
        validate_trace(written)


def test_variable_lists_of_right_length_are_accepted(written, small):
    k = small.K
    values = small.z.ravel().tolist()
    lists = [values[i * k:(i + 1) * k] for i in range(small.n_rows)]
    _rewrite_table(written / POS, "z", pa.array(lists, type=pa.list_(pa.float64())))
    assert np.array_equal(read_trace(written).z, small.z)


def test_null_entries(written, small):
    values = small.q.ravel().tolist()
    values[5] = None
    _rewrite_table(
        written / POS,
        "q",
        pa.FixedSizeListArray.from_arrays(pa.array(values, pa.float64()), small.K),
    )
    with pytest.raises(SpecbatchError, match=r"field q: expected no null"):
        validate_trace(written)


def _set_value(written: Path, small: Trace, name: str, value: float, row: int = 2,
               col: int = 1) -> None:
    arr = np.array(getattr(small, name), dtype=np.float64)
    arr[row, col] = value
    _rewrite_table(
        written / POS, name, pa.FixedSizeListArray.from_arrays(pa.array(arr.ravel()), small.K)
    )


@pytest.mark.parametrize("name", ["q", "pt", "z", "draft_conf", "entropy", "top1"])
@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
def test_non_finite_values(written, small, name, value):
    _set_value(written, small, name, value)
    with pytest.raises(SpecbatchError) as exc:
        validate_trace(written)
    msg = _one_line(exc)
    assert f"field {name}: expected finite values" in msg and "row 2, draft position 2" in msg


@pytest.mark.parametrize("name", ["q", "pt", "z", "draft_conf", "top1"])
@pytest.mark.parametrize("value", [1.01, -0.01])
def test_probabilities_outside_unit_interval(written, small, name, value):
    if name == "draft_conf" and value > 1:
        _set_value(written, small, "top1", 1.0)  # so the draft_conf <= top1 check is not first
    _set_value(written, small, name, value)
    with pytest.raises(SpecbatchError) as exc:
        validate_trace(written)
    assert f"field {name}: expected values in [0, 1]" in _one_line(exc)


def test_slack_is_tolerated_and_values_kept_as_stored(written, small):
    _set_value(written, small, "top1", 1 + SLACK / 2)
    assert read_trace(written).top1[2, 1] == 1 + SLACK / 2


def test_negative_entropy(written, small):
    _set_value(written, small, "entropy", -0.5)
    with pytest.raises(SpecbatchError, match=r"field entropy: expected values in >= 0"):
        validate_trace(written)


def test_q_zero_on_drafted_token(written, small):
    _set_value(written, small, "q", 0.0)
    with pytest.raises(SpecbatchError, match=r"field q: expected q > 0 on a drafted token"):
        validate_trace(written)


def test_draft_conf_above_top1(written, small):
    _set_value(written, small, "top1", 0.0)
    _set_value(written, small, "draft_conf", 0.5)
    with pytest.raises(SpecbatchError, match=r"field draft_conf: expected <= top1"):
        validate_trace(written)


def test_negative_token(written, small):
    arr = np.array(small.draft_token)
    arr[0, 0] = -1
    _rewrite_table(
        written / POS,
        "draft_token",
        pa.FixedSizeListArray.from_arrays(pa.array(arr.ravel()), small.K),
    )
    with pytest.raises(SpecbatchError, match=r"field draft_token: expected token ids >= 0"):
        validate_trace(written)


def test_output_len_disagrees_with_rows(written, small):
    out = np.array(small.output_len)
    out[1] += 1
    _rewrite_table(written / "requests.parquet", "output_len", pa.array(out))
    with pytest.raises(SpecbatchError) as exc:
        validate_trace(written)
    msg = _one_line(exc)
    assert (
        "requests.parquet: field output_len" in msg and f"request {int(small.request_id[1])}" in msg
    )


def test_duplicate_position(written, small):
    pos = np.arange(small.n_rows) - np.repeat(small.offsets[:-1], small.output_len)
    pos[1] = pos[0]
    _rewrite_table(written / POS, "position", pa.array(pos))
    with pytest.raises(SpecbatchError, match=r"field position: expected each \(request, position\) "
                                             r"once"):
        validate_trace(written)


def test_missing_position(written, small):
    pos = np.arange(small.n_rows) - np.repeat(small.offsets[:-1], small.output_len)
    last = int(small.offsets[1]) - 1
    pos[0] = pos[last] + 1  # position 0 of request 0 replaced by one past its end: 0 is missing
    _rewrite_table(written / POS, "position", pa.array(pos))
    with pytest.raises(SpecbatchError, match=r"field position: expected positions 0..output_len-1"):
        validate_trace(written)


def test_duplicate_rows_across_files(written, small):
    (written / "positions-00001.parquet").write_bytes((written / POS).read_bytes())
    with pytest.raises(SpecbatchError, match=r"field position: expected each"):
        validate_trace(written)


def test_unknown_request_in_positions(written, small):
    rid = np.repeat(small.request_id, small.output_len)
    rid[0] = 999
    _rewrite_table(written / POS, "request_id", pa.array(rid))
    with pytest.raises(SpecbatchError, match=r"field request_id: expected ids listed in "
                                             r"requests.parquet, got 999"):
        validate_trace(written)


def test_duplicate_request_id(written, small):
    ids = np.array(small.request_id)
    ids[1] = ids[0]
    _rewrite_table(written / "requests.parquet", "request_id", pa.array(ids))
    with pytest.raises(SpecbatchError, match=r"requests\.parquet: field request_id: expected "
                                             r"unique"):
        validate_trace(written)


def test_mixed_arrivals(written, small):
    arrival = np.zeros(small.n_requests)
    arrival[0] = np.nan
    _rewrite_table(written / "requests.parquet", "arrival", pa.array(arrival))
    with pytest.raises(SpecbatchError, match=r"field arrival: expected all NaN"):
        validate_trace(written)


def test_make_trace_checks_shapes_and_names(small):
    cols = small.columns()
    with pytest.raises(SpecbatchError, match=r"field top1: expected a \[rows, K\] array, got none"):
        make_trace(small.meta, small.requests(), {k: v for k, v in cols.items() if k != "top1"})
    with pytest.raises(SpecbatchError, match=r"field z: expected shape"):
        make_trace(small.meta, small.requests(), {**cols, "z": cols["z"][:, :2]})
    with pytest.raises(SpecbatchError, match=r"field output_len: expected the lengths to sum"):
        make_trace(small.meta, {**small.requests(), "output_len": small.output_len + 1}, cols)
    with pytest.raises(SpecbatchError, match=r"field depth: expected the list length 4"):
        make_trace({**small.meta, "depth": 5}, small.requests(), cols)


# ---------------------------------------------------------------- properties


unit = st.floats(0.0, 1.0, allow_subnormal=True)


def residuals_within_bounds(q: np.ndarray, pt: np.ndarray, u: np.ndarray) -> np.ndarray:
    """A ``z`` # [rows, K] the reader accepts: ``u`` of the way through the window THEORY.md
    §3 allows, ``max(e, p_i (1 − pt) − (1 − q)) ≤ Z ≤ p_i (1 − pt) + e`` with ``e = max(0,
    p_i·pt − q)`` (a single point where q = 1)."""
    p = block_weights(q, pt)
    p_prev = np.concatenate([np.ones((q.shape[0], 1)), p[:, :-1]], axis=1)
    own, rest = np.maximum(p_prev * pt - q, 0.0), p_prev * (1 - pt)
    low = np.maximum(own, rest - (1 - q))
    return low + u * (rest + own - low)


@st.composite
def arbitrary_traces(draw):
    """Any valid trace content: ragged lengths, edge values 0, 1, subnormals, unicode."""
    n = draw(st.integers(1, 4))
    k = draw(st.integers(1, 4))
    lengths = draw(st.lists(st.integers(1, 3), min_size=n, max_size=n))
    rows = sum(lengths)
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    special = np.array([0.0, 1.0, 5e-324, 0.5, 1 - 2**-53])

    def column(low_zero: bool) -> np.ndarray:
        values = np.where(
            rng.random((rows, k)) < 0.3, rng.choice(special, (rows, k)), rng.random((rows, k))
        )
        return values if low_zero else np.where(values == 0, 1.0, values)

    top1 = column(True)
    q, pt = column(False), column(True)
    cols = {
        "draft_token": rng.integers(0, 2**31 - 1, (rows, k)),
        "q": q, "pt": pt, "z": residuals_within_bounds(q, pt, column(True)),
        "draft_conf": top1 * rng.random((rows, k)), "top1": top1,
        "entropy": rng.exponential(2.0, (rows, k)),
    }
    ids = draw(st.lists(st.integers(-2**62, 2**62), min_size=n, max_size=n, unique=True))
    arrival = np.full(n, np.nan) if draw(st.booleans()) else np.sort(rng.exponential(1.0, n))
    requests = {
        "request_id": np.array(ids), "prompt_len": rng.integers(0, 10**6, n),
        "output_len": np.array(lengths),
        "category": np.array(draw(st.lists(st.text(max_size=8), min_size=n, max_size=n)),
                             dtype=object),
        "arrival": arrival,
    }
    temperature = draw(st.sampled_from([0.5, 1.0, 2.0]))
    return make_trace(
        {"temperature": temperature, "note": draw(st.text(max_size=5))}, requests, cols
    )


@settings(max_examples=25)
@given(trace=arbitrary_traces(), float32=st.booleans())
def test_any_trace_round_trips(tmp_path_factory, trace, float32):
    path = tmp_path_factory.mktemp("rt") / "t"
    if float32 and np.any(trace.q.astype(np.float32) == 0):
        with pytest.raises(SpecbatchError, match="field q: expected values > 0 after rounding"):
            write_trace(trace, path, float_dtype="float32")
    elif float32:
        write_trace(trace, path, float_dtype="float32")
        loaded = read_trace(path)
        assert np.array_equal(loaded.q, trace.q.astype(np.float32).astype(np.float64))
    else:
        write_trace(trace, path)
        assert_same(trace, read_trace(path))


def test_a_failed_write_leaves_the_old_file_and_no_temporary(small, written, monkeypatch):
    before = (written / POS).read_bytes()

    def broken(table, where, **kwargs):
        Path(where).write_bytes(b"partial")
        raise OSError("disk full")

    monkeypatch.setattr(pq, "write_table", broken)
    with pytest.raises(OSError, match="disk full"):
        write_trace(small, written)
    assert (written / POS).read_bytes() == before
    assert not [p for p in written.iterdir() if p.name.startswith(".")]
    monkeypatch.undo()
    assert_same(small, read_trace(written))


def test_numpy_scalars_in_meta_are_stored_as_json(small, tmp_path):
    meta = {**small.meta, "depth": np.int64(4), "temperature": np.float32(1.0)}
    trace = make_trace(meta, small.requests(), small.columns())
    write_trace(trace, tmp_path / "np")
    assert read_trace(tmp_path / "np").meta["depth"] == 4


def test_make_trace_leaves_caller_arrays_writeable_and_rejects_huge_tokens(small):
    cols = {name: np.array(arr) for name, arr in small.columns().items()}
    trace = make_trace(small.meta, small.requests(), cols)
    assert cols["q"].flags.writeable and not trace.q.flags.writeable
    with pytest.raises(SpecbatchError, match=r"field draft_token: expected token ids < 2\^31"):
        make_trace(
            small.meta,
            small.requests(),
            {**cols, "draft_token": cols["draft_token"].astype(np.int64) + 2**31},
        )
