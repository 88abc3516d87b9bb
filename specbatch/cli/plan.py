"""``specbatch plan``: the cheapest deployment and speculation setting meeting the SLOs.

Argument parsing and printing only; the planner is :mod:`specbatch.analysis.plan.planner`.
"""

from __future__ import annotations

import argparse
import sys

from specbatch.cli.common import (
    JSON_FLAG,
    add_command,
    auto_bool,
    emit,
    int_list,
    positive_int,
    seed_int,
)
from specbatch.cli.flags import flag, grouped
from specbatch.cli.plan_report import format_report
from specbatch.errors import SpecbatchError, require
from specbatch.simulator.cost.analytic.precision import KV_CACHE_DTYPES, QUANTIZATIONS

HELP = "find the cheapest deployment and speculation setting that meets latency SLOs"


def hardware_choices() -> str:
    """The hardware presets (for --help)."""
    from specbatch.simulator.cost.gpus.hardware import HARDWARE

    return ", ".join(HARDWARE)


#: plan's flags in --help order (tune reuses the workload and model ones).
PLAN_FLAGS = (
    flag("--out", default=None,
         help="output directory: new, empty, or this same question's earlier plan "
              "(its stored runs are reused); default: a cache folder named by the "
              "question ($SPECBATCH_CACHE or ~/.cache/specbatch, under plan/)"),
    *grouped(
        "workload",
        flag("--workload", metavar="FILE|example",
             help="request lengths/arrivals file, as simulate's --workload"),
        flag("--prompt-len", metavar="DIST",
             help="prompt lengths: fixed:N, uniform:A,B, lognormal:MEDIAN,SIGMA, "
                  "trace (the trace's own) or sharegpt (a preset fitted on public "
                  "ShareGPT requests)"),
        flag("--output-len", metavar="DIST", help="output lengths, as --prompt-len"),
        flag("--rate", type=float, default=None,
             help="offered load, requests/s (Poisson arrivals)"),
        flag("--arrival", choices=("poisson", "trace", "burst"), default="poisson",
             help="arrivals: poisson at --rate (default), trace (the workload file's "
                  "or the trace's recorded times) or burst (all at t = 0)"),
        flag("--requests", type=positive_int, default=256,
             help="simulated requests per configuration (default 256)"),
        flag("--trace", default="default",
             help="acceptance trace: 'default', a trace directory, or 'synth'"),
        flag("--acceptance-profile", metavar="FILE|NAME", default=None,
             help="replay an acceptance profile (a file from `specbatch acceptance "
                  "import-*`, or a bundled name: `specbatch acceptance list`) on the "
                  "trace's requests instead of the trace's acceptance"),
        flag("--seed", type=seed_int, default=0, help="random seed (default 0)"),
        flag("--seeds", type=positive_int, default=3,
             help="R: the chosen deployment's settings are compared on seeds SEED.."
                  "SEED+R-1 with paired 95 %% intervals; settings whose difference "
                  "includes 0 form the tie set (default 3; 1: one seed, no interval)"),
        flag("--no-breakeven", action="store_true",
             help="skip the break-even acceptance of the tied settings (a bisection "
                  "of a scaled profile, a few runs each)"),
    ),
    *grouped(
        "models and engine",
        flag("--target", default="vicuna-33b",
             help="target: a shape name, a Hugging Face id of the catalogue "
                  "(meta-llama/Llama-3.1-8B-Instruct, ...) or a config.json path"),
        flag("--draft", default="vicuna-68m",
             help="draft: a shape name, an id, a config.json path, ngram, or a "
                  "head drafter: eagle, eagle3, mtp (priced from the target's "
                  "shape, simulator.cost.features.draft_head)"),
        flag("--draft-head", default=None, metavar="PATH",
             help="the EAGLE / EAGLE-3 head's config.json (draft eagle or eagle3)"),
        flag("--cost", default="auto", choices=("auto", "calibrated", "aic", "roofline"),
             help="step-time cost model (default auto: per GPU and model the best source "
                  "validated out of sample, simulator/cost/resolve.py, the roofline as the "
                  "named fallback; calibrated: the bundled public GPU profiles where they "
                  "cover a pass, the calibrated roofline elsewhere; roofline reproduces "
                  "earlier plans)"),
        flag("--profile", metavar="DIR", default=None,
             help="your GPU's profiles from `specbatch cost import-vidur`: with "
                  "--cost calibrated, their cells price the passes they cover first"),
        flag("--max-num-seqs", type=positive_int, default=64,
             help="running requests per replica (default 64)"),
        flag("--gpu-memory-utilization", type=float, default=0.9,
             help="share of each GPU's memory for weights and KV (default 0.9)"),
        flag("--quantization", default="none", choices=QUANTIZATIONS,
             help="the target's weight format, vLLM's --quantization (default none "
                  "= the checkpoint's own): prices its weights memory, KV room "
                  "and pass times (simulator.cost.analytic.precision)"),
        flag("--kv-cache-dtype", default="auto", choices=KV_CACHE_DTYPES,
             help="KV-cache element type, vLLM's --kv-cache-dtype (default auto; "
                  "fp8*: 1 byte, twice the KV tokens)"),
        flag("--disable-hybrid-kv-cache-manager", action="store_true",
             help="vLLM's --disable-hybrid-kv-cache-manager: a sliding-window model's layers "
                  "all hold every token; set automatically, with a note, when the models' "
                  "page sizes cannot be unified"),
        flag("--async-scheduling", type=auto_bool, default="auto", metavar="AUTO|BOOL",
             help="vLLM's --async-scheduling (default auto: vLLM's rule for the flag unset, "
                  "per run: on for ar and model or head drafters, off for ngram; true / "
                  "false: the flag given, or --no-async-scheduling; "
                  "simulator.cost.features.async_overhead)"),
    ),
    *grouped(
        "SLOs",
        flag("--slo-ttft", type=float, default=None, help="TTFT bound, seconds"),
        flag("--slo-tpot", type=float, default=None, help="TPOT bound, seconds"),
        flag("--slo-e2e", type=float, default=None, help="end-to-end bound, seconds"),
        flag("--percentile", type=float, default=99.0,
             help="percentile the bounds apply at (default 99)"),
        flag("--goodput", type=float, default=0.99,
             help="share of requests that must meet every bound (default 0.99)"),
        flag("--allow-preemption", action="store_true",
             help="accept configurations whose KV cache preempts requests (default: "
                  "a preemption rejects them for memory)"),
    ),
    *grouped(
        "search space",
        flag("--hardware", default="h100",
             help=f"hardware presets, comma-separated: {hardware_choices()} "
                  "(default h100)"),
        flag("--tp", type=int_list(positive_int), default=(1, 2, 4, 8),
             help="tensor-parallel degrees (default 1,2,4,8)"),
        flag("--max-gpus", type=positive_int, default=8,
             help="most GPUs a deployment may use (default 8, at most 1024)"),
        flag("--policies", default="ar,fixed,tetris,dsd",
             help="speculation policies to search (default ar,fixed,tetris,dsd)"),
        flag("--k", type=int_list(positive_int), default=(1, 2, 3, 4),
             help="windows k of fixed and tetris (default 1,2,3,4)"),
        flag("--extra", type=int_list(positive_int), default=(1, 2),
             help="extra drafted tokens e of tetris (default 1,2)"),
        flag("--verify", default="token,block",
             help="verification rules: token (TV), block (BV) (default both)"),
        flag("--price", default=None, metavar="HW=PRICE,...",
             help="price per GPU-hour of each preset; cost is then money, not GPUs"),
        flag("--levels-after", type=int, default=1,
             help="cost levels meeting the SLOs to simulate beyond the cheapest "
                  "one, for the runner-up table (default 1)"),
        flag("--acceptance-band", metavar="A,B", default=None,
             help="also plan with a constant acceptance alpha = A and = B"),
        flag("--exhaustive", action="store_true",
             help="simulate every setting of every searched level whole (default: "
                  "skip settings a latency lower bound proves cannot pass or matter, "
                  "and stop runs once their verdict is certain; the answer is the "
                  "same)"),
    ),
    *grouped(
        "capacity (--max-rate)",
        flag("--max-rate", action="store_true",
             help="instead of the cheapest deployment: the largest Poisson rate ONE "
                  "deployment (one --hardware, --tp, --replicas, --policies, --k, "
                  "--verify) serves within the SLOs, by bracketing and bisection "
                  "(analysis.plan.max_rate); --rate is the first probe (default 1); "
                  "writes OUT/max_rate.json"),
        flag("--replicas", type=positive_int, default=1,
             help="replicas of the deployment with --max-rate (default 1)"),
        flag("--rate-tolerance", type=float, default=0.02,
             help="relative width of the final bracket (default 0.02)"),
        flag("--data-parallel-size", type=positive_int, default=1,
             help="vLLM's --data-parallel-size with --max-rate: DP ranks of one server "
                  "(replicas must be 1; default 1)"),
        flag("--enable-expert-parallel", action="store_true",
             help="vLLM's --enable-expert-parallel with --max-rate: an MoE target's "
                  "experts split over the DP x tp GPUs (simulator.cost.features.expert_parallel)"),
    ),
    *grouped(
        "execution",
        flag("--workers", type=positive_int, default=None,
             help="local processes (or LocalCluster workers); default min(4, cores) on more "
                  "than 2 cores, else 1. One pool serves the whole plan; a round of fewer "
                  "than 4 pending runs runs in the main process"),
        flag("--scheduler", default=None, metavar="ADDRESS|local",
             help="run on Dask distributed: a scheduler address, or 'local'"),
        flag("--no-progress", action="store_true", help="hide the progress bar"),
    ),
    JSON_FLAG,
)


