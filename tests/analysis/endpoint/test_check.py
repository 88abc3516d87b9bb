"""analysis/endpoint/check.py and reference.py: `specbatch conform --endpoint` passes a correct
server and catches 2026's shipped sampler bugs served by `specbatch live serve`, with a stated
power, the acceptance read from /metrics, a result folder that resumes."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import numpy as np
import pytest

from specbatch.analysis.endpoint.check import (
    EndpointSettings,
    conform_endpoint,
    draws_needed,
    two_sample_test,
)
from tests.live.helpers import save_pair, served

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

#: A reduced run for the fast suite: two prompts, greedy and T = 1, 60 completions each.
SMALL = dict(prompts=("def add(a, b):", "The quick brown fox"), temperatures=(0.0, 1.0),
             samples=60, greedy=3, greedy_tokens=6, alpha=1e-3)


# ---------------------------------------------------------------- the statistics alone

def test_the_two_sample_test_holds_its_level_and_sees_a_shift():
    rng = np.random.default_rng(0)
    law = np.array([0.5, 0.3, 0.15, 0.05])
    rejections = 0
    for seed in range(200):
        r = np.random.default_rng(seed)
        a = [(int(x),) for x in r.choice(4, 60, p=law)]
        b = [(int(x),) for x in r.choice(4, 60, p=law)]
        rejections += two_sample_test(a, b, 0.05, rng)["p_value"] <= 0.05
    assert rejections <= 200 * 0.05 + 3 * np.sqrt(200 * 0.05 * 0.95)  # within 3 sd of 5 %
    shifted = np.array([0.3, 0.3, 0.15, 0.25])
    a = [(int(x),) for x in rng.choice(4, 300, p=law)]
    b = [(int(x),) for x in rng.choice(4, 300, p=shifted)]
    assert two_sample_test(a, b, 1e-3, rng)["p_value"] < 1e-3


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    pytest.importorskip("transformers")
    return save_pair(tmp_path_factory.mktemp("conformpair"), scale=30.0, noise=0.1)


def test_the_exact_prefix_law_is_the_targets_by_enumeration(pair):
    """With floor 0 the prefix tree is the whole V^2 grid: the law of the first two tokens
    equals Mb(a) Mb(b | a) computed one sequence at a time, and sums to 1."""
    import torch

    from specbatch.analysis.endpoint.target_law import REST, prefix_laws
    from tests.live.helpers import load_saved_pair

    _, target = load_saved_pair(pair)
    prompt = [5, 6, 7]
    laws = prefix_laws(target, prompt, 0.7, 2, floor=0.0)
    assert sum(laws[1].values()) == pytest.approx(1.0) and laws[1][REST] < 1e-9
    with torch.no_grad():
        first = torch.softmax(target(input_ids=torch.tensor([prompt])).logits[0, -1] / 0.7, -1)
        a = int(first.argmax())
        second = torch.softmax(target(input_ids=torch.tensor([prompt + [a]])).logits[0, -1]
                               / 0.7, -1)
    b = int(second.argmax())
    assert laws[0][(a,)] == pytest.approx(float(first[a]), rel=1e-5)
    assert laws[1][(a, b)] == pytest.approx(float(first[a] * second[b]), rel=1e-4)


# ---------------------------------------------------------------- against a live server

@pytest.fixture(scope="module")
def server(pair):
    with served("--draft", pair[0], "--target", pair[1]) as (url, _):
        yield url


def small(url: str, pair, **changes) -> EndpointSettings:
    return EndpointSettings(endpoint=url, target_model=pair[1], **(SMALL | changes))


def test_a_correct_server_passes_with_power_and_acceptance(server, pair, tmp_path):
    report = conform_endpoint(small(server, pair), tmp_path / "out")
    assert report["verdict"] == "no violation detected" and report["exit_code"] == 0
    assert report["requests_spent"] == 2 * (60 + 3)
    assert 0 < report["power"]["detectable_tv"] <= 1
    acc = report["acceptance"]
    assert acc["drafts"] > 0 and 1 < acc["mal"] <= 4 and 0 < acc["acceptance_rate"] <= 1
    assert len(report["tests"]) == 2 * 3  # prompts x temperatures > 0 x m
    saved = json.loads((tmp_path / "out" / "report.json").read_text())
    assert saved["verdict"] == report["verdict"]


def test_the_two_sample_path_runs_end_to_end(server):
    """The server against itself as --reference (a null by construction): the permutation
    test passes, the power is marked approximate, both acceptances are read."""
    report = conform_endpoint(EndpointSettings(endpoint=server, reference=server,
                                               **(SMALL | {"samples": 40})))
    assert report["verdict"] == "no violation detected", report["violations"]
    assert report["power"]["approximate"] and report["reference_acceptance"]["drafts"] > 0
    assert report["requests_spent"] == 2 * (2 * 40 + 3 + 1)  # both sides; one greedy reference


def test_a_partial_run_resumes_and_a_larger_size_tops_up(server, pair, tmp_path):
    from specbatch.analysis.endpoint.client import BudgetSpent

    out = tmp_path / "out"
    with pytest.raises(BudgetSpent):
        conform_endpoint(small(server, pair, budget=50), out)
    draws = json.loads((out / "draws.json").read_text())
    assert draws["spent"] == sum(len(v) for v in draws["draws"].values())
    assert 0 < draws["spent"] <= 50
    report = conform_endpoint(small(server, pair), out)
    assert report["requests_spent"] == 126 and report["requests_this_run"] <= 126 - 1
    bigger = conform_endpoint(small(server, pair, samples=80), out)
    assert bigger["requests_spent"] == 126 + 2 * 20 and bigger["requests_this_run"] == 40


def test_a_folder_of_other_settings_is_refused(server, pair, tmp_path):
    from specbatch.errors import SpecbatchError

    out = tmp_path / "out"
    conform_endpoint(small(server, pair, samples=10, greedy=1), out)
    with pytest.raises(SpecbatchError, match="another configuration"):
        conform_endpoint(small(server, pair, samples=10, tokens=2), out)
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    with pytest.raises(SpecbatchError, match="not a conform-endpoint result"):
        conform_endpoint(small(server, pair, samples=10), tmp_path / "other")


def test_bad_settings_are_one_line_errors(capsys):
    from specbatch.cli import main

    assert main(["conform", "--endpoint", "http://127.0.0.1:9"]) == 2
    assert "--reference/--target-model" in capsys.readouterr().err
    assert main(["conform", "vllm-v1", "--endpoint", "http://127.0.0.1:9",
                 "--target-model", "x"]) == 2
    assert "VERIFIER" in capsys.readouterr().err
    assert main(["conform", "--endpoint", "http://127.0.0.1:9", "--target-model", "x",
                 "--temperatures", "a,b"]) == 2
    assert "--temperatures" in capsys.readouterr().err


@pytest.mark.slow
def test_json_is_one_object_in_a_subprocess(server, pair):
    run = subprocess.run([sys.executable, "-m", "specbatch", "conform", "--endpoint", server,
                          "--target-model", pair[1], "--samples", "30", "--temperatures",
                          "0,1", "--greedy-requests", "2", "--json"],
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout)
    assert report["power"]["detectable_tv"] is not None and report["acceptance"]["mal"] > 1


@pytest.mark.slow
def test_a_correct_server_passes_at_the_defaults(server, pair):
    """Against the exact target law and against a second server without speculation (the
    two-sample path), at conform --endpoint's default settings."""
    exact = conform_endpoint(EndpointSettings(endpoint=server, target_model=pair[1]))
    assert exact["verdict"] == "no violation detected", exact["violations"]
    with served("--target", pair[1], "--speculate", "off") as (ref, _):
        two = conform_endpoint(EndpointSettings(endpoint=server, reference=ref))
    assert two["verdict"] == "no violation detected", two["violations"]
    assert two["power"]["approximate"] and two["reference_acceptance"]["drafts"] == 0


