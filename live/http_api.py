"""The OpenAI-compatible HTTP face of :class:`~.serving.ServeEngine` (``specbatch live serve``).

Routes, as vLLM's ``vllm serve`` exposes them (``vllm/entrypoints/openai/api_server.py``):
``POST /v1/completions``, ``POST /v1/chat/completions``, ``GET /v1/models``, ``GET /health``
and ``GET /metrics`` (Prometheus text, vLLM's counter names). The stack is vLLM's and
SGLang's: a FastAPI app served by uvicorn (the ``serve`` extra). Requests are handed to the
engine's background batching loop and awaited; concurrent requests share its batch.

Request fields: ``prompt`` (text, or a list of token ids) / ``messages``, ``max_tokens``
(``max_completion_tokens`` for chat), ``temperature`` (default 1, OpenAI's), ``seed``, ``n``,
``logprobs`` (completions: the number of top alternatives; chat: a bool with
``top_logprobs``), ``ignore_eos`` and ``return_tokens_as_token_ids`` (vLLM's: logprob tokens
as ``token_id:N``), ``return_token_ids`` (the choice carries ``token_ids``). Streaming,
``top_p`` < 1, ``top_k`` and penalties are refused with a 400 (the engine samples the full
law at T), never silently ignored.

Every error is OpenAI's body ``{"error": {"message", "type", "param", "code"}}`` with a 4xx
code for a bad request (401 without the ``--api-key`` Bearer token on ``/v1``), 500 only for
a failed engine step (a served sampler that breaks its contract, say), never a traceback.
"""



import asyncio
import json
import uuid
from dataclasses import dataclass
from typing import Any

from specbatch.live.serving import GenRequest, ServeEngine, wall_time

#: Fields the engine cannot honour: refused when set to anything but the neutral value.
_NEUTRAL = {"stream": (False, None), "top_p": (1, 1.0, None), "top_k": (-1, 0, None),
            "presence_penalty": (0, 0.0, None), "frequency_penalty": (0, 0.0, None),
            "repetition_penalty": (1, 1.0, None), "best_of": (1, None), "echo": (False, None),
            "suffix": (None,), "stop": (None, [])}


class ApiError(Exception):
    """A request the server refuses: HTTP status, message, OpenAI type, the offending param."""

    def __init__(self, status: int, message: str, param: str | None = None,
                 kind: str = "BadRequestError") -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.kind = status, message, param, kind

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.kind, "param": self.param,
                          "code": self.status}}


@dataclass(frozen=True)
class Params:
    """A generation request, checked."""

    prompt_ids: list
    max_tokens: int
    temperature: float
    seed: int | None
    n: int
    top_logprobs: int | None  # None: no logprobs; 0: the chosen token's only
    ignore_eos: bool
    ids_as_tokens: bool
    return_token_ids: bool


def _number(body: dict, name: str, default, kind, low=None, high=None):
    value = body.get(name, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float) if kind is float else int):
        raise ApiError(400, f"{name}: expected {'a number' if kind is float else 'an integer'}"
                       f", got {json.dumps(value)[:40]}", name)
    if (low is not None and value < low) or (high is not None and value > high):
        raise ApiError(400, f"{name}: expected a value in [{low}, {high}], got {value}", name)
    return kind(value)


def _flag(body: dict, name: str) -> bool:
    value = body.get(name, False)
    if not isinstance(value, bool) and value is not None:
        raise ApiError(400, f"{name}: expected true or false, got {json.dumps(value)[:40]}",
                       name)
    return bool(value)


def _refuse_unsupported(body: dict) -> None:
    for name, neutral in _NEUTRAL.items():
        if name in body and body[name] not in neutral:
            raise ApiError(400, f"{name}: not supported by specbatch live serve (the engine "
                           f"samples the full law at the request's temperature), got "
                           f"{json.dumps(body[name])[:40]}", name)


