"""SmolLM2-135M on a GPU (issue 16 §3): the target from its GGUF, layer-subset drafts, a
distilled draft, and their acceptance against the target.

Sub-commands (each prints one JSON object; the device script benchmarks/gpu/run_h200.sh
`smollm2` step chains them):

    convert --gguf F --meta DIR --out DIR      GGUF (Q4_1/Q8_0/F32) -> Hugging Face float32 dir
    meta --gguf F --out DIR                    config.json + tokenizer files (run here: needs
                                               transformers' GGUF tokenizer conversion)
    subset --target DIR --drop N --out DIR     the target with N middle layers dropped
    distill --target DIR --layers L[,L] --seconds S --out DIR [--tensors PREFIX]
                                               an L-layer draft initialised from target layers,
                                               its layers + final norm trained on KL(target ||
                                               draft) at T = 1, the target's (tied) embedding /
                                               LM head frozen
    accept --target DIR --draft NAME=DIR ...   mean Σ_x min(p_draft, p_target) at T = 1 on
                                               held-out stdlib text, KL, cross-entropy, a latency
                                               probe and a speed-up estimate per draft
    rebuild --target DIR --tensors F... --out DIR
                                               a distilled draft from the target + its tensors

The GGUF conversion does not use transformers' GGUF loader: tensors are dequantised with the
``gguf`` package (``gguf.quants.dequantize``) and llama.cpp's Q/K row permutation is undone
(the same arithmetic transformers applies), so the device's transformers version does not
matter; the result was checked equal to transformers 5.23's own GGUF load on the CPU.

Text: training uses the stdlib ``train`` split (traces.capture.prompts) plus, optionally, the Python
sources under site-packages (``--site-chars``); evaluation uses the stdlib ``heldout`` split,
the same files the ``default:N`` capture prompts are cut from.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import sysconfig
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))  # the sibling smollm2_models module

from smollm2_models import (  # noqa: E402
    META_FILES,
    gguf_state_dict,
    init_layers,
    keep_layers,
    load_model,
    middle_drop,
    save_dir,
)

EOS = "<|endoftext|>"


def log(msg: str) -> None:
    print(f"[smollm2 {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def pick_device(name: str | None) -> torch.device:
    return torch.device(name or ("cuda" if torch.cuda.is_available() else "cpu"))


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


# ----------------------------------------------------------------------------- GGUF -> HF


def cmd_meta(args) -> dict:
    """config.json + tokenizer files via transformers' GGUF support (here, on the CPU)."""
    from transformers import AutoConfig, AutoTokenizer

    gguf_path = Path(args.gguf)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    tok = AutoTokenizer.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name)
    tok.save_pretrained(out)
    config = AutoConfig.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.architectures = ["LlamaForCausalLM"]
    config.dtype = "float32"
    config.save_pretrained(out)
    return {"out": str(out), "files": sorted(p.name for p in out.iterdir()), "vocab": len(tok)}


def cmd_convert(args) -> dict:
    from transformers import AutoConfig, LlamaForCausalLM

    t0 = time.perf_counter()
    meta, out = Path(args.meta), Path(args.out)
    config = AutoConfig.from_pretrained(meta)
    state = gguf_state_dict(args.gguf, config.num_attention_heads, config.num_key_value_heads)
    with torch.device("meta"):
        model = LlamaForCausalLM(config)
    model.load_state_dict(state, strict=False, assign=True)
    model.tie_weights()
    missing = [k for k, v in model.state_dict().items() if v.is_meta]
    if missing:
        raise SystemExit(f"convert: tensors missing from the GGUF: {missing[:5]}")
    model.save_pretrained(out)
    for name in META_FILES:
        if (meta / name).is_file() and name not in ("config.json",):
            shutil.copy(meta / name, out / name)
    n = sum(p.numel() for p in model.parameters())
    return {"out": str(out), "params": n, "layers": config.num_hidden_layers,
            "seconds": round(time.perf_counter() - t0, 1)}


# ----------------------------------------------------------------------------- drafts
def cmd_subset(args) -> dict:
    model = load_model(args.target, "cpu")
    n = model.config.num_hidden_layers
    keep = middle_drop(n, args.drop)
    keep_layers(model, keep)
    save_dir(model, args.target, args.out)
    return {"out": args.out, "layers": len(keep), "dropped": sorted(set(range(n)) - set(keep))}


