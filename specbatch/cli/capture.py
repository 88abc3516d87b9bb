"""``specbatch capture``: record a trace from a live draft/target pair (see
:mod:`traces.capture.chain`)."""

from __future__ import annotations

import shlex
import sys

from specbatch.cli.common import (
    JSON_FLAG,
    NGRAM_FLAGS,
    PROMPTS_HELP,
    THREADS_FLAG,
    add_command,
    capped_int,
    device_arg,
    emit,
    nonneg_float,
    positive_int,
    seed_int,
    set_threads,
)
from specbatch.cli.flags import flag
from specbatch.limits import MAX_BATCH, MAX_DEPTH, MAX_NEW_TOKENS
from specbatch.traces.capture.prompts import resolve_prompts

#: capture's flags in --help order.
CAPTURE_FLAGS = (
    flag("--draft", required=True,
         help="local HF model directory of the draft Ms, or 'ngram': prompt-lookup "
              "drafts as vLLM's ngram method (no draft model; one-hot draft rows; a "
              "directory named ngram must be written ./ngram)"),
    *NGRAM_FLAGS,
    flag("--target", required=True, help="local HF model directory of the target Mb"),
    flag("--prompts", required=True,
         help=PROMPTS_HELP + " (random:N:LEN token ids are live-only: a capture "
              "records what the models think of real text)"),
    flag("--out", required=True,
         help="trace directory to write (new or empty; non-empty only with --resume)"),
    flag("--max-new-tokens", type=capped_int(MAX_NEW_TOKENS), default=128,
         help="reference output length cap"),
    flag("--depth", type=capped_int(MAX_DEPTH), default=8,
         help="K, drafted tokens per position"),
    flag("--temperature", type=nonneg_float, default=1.0,
         help="sampling temperature T (0: greedy; default: 1, while live defaults to 0)"),
    flag("--device", type=device_arg, default="cpu", help="cpu, cuda or cuda:N"),
    flag("--dtype", default="float32", choices=["float32", "float16", "bfloat16"]),
    flag("--batch-size", type=capped_int(MAX_BATCH), default=32,
         help="positions per batched draft/target pass (does not change the content)"),
    flag("--seed", type=seed_int, default=0),
    flag("--resume", action="store_true", help="finish an interrupted capture in --out"),
    flag("--limit", type=positive_int, default=None, help="use only the first N prompts"),
    flag("--max-prompt-tokens", type=positive_int, default=512,
         help="longer prompts keep their last N tokens"),
    flag("--no-stop-at-eos", action="store_true",
         help="always generate --max-new-tokens (default: stop after the target's EOS)"),
    flag("--chunk-requests", type=positive_int, default=8, help="requests per positions file"),
    flag("--store-dtype", default="float64", choices=["float64", "float32"],
         help="on-disk precision of the float columns (float32: half the size)"),
    flag("--draft-sample", choices=["probabilistic", "greedy"], default="probabilistic",
         help="how a draft model proposes: sample at T (probabilistic, default) or its "
              "argmax chain, recorded as one-hot drafts (greedy: vLLM's default "
              "draft_sample_method); recorded in meta.json"),
    flag("--tree", metavar="SHAPE", default=None,
         help="draft a static tree per position instead of a chain: children per depth "
              "like 2,2,1, or K i.i.d. paths of L tokens merged into a trie like 3x3 "
              "(the tree's depth replaces --depth); writes a version 2 trace with "
              "nodes-*.parquet (traces/FORMAT.md, docs/trees.md)"),
    flag("--sampling", choices=["topk", "iid"], default=None,
         help="with --tree 2,2,1: children are the draft's most probable tokens (topk, "
              "EAGLE's static trees; the default) or drawn i.i.d. from it (iid, "
              "SpecInfer); a KxL trie is always iid (its default)"),
    THREADS_FLAG,
    flag("--chat-template", action="store_true",
         help="wrap each prompt as a user turn of the target tokenizer's chat template "
              "(instruction-tuned targets); recorded in meta.json"),
    flag("--no-progress", action="store_true", help="no progress bar"),
    JSON_FLAG,
)



def register(subparsers) -> None:
    add_command(
        subparsers, "capture", help="capture a trace from a local draft/target model pair",
        description="For each prompt: sample the target's reference output y; at every output "
                    "position t draft K tokens from prompt + y_<t and score them with the "
                    "target; record q, pt, Z and the draft's confidence signals (THEORY.md §3) "
                    "into a trace directory. Models load only from local directories.",
        examples=(
            "specbatch zoo train --out /tmp/zoo --size tiny",
            "specbatch capture --draft /tmp/zoo/draft --target /tmp/zoo/target "
            "--prompts default:8 --out /tmp/trace --max-new-tokens 32 --depth 4",
            "specbatch capture --draft ngram --ngram-min 2 --ngram-max 4 --target /tmp/zoo/target "
            "--prompts default:8 --out /tmp/trace-ngram    # prompt-lookup drafts, no draft model",
            "specbatch capture ... --resume    # after an interruption: finish the same trace"),
        flags=CAPTURE_FLAGS, run=_capture)


def _sampling(tree: str | None, sampling: str | None) -> str:
    """``--sampling`` or its default: ``iid`` for a ``KxL`` trie, ``topk`` otherwise."""
    if sampling is not None:
        return sampling
    return "iid" if tree is not None and "x" in tree.lower() else "topk"


def _capture(args) -> int:
    from specbatch.traces.capture.chain import CaptureConfig, capture

    set_threads(args.threads, args.device)
    from transformers.utils import logging as hf_logging
    hf_logging.disable_progress_bar()
    prompts, source = resolve_prompts(args.prompts, args.limit)
    cfg = CaptureConfig(max_new_tokens=args.max_new_tokens, depth=args.depth,
                        temperature=args.temperature, seed=args.seed, batch_size=args.batch_size,
                        max_prompt_tokens=args.max_prompt_tokens,
                        stop_at_eos=not args.no_stop_at_eos, chunk_requests=args.chunk_requests,
                        store_dtype=args.store_dtype,
                        chat_template=args.chat_template, ngram_min=args.ngram_min,
                        ngram_max=args.ngram_max, draft_sample_method=args.draft_sample,
                        tree=args.tree, tree_sampling=_sampling(args.tree, args.sampling))
    command = "specbatch " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    meta = capture(args.draft, args.target, prompts, args.out, cfg, device=args.device,
                   dtype=args.dtype, resume=args.resume, progress=not args.no_progress,
                   prompt_source=source, command=command)
    comp = meta["completion"]
    rows = sum(r["output_len"] for r in comp["request_rows"].values())
    result = {"out": args.out, "requests": comp["done"], "positions": rows,
              "depth": meta["depth"], "temperature": args.temperature, "status": comp["status"]}
    if meta.get("tree"):
        result["tree"] = meta["tree"]
    emit(result, args.json)
    return 0
