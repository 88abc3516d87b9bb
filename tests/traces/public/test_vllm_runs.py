"""The importer of measured vLLM runs (traces.public.vllm_runs) and the bundled suite's
provenance."""

from __future__ import annotations

import gzip
import hashlib
import json

import pytest

from specbatch.errors import SpecbatchError
from specbatch.traces.public.vllm_runs import (
    BUNDLED_DIR,
    bundled_runs,
    load_run,
    read_anchor_summary,
    read_meta,
    read_requests,
    read_timeseries,
)

#: Three hand-made requests; the engine clock starts at 1000 s, the epoch arrival is ignored.
LINES = [
    {"request_id": "a", "input_toks": 10, "output_toks": 5, "arrival_time": 1.7e9,
     "queued_ts": 1000.0, "scheduled_ts": 1000.1, "first_token_ts": 1000.5,
     "last_token_ts": 1002.5},
    {"request_id": "c", "input_toks": 30, "output_toks": 3, "arrival_time": 1.7e9,
     "queued_ts": 1002.0, "scheduled_ts": 1003.0, "first_token_ts": 1004.0,
     "last_token_ts": 1008.0},
    {"request_id": "b", "input_toks": 20, "output_toks": 1, "arrival_time": 1.7e9,
     "queued_ts": 1001.0, "scheduled_ts": 1001.0, "first_token_ts": 1001.5,
     "last_token_ts": 1001.5},
]
META = {"model": "m", "vllm_version": "0.19.0",
        "engine_kwargs": {"max_num_seqs": 4, "max_num_batched_tokens": 64}}
SERIES = (
    "t,prompt_throughput,gen_throughput,running,waiting,kv_cache_pct\n1,0,0,1,0,0\n2,0,0,2,1,0\n"
)


def write_run(folder, lines=LINES, meta=META, series=SERIES, gz=False):
    folder.mkdir(parents=True, exist_ok=True)
    text = "".join(json.dumps(r) + "\n" for r in lines)
    if gz:
        (folder / "requests.jsonl.gz").write_bytes(gzip.compress(text.encode()))
    else:
        (folder / "requests.jsonl").write_text(text)
    (folder / "meta.json").write_text(json.dumps(meta))
    (folder / "timeseries.csv").write_text(series)
    return folder


def test_requests_are_relative_to_the_first_queue_time_and_sorted_by_arrival(tmp_path):
    df = read_requests(write_run(tmp_path / "r") / "requests.jsonl")
    assert df["arrival"].tolist() == [0.0, 1.0, 2.0]  # b (1001) before c (1002)
    assert df["prompt_len"].tolist() == [10, 20, 30]
    assert df["output_len"].tolist() == [5, 1, 3]
    assert df["first_token"].tolist() == [0.5, 1.5, 4.0]
    assert df["finish"].tolist() == [2.5, 1.5, 8.0]
    assert df["scheduled"].tolist() == pytest.approx([0.1, 1.0, 3.0])


def test_a_gzipped_folder_reads_like_a_plain_one(tmp_path):
    plain = load_run(write_run(tmp_path / "plain"))
    packed = load_run(write_run(tmp_path / "packed", gz=True))
    assert plain.requests.equals(packed.requests)
    assert plain.model_config is None and plain.gpu is None and plain.anchor is None


@pytest.mark.parametrize("line, needle", [
    ("{not json", "line 2: expected a JSON object"),
    ("[1, 2]", "line 2: expected a JSON object, got list"),
    (json.dumps({**LINES[0], "output_toks": 0}), "line 2: field output_toks: expected an "
                                                 "integer from 1 to"),
    (json.dumps({**LINES[0], "input_toks": 2.5}), "field input_toks"),
    (json.dumps({k: v for k, v in LINES[0].items() if k != "last_token_ts"}),
     "line 2: field last_token_ts: expected seconds"),
    (json.dumps({**LINES[0], "first_token_ts": 999.0}), "line 2: field first_token_ts: "
                                                        "expected queued_ts <= scheduled_ts"),
])
def test_a_damaged_request_line_is_a_one_line_error_naming_file_line_and_field(
        tmp_path, line, needle):
    path = tmp_path / "requests.jsonl"
    path.write_text(json.dumps(LINES[0]) + "\n" + line + "\n")
    with pytest.raises(SpecbatchError) as exc:
        read_requests(path)
    assert str(path) in str(exc.value) and needle in str(exc.value)
    assert "\n" not in str(exc.value)


