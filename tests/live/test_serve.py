"""live/serving.py and live/http_api.py: `specbatch live serve` answers as an OpenAI server,
batches concurrent requests, refuses bad ones in OpenAI's error shape, and counts what it
served in vLLM's metric names. One server (a subprocess on 127.0.0.1, always torn down) for
the module."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.live.helpers import IDS, greedy_decode, post, save_pair, served, server_output

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

KEY = "sk-test"
K = 3


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    pytest.importorskip("transformers")
    return save_pair(tmp_path_factory.mktemp("servepair"), scale=30.0, noise=0.1)


@pytest.fixture(scope="module")
def server(pair):
    with served("--draft", pair[0], "--target", pair[1], "--speculate", f"fixed:{K}",
                "--api-key", KEY, "--served-model-name", "tiny") as (url, proc):
        yield url, proc


def get(url: str, path: str, key: str | None = KEY):
    req = urllib.request.Request(url + path, headers={"Authorization": f"Bearer {key}"}
                                 if key else {})
    try:
        with urllib.request.urlopen(req, timeout=30) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def metrics(url: str) -> dict:
    from specbatch.analysis.endpoint.client import parse_prometheus

    parsed = parse_prometheus(get(url, "/metrics")[1])
    return {name: sum(v for _, v in rows) for name, rows in parsed.items()} | {
        "per_pos": [v for _, v in sorted(
            ((int(lab["position"]), v) for lab, v in
             parsed.get("vllm:spec_decode_num_accepted_tokens_per_pos_total", [])))]}


def complete(url: str, **body):
    return post(url, "/v1/completions", {"max_tokens": 4, **body}, KEY)


def test_health_models_and_the_api_key(server):
    url, _ = server
    assert get(url, "/health", key=None)[0] == 200
    status, text = get(url, "/v1/models")
    assert status == 200 and json.loads(text)["data"][0]["id"] == "tiny"
    for key in (None, "wrong"):
        status, body = post(url, "/v1/completions", {"prompt": [5, 6]}, key)
        assert status == 401
        assert set(body["error"]) == {"message", "type", "param", "code"}
        assert body["error"]["code"] == 401


def test_a_completion_carries_tokens_logprobs_and_usage(server):
    url, _ = server
    status, body = complete(url, prompt=IDS[1], max_tokens=6, temperature=0.8, logprobs=2,
                            return_token_ids=True, return_tokens_as_token_ids=True, n=3)
    assert status == 200 and body["object"] == "text_completion" and body["model"] == "tiny"
    assert len(body["choices"]) == 3
    for choice in body["choices"]:
        ids, lp = choice["token_ids"], choice["logprobs"]
        assert len(ids) == 6 and choice["finish_reason"] == "length"
        assert lp["tokens"] == [f"token_id:{t}" for t in ids]
        assert all(x <= 0 for x in lp["token_logprobs"])
        assert all(len(row) == 2 for row in lp["top_logprobs"])
    assert body["usage"] == {"prompt_tokens": len(IDS[1]), "completion_tokens": 18,
                             "total_tokens": len(IDS[1]) + 18}


def test_chat_completion_with_logprobs(server):
    url, _ = server
    status, body = post(url, "/v1/chat/completions",
                        {"messages": [{"role": "user", "content": "def add(a, b):"}],
                         "max_tokens": 5, "logprobs": True, "top_logprobs": 2,
                         "temperature": 0.5}, KEY)
    assert status == 200 and body["object"] == "chat.completion"
    content = body["choices"][0]["logprobs"]["content"]
    assert len(content) == 5 and all(len(c["top_logprobs"]) == 2 for c in content)
    assert body["choices"][0]["message"]["role"] == "assistant"


def test_greedy_output_is_the_targets_greedy_decoding(server, pair):
    from tests.live.helpers import load_saved_pair

    url, _ = server
    _, target = load_saved_pair(pair)
    for ids in IDS[:3]:
        status, body = complete(url, prompt=ids, max_tokens=8, temperature=0,
                                return_token_ids=True, ignore_eos=True)
        assert body["choices"][0]["token_ids"] == greedy_decode(target, ids, 8)


def test_a_seeded_request_reproduces_whatever_else_runs(server):
    url, _ = server
    body = {"prompt": IDS[0], "max_tokens": 10, "temperature": 1.0, "seed": 1234,
            "return_token_ids": True}
    alone = complete(url, **body)[1]["choices"][0]["token_ids"]
    with ThreadPoolExecutor(12) as pool:
        noise = [pool.submit(complete, url, prompt=IDS[i % 5], temperature=1.0)
                 for i in range(10)]
        crowded = pool.submit(complete, url, **body)
        [f.result() for f in noise]
    assert crowded.result()[1]["choices"][0]["token_ids"] == alone
    other = complete(url, **(body | {"seed": 99}))[1]["choices"][0]["token_ids"]
    assert other != alone


BAD = [
    (b"{not json", None),
    (b"[1, 2]", None),
    (b'{"prompt": [5], "max_tokens": -3}', "max_tokens"),
    (b'{"prompt": [5], "max_tokens": "many"}', "max_tokens"),
    (b'{"prompt": [5], "temperature": -1}', "temperature"),
    (b'{"prompt": [99999]}', "prompt"),
    (b'{"prompt": []}', "prompt"),
    (b'{"prompt": {"a": 1}}', "prompt"),
    (b'{"max_tokens": 3}', "prompt"),
    (b'{"prompt": [5], "max_tokens": 100000}', "max_tokens"),
    (b'{"prompt": [5], "stream": true}', "stream"),
    (b'{"prompt": [5], "top_p": 0.5}', "top_p"),
    (b'{"prompt": [5], "n": 0}', "n"),
    (b'{"prompt": [5], "model": "other"}', "model"),
    (b'{"prompt": [5], "logprobs": true}', "logprobs"),
    (b"\xff\xfe", None),
]


@pytest.mark.parametrize("raw,param", BAD, ids=[str(i) for i in range(len(BAD))])
def test_malformed_bodies_get_openai_errors(server, raw, param):
    url, _ = server
    status, body = post(url, "/v1/completions", None, KEY, raw=raw)
    assert 400 <= status < 500, (status, body)
    assert set(body["error"]) == {"message", "type", "param", "code"}
    assert body["error"]["param"] == param and body["error"]["code"] == status


def test_bad_chat_bodies_and_unknown_routes(server):
    url, proc = server
    for body in ({"messages": "hi"}, {"messages": []}, {"messages": [{"role": "user"}]},
                 {"messages": [{"role": "user", "content": "x"}], "top_logprobs": 3}):
        status, answer = post(url, "/v1/chat/completions", body, KEY)
        assert status == 400 and "error" in answer
    status, answer = post(url, "/v1/nothing", {}, KEY)
    assert status == 404 and answer["error"]["code"] == 404
    assert "Traceback" not in server_output(proc)


def test_200_concurrent_requests_are_batched_and_counted(server):
    url, proc = server
    before = metrics(url)
    with ThreadPoolExecutor(64) as pool:
        answers = list(pool.map(
            lambda i: complete(url, prompt=IDS[i % 5], max_tokens=2 + i % 5,
                               temperature=[0.0, 0.7, 1.0][i % 3]), range(200)))
    after = metrics(url)
    assert all(status == 200 for status, _ in answers)
    usage = [body["usage"] for _, body in answers]
    delta = {name: after[name] - before[name] for name in after if name != "per_pos"}
    assert delta["vllm:request_success_total"] == 200
    assert delta["vllm:prompt_tokens_total"] == sum(u["prompt_tokens"] for u in usage)
    assert delta["vllm:generation_tokens_total"] == sum(u["completion_tokens"] for u in usage)
    assert delta["vllm:spec_decode_num_draft_tokens_total"] == \
        K * delta["vllm:spec_decode_num_drafts_total"] > 0
    per_pos = [a - b for a, b in zip(after["per_pos"], before["per_pos"])]
    assert sum(per_pos) == delta["vllm:spec_decode_num_accepted_tokens_total"]
    assert per_pos == sorted(per_pos, reverse=True)  # position j accepted implies j - 1
    assert (
        after["vllm:num_requests_running"] == 0 and after["specbatch:request_failures_total"] == 0
    )
    assert "Traceback" not in server_output(proc)


@pytest.mark.slow
def test_speculation_off_counts_no_drafts(pair):
    with served("--target", pair[1], "--speculate", "off") as (url, _):
        status, body = post(url, "/v1/completions", {"prompt": [5, 6], "max_tokens": 5})
        assert status == 200 and body["usage"]["completion_tokens"] == 5
        assert metrics(url)["vllm:spec_decode_num_drafts_total"] == 0


def wrong_shape(draft_token_ids, draft_probs, target_probs, generator=None):
    """Broken on purpose: one column too few."""
    return draft_token_ids


@pytest.mark.slow
def test_a_sampler_breaking_its_contract_gives_500_not_a_crash(pair):
    """Its requests fail with OpenAI's error body; the server keeps serving."""
    with served("--draft", pair[0], "--target", pair[1], "--sampler",
                "tests.live.test_serve:wrong_shape") as (url, proc):
        status, body = post(url, "/v1/completions", {"prompt": [5, 6], "max_tokens": 5})
        assert status == 500 and "output_token_ids of shape" in body["error"]["message"]
        status, _ = post(url, "/v1/completions", {"prompt": [5, 6], "max_tokens": 1})
        assert status == 200  # one token comes from the prefill: no sampler call
        assert "Traceback" not in server_output(proc)


def test_bad_flags_are_one_line_errors(pair, capsys):
    from specbatch.cli import main

    assert main(["live", "serve", "--target", pair[1], "--speculate", "fixed:x"]) == 2
    assert "--speculate" in capsys.readouterr().err
    assert main(["live", "serve", "--target", pair[1], "--verify", "specinfer"]) == 2
    assert "--verify" in capsys.readouterr().err
    assert main(["live", "serve", "--target", pair[1]]) == 2
    assert "--draft" in capsys.readouterr().err
