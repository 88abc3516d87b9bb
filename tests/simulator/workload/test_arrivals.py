"""Workload specification: request selection and arrival processes."""

from __future__ import annotations

import numpy as np
import pytest

from specbatch.errors import SpecbatchError
from specbatch.simulator.config.sim_config import load_config
from specbatch.simulator.workload.arrivals import build_workload
from tests.simulator.helpers import const_trace


def test_in_order_when_enough_requests_else_seeded_resample():
    trace = const_trace(n_requests=10)
    w = build_workload(load_config(None, requests=6), trace)
    assert w.trace_index.tolist() == [0, 1, 2, 3, 4, 5]
    big = build_workload(load_config(None, requests=50, seed=1), trace)
    again = build_workload(load_config(None, requests=50, seed=1), trace)
    other = build_workload(load_config(None, requests=50, seed=2), trace)
    assert np.array_equal(big.trace_index, again.trace_index)
    assert not np.array_equal(big.trace_index, other.trace_index)
    assert set(big.trace_index.tolist()) <= set(range(10))
    cyc = build_workload(load_config(None, requests=13, sampling="in_order"), trace)
    assert cyc.trace_index.tolist() == list(range(10)) + [0, 1, 2]


@pytest.mark.parametrize("arrival, cv", [("poisson", 1.0), ("gamma", 3.0), ("gamma", 0.5)])
def test_arrival_processes_have_the_requested_rate_and_cv(arrival, cv):
    trace = const_trace(n_requests=4)
    w = build_workload(load_config(None, requests=20000, arrival=arrival, rate=8.0, cv=cv), trace)
    gaps = np.diff(np.concatenate([[0.0], w.arrival]))
    assert (gaps >= 0).all()
    assert abs(gaps.mean() - 1 / 8) < 0.01
    assert abs(gaps.std() / gaps.mean() - cv) < 0.1 * cv


def test_burst_and_trace_offsets():
    trace = const_trace(n_requests=3, arrival=np.array([0.0, 2.0, 1.0]))
    assert build_workload(load_config(None, requests=3), trace).arrival.tolist() == [0, 0, 0]
    w = build_workload(load_config(None, requests=3, arrival="trace"), trace)
    assert w.arrival.tolist() == [0.0, 2.0, 1.0]
    with pytest.raises(SpecbatchError, match="field arrival"):
        build_workload(load_config(None, requests=3, arrival="trace"), const_trace(n_requests=3))


# --- imported workloads (config.workload) -------------------------------------------------

from pathlib import Path  # noqa: E402

import pandas as pd  # noqa: E402

from specbatch.simulator.workload.arrivals import (  # noqa: E402
    EXAMPLE_WORKLOAD,
    example_workload,
    map_to_trace,
    read_workload_file,
    wrap_lengths,
)

TABLE = pd.DataFrame({"prompt_len": [5, 7, 9], "output_len": [3, 30, 2],
                      "arrival": [0.5, 1.0, 1.0], "category": ["a", "b", "a"]})


def write(table: pd.DataFrame, path: Path) -> Path:
    if path.suffix == ".csv":
        table.to_csv(path, index=False)
    elif path.suffix == ".parquet":
        table.to_parquet(path, index=False)
    else:
        table.to_json(path, orient="records", lines=True)
    return path


@pytest.mark.parametrize("name", ["w.csv", "w.parquet", "w.jsonl"])
def test_each_format_reads_the_same_columns(tmp_path, name):
    data = read_workload_file(write(TABLE, tmp_path / name))
    assert data["prompt_len"].tolist() == [5, 7, 9] and data["prompt_len"].dtype == np.int64
    assert data["output_len"].tolist() == [3, 30, 2]
    assert data["arrival"].tolist() == [0.5, 1.0, 1.0]
    assert data["category"].tolist() == ["a", "b", "a"]


def test_optional_columns_aliases_and_timestamps(tmp_path):
    plain = read_workload_file(write(TABLE[["prompt_len", "output_len"]], tmp_path / "p.csv"))
    assert np.isnan(plain["arrival"]).all() and plain["category"].tolist() == [None] * 3
    azure = pd.DataFrame({"TIMESTAMP": ["2023-11-16 18:15:46.5", "2023-11-16 18:15:47.0",
                                        "2023-11-16 18:15:49.0"],
                          "ContextTokens": [10, 20, 30], "GeneratedTokens": [1, 2, 3]})
    data = read_workload_file(write(azure, tmp_path / "azure.csv"))
    assert data["arrival"].tolist() == [0.0, 0.5, 2.5]
    assert data["prompt_len"].tolist() == [10, 20, 30]
    burst = pd.DataFrame({"Timestamp": [5.0, 6.0], "Request tokens": [4, 4],
                          "Response tokens": [2, 2]})
    assert read_workload_file(write(burst, tmp_path / "b.csv"))["arrival"].tolist() == [0, 1]


