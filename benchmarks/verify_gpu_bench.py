"""Verification kernels at memory bandwidth: batched torch TV and BV on a GPU (issue 7 §1).

Times :func:`theory.verify.torch_batched.verify_torch` with rule "token" (TV, THEORY.md §2) and
"block" (BV, THEORY.md §3) on the padded layout for every B x γ x V x input dtype of the grid
(default B in {64, 256}, γ in {4, 8}, V in {49152, 128256}: the SmolLM2 and Llama-3 vocabularies;
float32 and bfloat16), and compares the achieved bandwidth with the device's copy bandwidth measured
in the same run.

Bytes counted per call (the inputs a verifier over full distributions must read: the draft
row ``Ms(·|X^{i-1})`` and the target row ``Mb(·|X^{i-1})`` at every drafted position i = 1..γ,
plus the target's bonus row ``Mb(·|X^γ)``)::

    bytes = 2·B·γ·V·itemsize + B·V·itemsize = (2γ + 1)·B·V·itemsize

with ``itemsize`` of the input dtype as given (4 for float32, 2 for bfloat16). Achieved
bandwidth is ``bytes / median time``. Caveats: theory/verify/torch_batched.py upcasts half-precision
rows to float32 before verifying (one extra read of the bf16 inputs and a write + reads of
float32 copies), so for bfloat16 the bytes actually moved are larger than those counted; the
table reports the bytes of the inputs as given. TV as implemented reads only the drafted
tokens' probabilities plus one full row per request, so its "GB/s" is an effective rate against
the same byte count (it can exceed what the touched bytes alone would give).

Copy bandwidth: ``dst.copy_(src)`` of a large float32 tensor (1 GiB on CUDA, 64 MiB on CPU),
bytes = read + written = 2·nbytes, median of the repeats. Goal (issue 7): BV's achieved
bandwidth >= 60 % of the copy bandwidth and BV time within 1.2x of TV's.

Timing: ``--warmup`` untimed calls, then the median of ``--repeats`` timed calls (CUDA events
around each call and ``torch.cuda.synchronize`` on CUDA; ``time.perf_counter`` on CPU). Rows
are softmax(3·N(0,1) logits) for the target and softmax(logits + 0.5·noise) for the draft
(E[τ_TV] ≈ 3.6 of 8 at V = 32000, like verify_bench.py), made in float32 then cast.

    python benchmarks/verify_gpu_bench.py [--device cuda] [--quick | --full]
        [--batch 64,256] [--gamma 4,8] [--vocab 49152,128256] [--dtype float32,bfloat16]
        [--warmup 3] [--repeats 10] [--impl torch,torch-lazy,torch-sync-free,triton]
        [--json PATH]

``--impl`` picks the implementations timed side by side: ``torch`` (verify_torch's default:
the host-sync-free path on CUDA, the lazy path on CPU), ``torch-lazy``, ``torch-sync-free``
and ``triton`` (theory/verify/triton_fused.py, one fused launch; needs the ``kernels`` extra).

Without CUDA (and without --full) the grid shrinks to --quick (a CPU smoke run, < 60 s).
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import platform
import statistics
import time
from pathlib import Path

import torch

from specbatch.theory.verify.torch_batched import verify_torch


def _triton(rule, tokens, draft, target, uniforms, generator=None):
    from specbatch.theory.verify.triton_fused import verify_triton_padded

    return verify_triton_padded(rule, tokens, draft, target, uniforms, generator=generator)


#: Implementations (--impl): verify_torch's default dispatch (sync-free on CUDA, lazy on
#: CPU), either torch path forced, and the fused Triton kernel (needs the kernels extra).
IMPLS = {
    "torch": verify_torch,
    "torch-lazy": functools.partial(verify_torch, sync_free=False),
    "torch-sync-free": functools.partial(verify_torch, sync_free=True),
    "triton": _triton,
}

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
FULL_GRID = {"batch": (64, 256), "gamma": (4, 8), "vocab": (49152, 128256),
             "dtype": ("float32", "bfloat16")}
QUICK_GRID = {"batch": (16,), "gamma": (4, 8), "vocab": (8192,), "dtype": ("float32", "bfloat16")}
ROW_FIELDS = ("device", "impl", "dtype", "batch", "gamma", "vocab", "itemsize", "bytes", "upcast",
              "tv_ms", "bv_ms", "bv_over_tv", "tv_gbps", "bv_gbps", "copy_gbps",
              "tv_frac_copy", "bv_frac_copy", "mean_tau_tv", "mean_tau_bv", "goal_met")
GOAL_FRAC_COPY = 0.6
GOAL_BV_OVER_TV = 1.2


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(v) for v in text.split(",") if v.strip())


def _names(text: str) -> tuple[str, ...]:
    names = tuple(v.strip() for v in text.split(",") if v.strip())
    bad = [n for n in names if n not in DTYPES]
    if bad:
        raise argparse.ArgumentTypeError(f"expected dtypes among {', '.join(DTYPES)}, got {bad}")
    return names


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def median_seconds(fn, device: torch.device, warmup: int, repeats: int) -> float:
    """Median wall seconds of ``repeats`` calls of ``fn`` after ``warmup`` untimed calls."""
    for _ in range(warmup):
        fn()
    synchronize(device)
    times = []
    for _ in range(repeats):
        if device.type == "cuda":
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize(device)
            times.append(start.elapsed_time(end) / 1e3)
        else:
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def copy_bandwidth(device: torch.device, nbytes: int, warmup: int, repeats: int) -> float:
    """Device copy bandwidth in GB/s: ``dst.copy_(src)``, bytes read + written (2·nbytes)."""
    src = torch.empty(nbytes // 4, dtype=torch.float32, device=device).uniform_()
    dst = torch.empty_like(src)
    seconds = median_seconds(functools.partial(dst.copy_, src), device, warmup, repeats)
    return 2 * nbytes / seconds / 1e9


def make_batch(batch: int, gamma: int, vocab: int, device: torch.device, noise: float = 0.5,
               seed: int = 0):
    """float32 (tokens # [B, γ], draft rows # [B, γ, V], target rows # [B, γ+1, V],
    uniforms # [B, γ] float64), generated on ``device``."""
    gen = torch.Generator(device=device).manual_seed(seed)
    target = torch.randn((batch, gamma + 1, vocab), generator=gen, device=device).mul_(3.0)
    draft = torch.randn((batch, gamma, vocab), generator=gen, device=device).mul_(noise)
    draft.add_(target[:, :gamma])
    target = torch.softmax(target, dim=-1)
    draft = torch.softmax(draft, dim=-1)
    tokens = torch.multinomial(draft.reshape(-1, vocab), 1, generator=gen).reshape(batch, gamma)
    uniforms = torch.rand((batch, gamma), generator=gen, dtype=torch.float64, device=device)
    return tokens, draft, target, uniforms


def verify_bytes(batch: int, gamma: int, vocab: int, itemsize: int) -> int:
    """(2γ + 1)·B·V·itemsize: both rows at every drafted position plus the bonus row."""
    return (2 * gamma + 1) * batch * vocab * itemsize


def bench_config(batch, gamma, vocab, dtypes, device, copy_gbps, warmup, repeats,
                 impl: str = "torch") -> list[dict]:
    """One row per dtype for one (B, γ, V); rows are generated once in float32 and cast."""
    tokens, draft32, target32, uniforms = make_batch(batch, gamma, vocab, device)
    rows = []
    for name in dtypes:
        dtype = DTYPES[name]
        draft = draft32 if dtype == torch.float32 else draft32.to(dtype)
        target = target32 if dtype == torch.float32 else target32.to(dtype)
        gen = torch.Generator(device=device).manual_seed(1)
        result = {}
        for rule in ("token", "block"):
            call = functools.partial(IMPLS[impl], rule, tokens, draft, target, uniforms,
                                     generator=gen)
            result[rule + "_s"] = median_seconds(call, device, warmup, repeats)
            result[rule] = call()  # τ of one more call, for the mean-τ columns
        itemsize = draft.element_size()
        nbytes = verify_bytes(batch, gamma, vocab, itemsize)
        tv_gbps = nbytes / result["token_s"] / 1e9
        bv_gbps = nbytes / result["block_s"] / 1e9
        bv_over_tv = result["block_s"] / result["token_s"]
        rows.append({
            "device": str(device), "impl": impl, "dtype": name, "batch": batch, "gamma": gamma,
            "vocab": vocab,
            "itemsize": itemsize, "bytes": nbytes, "upcast": dtype != torch.float32 and
            dtype != torch.float64,
            "tv_ms": 1e3 * result["token_s"], "bv_ms": 1e3 * result["block_s"],
            "bv_over_tv": bv_over_tv, "tv_gbps": tv_gbps, "bv_gbps": bv_gbps,
            "copy_gbps": copy_gbps, "tv_frac_copy": tv_gbps / copy_gbps,
            "bv_frac_copy": bv_gbps / copy_gbps,
            "mean_tau_tv": float(result["token"][0].float().mean()),
            "mean_tau_bv": float(result["block"][0].float().mean()),
            "goal_met": bool(bv_gbps >= GOAL_FRAC_COPY * copy_gbps
                             and bv_over_tv <= GOAL_BV_OVER_TV),
        })
    return rows


def sampler_floors(rows: list[dict], copy_gbps: float) -> dict:
    """Per implementation with float32 cells: the simulator's sampler floors
    (:func:`specbatch.simulator.cost.verify_cost.measured_floors`, bytes term at the measured copy
    bandwidth), what a ``simulator.cost.gpus.hardware.SAMPLERS`` preset of this device takes."""
    from specbatch.simulator.cost.verify_cost import measured_floors

    out = {}
    for impl in dict.fromkeys(r["impl"] for r in rows):
        cells = [r for r in rows if r["impl"] == impl and r["dtype"] == "float32"]
        if cells:
            tv, bv = measured_floors(cells, copy_gbps * 1e9)
            out[impl] = {"tv_s": tv, "bv_per_position_s": bv}
    return out


def format_table(rows: list[dict], copy_gbps: float) -> str:
    head = (f"{'impl':<16}{'dtype':<9}{'B':>5}{'γ':>3}{'V':>8}{'MB':>9}{'TV ms':>9}{'BV ms':>9}"
            f"{'BV/TV':>7}{'TV GB/s':>9}{'BV GB/s':>9}{'TV/copy':>8}{'BV/copy':>8}"
            f"{'τ TV':>6}{'τ BV':>6}  goal")
    lines = [f"copy bandwidth {copy_gbps:.1f} GB/s (read + write)", head]
    for r in rows:
        lines.append(
            f"{r['impl']:<16}{r['dtype']:<9}{r['batch']:>5}{r['gamma']:>3}{r['vocab']:>8}"
            f"{r['bytes'] / 1e6:>9.1f}"
            f"{r['tv_ms']:>9.3f}{r['bv_ms']:>9.3f}{r['bv_over_tv']:>7.2f}{r['tv_gbps']:>9.1f}"
            f"{r['bv_gbps']:>9.1f}{r['tv_frac_copy']:>8.2f}{r['bv_frac_copy']:>8.2f}"
            f"{r['mean_tau_tv']:>6.2f}{r['mean_tau_bv']:>6.2f}  {'yes' if r['goal_met'] else 'no'}")
    lines.append(f"bytes = (2γ+1)·B·V·itemsize of the inputs as given (bfloat16 rows are upcast "
                 f"to float32 inside verify_torch, so more bytes actually move); goal: BV >= "
                 f"{GOAL_FRAC_COPY:.0%} of copy and BV/TV <= {GOAL_BV_OVER_TV}")
    return "\n".join(lines)


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default=None, help="cuda, cuda:N or cpu (default: cuda if "
                        "available, else cpu)")
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="small grid (CPU smoke run)")
    size.add_argument("--full", action="store_true", help="full grid even without CUDA")
    parser.add_argument("--batch", type=_ints, default=None, help="e.g. 64,256")
    parser.add_argument("--gamma", type=_ints, default=None, help="e.g. 4,8")
    parser.add_argument("--vocab", type=_ints, default=None, help="e.g. 49152,128256")
    parser.add_argument("--dtype", type=_names, default=None, help="e.g. float32,bfloat16")
    parser.add_argument("--warmup", type=int, default=None, help="untimed calls (3; quick: 1)")
    parser.add_argument("--repeats", type=int, default=None, help="timed calls (10; quick: 3)")
    parser.add_argument("--copy-mib", type=int, default=None,
                        help="copy-bandwidth tensor size (1024 on CUDA, 64 otherwise)")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    parser.add_argument("--impl", default="torch", help="comma-separated implementations among "
                        f"{', '.join(IMPLS)} (default torch)")
    parser.add_argument("--json", metavar="PATH", default=None, help="also write the rows here")
    return parser.parse_args(argv)