def register(subparsers: argparse._SubParsersAction) -> None:
    add_command(
        subparsers, "plan", help=HELP,
        description=(
            "Search hardware x tensor parallel x replicas x speculation (ar; fixed k; tetris k, "
            "e; dsd; TV/BV) with the simulator's paged KV cache (preemption by recomputation), "
            "cheapest cost level first, and report the cheapest configuration meeting every "
            "SLO at the offered rate: its memory plan, its gain over ar, the cost-latency "
            "frontier, and what limits each rejected configuration. Resumable: the runs are "
            "stored under OUT/runs (sweep machinery). The choice is written as OUT/plan.toml "
            "for `specbatch simulate --config`."),
        examples=(
            "specbatch plan --target vicuna-33b --draft vicuna-68m --hardware h100 --rate 4 "
            "--prompt-len fixed:500 --output-len fixed:200 --slo-tpot 0.1 --out runs/plan",
            "specbatch plan --workload example --arrival trace --slo-ttft 2 --slo-e2e 20 "
            "--hardware h100,h200 --price h100=2.5,h200=3.9 --out runs/plan2",
            "specbatch plan --target ./my-model/config.json --draft vicuna-68m --rate 2 "
            "--prompt-len lognormal:400,0.8 --output-len uniform:50,300 --slo-tpot 0.05 "
            "--acceptance-band 0.6,0.9 --out runs/plan3 --json",
            "specbatch plan --target llama-3.1-8b --draft ngram --acceptance-profile "
            "ngram-llama3.1-8b-code-edit --rate 4 --slo-tpot 0.05 --seeds 3 --out runs/plan4"),
        flags=PLAN_FLAGS, run=run_command)