def test_damaged_meta_and_timeseries_are_one_line_errors(tmp_path):
    (tmp_path / "meta.json").write_text(json.dumps({"model": "m"}))
    with pytest.raises(SpecbatchError, match="field engine_kwargs: expected an object"):
        read_meta(tmp_path / "meta.json")
    (tmp_path / "meta.json").write_text("{")
    with pytest.raises(SpecbatchError, match="meta.json: expected a JSON object"):
        read_meta(tmp_path / "meta.json")
    (tmp_path / "ts.csv").write_text("t,running\n1,2\n")
    with pytest.raises(SpecbatchError, match="column waiting: expected it"):
        read_timeseries(tmp_path / "ts.csv")
    (tmp_path / "ts.csv").write_text("t,running,waiting\n1,2,x\n")
    with pytest.raises(SpecbatchError, match="column waiting: expected numbers >= 0, got 'x' "
                                             "in row 1"):
        read_timeseries(tmp_path / "ts.csv")
    (tmp_path / "ts.csv").write_text("t,running,waiting\n2,0,0\n1,0,0\n")
    with pytest.raises(SpecbatchError, match="column t: expected increasing"):
        read_timeseries(tmp_path / "ts.csv")
    with pytest.raises(SpecbatchError, match="requests.jsonl: expected an existing file"):
        read_requests(tmp_path / "requests.jsonl")


def test_an_unknown_name_or_missing_folder_is_refused(tmp_path):
    with pytest.raises(SpecbatchError, match="--vllm .*nope: expected a run folder .* or a "
                                             "bundled run \\(rtx4090-llama-3.1-8b"):
        load_run(str(tmp_path / "nope"))


def _git_blob(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def test_every_bundled_file_is_the_provenance_record_s_git_blob():
    record = json.loads((BUNDLED_DIR / "PROVENANCE.json").read_text())
    assert record["repository"] == "https://github.com/casys-kaist/LLMServingSim"
    assert len(record["commit"]) == 40 and record["licence"].startswith("MIT")
    assert (BUNDLED_DIR / "LICENSE-LLMServingSim").read_text().startswith("MIT License")
    runs = bundled_runs()
    assert set(runs) == {"rtx4090-llama-3.1-8b", "rtxpro6000-llama-3.1-8b",
                         "rtxpro6000-qwen3-32b", "rtxpro6000-qwen3-30b-a3b"}
    for name, run in runs.items():
        for file, src in run["files"].items():
            data = (BUNDLED_DIR / name / file).read_bytes()
            if file.endswith(".gz"):
                data = gzip.decompress(data)
            assert _git_blob(data) == src["blob"], (name, file)
    for file, src in record["profiles"]["files"].items():
        data = (BUNDLED_DIR / file).read_bytes()
        if file.endswith(".gz"):
            data = gzip.decompress(data)
        assert _git_blob(data) == src["blob"], file


def test_bundled_runs_reproduce_the_anchor_s_measured_column():
    # The anchor's summary.txt computes TTFT/TPOT/e2e of the same files (ms, 1 decimal): our
    # importer's times (queued_ts as arrival) must give the same measured numbers.
    from specbatch.analysis.validate.vllm_metrics import per_request, summary

    for name in bundled_runs():
        run = load_run(name)
        assert len(run.requests) == 300
        ours = {m: summary(v) for m, v in per_request(run.requests).items()}
        for key, row in run.anchor.items():
            metric, stat = key.split("_")
            if stat == "p95":
                continue
            assert ours[metric][stat] * 1e3 == pytest.approx(row["measured"], abs=0.051), \
                (name, key)


def test_anchor_summary_rows_parse(tmp_path):
    path = tmp_path / "summary.txt"
    path.write_text("Metric  vLLM  Sim  Diff%\n----\nTTFT Mean   7097.2   6815.7   -4.0%\n"
                    "TPOT P99   37.3   37.6   +0.6%\n")
    assert read_anchor_summary(path) == {
        "ttft_mean": {"measured": 7097.2, "simulated": 6815.7, "error": -0.04},
        "tpot_p99": {"measured": 37.3, "simulated": 37.6, "error": 0.006}}


def test_stamps_outside_the_run_s_length_or_a_request_twice_are_refused(tmp_path):
    from specbatch.traces.public.vllm_runs import max_span

    path = write_run(tmp_path / "r") / "requests.jsonl"  # the requests span 8 s
    assert len(read_requests(path, max_span=8.0)) == 3
    with pytest.raises(SpecbatchError, match="line 2: field last_token_ts: expected the "
                                             "requests to span at most the run's 7 s"):
        read_requests(path, max_span=7.0)
    path.write_text("".join(json.dumps(r) + "\n" for r in [*LINES, LINES[1]]))
    with pytest.raises(SpecbatchError, match="line 4: field request_id: expected each request "
                                             "once, got 'c' again \\(first on line 2\\)"):
        read_requests(path)
    # no started_at / finished_at: the stat logger's last tick (2 s) plus one tick, +10 s slack
    assert max_span(META, read_timeseries(tmp_path / "r" / "timeseries.csv")) == 3.0 + 10.0


def test_every_bundled_run_s_requests_lie_inside_its_recorded_length():
    from specbatch.traces.public.vllm_runs import run_seconds

    for name in bundled_runs():
        run = load_run(name)
        span = run.requests["finish"].max() - run.requests["arrival"].min()
        assert 0.9 * run_seconds(run.meta) < span <= run_seconds(run.meta)
