"""``specbatch cost``: fit a profiled cost model (``fit``) or print roofline step times (``show``).

``cost fit PROFILE`` fits, per role, a non-negative linear law and an interpolated grid
(simulator/cost/measured/profiled.py), keeps the one with the lower k-fold cross-validated MAPE and
reports both families' MAPE and the choice, warning on stderr (and in ``--json``'s ``warnings``) for
a role whose held-out MAPE exceeds 10 %; ``cost show`` prints the draft pass, target decode pass and
target verification pass (k+1 query tokens per request) across batch sizes, so the memory-bound
floor and the compute knee of the active cost model are visible, then the draft/target split of one
speculative step (k draft passes, the verify pass, the rejection sampler of ``--verify`` under
``--verify-cost`` (simulator.cost.verify_cost), the engine overhead, the draft's and the sampler's
shares) and, for the roofline, which execution preset (``--execution``) set the launch floors and
where its numbers come from.
"""

from __future__ import annotations

import argparse
import sys

from specbatch.cli.common import (
    JSON_FLAG,
    add_command,
    emit,
    example,
    help_without_verb,
    positive_int,
)
from specbatch.cli.cost_show import SHOW_FLAGS, run_show
from specbatch.cli.flags import flag
from specbatch.errors import require
from specbatch.simulator.cost.measured.profiled import (
    fit_profile,
    fit_report,
    mape_warnings,
)

#: ``cost fit``'s flags in --help order.
FIT_FLAGS = (
    flag("profile", metavar="PROFILE", help="latency profile (.parquet or .csv)"),
    flag("--target", help="target model to select when the profile holds several"),
    flag("--draft", help="draft model to select when the profile holds several"),
    flag("--device", help="device to select when the profile holds several"),
    flag("--folds", type=positive_int, default=5, help="cross-validation folds (default 5)"),
    JSON_FLAG,
)


#: ``cost import-vidur``'s flags in --help order.
IMPORT_FLAGS = (
    flag("folder", metavar="DIR", help="Vidur-layout profile folder"),
    flag("--out", required=True, help="output folder (new, empty, or an earlier "
                                      "import of the same files)"),
    flag("--repository", help="where the profiles come from (provenance)"),
    flag("--commit", help="the source's commit (provenance)"),
    flag("--licence", help="the source's licence (provenance)"),
    flag("--force", action="store_true", help="replace an earlier import"),
    JSON_FLAG,
)


#: ``cost import-aiconfigurator``'s flags in --help order.
AIC_FLAGS = (
    flag("folder", metavar="DIR", help="AIConfigurator's systems/data folder"),
    flag("--out", required=True, help="output folder (new, empty, or an earlier "
                                      "import of the same tables)"),
    flag("--system", nargs="+", default=[], metavar="SYSTEM",
         help="systems to fit (default: every system with vLLM tables)"),
    flag("--vllm-version", help="vLLM version of the tables (default: each system's newest "
                                "version with gemm, attention, comm and moe tables)"),
    flag("--commit", help="AIConfigurator's commit (provenance)"),
    flag("--force", action="store_true", help="replace an earlier import"),
    JSON_FLAG,
)