@pytest.mark.parametrize("change, field", [
    (lambda t: t.drop(columns="output_len"), "output_len"),
    (lambda t: t.assign(prompt_len=[5, -1, 9]), "prompt_len"),
    (lambda t: t.assign(output_len=[3, 2.5, 2]), "output_len"),
    (lambda t: t.assign(output_len=[3, np.nan, 2]), "output_len"),
    (lambda t: t.assign(output_len=[3, 10**12, 2]), "output_len"),
    (lambda t: t.assign(prompt_len=[5, 2**24 + 1, 9]), "prompt_len"),
    (lambda t: t.assign(arrival=[0.5, np.nan, 1.0]), "arrival"),
    (lambda t: t.assign(arrival=[1.0, 0.5, 2.0]), "arrival"),
    (lambda t: t.assign(arrival=[-1.0, 0.5, 2.0]), "arrival"),
    (lambda t: t.assign(prefix_group=["g", "g", None], prefix_len=[4, 1e30, 0]), "prefix_len"),
    (lambda t: t.assign(prefix_group=["g", "g", None], prefix_len=[4, np.inf, 0]),
     "prefix_len"),
    (lambda t: t.assign(prefix_group=["g", "g", None], prefix_len=[4, "abc", 0]),
     "prefix_len"),
    (lambda t: t.assign(prefix_group=["g", "g", None], prefix_len=[4, None, 0]), "prefix_len"),
    (lambda t: t.assign(prefix_group=["g", "g", None], prefix_len=[4, -2, 0]), "prefix_len"),
    (lambda t: t.assign(prefix_group=["g", "g", None], prefix_len=[4, 2.5, 0]), "prefix_len"),
])
def test_bad_inputs_are_one_line_errors_naming_file_and_field(tmp_path, change, field):
    path = write(change(TABLE.copy()), tmp_path / "bad.csv")
    with pytest.raises(SpecbatchError, match=f"workload {path}: field {field}") as err:
        read_workload_file(path)
    assert "\n" not in str(err.value)


def test_prefix_len_names_the_row_and_an_ungrouped_row_may_leave_it_empty(tmp_path):
    table = TABLE.assign(prefix_group=["g", "g", None], prefix_len=[4, "abc", None])
    with pytest.raises(SpecbatchError, match=r"field prefix_len: expected an integer in "
                       r"\[0, 2\^53\] .*got 'abc' in row 1$"):
        read_workload_file(write(table, tmp_path / "w.csv"))
    table = TABLE.assign(prefix_group=["g", "g", None], prefix_len=[4, 4, None])
    data = read_workload_file(write(table, tmp_path / "w.csv"))
    assert data["prefix_len"].tolist() == [4, 4, 0]
    assert data["prefix_group"].tolist() == [0, 0, -1]


def test_a_length_beyond_any_context_window_is_refused_not_simulated_for_days(tmp_path):
    """A 10^12-token output used to run (hours to days); 2^24 tokens is the largest length."""
    path = write(TABLE.assign(output_len=[3, 10**12, 2]), tmp_path / "w.csv")
    with pytest.raises(SpecbatchError, match=r"field output_len: expected integers in \[1, "
                       r"2\^24\] .*got 1000000000000 in row 1$"):
        read_workload_file(path)
    ok = read_workload_file(write(TABLE.assign(output_len=[3, 2**24, 2]), tmp_path / "w.csv"))
    assert ok["output_len"].tolist() == [3, 2**24, 2]


def test_a_csv_with_a_byte_order_mark_reads_like_one_without(tmp_path):
    plain = write(TABLE, tmp_path / "plain.csv")
    marked = tmp_path / "marked.csv"
    marked.write_bytes(b"\xef\xbb\xbf" + plain.read_bytes())
    got, want = read_workload_file(marked), read_workload_file(plain)
    assert all(np.array_equal(got[k], want[k], equal_nan=k == "arrival") for k in want)