def token_stream(tokenizer, docs: list[str]) -> np.ndarray:
    ids = tokenizer(docs, add_special_tokens=False)["input_ids"]
    eos = tokenizer.convert_tokens_to_ids(EOS)
    out = []
    for seq in ids:
        out.extend(seq)
        out.append(eos)
    return np.asarray(out, dtype=np.int64)


def site_documents(max_chars: int) -> list[str]:
    """Python sources under site-packages (sorted, every file until ``max_chars``; files of
    50 kB or less), as extra distillation text disjoint from the stdlib held-out files."""
    if max_chars <= 0:
        return []
    root = Path(sysconfig.get_paths()["purelib"])
    files = sorted(p for p in root.rglob("*.py") if "test" not in p.as_posix().lower())
    # spread over packages: a deterministic stride through the sorted list
    step = max(1, len(files) // 20000)
    docs, total = [], 0
    for p in files[::step]:
        try:
            if p.stat().st_size > 50_000:
                continue
            text = p.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        if len(text) < 200:
            continue
        docs.append(text)
        total += len(text)
        if total >= max_chars:
            break
    return docs


def kl_rows(target_logits, draft_logits) -> torch.Tensor:
    """KL(p_target || p_draft) per position, float32 (T = 1)."""
    lt = torch.log_softmax(target_logits.float(), dim=-1)
    ld = torch.log_softmax(draft_logits.float(), dim=-1)
    return (lt.exp() * (lt - ld)).sum(-1)


def trained_tensors(draft) -> dict[str, torch.Tensor]:
    """The distilled draft's own tensors: decoder layers + final norm (bf16)."""
    return {k: v.detach().to(torch.bfloat16).cpu().contiguous()
            for k, v in draft.state_dict().items()
            if k.startswith("model.layers.") or k == "model.norm.weight"}


def save_tensors(tensors: dict, prefix: str, max_bytes: int = 15 * 2**20) -> list[str]:
    """safetensors files of at most ``max_bytes`` each (the device returns 16 MiB files)."""
    from safetensors.torch import save_file

    Path(prefix).parent.mkdir(parents=True, exist_ok=True)
    parts, cur, size = [], {}, 0
    for k, v in tensors.items():
        nb = v.numel() * v.element_size()
        if cur and size + nb > max_bytes:
            parts.append(cur)
            cur, size = {}, 0
        cur[k] = v
        size += nb
    parts.append(cur)
    names = []
    for i, part in enumerate(parts):
        name = f"{prefix}.safetensors" if len(parts) == 1 else f"{prefix}-{i}.safetensors"
        save_file(part, name)
        names.append(name)
    return names


def distill_text(tok, site_chars: int) -> tuple[torch.Tensor, int, int]:
    """Training tokens: the stdlib ``train`` split plus optional site-packages sources."""
    from specbatch.traces.corpus import stdlib_documents

    docs = stdlib_documents("code", "train") + stdlib_documents("prose", "train")
    site = site_documents(site_chars)
    return torch.from_numpy(token_stream(tok, docs + site)), len(docs), len(site)


def make_drafts(args, target_path: str, n_layers: int, device) -> list[dict]:
    """One trainable draft per ``--layers`` entry: its layers + final norm, own optimizer."""
    drafts = []
    for layers in args.layers:
        init = init_layers(n_layers, layers, args.init)
        draft = keep_layers(load_model(target_path, "cpu"), init).to(device).train()
        for name, p in draft.named_parameters():
            p.requires_grad_(name.startswith("model.layers.") or name == "model.norm.weight")
        params = [p for p in draft.parameters() if p.requires_grad]
        opt = torch.optim.AdamW(params, lr=args.lr, betas=(0.9, 0.95), weight_decay=0.0)
        drafts.append({"layers": layers, "init": init, "model": draft, "params": params,
                       "opt": opt, "hist": []})
    return drafts


def draft_step(d: dict, x, t_logits, lr: float, amp: bool, device) -> float:
    """One KL(target || draft) step of one draft on the shared batch; returns the loss."""
    for g in d["opt"].param_groups:
        g["lr"] = lr
    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=amp):
        d_logits = d["model"](input_ids=x).logits
    loss = kl_rows(t_logits, d_logits).mean()
    d["opt"].zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(d["params"], 1.0)
    d["opt"].step()
    return float(loss.detach())