def register(subparsers) -> None:
    cost = subparsers.add_parser(
        "cost", help="fit or inspect the step-time cost model",
        description=__doc__.split("\n\n")[0],
        epilog=example("specbatch cost show --hardware h100 --target vicuna-33b --draft vicuna-68m",
                       "specbatch cost fit profile.parquet --json"),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    verbs = cost.add_subparsers(dest="verb", metavar="VERB", parser_class=type(cost))

    add_command(
        verbs, "fit", help="fit a profiled cost model and report its cross-validated MAPE",
        description="Fit t = β·features (non-negative least squares) and an interpolated "
                    "(batch, query, kv) grid per role from a latency profile (Parquet/CSV: model, "
                    "role, device, dtype, batch_size, query_tokens, kv_tokens, latency_s), keep "
                    "the family with the lower k-fold cross-validated MAPE and report both.",
        examples=("specbatch cost fit profile.parquet",
                  "specbatch cost fit profile.csv --target vicuna-33b --folds 10 --json"),
        flags=FIT_FLAGS, run=run_fit)
    add_command(
        verbs, "import-vidur", help="import GPU profiles in Vidur's layout for --cost calibrated",
        description="Read Vidur-layout profiles (compute/<gpu>/<org>/<model>/mlp.csv, "
                    "network/<cluster>/{all_reduce,send_recv}.csv, e.g. Vidur's "
                    "data/profiling or your own profiler run) into compute.parquet, "
                    "network.parquet and PROVENANCE.json (medians and std per op and token "
                    "count); `cost show --cost calibrated --profile OUT` then prices the "
                    "cells it covers.",
        examples=("specbatch cost import-vidur vidur/data/profiling --out my-profiles",
                  "specbatch cost show --cost calibrated --profile my-profiles "
                  "--target vicuna-7b"),
        flags=IMPORT_FLAGS, run=run_import)
    add_command(
        verbs, "import-aiconfigurator",
        help="fit per-op laws to AIConfigurator's measured vLLM tables",
        description="Read AIConfigurator's measured vLLM op tables (DIR = its "
                    "aic-core/src/aiconfigurator_core/systems/data: <system>/{gemm,attention,"
                    "comm,moe}/vllm/<version>/*.parquet), fit per-op laws per GPU (attention "
                    "decode and prefill, GEMMs by dtype, all-reduce, MoE; "
                    "simulator/cost/measured/aic_laws.py) with their leave-one-shape-out "
                    "errors, and write laws.json, the compact measured curves cost = \"aic\" "
                    "reads (curves/<system>/<family>.parquet) and PROVENANCE.json into OUT.",
        examples=("specbatch cost import-aiconfigurator aiconfigurator/aic-core/src/"
                  "aiconfigurator_core/systems/data --system h100_sxm --out my-laws",
                  "specbatch cost import-aiconfigurator DATA --vllm-version 0.19.0 "
                  "--out laws --json"),
        flags=AIC_FLAGS, run=run_import_aic)
    add_command(
        verbs, "show", help="print draft/target step times across batch sizes",
        description="Print the step time of one draft pass (1 token per request), one target "
                    "decode pass (1 token) and one target verification pass (k+1 tokens) per "
                    "batch size, each request holding --kv cached tokens.",
        examples=("specbatch cost show --hardware h100 --target vicuna-33b --draft vicuna-68m",
                  "specbatch cost show --hardware h200 --batch 64 --kv 512 --json"),
        flags=SHOW_FLAGS, run=run_show)
    help_without_verb(cost)


def run_fit(args) -> int:
    require(args.folds >= 2, f"--folds {args.folds}: expected an integer >= 2")
    model = fit_profile(args.profile, target=args.target, draft=args.draft, device=args.device,
                        folds=args.folds)
    roles = fit_report(model)
    warnings = mape_warnings(model)
    out = {"profile": str(args.profile), "roles": roles,
           "cv_mape": {role: r["cv_mape"] for role, r in roles.items()},
           "family": {role: r["family"] for role, r in roles.items()}, "warnings": warnings}
    for line in warnings:
        sys.stderr.write(f"warning: {line}\n")
    lines = [f"profile {args.profile}"]
    for role, r in roles.items():
        lines.append(f"{role:<6} {r['model'] or '?'}: {r['rows']} rows, {r['folds']}-fold CV MAPE "
                     f"{100 * r['cv_mape']:.2f} % (in-sample {100 * r['fit_mape']:.2f} %), "
                     f"{r['family']} law")
        lines.append("    CV MAPE by family: " + ", ".join(
            f"{name} {100 * v:.2f} %" for name, v in r["family_cv_mape"].items()))
        if r["family"] == "floor":
            per_layer = (f" ({1e6 * r['floor_per_layer_s']:.0f} µs per layer)"
                         if r["floor_per_layer_s"] is not None else "")
            lines.append(f"    floor          {1e3 * r['floor_s']:.4g} ms{per_layer}")
        for name, value in r["coefficients"].items():
            if value > 0:
                lines.append(f"    {name:<14} {value:.4g}")
    emit(out, args.json, "\n".join(lines))
    return 0


def run_import(args) -> int:
    from specbatch.traces.public.vidur_profiles import import_vidur, write_public_profiles

    source = {k: v for k, v in (("repository", args.repository), ("commit", args.commit),
                                ("licence", args.licence)) if v}
    profiles = import_vidur(args.folder, source or None)
    write_public_profiles(profiles, args.out, force=args.force)
    c, n = profiles.compute, profiles.network
    out = {"out": str(args.out), "compute_rows": len(c), "network_rows": len(n),
           "gpus": sorted(c["gpu"].unique()), "models": sorted(c["model"].unique()),
           "clusters": sorted(n["cluster"].unique()) if len(n) else [],
           "files": len(profiles.provenance["files"])}
    emit(out, args.json, f"wrote {args.out}/: {len(c)} compute rows ({', '.join(out['gpus'])}; "
                         f"{len(out['models'])} models), {len(n)} collective rows from "
                         f"{out['files']} files")
    return 0


def run_import_aic(args) -> int:
    from specbatch.io import check_result_dir
    from specbatch.simulator.cost.measured.aic_import import RESULT_KIND, import_laws, write_laws

    if not args.force:
        check_result_dir(args.out, RESULT_KIND, "", force=True)
    result = import_laws(args.folder, tuple(args.system), args.vllm_version, args.commit)
    write_laws(result, args.out, force=args.force)
    table = {name: {"vllm_version": s["vllm_version"], "laws": len(s["laws"])}
             for name, s in result["systems"].items()}
    curves = sum(len(c) for c in result.get("curves", {}).values())
    lines = [f"wrote {args.out}/: laws.json, {curves} curves, PROVENANCE.json "
             f"({len(result['provenance']['files'])} tables)"]
    for name, s in result["systems"].items():
        lines.append(f"{name} (vLLM {s['vllm_version']}):")
        for law in s["laws"]:
            group = " ".join(str(v) for v in law["group"].values())
            lines.append(f"  {law['family']:<18} {group:<60} {law['rows']:>6} rows "
                         f"{law['shapes']:>4} shapes  LOSO MAPE law {100 * law['mape_loso']:5.1f} %"
                         f"  transfer {100 * law['mape_transfer']:5.1f} %")
    emit({"out": str(args.out), "systems": table, "laws": result["systems"]}, args.json,
         "\n".join(lines))
    return 0

