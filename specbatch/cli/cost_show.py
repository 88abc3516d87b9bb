"""``specbatch cost show``: the draft pass, target decode pass and target verification pass (k+1
query tokens per request) of the active cost model across batch sizes, so its memory-bound
floor and compute knee are visible, then the draft/target split of one speculative step (k
draft passes, the verify pass, the rejection sampler of ``--verify`` under ``--verify-cost``,
the engine overhead, the draft's and the sampler's shares), where the time of a pass goes, and
the KV capacity; registered by specbatch.cli.cost.
"""

from __future__ import annotations

import sys
from types import SimpleNamespace

from specbatch.cli.common import (
    JSON_FLAG,
    auto_bool,
    capped_int,
    emit,
)
from specbatch.cli.flags import flag
from specbatch.errors import require
from specbatch.fields import AUTO
from specbatch.limits import MAX_BATCH, MAX_CONTEXT_TOKENS, MAX_DEPTH
from specbatch.simulator.cost.analytic.memory import weights_shortfall
from specbatch.simulator.cost.analytic.precision import KV_CACHE_DTYPES, QUANTIZATIONS, describe
from specbatch.simulator.cost.analytic.roofline import RooflineCost
from specbatch.simulator.cost.features.async_overhead import AsyncOverheadCost, resolve_async
from specbatch.simulator.cost.gpus.hardware import (
    DEFAULT_EXECUTION,
    DEFAULT_SAMPLER,
    EXECUTIONS,
    HARDWARE,
    VERIFY_COSTS,
    get_sampler,
)
from specbatch.simulator.cost.measured.profiled import (
    ProfiledCost,
    mape_warnings,
)
from specbatch.simulator.cost.registry import (
    build_cost_model,
    execution_info,
    pass_times,
    prefill_time,
    step_split,
)
from specbatch.simulator.cost.report import (
    SHOWN_PARTS,
    cost_sources,
    row_breakdowns,
    source_line,
)
from specbatch.simulator.cost.verify_cost import build_verify_cost
from specbatch.simulator.replay.rules import names as rule_names
from specbatch.simulator.replay.rules import rule_entry
from specbatch.traces.models.model_shape import ModelShape
from specbatch.traces.models.shapes import SHAPES

DEFAULT_BATCHES = (1, 8, 32, 64, 128, 256)


