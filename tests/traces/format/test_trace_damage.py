"""A damaged trace is refused, never simulated: the THEORY.md §3 window of every Z, integer
columns that do not fit, and a meta.json that is not the object FORMAT.md describes."""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from specbatch.errors import SpecbatchError
from specbatch.traces.format.checks import z_tolerance
from specbatch.traces.format.files import (
    BUNDLED_DIR,
    make_trace,
    read_meta,
    read_trace,
    validate_trace,
    write_trace,
)
from specbatch.traces.synth import SynthConfig, synth_trace
from tests.test_inputs import call_within

BUNDLED = sorted(p.name for p in BUNDLED_DIR.iterdir() if (p / "meta.json").is_file())


def one_line(exc) -> str:
    msg = str(exc.value)
    assert "\n" not in msg
    return msg


@pytest.mark.parametrize("name", BUNDLED)
def test_every_bundled_trace_is_inside_the_bounds(name):
    trace = read_trace(name)
    assert trace.n_rows > 0


def rewrite_list_column(path, name: str, values: np.ndarray, k: int) -> None:
    table = pq.read_table(path)
    column = pa.FixedSizeListArray.from_arrays(pa.array(values.ravel()), k)
    pq.write_table(table.set_column(table.column_names.index(name), name, column), path)


def test_one_flipped_z_in_a_bundled_trace_is_refused_naming_request_and_position(tmp_path):
    """The reproduction: a z of 0.0006 in the real trace becomes 0.233."""
    copy = tmp_path / "smollm2"
    shutil.copytree(BUNDLED_DIR / "smollm2", copy)
    target = copy / "positions-00003.parquet"
    z = pq.read_table(target).column("z").combine_chunks()
    k = z.type.list_size
    flat = z.flatten().to_numpy().copy()
    i = int(np.argmin(np.abs(flat - 0.0006)))
    assert abs(flat[i] - 0.0006) < 1e-4
    flat[i] = 0.233
    rewrite_list_column(target, "z", flat, k)
    rows = pq.read_table(target, columns=["request_id", "position"])
    request, position = (int(rows.column(c)[i // k].as_py()) for c in ("request_id", "position"))
    with pytest.raises(SpecbatchError) as exc:
        validate_trace(copy)
    msg = one_line(exc)
    assert "positions-*.parquet: field z: expected Z_" in msg and "got 0.23" in msg
    assert f"(request {request}, output position {position})" in msg
    assert f"draft position {i % k + 1}" in msg


@pytest.fixture(scope="module")
def small():
    return synth_trace(SynthConfig(requests=4, depth=3, output_mean=8, vocab=8, seed=5))


def with_z(trace, row: int, col: int, value: float):
    cols = {name: np.array(arr) for name, arr in trace.columns().items()}
    cols["z"][row, col] = value
    return make_trace(dict(trace.meta), trace.requests(), cols)


def bounds(trace, row: int, col: int) -> tuple[float, float]:
    p_prev = 1.0 if col == 0 else float(trace.p[row, col - 1])
    q, pt = float(trace.q[row, col]), float(trace.pt[row, col])
    own, rest = max(p_prev * pt - q, 0.0), p_prev * (1 - pt)
    return max(own, rest - (1 - q)), rest + own


@pytest.mark.parametrize("col", [0, 1, 2])
def test_z_just_outside_its_window_is_refused_and_just_inside_is_kept(small, col):
    row = 3
    low, high = bounds(small, row, col)
    tol = z_tolerance(small.K)
    assert with_z(small, row, col, high + tol / 2).z[row, col] == high + tol / 2
    with pytest.raises(SpecbatchError, match=rf"field z: expected Z_{col + 1} <= "):
        with_z(small, row, col, high + 2 * tol)
    if low - 2 * tol >= 0:
        with pytest.raises(SpecbatchError, match=rf"field z: expected Z_{col + 1} >= "):
            with_z(small, row, col, low - 2 * tol)


def test_the_one_hot_identity_is_enforced_where_q_is_one():
    trace = synth_trace(SynthConfig(requests=3, depth=3, output_mean=6, vocab=8, seed=2,
                                    temperature=0.0))
    row, col = 2, 1
    expected = (1.0 if col == 0 else trace.p[row, col - 1]) * (1 - trace.pt[row, col])
    shifted = expected + 0.01 if expected < 0.5 else expected - 0.01
    with pytest.raises(SpecbatchError, match=r"field z: expected Z_2 (<=|>=) "):
        with_z(trace, row, col, shifted)


def test_a_token_id_beyond_int32_is_refused_not_wrapped(tmp_path, small):
    write_trace(small, tmp_path / "t")
    path = tmp_path / "t" / "positions-00000.parquet"
    tokens = np.array(small.draft_token, dtype=np.int64)
    tokens[1, 2] = 2**40  # wraps to 0 in int32
    rewrite_list_column(path, "draft_token", tokens, small.K)
    with pytest.raises(SpecbatchError, match=r"field draft_token: expected token ids < 2\^31 "
                       r"\(int32\), got 1099511627776"):
        validate_trace(tmp_path / "t")


def test_unsigned_ids_beyond_int64_are_refused(tmp_path, small):
    write_trace(small, tmp_path / "t")
    path = tmp_path / "t" / "requests.parquet"
    table = pq.read_table(path)
    ids = pa.array(np.array([2**64 - 1, 0, 1, 2], dtype=np.uint64))
    pq.write_table(table.set_column(0, "request_id", ids), path)
    with pytest.raises(SpecbatchError, match=r"requests\.parquet: field request_id: expected "
                       r"integers below 2\^63"):
        validate_trace(tmp_path / "t")


META_DAMAGE = {
    "completion is a string": lambda meta: {**meta, "completion": "done"},
    "completion status unknown": lambda meta: {**meta, "completion": {"status": "done"}},
    "models is a list": lambda meta: {**meta, "models": ["a", "b"]},
    "a model is a number": lambda meta: {**meta, "models": {"draft": 3}},
    "a list": lambda meta: [meta],
}


@pytest.mark.parametrize("damage", sorted(META_DAMAGE))
def test_a_meta_json_of_the_wrong_shape_is_one_line(tmp_path, small, damage):
    write_trace(small, tmp_path / "t")
    meta_path = tmp_path / "t" / "meta.json"
    meta_path.write_text(json.dumps(META_DAMAGE[damage](json.loads(meta_path.read_text()))))
    for reader in (validate_trace, read_meta):
        with pytest.raises(SpecbatchError, match=r"meta\.json: ") as exc:
            reader(tmp_path / "t")
        one_line(exc)


@pytest.mark.parametrize("content", [b"\x00\xff\xfe binary", b"[" * 50_000 + b"]" * 50_000])
def test_a_binary_or_deeply_nested_meta_json_is_one_line(tmp_path, small, content):
    write_trace(small, tmp_path / "t")
    (tmp_path / "t" / "meta.json").write_bytes(content)
    with pytest.raises(SpecbatchError, match=r"meta\.json: expected the trace's meta\.json") as exc:
        validate_trace(tmp_path / "t")
    one_line(exc)


@pytest.mark.parametrize("name", ["meta.json", "requests.parquet", "positions-00000.parquet"])
def test_a_fifo_in_place_of_a_trace_file_is_refused_without_blocking(tmp_path, small, name):
    write_trace(small, tmp_path / "t")
    os.unlink(tmp_path / "t" / name)
    os.mkfifo(tmp_path / "t" / name)
    with pytest.raises(SpecbatchError, match=r"got a FIFO"):
        call_within(5, validate_trace, tmp_path / "t")


def test_a_flipped_bit_in_a_written_page_is_caught_by_its_checksum(tmp_path, small):
    """Inside the Z window a flipped value looks valid; the page CRC catches it anyway."""
    write_trace(small, tmp_path / "t")
    path = tmp_path / "t" / "positions-00000.parquet"
    chunk = pq.ParquetFile(path).metadata.row_group(0).column(
        pq.read_schema(path).get_field_index("z"))
    middle = chunk.data_page_offset + chunk.total_compressed_size // 2  # inside z's page data
    data = bytearray(path.read_bytes())
    data[middle] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(SpecbatchError, match=r"positions-00000\.parquet: expected a Parquet "
                       r"file, got an unreadable one") as exc:
        validate_trace(tmp_path / "t")
    one_line(exc)


def test_odd_provenance_values_are_shown_never_a_crash(small):
    from specbatch.traces.format.describe import describe_trace, trace_summary

    meta = {**small.meta, "target": 7, "models": {
        "draft": {"params": "big", "name": ["x"], "source": "pypi", "derived": [1],
                  "weights_sha256": {"model.safetensors": 5}}, "target": None}}
    trace = make_trace(meta, small.requests(), small.columns())
    summary = trace_summary(trace)
    assert summary["model_params"] == {"draft": None}
    assert describe_trace(trace.meta, trace.K).startswith("['x'] -> 7")


def test_a_token_beyond_the_recorded_vocabulary_is_refused(small):
    meta = {**small.meta, "models": {"target": {"shape": {"vocab": 8}}}}
    cols = {name: np.array(arr) for name, arr in small.columns().items()}
    cols["draft_token"][2, 1] = 8  # the filler id V is allowed
    make_trace(meta, small.requests(), cols)
    cols["draft_token"][2, 1] = 9
    with pytest.raises(SpecbatchError, match=r"field draft_token: expected token ids in 0\.\.8 "
                       r".*got 9 at row 2, draft position 2"):
        make_trace(meta, small.requests(), cols)


def test_the_weights_behind_the_z_window_survive_a_subnormal_draft_probability():
    """p_2 = 5e-324 then r_3 = 0.66 / 5e-324 overflows; p_2 · r_3 is still 0.66, not 1."""
    from specbatch.theory.exact.enumeration import block_weights_exact
    from specbatch.traces.format.checks import previous_weights

    q = np.array([[0.5, 1.0, 5e-324, 0.7]])
    pt = np.array([[0.75, 5e-324, 0.66, 1.0]])
    from fractions import Fraction

    exact = block_weights_exact([Fraction(v) for v in q[0]], [Fraction(v) for v in pt[0]])
    expected = [1.0, *(float(w) for w in exact[:3])]  # p_0..p_3 = 1, 1, 5e-324, 0.66
    assert np.allclose(previous_weights(q, pt)[0], expected, rtol=1e-9, atol=0)