class Api:
    """Request parsing and response building around one engine and tokenizer."""

    def __init__(self, engine: ServeEngine, model: str, tokenizer=None,
                 api_key: str | None = None) -> None:
        self.engine, self.model, self.tok, self.api_key = engine, model, tokenizer, api_key

    # ------------------------------------------------------------ parsing

    def _prompt_ids(self, prompt) -> list[int]:
        vocab = self.engine.vocab
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
            prompt = prompt[0]  # a batch of one prompt
        if isinstance(prompt, str):
            if self.tok is None:
                raise ApiError(400, "prompt: this model has no tokenizer; send token ids (a "
                               "list of integers)", "prompt")
            return list(self.tok(prompt, add_special_tokens=True)["input_ids"])
        if isinstance(prompt, list) and all(isinstance(t, int) and not isinstance(t, bool)
                                            for t in prompt):
            if any(t < 0 or t >= vocab for t in prompt):
                raise ApiError(400, f"prompt: expected token ids in [0, {vocab}), got one "
                               "outside", "prompt")
            return list(prompt)
        raise ApiError(400, "prompt: expected a string or a list of token ids (one prompt per "
                       "request)", "prompt")

    def _chat_ids(self, messages) -> list[int]:
        if not isinstance(messages, list) or not messages or not all(
                isinstance(m, dict) and isinstance(m.get("content"), str)
                and isinstance(m.get("role"), str) for m in messages):
            raise ApiError(400, "messages: expected a non-empty list of {role, content} "
                           "objects with string values", "messages")
        if self.tok is None:
            raise ApiError(400, "messages: this model has no tokenizer; use /v1/completions "
                           "with token ids", "messages")
        if getattr(self.tok, "chat_template", None):
            ids = self.tok.apply_chat_template(messages, add_generation_prompt=True,
                                               tokenize=True)
            return list(ids["input_ids"] if isinstance(ids, dict) else ids)
        text = "".join(f"{m['role']}: {m['content']}\n" for m in messages) + "assistant:"
        return list(self.tok(text, add_special_tokens=True)["input_ids"])

    def params(self, body: Any, chat: bool) -> Params:
        if not isinstance(body, dict):
            raise ApiError(400, "body: expected a JSON object", None)
        _refuse_unsupported(body)
        if chat:
            ids = self._chat_ids(body.get("messages"))
            max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
            want = _flag(body, "logprobs")
            top = _number(body, "top_logprobs", 0, int, 0, 20)
            top_logprobs = top if want else None
            if top and not want:
                raise ApiError(400, "top_logprobs: needs logprobs: true", "top_logprobs")
        else:
            if "prompt" not in body:
                raise ApiError(400, "prompt: required", "prompt")
            ids = self._prompt_ids(body["prompt"])
            max_tokens = body.get("max_tokens", 16)
            top_logprobs = _number(body, "logprobs", None, int, 0, 20)
        max_tokens = _number({"max_tokens": max_tokens}, "max_tokens", 16, int, 1, None)
        why = self.engine.check_request(len(ids), max_tokens)
        if why is not None:
            raise ApiError(400, why, "max_tokens" if ids else "prompt")
        model = body.get("model")
        if model is not None and model != self.model:
            raise ApiError(404, f"model: this server serves {self.model!r}, got {model!r}",
                           "model", "NotFoundError")
        return Params(ids, max_tokens, _number(body, "temperature", 1.0, float, 0.0, 100.0),
                      _number(body, "seed", None, int, 0, 2**63 - 1),
                      _number(body, "n", 1, int, 1, 64), top_logprobs,
                      _flag(body, "ignore_eos"), _flag(body, "return_tokens_as_token_ids"),
                      _flag(body, "return_token_ids"))

    # ------------------------------------------------------------ running

    async def generate(self, p: Params) -> list[GenRequest]:
        """Submit ``n`` requests to the engine and await them all."""
        loop = asyncio.get_running_loop()
        futures, reqs = [], []
        for i in range(p.n):
            fut = loop.create_future()

            def done(req, fut=fut):
                loop.call_soon_threadsafe(lambda: fut.done() or fut.set_result(req))

            seed = None if p.seed is None else (p.seed + i) % 2**63
            req = GenRequest(prompt_ids=p.prompt_ids, max_tokens=p.max_tokens,
                             temperature=p.temperature, seed=seed,
                             top_logprobs=p.top_logprobs or 0, ignore_eos=p.ignore_eos,
                             on_done=done)
            futures.append(fut)
            reqs.append(req)
            self.engine.submit(req)
        await asyncio.gather(*futures)
        failed = next((r.error for r in reqs if r.error is not None), None)
        if failed is not None:
            raise ApiError(500, f"engine step failed: {failed}", None, "InternalServerError")
        return reqs

    # ------------------------------------------------------------ responses

    def _piece(self, tok: int, as_ids: bool) -> str:
        if as_ids or self.tok is None:
            return f"token_id:{tok}"
        return self.tok.decode([tok])

    def _text(self, tokens: list[int]) -> str:
        if self.tok is None:
            return " ".join(map(str, tokens))
        return self.tok.decode(tokens, skip_special_tokens=True)

    def _usage(self, p: Params, reqs) -> dict:
        done = sum(len(r.tokens) for r in reqs)
        return {"prompt_tokens": len(p.prompt_ids), "completion_tokens": done,
                "total_tokens": len(p.prompt_ids) + done}

    def completion(self, p: Params, reqs) -> dict:
        choices = []
        for i, r in enumerate(reqs):
            choice = {"index": i, "text": self._text(r.tokens), "logprobs": None,
                      "finish_reason": r.finish_reason}
            if p.top_logprobs is not None:
                pieces = [self._piece(t, p.ids_as_tokens) for t in r.tokens]
                offsets = list(_offsets(pieces))
                top = [{self._piece(t, p.ids_as_tokens): lp for t, lp in row} for row in r.top]
                choice["logprobs"] = {"tokens": pieces, "token_logprobs": r.logprobs,
                                      "top_logprobs": top if p.top_logprobs else None,
                                      "text_offset": offsets}
            if p.return_token_ids:
                choice["token_ids"] = list(r.tokens)
            choices.append(choice)
        return {"id": f"cmpl-{uuid.uuid4().hex}", "object": "text_completion",
                "created": wall_time(), "model": self.model, "choices": choices,
                "usage": self._usage(p, reqs)}

    def chat(self, p: Params, reqs) -> dict:
        choices = []
        for i, r in enumerate(reqs):
            choice = {"index": i, "message": {"role": "assistant",
                                              "content": self._text(r.tokens)},
                      "logprobs": None, "finish_reason": r.finish_reason}
            if p.top_logprobs is not None:
                content = []
                for j, (t, lp) in enumerate(zip(r.tokens, r.logprobs)):
                    piece = self._piece(t, p.ids_as_tokens)
                    alts = [{"token": self._piece(a, p.ids_as_tokens), "logprob": v,
                             "bytes": list(self._piece(a, p.ids_as_tokens).encode())}
                            for a, v in (r.top[j] if r.top else [])]
                    content.append({"token": piece, "logprob": lp,
                                    "bytes": list(piece.encode()), "top_logprobs": alts})
                choice["logprobs"] = {"content": content}
            if p.return_token_ids:
                choice["token_ids"] = list(r.tokens)
            choices.append(choice)
        return {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion",
                "created": wall_time(), "model": self.model, "choices": choices,
                "usage": self._usage(p, reqs)}

    def models(self) -> dict:
        return {"object": "list", "data": [{"id": self.model, "object": "model",
                                            "created": wall_time(), "owned_by": "specbatch",
                                            "max_model_len": self.engine.cfg.max_model_len}]}

    def metrics(self) -> str:
        """Prometheus text exposition (format 0.0.4) with vLLM's names."""
        c = self.engine.counters.snapshot()
        running, waiting = self.engine.load()
        label = f'model_name="{self.model}"'
        lines = []

        def metric(name, kind, help_text, samples):
            lines.extend([f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"])
            for labels, value in samples:
                lines.append(f"{name}{{{labels}}} {value}")

        metric("vllm:num_requests_running", "gauge", "Requests in the running batch.",
               [(label, running)])
        metric("vllm:num_requests_waiting", "gauge", "Requests waiting for a slot.",
               [(label, waiting)])
        reasons = sorted(set(c["finished"]) | {"length", "stop"})
        metric("vllm:request_success_total", "counter", "Finished requests by reason.",
               [(f'{label},finished_reason="{r}"', c["finished"].get(r, 0)) for r in reasons])
        metric("vllm:prompt_tokens_total", "counter", "Prefilled prompt tokens.",
               [(label, c["prompt_tokens"])])
        metric("vllm:generation_tokens_total", "counter", "Generated tokens.",
               [(label, c["generation_tokens"])])
        metric("specbatch:request_failures_total", "counter",
               "Requests failed by an engine step.", [(label, c["failed"])])
        metric("vllm:spec_decode_num_drafts_total", "counter",
               "Request-steps with drafts.", [(label, c["drafts"])])
        metric("vllm:spec_decode_num_draft_tokens_total", "counter", "Draft tokens.",
               [(label, c["draft_tokens"])])
        metric("vllm:spec_decode_num_accepted_tokens_total", "counter", "Accepted tokens.",
               [(label, c["accepted"])])
        metric("vllm:spec_decode_num_accepted_tokens_per_pos_total", "counter",
               "Accepted tokens by draft position.",
               [(f'{label},position="{j}"', v) for j, v in enumerate(c["per_pos"])])
        return "\n".join(lines) + "\n"


def _offsets(pieces):
    at = 0
    for piece in pieces:
        yield at
        at += len(piece)


def make_app(api: Api):
    """The FastAPI app of ``api`` (module docstring)."""
    from fastapi import FastAPI, Request
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse, PlainTextResponse, Response
    from starlette.exceptions import HTTPException

    app = FastAPI(title="specbatch live serve", docs_url=None, redoc_url=None,
                  openapi_url=None)

    def error(exc: ApiError) -> JSONResponse:
        return JSONResponse(exc.body(), status_code=exc.status)

    @app.exception_handler(ApiError)
    async def _api_error(request, exc: ApiError):
        return error(exc)

    @app.exception_handler(HTTPException)
    async def _http_error(request, exc: HTTPException):
        kind = "NotFoundError" if exc.status_code == 404 else "BadRequestError"
        return error(ApiError(exc.status_code, str(exc.detail), None, kind))

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request, exc):
        return error(ApiError(400, "body: malformed request", None))

    @app.exception_handler(Exception)
    async def _internal(request, exc: Exception):
        return error(ApiError(500, f"internal error: {type(exc).__name__}", None,
                              "InternalServerError"))

    @app.middleware("http")
    async def _auth(request: Request, call_next):
        if api.api_key and request.url.path.startswith("/v1"):
            if request.headers.get("authorization") != f"Bearer {api.api_key}":
                return error(ApiError(401, "Unauthorized: expected the header Authorization: "
                                      "Bearer <--api-key>", None, "AuthenticationError"))
        return await call_next(request)

    async def body_of(request: Request):
        try:
            return json.loads(await request.body())
        except (ValueError, UnicodeDecodeError):
            raise ApiError(400, "body: expected a JSON object, got malformed JSON") from None

    @app.get("/health")
    async def _health():
        return Response(status_code=200)

    @app.get("/v1/models")
    async def _models():
        return api.models()

    @app.get("/metrics")
    async def _metrics():
        return PlainTextResponse(api.metrics(), media_type="text/plain; version=0.0.4")

    async def answer(request: Request, chat: bool) -> dict:
        """A generation route; an unexpected failure is a 500 body, logged without a
        traceback (Starlette's own 500 handler would print one)."""
        try:
            p = api.params(await body_of(request), chat=chat)
            reqs = await api.generate(p)
            return api.chat(p, reqs) if chat else api.completion(p, reqs)
        except ApiError:
            raise
        except Exception as exc:  # noqa: BLE001 - never a traceback to the client or log
            raise ApiError(500, f"internal error: {type(exc).__name__}: {exc}", None,
                           "InternalServerError") from None

    @app.post("/v1/completions")
    async def _completions(request: Request):
        return await answer(request, chat=False)

    @app.post("/v1/chat/completions")
    async def _chat(request: Request):
        return await answer(request, chat=True)

    return app


def load_engine(target: str, draft: str | None, cfg, device: str = "cpu",
                dtype: str = "float32"):
    """(engine, tokenizer) from local Hugging Face model directories."""
    from specbatch.errors import require
    from specbatch.traces.capture.chain import load_pair, load_target

    if cfg.k:
        require(draft is not None, f"--draft: expected a draft model directory for --speculate "
                f"{cfg.speculate}, got none")
        tok, draft_model, target_model = load_pair(draft, target, device, dtype)
    else:
        (tok, target_model), draft_model = load_target(target, device, dtype), None
    eos = getattr(tok, "eos_token_id", None) if tok is not None else None
    return ServeEngine(draft_model, target_model, cfg, eos), tok


def serve(engine: ServeEngine, tokenizer, model: str, host: str, port: int,
          api_key: str | None = None, announce=None) -> None:
    """Run the engine loop and the HTTP server until interrupted (uvicorn handles SIGINT and
    SIGTERM); ``announce(url)`` is called once the socket listens."""
    from specbatch.errors import SpecbatchError

    try:
        import uvicorn
    except ImportError:
        raise SpecbatchError("live serve: needs FastAPI and uvicorn (pip install "
                             "'specbatch[serve]')") from None
    app = make_app(Api(engine, model, tokenizer, api_key))
    config = uvicorn.Config(app, host=host, port=port, log_level="warning",
                            access_log=False, lifespan="off")
    server = uvicorn.Server(config)
    engine.start()

    async def run() -> None:
        config.load()
        server.lifespan = config.lifespan_class(config)
        try:
            await server.startup()
        except SystemExit:  # uvicorn exits when the socket cannot be bound
            server.should_exit = True
        if server.should_exit:
            raise SpecbatchError(f"--port {port}: cannot listen on {host}:{port} (in use?)")
        if announce is not None:
            announce(f"http://{host}:{port}")
        await server.main_loop()
        await server.shutdown()

    try:
        with server.capture_signals():
            asyncio.run(run())
    finally:
        engine.stop()