def _names(text: str, flag: str, allowed: dict[str, str]) -> tuple[str, ...]:
    """A comma-separated list of names (case-insensitive), each mapped through ``allowed``."""
    out = []
    for item in text.split(","):
        key = item.strip().lower()
        if key not in allowed:
            raise SpecbatchError(f"{flag}: expected some of "
                                 f"{', '.join(sorted(set(allowed.values())))}"
                                 f", got {item.strip()!r}")
        if allowed[key] not in out:
            out.append(allowed[key])
    require(bool(out), f"{flag}: expected at least one name, got {text!r}")
    return tuple(out)


def check_slo_bounds(args: argparse.Namespace) -> None:
    """Each given SLO bound is seconds > 0 (one-line error naming its flag)."""
    for option, value in (("--slo-ttft", args.slo_ttft), ("--slo-tpot", args.slo_tpot),
                          ("--slo-e2e", args.slo_e2e)):
        require(value is None or value > 0, f"{option}: expected seconds > 0, got {value}")


def build_question(args: argparse.Namespace):
    """The planner's :class:`~specbatch.analysis.plan.planner.Question` from the flags (one-line
    errors; nothing is written)."""
    from specbatch.analysis.plan.planner import Question, check_band
    from specbatch.analysis.plan.slo import Slos
    from specbatch.analysis.plan.space import PLAN_POLICIES, Space, check_space, parse_prices
    from specbatch.simulator.cost.gpus.hardware import HARDWARE, get_hardware
    from specbatch.simulator.defaults import FREE_DRAFTS, HEAD_DRAFTS
    from specbatch.traces.models.shapes import get_shape

    check_slo_bounds(args)
    require(0 < args.percentile <= 100, f"--percentile: expected 0 < P <= 100, got "
            f"{args.percentile}")
    require(0 < args.goodput <= 1, f"--goodput: expected a share 0 < G <= 1, got {args.goodput}")
    require(args.levels_after >= 0, f"--levels-after: expected an integer >= 0, got "
            f"{args.levels_after}")
    require(0 < args.gpu_memory_utilization <= 1, "--gpu-memory-utilization: expected a share "
            f"0 < u <= 1, got {args.gpu_memory_utilization}")
    for model in (args.target, args.draft):  # the roofline prices every shape it plans
        if str(model).lower() not in FREE_DRAFTS + HEAD_DRAFTS:
            get_shape(model)
    require(args.draft_head is None or str(args.draft).lower() in ("eagle", "eagle3"),
            f"--draft-head: expected --draft eagle or eagle3 with a head's config.json, got "
            f"--draft {args.draft}")
    hardware = tuple(dict.fromkeys(get_hardware(h.strip()).name
                                   for h in args.hardware.split(",") if h.strip()))
    require(bool(hardware), f"--hardware: expected presets ({', '.join(HARDWARE)}), got "
            f"{args.hardware!r}")
    space = Space(
        hardware=hardware, tp=tuple(sorted(set(args.tp))), max_gpus=args.max_gpus,
        policies=_names(args.policies, "--policies", {p: p for p in PLAN_POLICIES}),
        k=tuple(sorted(set(args.k))), extra=tuple(sorted(set(args.extra))),
        verify=_names(args.verify, "--verify", {"token": "token", "tv": "token",
                                                "block": "block", "bv": "block"}),
        prices=parse_prices(args.price, hardware))
    band = check_band(args.acceptance_band)
    check_space(space, args.requests, 1 if band is None else 3)
    slos = Slos(ttft=args.slo_ttft, tpot=args.slo_tpot, e2e=args.slo_e2e,
                percentile=args.percentile, goodput=args.goodput,
                allow_preemption=args.allow_preemption)
    lengths = workload_lengths(args)
    base = {"trace": args.trace, "requests": args.requests, "target": args.target,
            "draft": args.draft, "cost": args.cost, "max_num_seqs": args.max_num_seqs,
            "kv_mode": "paged", **({"profile": args.profile} if args.profile else {}),
            **({"draft_head": args.draft_head} if args.draft_head else {}),
            "gpu_memory_utilization": args.gpu_memory_utilization, "seed": args.seed,
            **precision_fields(args), **arrival_fields(args)}
    if args.acceptance_profile is not None:
        from specbatch.traces.acceptance.library import resolve_profile

        resolve_profile(args.acceptance_profile)  # one-line errors before anything runs
        base["acceptance_profile"] = args.acceptance_profile
    if args.workload is not None:
        from specbatch.simulator.workload.arrivals import resolve_workload

        base["workload"] = str(resolve_workload(args.workload).resolve())
    return Question(base=base, space=space, slos=slos, levels_after=args.levels_after,
                    band=band, lengths=lengths, prune=not args.exhaustive, seeds=args.seeds,
                    breakeven=not args.no_breakeven)