def main(argv=None) -> dict:
    args = parse_args(argv)
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit(f"--device {args.device}: expected a CUDA device, got none")
    if args.threads:
        torch.set_num_threads(args.threads)
    quick = args.quick or (device.type != "cuda" and not args.full)
    grid = dict(QUICK_GRID if quick else FULL_GRID)
    for key in grid:
        if getattr(args, key) is not None:
            grid[key] = getattr(args, key)
    warmup = args.warmup if args.warmup is not None else (1 if quick else 3)
    repeats = args.repeats if args.repeats is not None else (3 if quick else 10)
    copy_mib = args.copy_mib or (1024 if device.type == "cuda" else 64)
    copy_gbps = copy_bandwidth(device, copy_mib * 2**20, warmup, repeats)
    rows = []
    for batch, gamma, vocab in itertools.product(grid["batch"], grid["gamma"], grid["vocab"]):
        for impl in args.impl.split(","):
            rows += bench_config(batch, gamma, vocab, grid["dtype"], device, copy_gbps, warmup,
                                 repeats, impl)
        if device.type == "cuda":  # the config's rows are freed: give the cache back
            torch.cuda.empty_cache()
    gpu = (
        torch.cuda.get_device_name(device)
        if device.type == "cuda"
        else (platform.processor() or platform.machine())
    )
    report = {"device": str(device), "device_name": gpu, "torch": torch.__version__,
              "quick": quick, "warmup": warmup, "repeats": repeats, "copy_mib": copy_mib,
              "copy_gbps": copy_gbps, "goal_frac_copy": GOAL_FRAC_COPY,
              "goal_bv_over_tv": GOAL_BV_OVER_TV,
              "bytes_formula": "(2*gamma + 1) * batch * vocab * itemsize (inputs as given)",
              "rows": rows, "sampler_floors": sampler_floors(rows, copy_gbps)}
    print(f"{device} ({gpu}), torch {torch.__version__}, median of {repeats} after {warmup} "
          f"warm-up{' (quick grid)' if quick else ''}")
    print(format_table(rows, copy_gbps))
    for impl, f in report["sampler_floors"].items():
        print(f"simulator.cost.verify_cost floors of {impl} (float32 cells): TV "
              f"{1e3 * f['tv_s']:.3f} "
              f"ms per call, BV {1e3 * f['bv_per_position_s']:.3f} ms per draft position")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
        print(f"wrote {args.json}")
    return report


if __name__ == "__main__":
    main()