#: ``cost show``'s flags in --help order.
SHOW_FLAGS = (
    flag("--cost", default="auto",
         choices=("auto", "roofline", "profiled", "calibrated", "aic"),
         help="cost model (default %(default)s; auto: the best validated source covering the "
              "GPU and models, simulator/cost/resolve.py; calibrated: bundled public GPU "
              "profiles + calibrated roofline; aic: AIConfigurator's vLLM op tables)"),
    flag("--profile", help="latency profile for --cost profiled, or a "
                           "`cost import-vidur` folder for --cost calibrated"),
    flag("--hardware", default="h100", help=f"one of {', '.join(HARDWARE)}"),
    flag("--target", default="vicuna-33b", help="target model shape"),
    flag("--draft", default="vicuna-68m", help="draft model shape"),
    flag("--tp", type=capped_int(MAX_BATCH), default=1,
         help="tensor-parallel degree of the target"),
    flag("--draft-weight-bits", type=int, choices=range(2, 17), default=16,
         metavar="BITS", help="bits per weight of the draft's decoder-layer "
                              "projections, 2-16 (default 16 = bf16; below, a quantised draft at "
                              "bits/8 + 4/128 bytes per weight, roofline only)"),
    flag("--execution", default=DEFAULT_EXECUTION, choices=tuple(EXECUTIONS),
         help="roofline launch-latency preset (default %(default)s; eager = "
              "host-bound HF forward, fitted to the H100 profiles)"),
    flag("--routing-skew", type=float, default=0.0, metavar="S",
         help="Zipf exponent of a mixture-of-experts target's expert loads "
              "(default 0 = uniform routing; theory.moe, roofline only)"),
    flag("--quantization", default="none", choices=QUANTIZATIONS,
         help="the target's weight format, vLLM's --quantization (default none = "
              "the checkpoint's own; simulator.cost.analytic.precision)"),
    flag("--kv-cache-dtype", default="auto", choices=KV_CACHE_DTYPES,
         help="KV-cache element type, vLLM's --kv-cache-dtype (default auto = "
              "bf16; fp8*: 1 byte)"),
    flag("--disable-hybrid-kv-cache-manager", action="store_true",
         help="price the KV capacity without vLLM V1's hybrid KV cache manager (a "
              "sliding-window model's layers all hold every token); set automatically, with a "
              "note, when the models' page sizes cannot be unified"),
    flag("--host", default="vllm", choices=("vllm", "fixed"),
         help="host time (default %(default)s: vLLM's scheduler + input preparation per step "
              "and request, the proposer loop's per-pass floor, the n-gram proposer's CPU "
              "time; simulator.cost.features.host; fixed: the preset's 1 ms per step)"),
    flag("--async-scheduling", nargs="?", const=True, default=AUTO, type=auto_bool,
         metavar="AUTO|BOOL",
         help="vLLM's --async-scheduling: the host time hides under the target pass (max of "
              "the two); auto (default) = vLLM's rule for the flag unset: on, off for --draft "
              "ngram with --k > 0; given alone = true (dropped for ngram); false = synchronous "
              "(simulator.cost.features.async_overhead.resolve_async)"),
    flag("--batch", type=capped_int(MAX_BATCH), nargs="+", default=list(DEFAULT_BATCHES),
         help="batch sizes (requests per pass)"),
    flag("--kv", type=capped_int(MAX_CONTEXT_TOKENS, low=0), default=512, help="cached tokens per "
                                                                               "request (default "
                                                                               "512)"),
    flag("--k", type=capped_int(MAX_DEPTH, low=0), default=3, help="speculative tokens per request "
                                                                   "(default 3)"),
    flag("--prompt", type=capped_int(MAX_CONTEXT_TOKENS), default=512, help="prompt length for the "
                                                                            "prefill row"),
    flag("--verify", default="token", choices=rule_names(),
         help="verification rule the sampler runs (default %(default)s)"),
    flag("--verify-cost", default=DEFAULT_SAMPLER, choices=VERIFY_COSTS,
         help="rejection sampler preset priced in the step (default %(default)s; "
              "none: 0 s; needs a target shape for its vocabulary)"),
    JSON_FLAG,
)




def show_sampler(args):
    """The rejection sampler ``cost show`` prices (dense draft rows, the target shape's
    vocabulary); None for ``--verify-cost none`` or a target that is not a known shape."""
    if args.verify_cost == "none" or args.target.lower() not in SHAPES:
        return None
    return build_verify_cost(args.verify_cost, rule_entry(args.verify).sampler_cost, args.hardware,
                             SHAPES[args.target.lower()].vocab)


def split_lines(row: dict, k: int) -> list[str]:
    """The text of one row's breakdown (its passes' seconds per part, in ms)."""
    split = row["breakdown"]
    if all(v is None for v in split.values()):
        return [f"batch {row['batch']}: no per-part split (a fitted law of the whole pass)"]
    moe = any(parts is not None and parts["experts"] > 0 for parts in split.values())
    shown = [p for p in SHOWN_PARTS if moe or p != "experts"]  # a dense model's experts are 0
    lines = [f"where the time goes at batch {row['batch']} (ms): "
             + " + ".join(shown) + " = pass"]
    for name, parts in split.items():
        label = name if name != "target_verify" else f"target_verify (k+1={k + 1})"
        if parts is not None:
            lines.append(f"  {label:<22} " + " + ".join(f"{1e3 * parts[p]:.3f}" for p in shown)
                         + f" = {1e3 * sum(parts.values()):.3f}")
    return lines