#: Catalogued 2026 bugs that change the law: served with their row's flags, caught over HTTP.
BROKEN = ("bug-1cat-656", "bug-ascend-7839", "bug-vllm-32852", "bug-vllm-27077",
          "bug-openvino-4190")
#: Rows whose law is right (a lossless fallback, equality matching): they pass.
LOSSLESS = ("bug-ascend-15673", "bug-dflash-74", "bug-mlx-swift-459")


def serve_flags(name: str) -> list[str]:
    from specbatch.theory.conform.catalogue import CATALOGUE

    return next(r.serve for r in CATALOGUE if r.name == name).split()


def test_one_served_bug_is_caught_in_the_fast_suite(pair):
    """openvino.genai #4190 (the correction dropped, the next row's token kept) at 50
    completions per prompt and temperature: the slow ladder caught it at 25."""
    settings = EndpointSettings(endpoint="http://unset", target_model=pair[1], samples=50,
                                temperatures=(1.0,), greedy=1)
    with served("--draft", pair[0], "--target", pair[1],
                *serve_flags("bug-openvino-4190")) as (url, _):
        report = conform_endpoint(dataclasses.replace(settings, endpoint=url))
    assert report["verdict"] == "LOSSY"
    assert any("law of the first" in v for v in report["violations"])


@pytest.mark.slow
@pytest.mark.parametrize("name", BROKEN)
def test_a_catalogued_2026_bug_served_over_http_is_caught(pair, tmp_path, name):
    settings = EndpointSettings(endpoint="http://unset", target_model=pair[1],
                                temperatures=(0.0, 1.0), greedy=4)
    with served("--draft", pair[0], "--target", pair[1], *serve_flags(name)) as (url, _):
        needed, report = draws_needed(dataclasses.replace(settings, endpoint=url),
                                      tmp_path / "out")
    print(f"{name}: caught at {needed} completions per prompt and T "
          f"({report['requests_spent']} requests), MAL {report['acceptance']['mal']:.3f}")
    assert needed is not None and report["verdict"] == "LOSSY"


@pytest.mark.slow
@pytest.mark.parametrize("name", LOSSLESS)
def test_a_2026_row_with_the_right_law_passes_over_http(pair, name):
    settings = EndpointSettings(endpoint="http://unset", target_model=pair[1],
                                temperatures=(0.0, 1.0), samples=200, greedy=4)
    with served("--draft", pair[0], "--target", pair[1], *serve_flags(name)) as (url, _):
        report = conform_endpoint(dataclasses.replace(settings, endpoint=url))
    assert report["verdict"] == "no violation detected", report["violations"]