def precision_fields(args: argparse.Namespace) -> dict:
    """``quantization`` / ``kv_cache_dtype`` / ``async_scheduling`` when set away from their
    defaults (a question without them stays the one it was)."""
    out = {}
    if args.quantization != "none":
        out["quantization"] = args.quantization
    if args.kv_cache_dtype != "auto":
        out["kv_cache_dtype"] = args.kv_cache_dtype
    if args.async_scheduling != "auto":  # given: the runs and vLLM's line carry it
        out["async_scheduling"] = args.async_scheduling
    if args.disable_hybrid_kv_cache_manager or hybrid_needs_disabling(args, out):
        out["disable_hybrid_kv_cache_manager"] = True
    return out


def hybrid_needs_disabling(args: argparse.Namespace, precision: dict) -> bool:
    """Whether the models have sliding-window layers whose pages vLLM's hybrid KV cache
    manager cannot unify (simulator.engine.kv.hybrid_refused): vLLM refuses them unless
    it is disabled, so the plan disables it and says so on stderr."""
    from specbatch.simulator.config.sim_config import make_config
    from specbatch.simulator.engine.kv import hybrid_refused

    config = make_config({"target": args.target, "draft": args.draft, **precision})
    if not hybrid_refused(config):
        return False
    sys.stderr.write(f"specbatch plan: note: disable_hybrid_kv_cache_manager set: the page "
                     f"sizes of {args.target} and {args.draft} cannot be unified, and vLLM "
                     "refuses the hybrid KV cache manager for them\n")
    return True


