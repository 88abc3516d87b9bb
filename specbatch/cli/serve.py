"""``specbatch live serve``: the live engine behind an OpenAI-compatible HTTP server.

Argument parsing and printing only; the engine is :mod:`specbatch.live.serving`, the HTTP
face :mod:`specbatch.live.http_api`. ``specbatch live serve`` is dispatched from
:func:`specbatch.cli.main` (``live`` itself runs a measured batch).
"""

from __future__ import annotations

import argparse
import sys

from specbatch.cli.common import ArgumentParser, add_threads_flag, example, seed_int, set_threads


def serve_parser() -> ArgumentParser:
    """The parser of ``specbatch live serve``."""
    from specbatch.live.serving import DRAFT_SAMPLES

    p = ArgumentParser(
        prog="specbatch live serve",
        description="Serve a draft/target pair with the live engine behind an OpenAI-compatible "
                    "HTTP server (FastAPI + uvicorn, as vLLM and SGLang): /v1/completions, "
                    "/v1/chat/completions (logprobs, seed, temperature, max_tokens, n), "
                    "/v1/models, /health and /metrics (Prometheus text with vLLM's "
                    "spec-decode counter names). Concurrent requests join one running batch "
                    "(a background loop, up to --max-num-seqs slots). Speculation per server "
                    "(--speculate off | fixed:K), a verification rule of the rule catalogue "
                    "(--verify), or any sampler with `specbatch conform`'s engine signature "
                    "(--sampler: a built-in, a catalogued engine bug, or "
                    "package.module:callable) so a broken sampler can be served and caught by "
                    "`specbatch conform --endpoint`.",
        epilog=example(
            "specbatch zoo train --out /tmp/zoo --size tiny",
            "specbatch live serve --draft /tmp/zoo/draft --target /tmp/zoo/target --port 8000",
            "specbatch live serve --target /tmp/zoo/target --speculate off --port 8001",
            "specbatch live serve --draft /tmp/zoo/draft --target /tmp/zoo/target "
            "--sampler bug-openvino-4190 --port 8002",
            "specbatch conform --endpoint http://127.0.0.1:8000 --reference "
            "http://127.0.0.1:8001"),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--target", required=True, help="local Hugging Face model directory of Mb")
    p.add_argument("--draft", default=None,
                   help="local Hugging Face model directory of Ms (needed unless --speculate "
                        "off)")
    p.add_argument("--speculate", default="fixed:3", metavar="off|fixed:K",
                   help="speculation: off, or K draft tokens per request-step (default fixed:3)")
    p.add_argument("--verify", default="token",
                   help="chain verification rule of the rule catalogue: token (TV) or block "
                        "(BV) (default token)")
    p.add_argument("--sampler", default=None, metavar="SPEC",
                   help="serve this sampler instead of the rule's: a padded `specbatch "
                        "conform` built-in (tv-torch, vllm-standard, ...), a bug-* row of the "
                        "2026 catalogue, or package.module:callable with the padded engine "
                        "signature")
    p.add_argument("--draft-sample", choices=DRAFT_SAMPLES, default="probabilistic",
                   help="draft tokens sampled from Ms at the request's temperature "
                        "(probabilistic, default) or argmax of Ms, passed as draft_probs None "
                        "(greedy; vLLM's draft_sample_method)")
    p.add_argument("--max-num-seqs", type=int, default=16, help="running slots (default 16)")
    p.add_argument("--max-model-len", type=int, default=512,
                   help="prompt + output tokens per request (default 512)")
    p.add_argument("--seed", type=seed_int, default=0,
                   help="seed of the engine's generator (unseeded requests; default 0)")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to bind (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    p.add_argument("--api-key", default=None,
                   help="require 'Authorization: Bearer KEY' on /v1 routes (401 otherwise), "
                        "as vllm serve --api-key")
    p.add_argument("--served-model-name", default=None,
                   help="the model name in responses and /v1/models (default: the target "
                        "directory's name)")
    p.add_argument("--device", default="cpu", help="torch device (default cpu)")
    p.add_argument("--dtype", default="float32", choices=("float32", "float16", "bfloat16"),
                   help="weights dtype (default float32)")
    add_threads_flag(p)
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from specbatch.errors import require
    from specbatch.live.http_api import load_engine, serve
    from specbatch.live.serving import ServeConfig

    require(1 <= args.port <= 65535, f"--port: expected 1..65535, got {args.port}")
    cfg = ServeConfig(speculate=args.speculate, verify=args.verify, sampler=args.sampler,
                      draft_sample=args.draft_sample, max_num_seqs=args.max_num_seqs,
                      max_model_len=args.max_model_len, seed=args.seed)
    cfg.check()
    if args.sampler is not None:
        from specbatch.theory.conform.samplers import load_sampler

        found = load_sampler(args.sampler)
        require(found.interface == "padded", f"--sampler {args.sampler}: expected a sampler "
                f"with the padded signature, got the {found.interface} interface")
    set_threads(args.threads, args.device)
    engine, tok = load_engine(args.target, args.draft, cfg, args.device, args.dtype)
    name = args.served_model_name or Path(args.target).resolve().name

    def announce(url: str) -> None:
        sys.stderr.write(f"specbatch live serve: {name} on {url} (speculate {cfg.speculate}, "
                         f"sampler {cfg.sampler_spec}, draft {cfg.draft_sample})\n")
        sys.stderr.flush()

    serve(engine, tok, name, args.host, args.port, args.api_key, announce)
    return 0
