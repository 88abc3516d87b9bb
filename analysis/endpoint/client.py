"""An OpenAI-compatible endpoint as ``specbatch conform --endpoint`` talks to it, and its
acceptance read from ``/metrics``.

:class:`Endpoint` sends ``/v1/completions`` requests over HTTP (the standard library's
``urllib``: no dependency) with a timeout, retries with exponential backoff on connection
errors, timeouts, 429 and 5xx answers, and a shared :class:`Budget` of requests (every try
counts). Any other 4xx is bad input: a one-line :class:`SpecbatchError` carrying the server's
own message (a parameter the server refuses, a wrong API key).

:func:`acceptance` parses Prometheus text for vLLM's four speculative-decoding counters
(``vllm:spec_decode_num_drafts_total`` D, ``..._num_draft_tokens_total`` T,
``..._num_accepted_tokens_total`` A, ``..._num_accepted_tokens_per_pos_total{position=j}``
c_j; vLLM, SGLang's vLLM-compatible exporter and ``specbatch live serve`` use these names),
summed over label sets, and gives THEORY.md §9's numbers from the difference of two scrapes:
MAL = 1 + A/D, acceptance rate A/T, P(τ ≥ j+1) = c_j/D and a_j = c_j/c_{j−1}.
"""

from __future__ import annotations

import json
import re
import threading
import time
import urllib.error
import urllib.request

from specbatch.errors import SpecbatchError

#: vLLM's spec-decode counter names.
DRAFTS = "vllm:spec_decode_num_drafts_total"
DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens_total"
ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"
PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos_total"

_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([^}]*)\})?\s+(\S+)')
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


class BudgetSpent(SpecbatchError):
    """The request budget ran out (the draws so far are kept; a rerun resumes)."""


class Budget:
    """A thread-safe count of requests left."""

    def __init__(self, requests: int) -> None:
        self.left, self.spent = int(requests), 0
        self.lock = threading.Lock()

    def take(self) -> None:
        with self.lock:
            if self.left <= 0:
                raise BudgetSpent(f"--budget: the request budget is spent after {self.spent} "
                                  "requests")
            self.left -= 1
            self.spent += 1


class Endpoint:
    """One server's base URL (``http://host:port``, no ``/v1``), API key and client settings."""

    def __init__(self, url: str, api_key: str | None = None, timeout: float = 60.0,
                 retries: int = 3, budget: Budget | None = None, flag: str = "--endpoint"):
        if not re.match(r"^https?://[^/\s]+", url or ""):
            raise SpecbatchError(f"{flag}: expected http://HOST:PORT, got {url!r}")
        self.url = url.rstrip("/")
        self.api_key, self.timeout, self.retries = api_key, float(timeout), int(retries)
        self.budget = budget or Budget(10**12)
        self.flag = flag
        self.model: str | None = None

    def _open(self, path: str, body: dict | None):
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, headers=headers,
                                     method="GET" if body is None else "POST")
        return urllib.request.urlopen(req, timeout=self.timeout)

    def call(self, path: str, body: dict | None = None, budgeted: bool = True) -> bytes:
        """The answer's bytes; retries on transient failures (module docstring)."""
        last = ""
        for attempt in range(self.retries + 1):
            if budgeted:
                self.budget.take()
            try:
                with self._open(path, body) as answer:
                    return answer.read()
            except urllib.error.HTTPError as exc:
                text = exc.read()[:2000].decode(errors="replace")
                if exc.code != 429 and exc.code < 500:
                    raise SpecbatchError(f"{self.flag} {self.url}{path}: HTTP {exc.code}: "
                                         f"{_message(text)}") from None
                last = f"HTTP {exc.code}: {_message(text)}"
            except (urllib.error.URLError, TimeoutError, ConnectionError, OSError) as exc:
                last = f"{type(exc).__name__}: {getattr(exc, 'reason', exc)}"
            if attempt < self.retries:
                time.sleep(min(0.2 * 2**attempt, 5.0))
        raise SpecbatchError(f"{self.flag} {self.url}{path}: no answer after "
                             f"{self.retries + 1} tries ({last})")

    def models(self) -> list[str]:
        data = _json(self.call("/v1/models", budgeted=False), self.flag)
        return [m.get("id") for m in data.get("data", []) if isinstance(m, dict)]

    def resolve_model(self) -> str:
        """The served model's name (the first of ``/v1/models``)."""
        if self.model is None:
            names = self.models()
            if not names:
                raise SpecbatchError(f"{self.flag} {self.url}: /v1/models lists no model")
            self.model = names[0]
        return self.model

    def complete(self, prompt, max_tokens: int, temperature: float,
                 seed: int | None = None) -> list:
        """The first ``max_tokens`` tokens of one completion: token ids when the server
        returns them (``token_ids``, or ``token_id:N`` logprob tokens), else token strings."""
        body = {"model": self.resolve_model(), "prompt": prompt, "max_tokens": max_tokens,
                "temperature": temperature, "logprobs": 0, "ignore_eos": True,
                "return_tokens_as_token_ids": True, "return_token_ids": True}
        if seed is not None:
            body["seed"] = seed
        data = _json(self.call("/v1/completions", body), self.flag)
        try:
            choice = data["choices"][0]
        except (KeyError, IndexError, TypeError):
            raise SpecbatchError(f"{self.flag} {self.url}: expected an OpenAI completion with "
                                 f"choices, got {str(data)[:120]}") from None
        return completion_tokens(choice)

    def metrics(self) -> str | None:
        """The ``/metrics`` text, or None when the server has none."""
        try:
            return self.call("/metrics", budgeted=False).decode(errors="replace")
        except SpecbatchError:
            return None