def moe_line(model, args) -> tuple[str, dict] | None:
    """For a mixture-of-experts roofline target: its routing (E, k, skew) and the experts
    one decode / verify pass touches per MoE layer at the first batch size (THEORY.md §8)."""
    if not isinstance(model, RooflineCost) or not model.target.is_moe:
        return None
    shape, touched = model.target, model.consts["target"].experts_touched
    batch = args.batch[0]
    info = {"experts": shape.experts, "top_k": shape.top_k, "moe_layers": shape.moe_layers,
            "routing_skew": args.routing_skew, "params": shape.params,
            "active_params": shape.active_params}
    routing = "uniform routing" if args.routing_skew == 0 else f"routing skew {args.routing_skew:g}"
    text = (f"mixture of experts: {shape.moe_layers} MoE layers, {shape.top_k} of "
            f"{shape.experts} experts per token ({routing}), {shape.params / 1e9:.2f} B "
            f"parameters, {shape.active_params / 1e9:.2f} B active; experts read per layer at "
            f"batch {batch}: decode {touched(float(batch)):.1f}, verify "
            f"{touched(float(batch * (args.k + 1))):.1f}")
    return text, info


def target_precision(model, args) -> str:
    """" (fp8 W8A8, fp8 KV cache)" for a quantised target or fp8 KV, else ""."""
    target = getattr(getattr(model, "inner", model), "target", None)
    if not isinstance(target, ModelShape):
        return ""
    text = describe(target, args.kv_cache_dtype, getattr(model, "inner", model).hardware)
    return f" ({text})" if text else ""


