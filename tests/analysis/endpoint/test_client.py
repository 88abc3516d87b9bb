"""analysis/endpoint/client.py: acceptance from Prometheus text (THEORY.md §9's worked
numbers), and a client with timeouts, retries and a budget, against a scripted local server."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from specbatch.analysis.endpoint.client import (
    Budget,
    BudgetSpent,
    Endpoint,
    acceptance,
    completion_tokens,
    parse_prometheus,
    spec_counters,
)
from specbatch.errors import SpecbatchError


def exposition(d, t, c, extra_label="") -> str:
    lines = ["# HELP vllm:spec_decode_num_drafts_total drafts",
             "# TYPE vllm:spec_decode_num_drafts_total counter",
             f'vllm:spec_decode_num_drafts_total{{model_name="m"{extra_label}}} {d}',
             f'vllm:spec_decode_num_draft_tokens_total{{model_name="m"}} {t}',
             f'vllm:spec_decode_num_accepted_tokens_total{{model_name="m"}} {sum(c)}']
    lines += [f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{model_name="m",'
              f'position="{j}"}} {v}' for j, v in enumerate(c)]
    return "\n".join(lines) + "\n"


def test_the_worked_example_of_theory_section_9():
    """D = 1000, T = 3000, c = (800, 560, 392): a = (0.8, 0.7, 0.7), A = 1752, MAL 2.752,
    acceptance rate 0.584 (two scrapes: the window is their difference)."""
    before = spec_counters(exposition(500, 1500, [100, 40, 8]))
    after = spec_counters(exposition(1500, 4500, [900, 600, 400]))
    acc = acceptance(before, after)
    assert acc["drafts"] == 1000 and acc["draft_tokens"] == 3000 and acc["accepted"] == 1752
    assert acc["mal"] == pytest.approx(2.752)
    assert acc["acceptance_rate"] == pytest.approx(0.584)
    assert acc["conditional"] == pytest.approx([0.8, 0.7, 0.7])
    assert acc["p_tau_at_least"] == pytest.approx([0.8, 0.56, 0.392])


def test_prometheus_parsing_sums_label_sets_and_skips_comments():
    text = exposition(3, 9, [2, 1]) + 'vllm:spec_decode_num_drafts_total{model_name="b"} 4\n'
    parsed = parse_prometheus(text)
    assert sorted(v for _, v in parsed["vllm:spec_decode_num_drafts_total"]) == [3, 4]
    assert spec_counters(text)["drafts"] == 7
    assert spec_counters("# nothing here\nfoo 1\n") is None
    assert acceptance(None, spec_counters(text)) is None


def test_tokens_from_a_choice():
    assert completion_tokens({"token_ids": [3, 4]}) == [3, 4]
    assert completion_tokens({"logprobs": {"tokens": ["token_id:7", "token_id:1"]}}) == [7, 1]
    assert completion_tokens({"logprobs": {"tokens": ["a", "b"]}}) == ["a", "b"]
    with pytest.raises(SpecbatchError, match="token_ids or logprobs"):
        completion_tokens({"text": "x"})


class Scripted(BaseHTTPRequestHandler):
    """Answers POSTs from a script of (status, body) pairs, then 200 with a completion."""

    script: list = []
    seen: list = []

    def do_POST(self):  # noqa: N802 - http.server's name
        self.seen.append(json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                         | {"auth": self.headers.get("Authorization")})
        status, body = self.script.pop(0) if self.script else (
            200, {"choices": [{"token_ids": [1, 2]}]})
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):  # noqa: N802
        data = json.dumps({"data": [{"id": "m"}]}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture
def scripted():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Scripted)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    Scripted.script, Scripted.seen = [], []
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_transient_failures_are_retried_and_counted(scripted):
    Scripted.script = [(503, {"error": {"message": "busy"}}), (429, {})]
    budget = Budget(10)
    ep = Endpoint(scripted, retries=3, budget=budget, api_key="sk-1")
    assert ep.complete([5, 6], 2, 1.0) == [1, 2]
    assert budget.spent == 3  # every try counts
    sent = Scripted.seen[-1]
    assert sent["model"] == "m" and sent["max_tokens"] == 2 and sent["ignore_eos"] is True
    assert sent["auth"] == "Bearer sk-1" and sent["prompt"] == [5, 6]


def test_a_refused_request_is_one_line_with_the_servers_message(scripted):
    Scripted.script = [(400, {"error": {"message": "top_p: not supported"}})]
    with pytest.raises(SpecbatchError, match="HTTP 400: top_p: not supported"):
        Endpoint(scripted).complete([5], 2, 1.0)


def test_retries_run_out_and_the_budget_stops_the_run(scripted):
    Scripted.script = [(500, {})] * 2
    with pytest.raises(SpecbatchError, match="no answer after 2 tries"):
        Endpoint(scripted, retries=1).complete([5], 2, 1.0)
    budget = Budget(1)
    ep = Endpoint(scripted, budget=budget)
    ep.complete([5], 2, 1.0)
    with pytest.raises(BudgetSpent, match="budget is spent after 1"):
        ep.complete([5], 2, 1.0)


def test_no_server_is_a_one_line_error_after_the_retries():
    from tests.live.helpers import free_port

    ep = Endpoint(f"http://127.0.0.1:{free_port()}", retries=1, timeout=2)
    with pytest.raises(SpecbatchError, match="no answer after 2 tries"):
        ep.call("/v1/completions", {})
    with pytest.raises(SpecbatchError, match="expected http://HOST:PORT"):
        Endpoint("localhost:8000")