def completion_tokens(choice: dict) -> list:
    """Token ids of a completion choice, else its logprob token strings."""
    ids = choice.get("token_ids")
    if isinstance(ids, list) and all(isinstance(t, int) for t in ids):
        return list(ids)
    tokens = (choice.get("logprobs") or {}).get("tokens")
    if isinstance(tokens, list):
        if all(isinstance(t, str) and t.startswith("token_id:") for t in tokens):
            return [int(t.split(":", 1)[1]) for t in tokens]
        return list(tokens)
    raise SpecbatchError("endpoint: expected token_ids or logprobs tokens in the completion "
                         "(send logprobs; vLLM: return_tokens_as_token_ids)")


def _message(text: str) -> str:
    try:
        return str(json.loads(text)["error"]["message"])[:300]
    except (ValueError, KeyError, TypeError):
        return " ".join(text.split())[:300]


def _json(raw: bytes, flag: str) -> dict:
    try:
        data = json.loads(raw)
    except ValueError:
        raise SpecbatchError(f"{flag}: expected a JSON answer, got {raw[:80]!r}") from None
    if not isinstance(data, dict):
        raise SpecbatchError(f"{flag}: expected a JSON object, got {str(data)[:80]}")
    return data


def parse_prometheus(text: str) -> dict[str, list[tuple[dict, float]]]:
    """``{metric name: [(labels, value), ...]}`` of a Prometheus text exposition."""
    out: dict[str, list[tuple[dict, float]]] = {}
    for line in text.splitlines():
        match = _SAMPLE.match(line.strip())
        if not match or line.startswith("#"):
            continue
        try:
            value = float(match.group(4))
        except ValueError:
            continue
        labels = dict(_LABEL.findall(match.group(3) or ""))
        out.setdefault(match.group(1), []).append((labels, value))
    return out


def spec_counters(text: str | None) -> dict | None:
    """D, T, A and c_j (summed over label sets other than ``position``), or None when the
    text has no ``vllm:spec_decode_num_drafts_total``."""
    if text is None:
        return None
    parsed = parse_prometheus(text)
    if DRAFTS not in parsed:
        return None

    def total(name: str) -> float:
        return sum(v for _, v in parsed.get(name, []))

    per_pos: dict[int, float] = {}
    for labels, value in parsed.get(PER_POS, []):
        if labels.get("position", "").isdigit():
            j = int(labels["position"])
            per_pos[j] = per_pos.get(j, 0.0) + value
    return {"drafts": total(DRAFTS), "draft_tokens": total(DRAFT_TOKENS),
            "accepted": total(ACCEPTED),
            "per_pos": [per_pos.get(j, 0.0) for j in range(max(per_pos, default=-1) + 1)]}


def acceptance(before: dict | None, after: dict | None) -> dict | None:
    """THEORY.md §9's numbers over the window between two scrapes (None without counters or
    without drafts in the window)."""
    if before is None or after is None:
        return None
    d = after["drafts"] - before["drafts"]
    t = after["draft_tokens"] - before["draft_tokens"]
    a = after["accepted"] - before["accepted"]
    width = max(len(after["per_pos"]), len(before["per_pos"]))
    c = [after["per_pos"][j] - (before["per_pos"][j] if j < len(before["per_pos"]) else 0.0)
         for j in range(len(after["per_pos"]))][:width]
    if d <= 0:
        return {"drafts": d, "draft_tokens": t, "accepted": a, "per_pos": c, "mal": None,
                "acceptance_rate": None, "p_tau_at_least": [], "conditional": []}
    conditional, prev = [], d
    for cj in c:
        conditional.append(cj / prev if prev > 0 else None)
        prev = cj
    return {"drafts": d, "draft_tokens": t, "accepted": a, "per_pos": c,
            "mal": 1.0 + a / d, "acceptance_rate": a / t if t > 0 else None,
            "p_tau_at_least": [cj / d for cj in c], "conditional": conditional}