def run_show(args) -> int:
    require(all(b >= 1 for b in args.batch), f"--batch {args.batch}: expected integers >= 1")
    require(args.kv >= 0, f"--kv {args.kv}: expected an integer >= 0")
    require(args.k >= 0, f"--k {args.k}: expected an integer >= 0")
    require(args.prompt >= 1, f"--prompt {args.prompt}: expected an integer >= 1")
    model = build_cost_model(args.cost, args.hardware, args.target, args.draft, args.tp,
                             args.profile, execution=args.execution,
                             draft_weight_bits=args.draft_weight_bits,
                             routing_skew=args.routing_skew, quantization=args.quantization,
                             kv_cache_dtype=args.kv_cache_dtype)
    priced = model  # with vLLM's host share (simulator.cost.features.host) unless --host fixed
    # vLLM's rule for the flag, as a simulated run resolves it (async_overhead.resolve_async)
    setting = resolve_async(args.async_scheduling, args.draft, args.k > 0)
    if args.host == "vllm":
        from specbatch.simulator.cost.features.host import with_host

        priced = with_host(model, args.draft, overlap=setting.on)
    elif setting.on:  # the preset's flat overhead under the pass, as simulate prices it
        priced = AsyncOverheadCost(model)
    rows = pass_times(priced, args.batch, args.kv, args.k)
    for row in rows:
        row["breakdown"] = row_breakdowns(priced, row["batch"], args.kv, args.k)
    sources = cost_sources(priced)
    sampler = show_sampler(args)
    split = [step_split(priced, b, args.kv, args.k, sampler) for b in args.batch]
    execution = execution_info(model)
    prefill = prefill_time(priced, args.prompt)
    out = {"cost": args.cost, "hardware": args.hardware, "target": args.target,
           "draft": args.draft, "tp": args.tp, "kv": args.kv, "k": args.k, "host": args.host,
           "overhead_s": priced.overhead, "prefill_s": prefill, "prompt": args.prompt,
           "rows": rows, "step_split": split, "execution": execution, "verify": args.verify,
           "verify_cost": args.verify_cost if sampler is not None else "none",
           "async_scheduling": str(setting),
           "sources": sources}
    if isinstance(model, ProfiledCost):
        out["cv_mape"] = model.cv_mape
        out["warnings"] = mape_warnings(model)
        for line in out["warnings"]:
            sys.stderr.write(f"warning: {line}\n")
    head = getattr(model, "head", None)
    disable = hybrid_disabled(args, model, out)
    # simulator.cost.features.draft_head
    if head is not None and getattr(model, "first_pass_time", None) is not None:
        out["head"] = {"method": head.method, "held_params": head.held_params,
                       "layers": head.layer.layers, "lm_vocab": head.lm_vocab,
                       "own_lm_head": head.own_lm_head}
        out["kv_capacity_tokens"] = model.kv_capacity_tokens(0.9, 16, disable)
        out.update(hybrid_kv(SimpleNamespace(  # the head's layer among the KV cache groups
            target=model.target, draft=head.layer, hardware=model.hardware,
            kv_capacity_tokens=model.kv_capacity_tokens), args.kv_cache_dtype, disable))
    if isinstance(model, RooflineCost):
        out["ridge_flop_per_byte"] = model.hardware.ridge
    if hasattr(model, "kv_capacity_tokens") and hasattr(model, "target"):
        # memory is the shapes' and the GPU's, whichever source prices the passes
        out["draft_weight_bits"] = args.draft_weight_bits
        out["quantization"] = model.target.quantization
        out["kv_cache_dtype"] = args.kv_cache_dtype
        out["kv_capacity_tokens"] = model.kv_capacity_tokens(0.9, 16, disable)
        out.update(hybrid_kv(model, args.kv_cache_dtype, disable))
        short = weights_shortfall(args.hardware, args.target, args.draft, args.tp, 0.9,
                                  args.draft_weight_bits, args.quantization)
        if short is not None:  # simulate refuses this pair; the pass times are hypothetical
            out["warnings"] = [f"gpu_memory_utilization 0.9: {short}"]
            sys.stderr.write(f"warning: {out['warnings'][0]}\n")
    bits = "" if args.draft_weight_bits == 16 else f" ({args.draft_weight_bits}-bit weights)"
    precision = target_precision(model, args)
    lines = [f"{args.cost} cost: {args.target}{precision} (tp={args.tp}) + draft "
             f"{args.draft}{bits} on "
             f"{args.hardware}; kv={args.kv} per request, k={args.k}; "
             f"step overhead {1e3 * priced.overhead:.2f} ms; async scheduling "
             f"{out['async_scheduling']}"]
    header = f"{'batch':>6} {'draft ms':>10} {'decode ms':>10} {'verify(k+1) ms':>15}"
    lines.append(header + ("  bound" if isinstance(model, RooflineCost) else ""))
    for r in rows:
        line = (f"{r['batch']:>6} {1e3 * r['draft_s']:>10.3f} {1e3 * r['target_decode_s']:>10.3f} "
                f"{1e3 * r['target_verify_s']:>15.3f}")
        lines.append(line + (f"  {r['verify_bound']}" if "verify_bound" in r else ""))
    lines.append(f"source: {source_line(sources)}")
    lines += split_lines(rows[-1], args.k)
    lines.append(f"one speculative step at k={args.k} (ms): draft pass x {args.k} + verify + "
                 f"sampler ({args.verify}, {out['verify_cost']}) + overhead = step, draft %, "
                 "sampler %")
    for r in split:
        passes = (f"{1e3 * r['draft_pass_s']:.3f} x {r['draft_passes']}"
                  if "draft_first_pass_s" not in r else  # a head: pass 1, then k − 1 more
                  f"{1e3 * r['draft_first_pass_s']:.3f} + {1e3 * r['draft_pass_s']:.3f} x "
                  f"{r['draft_passes'] - 1}")
        lines.append(f"  batch {r['batch']:>4}: {passes} "
                     f"= {1e3 * r['draft_s']:.3f} + {1e3 * r['target_verify_s']:.3f} + "
                     f"{1e3 * r['sampler_s']:.3f} + "
                     f"{1e3 * r['overhead_s']:.3f} = {1e3 * r['step_s']:.3f}, "
                     f"draft {100 * r['draft_share']:.1f} %, sampler "
                     f"{100 * r['sampler_share']:.2f} %")
    if execution is not None:
        floors = ", ".join(f"{role} {1e3 * v['floor_s']:.3f} ms ({v['layers']} layers)"
                           for role, v in execution["roles"].items())
        lines.append(f"execution {execution['name']} ({execution['combine']}): launch floor "
                     f"{floors}")
        lines.append(f"  source: {execution['source']}")
    if sampler is not None:
        lines.append(f"sampler {sampler.sampler}: {get_sampler(sampler.sampler).source}")
    lines.append(f"prefill of a {args.prompt}-token prompt: {1e3 * prefill:.2f} ms")
    if "head" in out:
        h = out["head"]
        lines.append(f"{h['method']} head: {h['layers']} layer(s), {h['held_params'] / 1e6:.1f} M "
                     f"weights of its own, LM head of {h['lm_vocab']} rows "
                     f"({'its own' if h['own_lm_head'] else 'the target' + chr(39) + 's'}); "
                     "draft pass 1 runs over the verify pass's k + 1 tokens per request")
    moe = moe_line(model, args)
    if moe:
        out["moe"] = moe[1]
        lines.append(moe[0])
    if "kv_capacity_tokens" in out:
        line = f"KV capacity at gpu_memory_utilization 0.9: {out['kv_capacity_tokens']} tokens"
        if "kv_groups" in out:  # vLLM V1's hybrid manager: one block pool, several groups
            line += (f" of one KV cache group ({out['kv_groups']} groups share the pool; "
                     f"vLLM logs {out['vllm_kv_tokens']} tokens)")
        lines.append(line)
    if "notes" in out:
        lines += [f"note: {note}" for note in out["notes"]]
    emit(out, args.json, "\n".join(lines))
    return 0