def test_empty_file_and_unknown_extension(tmp_path):
    (tmp_path / "e.csv").write_text("")
    with pytest.raises(SpecbatchError, match="e.csv: expected a header"):
        read_workload_file(tmp_path / "e.csv")
    (tmp_path / "h.csv").write_text("prompt_len,output_len\n")
    with pytest.raises(SpecbatchError, match="h.csv: expected at least one request"):
        read_workload_file(tmp_path / "h.csv")
    (tmp_path / "w.xlsx").write_text("x")
    with pytest.raises(SpecbatchError, match="w.xlsx: expected a file ending in .csv"):
        read_workload_file(tmp_path / "w.xlsx")
    with pytest.raises(SpecbatchError, match="expected an existing file"):
        read_workload_file(tmp_path / "missing.csv")


def test_mapping_stays_within_category_and_is_seeded():
    trace_cat = np.array(["a", "b", "a", "b", "a", "c"], dtype=object)
    cat = np.array(["a"] * 50 + ["b"] * 50 + ["zzz"] * 50 + [None] * 50, dtype=object)
    idx, matched = map_to_trace(cat, trace_cat, np.random.default_rng(3))
    assert matched == 100
    assert set(idx[:50].tolist()) == {0, 2, 4} and set(idx[50:100].tolist()) == {1, 3}
    assert set(idx[100:].tolist()) == set(range(6))  # unknown or no category: all requests
    again, _ = map_to_trace(cat, trace_cat, np.random.default_rng(3))
    other, _ = map_to_trace(cat, trace_cat, np.random.default_rng(4))
    assert np.array_equal(idx, again) and not np.array_equal(idx, other)


def test_wrap_lengths_only_when_some_output_outruns_its_trace_request():
    trace = const_trace(n_requests=3, output_lens=np.array([4, 5, 6]))
    assert wrap_lengths(trace, np.array([1, 0, 2]), np.array([3, 11, 6])).tolist() == [5, 4, 6]
    assert wrap_lengths(trace, np.array([2, 0]), np.array([6, 4])) is None  # all fit


def materialised(trace, workload):
    """Twin of position wrapping: a trace with every wrapped request's rows copied out
    (row t of the copy is row t mod L of the original) and the workload pointing at them."""
    import dataclasses

    lens = np.asarray(trace.output_len)[workload.trace_index]
    long = np.flatnonzero(workload.output_len > lens)
    copies = [workload.row_base[i] + np.arange(workload.output_len[i]) % lens[i] for i in long]
    rows = np.concatenate(copies)
    columns = {name: np.concatenate([arr, arr[rows]]) for name, arr in trace.columns().items()}
    out = workload.output_len[long]
    requests = {name: np.concatenate([np.asarray(getattr(trace, name)), extra]) for name, extra in {
        "request_id": trace.n_requests + np.arange(long.size), "output_len": out,
        "prompt_len": workload.prompt_len[long],
        "category": np.asarray(trace.category)[workload.trace_index[long]],
        "arrival": np.asarray(trace.arrival)[workload.trace_index[long]]}.items()}
    offsets = np.concatenate([[0], np.cumsum(requests["output_len"])])
    base = workload.row_base.copy()
    base[long] = trace.n_rows + offsets[trace.n_requests:-1] - offsets[trace.n_requests]
    return (dataclasses.replace(trace, offsets=offsets, **requests, **columns),
            dataclasses.replace(workload, row_base=base, wrap=None))


@pytest.mark.parametrize("policy, verify, kv_mode", [
    ("tetris", "block", "paged"), ("fixed", "token", "reserve"), ("oracle", "token", "reserve")])
def test_wrapped_positions_replay_the_rows_a_copy_would(tmp_path, policy, verify, kv_mode):
    """Reading row base + t mod L on the fly gives the run that materialised copies of the
    wrapped rows give, table for table (the engine never copies positions)."""
    from specbatch.simulator.engine_run import run_engine
    from specbatch.simulator.policies.registry import make_policy
    from specbatch.traces.synth import SynthConfig, synth_trace
    from tests.simulator.helpers import LinearCost

    trace = synth_trace(SynthConfig(requests=6, depth=4, output_mean=12, prompt_mean=16, seed=3))
    rng = np.random.default_rng(0)
    table = pd.DataFrame({"prompt_len": rng.integers(4, 40, 40),
                          "output_len": rng.integers(2, 90, 40)})
    config = load_config(None, workload=str(write(table, tmp_path / "w.csv")), policy=policy,
                         verify=verify, kv_mode=kv_mode, max_num_seqs=8, requests=40,
                         num_speculative_tokens=3)
    workload = build_workload(config, trace)
    assert workload.wrap is not None and (workload.output_len > workload.wrap).sum() > 10
    twin_trace, twin_workload = materialised(trace, workload)
    capacity = 4000 if kv_mode == "paged" else None
    got = run_engine(config, trace, workload, LinearCost(), make_policy(config, 4), capacity)
    want = run_engine(config, twin_trace, twin_workload, LinearCost(), make_policy(config, 4),
                      capacity)
    for a, b in zip(got, want):
        pd.testing.assert_frame_equal(a, b, check_exact=True)