def arrival_fields(args: argparse.Namespace) -> dict:
    if args.arrival == "poisson":
        require(args.rate is not None, "--rate: expected the offered load in requests/s for "
                "Poisson arrivals (or --arrival trace / burst), got none")
        require(args.rate > 0, f"--rate: expected requests/s > 0, got {args.rate}")
        return {"arrival": "poisson", "rate": args.rate}
    require(args.rate is None, f"--rate: expected no rate with --arrival {args.arrival} (the "
            f"times are given), got {args.rate}")
    return {"arrival": args.arrival}


def workload_lengths(args: argparse.Namespace):
    """The (prompt, output) length distributions to draw a workload from, or None when the
    workload is a file or the trace's own requests (one-line errors for bad flags)."""
    from specbatch.simulator.workload.lengths import parse_lengths

    given = [f for f, v in (("--prompt-len", args.prompt_len), ("--output-len", args.output_len))
             if v is not None]
    if args.workload is not None:
        require(not given, f"{given[0] if given else ''}: expected either --workload or length "
                "distributions, got both")
        return None
    # None (not given) is the trace's lengths; an empty string is a mistake, refused by
    # parse_lengths, never read as "trace"
    prompt = parse_lengths("trace" if args.prompt_len is None else args.prompt_len,
                           "--prompt-len")
    output = parse_lengths("trace" if args.output_len is None else args.output_len,
                           "--output-len")
    if prompt.kind == output.kind == "trace":
        return None
    require(args.arrival != "trace", "--arrival trace: expected a workload file or the "
            "trace's own requests (length distributions carry no arrival times)")
    return prompt, output


def run_command(args: argparse.Namespace) -> int:
    from specbatch.analysis.plan.planner import run_plan

    if args.max_rate:
        return run_max_rate(args)
    require(args.data_parallel_size == 1 and not args.enable_expert_parallel,
            "--data-parallel-size/--enable-expert-parallel: expected them with --max-rate "
            "only (the deployment search does not enumerate DP + EP yet)")
    question = build_question(args)
    if args.scheduler is not None:
        from specbatch.analysis.sweep.executors import check_scheduler

        check_scheduler(args.scheduler)
    from specbatch.analysis.plan.runner import default_workers

    workers = args.workers if args.workers is not None else default_workers()
    report = run_plan(question, args.out, workers=workers, scheduler=args.scheduler,
                      progress=not (args.no_progress or args.json))
    emit(report, args.json, text=None if args.json else format_report(report))
    return 0


MAX_RATE_FILES = ("max_rate.json", "workload.csv")


def _one(values, flag: str):
    values = tuple(dict.fromkeys(values))
    require(len(values) == 1, f"{flag}: expected exactly one value with --max-rate, got "
            f"{', '.join(map(str, values))}")
    return values[0]