def hybrid_disabled(args, model, out: dict) -> bool:
    """``--disable-hybrid-kv-cache-manager``, or True with a note in ``out`` when the models
    have sliding-window layers whose pages vLLM's hybrid manager cannot unify
    (simulator.cost.analytic.kv_groups.pages_unify: vLLM refuses the pair unless it is disabled)."""
    from specbatch.simulator.cost.analytic.kv_groups import pages_unify

    out["disable_hybrid_kv_cache_manager"] = bool(args.disable_hybrid_kv_cache_manager)
    head = getattr(model, "head", None)
    target = getattr(model, "target", None)
    draft = head.layer if head is not None else getattr(model, "draft", None)
    if (args.disable_hybrid_kv_cache_manager or not isinstance(target, ModelShape)
            or not (target.is_windowed or getattr(draft, "is_windowed", False))
            or pages_unify(target, draft)):
        return bool(args.disable_hybrid_kv_cache_manager)
    out["disable_hybrid_kv_cache_manager"] = True
    out.setdefault("notes", []).append(
        f"KV capacity priced with disable_hybrid_kv_cache_manager: the page sizes of "
        f"{target.name}'s sliding-window layers and {getattr(draft, 'name', 'the draft')}'s "
        "cannot be unified, and vLLM refuses the hybrid KV cache manager for them")
    return True


def hybrid_kv(model, kv_cache_dtype: str, disable: bool = False) -> dict:
    """For a sliding-window model under vLLM V1's hybrid KV cache manager: its number of KV
    cache groups and the token count vLLM logs (num_blocks // groups · block size,
    simulator.cost.analytic.kv_groups.KVLayout.vllm_tokens); {} otherwise. The capacity itself is
    tokens of one group: each request draws on the shared pool once per group."""
    from specbatch.simulator.cost.analytic.kv_groups import kv_layout
    from specbatch.simulator.cost.analytic.precision import kv_element_bytes

    shapes = [m for m in (model.target, model.draft) if m is not None]
    if not any(m.is_windowed for m in shapes):
        return {}
    block = 16  # vLLM's default block_size, as kv_capacity_tokens prices it
    layout = kv_layout(model.target, model.draft,
                       kv_element_bytes(kv_cache_dtype, model.hardware), block, disable)
    if not layout.hybrid:
        return {}
    blocks = model.kv_capacity_tokens(0.9, block, disable) // block
    return {"kv_groups": len(layout.groups), "vllm_kv_tokens": layout.vllm_tokens(blocks, block)}