def test_config_workload_builds_from_the_file(tmp_path):
    trace = const_trace(n_requests=4, output_len=5)
    path = write(TABLE, tmp_path / "w.csv")
    w = build_workload(load_config(None, workload=str(path), arrival="trace", seed=2), trace)
    assert w.n == 3 and w.prompt_len.tolist() == [5, 7, 9] and w.output_len.tolist() == [3, 30, 2]
    assert w.arrival.tolist() == [0.5, 1.0, 1.0]
    assert w.wrap.tolist() == [5, 5, 5]  # request 1 (30 tokens) wraps its 5 rows
    assert "3 of its 3 requests" in w.notes[0]
    again = build_workload(load_config(None, workload=str(path), arrival="trace", seed=2), trace)
    assert np.array_equal(w.trace_index, again.trace_index)
    short = build_workload(load_config(None, workload=str(path), requests=2), trace)
    assert short.n == 2 and short.arrival.tolist() == [0, 0]
    bare = write(TABLE[["prompt_len", "output_len"]], tmp_path / "bare.csv")
    with pytest.raises(SpecbatchError, match="field arrival: expected a workload file with"):
        build_workload(load_config(None, workload=str(bare), arrival="trace"), trace)


def test_bundled_example_is_the_documented_generator_output(tmp_path):
    from specbatch.simulator.workload.arrivals import write_example

    assert write_example(tmp_path / "x.csv").read_text() == EXAMPLE_WORKLOAD.read_text()
    table = example_workload()
    assert len(table) == 200 and (np.diff(table["arrival"]) >= 0).all()
    assert (
        read_workload_file(EXAMPLE_WORKLOAD)["prompt_len"].tolist() == table["prompt_len"].tolist()
    )


def test_a_workload_file_is_read_once_per_contents_and_equals_the_uncached_read(tmp_path):
    from specbatch.simulator.workload import arrivals

    path = tmp_path / "w.csv"
    path.write_text("prompt_len,output_len,arrival,category\n10,5,0.0,code\n20,7,0.5,prose\n")
    first = arrivals.read_workload_file(path)
    slow = arrivals.read_workload_file_uncached(path)
    assert first.keys() == slow.keys()
    for name in slow:
        assert np.array_equal(first[name], slow[name]) and first[name].dtype == slow[name].dtype
    first["prompt_len"][0] = 999  # a caller's edit does not reach the kept copy
    assert arrivals.read_workload_file(path)["prompt_len"].tolist() == [10, 20]
    path.write_text("prompt_len,output_len\n30,9\n")  # same path, new contents: read again
    again = arrivals.read_workload_file(path)
    assert again["prompt_len"].tolist() == [30] and np.isnan(again["arrival"]).all()


def test_a_plain_csv_is_parsed_once_then_read_back_from_the_cache_folder(tmp_path, monkeypatch):
    """A plain lengths-and-arrivals CSV's arrays are kept in the cache folder by the bytes'
    digest (specbatch.array_cache): a later process (here: this one with its in-process
    memo cleared) reads them back without parsing, the same arrays; edited bytes parse again."""
    from specbatch.simulator.workload import arrivals, plain_csv

    monkeypatch.setenv("SPECBATCH_CACHE", str(tmp_path / "cache"))
    path = write(TABLE[["prompt_len", "output_len", "arrival"]], tmp_path / "w.csv")
    arrivals._READ.clear()
    parsed = read_workload_file(path)
    arrivals._READ.clear()

    def no_parse(*args):
        raise AssertionError("parsed again")

    real = plain_csv.lengths_table
    monkeypatch.setattr(plain_csv, "lengths_table", no_parse)
    kept = read_workload_file(path)
    assert list(kept) == list(parsed)
    for name in ("prompt_len", "output_len", "arrival"):
        assert kept[name].dtype == parsed[name].dtype
        assert kept[name].tobytes() == parsed[name].tobytes()
    assert kept["category"].tolist() == [None, None, None]
    monkeypatch.setattr(plain_csv, "lengths_table", real)
    write(TABLE[["prompt_len", "output_len"]].assign(output_len=[4, 4, 4]), path)
    arrivals._READ.clear()
    assert read_workload_file(path)["output_len"].tolist() == [4, 4, 4]