def distill_loop(args, target, drafts: list[dict], stream, device, amp: bool) -> int:
    """Train every draft on the same batches until ``--seconds`` (cosine schedule with
    warm-up); one target forward per step feeds all drafts. Returns the step count."""
    gen = torch.Generator().manual_seed(args.seed)
    seq, bs = args.seq_len, args.batch
    step, t0 = 0, time.perf_counter()
    while True:
        elapsed = time.perf_counter() - t0
        if elapsed >= args.seconds or (args.max_steps and step >= args.max_steps):
            return step
        warm = min(1.0, (step + 1) / args.warmup_steps)
        cosine = 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * elapsed / args.seconds))
        starts = torch.randint(0, len(stream) - seq - 1, (bs,), generator=gen)
        x = torch.stack([stream[s:s + seq] for s in starts.tolist()]).to(device)
        with torch.no_grad(), torch.autocast(device.type, dtype=torch.bfloat16, enabled=amp):
            t_logits = target(input_ids=x).logits
        step += 1
        for d in drafts:
            value = draft_step(d, x, t_logits, args.lr * warm * cosine, amp, device)
            if step == 1 or step % args.log_every == 0:
                d["hist"].append([step, round(time.perf_counter() - t0, 1), round(value, 4)])
                log(f"distill L={d['layers']} step {step} kl {value:.4f} "
                    f"lr {args.lr * warm * cosine:.2e} {time.perf_counter() - t0:.0f}s")


def cmd_distill(args) -> dict:
    """Distil one draft per ``--layers`` entry, all on the same batches: one target forward per
    step feeds every draft's KL loss (each draft has its own optimizer), so two drafts cost
    about 1.5 single-draft steps per step, not 2."""
    from transformers import AutoTokenizer

    device = pick_device(args.device)
    torch.manual_seed(args.seed)
    t_start = time.perf_counter()
    tok = AutoTokenizer.from_pretrained(args.target)
    stream, n_docs, n_site = distill_text(tok, args.site_chars)
    log(f"distill: {n_docs} stdlib + {n_site} site-packages docs, {len(stream)} tokens "
        f"({time.perf_counter() - t_start:.1f}s)")
    target = load_model(args.target, device)
    for p in target.parameters():
        p.requires_grad_(False)
    drafts = make_drafts(args, args.target, target.config.num_hidden_layers, device)
    amp = device.type == "cuda" and args.dtype == "bfloat16"
    t0 = time.perf_counter()
    step = distill_loop(args, target, drafts, stream, device, amp)
    sync(device)
    out = Path(args.out)
    report = {"out": str(out), "init": args.init, "steps": step,
              "train_seconds": round(time.perf_counter() - t0, 1),
              "tokens_per_step": args.batch * args.seq_len, "train_tokens": int(len(stream)),
              "stdlib_docs": n_docs, "site_docs": n_site, "site_chars": args.site_chars,
              "lr": args.lr, "seq_len": args.seq_len, "batch": args.batch, "amp_bf16": amp,
              "drafts": {}}
    for d in drafts:
        name = f"draft-{d['layers']}L"
        model = d["model"].eval()
        save_dir(model.float(), args.target, out / name)
        files = (save_tensors(trained_tensors(model), f"{args.tensors}{d['layers']}L")
                 if args.tensors else [])
        report["drafts"][name] = {
            "dir": str(out / name), "layers": d["layers"], "init_layers": d["init"],
            "trainable_params": sum(p.numel() for p in d["params"]),
            "loss_history": d["hist"], "tensor_files": files}
    report["seconds"] = round(time.perf_counter() - t_start, 1)
    return report


def cmd_rebuild(args) -> dict:
    from safetensors.torch import load_file

    tensors = {}
    for f in args.tensors:
        tensors.update(load_file(f))
    idx = sorted({int(k.split(".")[2]) for k in tensors if k.startswith("model.layers.")})
    model = load_model(args.target, "cpu")
    keep_layers(model, list(range(len(idx))))
    missing, unexpected = model.load_state_dict({k: v.float() for k, v in tensors.items()},
                                                strict=False)
    bad = [k for k in missing if k.startswith("model.layers.") or k == "model.norm.weight"]
    if bad or unexpected:
        raise SystemExit(f"rebuild: missing {bad[:3]}, unexpected {unexpected[:3]}")
    save_dir(model, args.target, args.out)
    return {"out": args.out, "layers": len(idx)}