def run_max_rate(args: argparse.Namespace) -> int:
    """``plan --max-rate``: one deployment's capacity within the SLOs (OUT/max_rate.json)."""
    from pathlib import Path

    from specbatch.analysis.plan.max_rate import search, simulate_probe
    from specbatch.analysis.plan.slo import Slos
    from specbatch.analysis.plan.space import PLAN_POLICIES, Speculation
    from specbatch.io import atomic_write, check_output_dir, dumps, prepare_output_dir
    from specbatch.simulator.config.sim_config import make_config
    from specbatch.simulator.cost.gpus.hardware import get_hardware
    from specbatch.simulator.policies.catalogue import entry

    require(args.out is not None, "--out: expected a directory for --max-rate's "
            "max_rate.json, got none")
    require(args.arrival == "poisson", f"--arrival: expected poisson with --max-rate (the rate "
            f"is searched), got {args.arrival}")
    hardware = _one([get_hardware(h.strip()).name for h in args.hardware.split(",")
                     if h.strip()], "--hardware")
    tp = _one(args.tp, "--tp")
    policy = _one(_names(args.policies, "--policies", {p: p for p in PLAN_POLICIES}),
                  "--policies")
    verify = _one(_names(args.verify, "--verify", {"token": "token", "tv": "token",
                                                   "block": "block", "bv": "block"}), "--verify")
    row = entry(policy)
    k = _one(args.k, "--k") if row.uses_k else None
    extra = _one(args.extra, "--extra") if row.uses_extra else 0
    check_slo_bounds(args)
    slos = Slos(ttft=args.slo_ttft, tpot=args.slo_tpot, e2e=args.slo_e2e,
                percentile=args.percentile, goodput=args.goodput,
                allow_preemption=args.allow_preemption)
    spec = Speculation(policy=policy, k=k, extra=extra, verify=verify)
    fields = {"trace": args.trace, "requests": args.requests, "target": args.target,
              "draft": args.draft, "cost": args.cost, "max_num_seqs": args.max_num_seqs,
              "kv_mode": "paged", "gpu_memory_utilization": args.gpu_memory_utilization,
              "seed": args.seed, "hardware": hardware, "tp": tp, "replicas": args.replicas,
              **({"data_parallel_size": args.data_parallel_size}
                 if args.data_parallel_size > 1 else {}),
              **({"enable_expert_parallel": True} if args.enable_expert_parallel else {}),
              **({"draft_head": args.draft_head} if args.draft_head else {}),
              **({"profile": args.profile} if args.profile else {}),
              **precision_fields(args), **spec.fields()}
    if policy == "ar":
        fields.pop("verify")
    if not extra:
        fields.pop("extra")
    lengths = workload_lengths(args)
    start = args.rate if args.rate is not None else 1.0
    make_config({**fields, "arrival": "poisson", "rate": start})  # one-line errors first
    out = Path(args.out)
    check_output_dir(out, allow_existing=True)
    if out.is_dir():
        other = sorted(p.name for p in out.iterdir() if p.name not in MAX_RATE_FILES)
        require(not other, f"--out {out}: holds files that are not plan --max-rate's "
                f"({', '.join(other[:3])}); choose an empty or new directory")
    prepare_output_dir(out, allow_existing=True)
    if args.workload is not None:
        from specbatch.simulator.workload.arrivals import resolve_workload

        fields["workload"] = str(resolve_workload(args.workload).resolve())
    elif lengths is not None:
        from specbatch.analysis.plan.planner import write_length_workload

        fields["workload"] = str(write_length_workload(fields, *lengths,
                                                       out.resolve() / "workload.csv"))
    result = search(simulate_probe(fields, slos), start=start, tolerance=args.rate_tolerance)
    dp = args.data_parallel_size
    shape = (f"DP {dp}{' + EP' if args.enable_expert_parallel else ''}" if dp > 1 else
             f"{args.replicas} replica{'s' if args.replicas > 1 else ''}")
    report = {"question": {**fields, "slos": slos.describe()},
              "deployment": f"{args.replicas * dp * tp} x {hardware} (tp {tp}, {shape}), "
                            f"{spec.label}",
              **result}
    atomic_write(out / "max_rate.json", dumps(report, indent=1))
    emit(report, args.json, text=None if args.json else format_max_rate(report))
    return 0


def format_max_rate(report: dict) -> str:
    lines = [f"deployment: {report['deployment']}; {report['question']['slos']}"]
    if report["max_rate"] is None:
        lines.append("max rate: none (every probed rate fails; see probes)")
    elif not report["bounded"]:
        lines.append(f"max rate: > {report['max_rate']:.4g} req/s (no failing rate found)")
    else:
        lines.append(f"max rate: {report['max_rate']:.4g} req/s (fails at "
                     f"{report['first_failing']:.4g}: {'; '.join(report['limits_above'])})")
    lines.append(f"how: {report['how']}")
    lines += [f"  probe {p['rate']:.4g} req/s: {'pass' if p['passed'] else 'fail'}"
              for p in report["probes"]]
    if report["non_monotone"]:
        lines.append(f"warning: non-monotone probes at {report['non_monotone']}")
    return "\n".join(lines)