# ----------------------------------------------------------------------------- acceptance
def heldout_windows(tokenizer, kind: str, seq: int, count: int) -> torch.Tensor:
    """``count`` evenly spaced windows of ``seq`` tokens of the held-out stdlib ``kind``."""
    from specbatch.traces.corpus import stdlib_documents

    stream = token_stream(tokenizer, stdlib_documents(kind, "heldout"))
    count = max(1, min(count, len(stream) // seq))
    starts = np.linspace(0, len(stream) - seq, count).astype(np.int64)
    return torch.from_numpy(np.stack([stream[s:s + seq] for s in starts]))


@torch.no_grad()
def logits_of(model, windows, batch, device):
    out = []
    for i in range(0, len(windows), batch):
        out.append(model(input_ids=windows[i:i + batch].to(device)).logits.float())
    return torch.cat(out)


@torch.no_grad()
def compare(target_logits, draft_logits, windows, device) -> dict:
    """Mean over positions: α = Σ_x min(p_d, p_t), KL(t||d), draft CE on the text."""
    alpha, kl, ce = [], [], []
    for t, d, w in zip(target_logits, draft_logits, windows):
        pt, pd = torch.softmax(t, -1), torch.softmax(d, -1)
        alpha.append(torch.minimum(pt, pd).sum(-1))
        kl.append(kl_rows(t, d))
        ce.append(torch.nn.functional.cross_entropy(d[:-1], w[1:].to(device), reduction="none"))
    cat = lambda xs: float(torch.cat(xs).double().mean())  # noqa: E731
    return {"alpha": cat(alpha), "kl": cat(kl), "ce": cat(ce)}


def latency_probe(path, device, batches=(1, 64), kv=256, query=(1, 4)) -> dict:
    """Median eager bf16 (CUDA) forward seconds per (batch, query) on ``kv`` cached tokens."""
    from specbatch.traces.capture.profile import ProfileGrid, profile_model

    dtype = "bfloat16" if device.type == "cuda" else "float32"
    grid = ProfileGrid(batch_sizes=tuple(batches), query_tokens=tuple(query), kv_tokens=(kv,),
                       warmup=3, repeats=10)
    frame = profile_model(str(path), grid, device=str(device), dtype=dtype)
    return {f"b{r.batch_size}_q{r.query_tokens}": float(r.latency_s) for r in frame.itertuples()}


def speedup(alpha: float, k: int, t_draft: float, t_target1: float, t_target_v: float) -> float:
    """i.i.d.-acceptance estimate: tokens per step (1 - α^{k+1}) / (1 - α) over the time of k
    draft passes + one verify pass, relative to plain decoding (one target pass per token)."""
    tokens = (k + 1.0) if alpha >= 1 else (1 - alpha ** (k + 1)) / (1 - alpha)
    return tokens * t_target1 / (k * t_draft + t_target_v)


def cmd_accept(args) -> dict:
    from transformers import AutoTokenizer

    device = pick_device(args.device)
    tok = AutoTokenizer.from_pretrained(args.target)
    windows = {kind: heldout_windows(tok, kind, args.seq_len, n)
               for kind, n in (("code", args.windows), ("prose", max(1, args.windows // 2)))}
    target = load_model(args.target, device)
    t_logits = {k: logits_of(target, w, args.batch, device) for k, w in windows.items()}
    t_ce = {}
    for kind, w in windows.items():
        ce = [torch.nn.functional.cross_entropy(t[:-1], x[1:].to(device))
              for t, x in zip(t_logits[kind], w)]
        t_ce[kind] = float(torch.stack(ce).mean())
    del target
    report = {"seq_len": args.seq_len,
              "positions": {k: int(w.numel()) for k, w in windows.items()},
              "target": {"path": args.target, "ce": t_ce}, "drafts": {}}
    probe = not args.no_probe
    if probe:
        report["target"]["latency"] = latency_probe(args.target, device)
    for spec in args.draft:
        name, path = spec.split("=", 1)
        draft = load_model(path, device)
        per = {k: compare(t_logits[k], logits_of(draft, w, args.batch, device), w, device)
               for k, w in windows.items()}
        n_pos = sum(report["positions"].values())
        mean = {m: sum(per[k][m] * report["positions"][k] for k in per) / n_pos
                for m in ("alpha", "kl", "ce")}
        entry = {"path": path, "layers": draft.config.num_hidden_layers, **mean, "by_kind": per}
        del draft
        if probe:
            lat = latency_probe(path, device, query=(1,))
            tl = report["target"]["latency"]
            entry["latency"] = lat
            entry["speedup_k3"] = {
                f"b{b}": speedup(mean["alpha"], 3, lat[f"b{b}_q1"], tl[f"b{b}_q1"], tl[f"b{b}_q4"])
                for b in (1, 64)}
        report["drafts"][name] = entry
        log(f"accept {name}: alpha {mean['alpha']:.4f} kl {mean['kl']:.4f}")
        if device.type == "cuda":
            torch.cuda.empty_cache()
    if probe and report["drafts"]:
        report["best"] = max(report["drafts"],
                             key=lambda n: report["drafts"][n]["speedup_k3"]["b64"])
    return report


# ----------------------------------------------------------------------------- CLI
def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("meta")
    m.add_argument("--gguf", required=True)
    m.add_argument("--out", required=True)
    c = sub.add_parser("convert")
    c.add_argument("--gguf", required=True)
    c.add_argument("--meta", required=True)
    c.add_argument("--out", required=True)
    s = sub.add_parser("subset")
    s.add_argument("--target", required=True)
    s.add_argument("--drop", type=int, required=True)
    s.add_argument("--out", required=True)
    d = sub.add_parser("distill")
    d.add_argument("--target", required=True)
    d.add_argument("--layers", type=lambda t: [int(v) for v in t.split(",")], default=[4],
                   help="draft layer counts, e.g. 2,4 (one draft each, trained together)")
    d.add_argument("--init", choices=("ends", "spread"), default="ends")
    d.add_argument("--seconds", type=float, default=120.0)
    d.add_argument("--max-steps", type=int, default=0)
    d.add_argument("--seq-len", type=int, default=512)
    d.add_argument("--batch", type=int, default=32)
    d.add_argument("--lr", type=float, default=5e-4)
    d.add_argument("--warmup-steps", type=int, default=50)
    d.add_argument("--site-chars", type=int, default=40_000_000)
    d.add_argument("--dtype", default="bfloat16", help="autocast dtype on CUDA (float32: off)")
    d.add_argument("--log-every", type=int, default=100)
    d.add_argument("--seed", type=int, default=0)
    d.add_argument("--device", default=None)
    d.add_argument("--tensors", default=None,
                   help="also save each draft's trained tensors as PREFIX{L}L[-i].safetensors")
    d.add_argument("--out", required=True, help="directory: OUT/draft-{L}L per draft")
    r = sub.add_parser("rebuild")
    r.add_argument("--target", required=True)
    r.add_argument("--tensors", nargs="+", required=True)
    r.add_argument("--out", required=True)
    a = sub.add_parser("accept")
    a.add_argument("--target", required=True)
    a.add_argument("--draft", action="append", default=[], help="NAME=DIR (repeatable)")
    a.add_argument("--seq-len", type=int, default=512)
    a.add_argument("--windows", type=int, default=32, help="code windows (prose: half)")
    a.add_argument("--batch", type=int, default=8)
    a.add_argument("--no-probe", action="store_true", help="no latency probe / speed-up")
    a.add_argument("--device", default=None)
    a.add_argument("--json", default=None, help="also write the report here")
    args = p.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    result = {"meta": cmd_meta, "convert": cmd_convert, "subset": cmd_subset,
              "distill": cmd_distill, "rebuild": cmd_rebuild, "accept": cmd_accept}[args.cmd](args)
    text = json.dumps(result, indent=1)
    if getattr(args, "json", None):
        Path(args.json).write_text(text + "\n")
    print(text, flush=True)
    return result


if __name__ == "__main__":
    main()
