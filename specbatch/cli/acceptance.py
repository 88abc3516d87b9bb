"""``specbatch acceptance``: acceptance profiles in and out (traces.acceptance).

Verbs: ``import-vllm-metrics`` (a vLLM /metrics scrape, or the window between two), ``make``
(a mean accepted length at K, or per-position rates),
``import-profile`` (Model-Optimizer's ``speculation_profile.json``), ``export-profile`` (a
trace or a profile in Model-Optimizer's layout), ``show`` (per-position table, MAL at each k,
where it came from), ``list`` (the bundled published profiles). Argument parsing and printing
only. An ``--out`` file that exists is refused unless ``--force`` (written atomically).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from specbatch.cli.common import add_json_flag, emit, example, help_without_verb
from specbatch.errors import SpecbatchError, require

DRAFTER_HELP = ("drafter kind: draft-model, eagle, eagle3, mtp, ngram or unknown (the counters "
                "do not say)")


def register(subparsers: Any) -> None:
    """Add ``acceptance`` and its verbs to the CLI root."""
    group = subparsers.add_parser(
        "acceptance", help="import, export and show acceptance profiles",
        description="Acceptance profiles: per-position conditional acceptance of one drafter "
        "on one pair, the accept-length histogram when known, the conditions and provenance "
        "(docs/acceptance.md). simulate, sweep, plan and tune replay one with "
        "--acceptance-profile FILE|NAME.",
        epilog=example("specbatch acceptance import-vllm-metrics after.prom --before "
                       "before.prom --drafter eagle3 --out mine.json",
                       "specbatch acceptance show mine.json",
                       "specbatch acceptance list"),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    verbs = group.add_subparsers(dest="verb", metavar="VERB", parser_class=type(group))
    help_without_verb(group)

    vm = verbs.add_parser(
        "import-vllm-metrics", help="a profile from vLLM's Prometheus spec-decode counters",
        description="Read vllm:spec_decode_num_drafts_total, _num_draft_tokens_total, "
        "_num_accepted_tokens_total and _num_accepted_tokens_per_pos_total{position} from a "
        "saved /metrics scrape (curl http://HOST:PORT/metrics > after.prom); with --before, "
        "the window between two scrapes. a_j = c_j / c_(j-1), MAL = 1 + A / D (THEORY.md §13).",
        epilog=example("specbatch acceptance import-vllm-metrics after.prom --out p.json"),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    vm.add_argument("file", metavar="FILE", help="Prometheus text (the later scrape)")
    vm.add_argument("--before", metavar="FILE", default=None,
                    help="an earlier scrape of the same server: the profile of the window")
    vm.add_argument("--model", default=None,
                    help="the model_name label to read when the scrape serves several")
    vm.add_argument("--drafter", default="unknown", help=DRAFTER_HELP)
    vm.add_argument("--draft", default=None, help="the drafter's name (model id or method)")
    _conditions_flags(vm)
    _out_flags(vm)
    vm.set_defaults(func=run_import_vllm)

    mo = verbs.add_parser(
        "import-profile", help="a profile from Model-Optimizer's speculation_profile.json",
        description="Read NVIDIA Model-Optimizer's speculation_profile.json (the layout of "
        "its PRs #2247/#2313/#2315/#2316): the histogram when given, else the conditional or "
        "marginal vector, checked against each other.",
        epilog=example("specbatch acceptance import-profile speculation_profile.json "
                       "--out p.json"),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    mo.add_argument("file", metavar="FILE", help="speculation_profile.json")
    _out_flags(mo)
    mo.set_defaults(func=run_import_modelopt)

    ex = verbs.add_parser(
        "export-profile", help="a trace or profile in Model-Optimizer's layout",
        description="Write a profile, or a trace's pooled TV law (traces.acceptance."
        "from_trace), as a speculation_profile.json.",
        epilog=example("specbatch acceptance export-profile default --out "
                       "speculation_profile.json"),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    ex.add_argument("source", metavar="PROFILE|TRACE",
                    help="a profile file, a bundled profile name, or a trace (directory or "
                         "'default')")
    _out_flags(ex)
    ex.set_defaults(func=run_export)

    show = verbs.add_parser(
        "show", help="per-position table, MAL at each k, and where it came from",
        description="Print a profile's (or a trace's) conditional rate a_j, survival "
        "P(tau >= j), histogram P(tau = n) and MAL at every k <= K, with its pair, drafter, "
        "conditions, source and notes.",
        epilog=example("specbatch acceptance show ngram-llama3.1-8b-code-edit",
                       "specbatch acceptance show default --json"),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    show.add_argument("source", metavar="PROFILE|TRACE",
                      help="a profile file, a bundled profile name, or a trace")
    add_json_flag(show)
    show.set_defaults(func=run_show)

    mk = verbs.add_parser(
        "make", help="a profile from a mean accepted length at K, or per-position rates",
        description="Write a profile from what you have: --mal M --k K (a published or "
        "forced mean accepted length, bonus token included: vLLM synthetic_acceptance_length, "
        "SGLANG_SIMULATE_ACC_LEN) as the constant chain 1 + sum_(j<=K) alpha^j = M, or "
        "--rates a_1,...,a_K (conditional per-position rates, P(draft j accepted | the "
        "earlier ones were)), or --survival S_1,...,S_K (P(the first j all accepted): the "
        "marginal rates vLLM's synthetic rejection sampler takes, per NVIDIA Model-Optimizer "
        "PR #2247).",
        epilog=example("specbatch acceptance make --mal 3.2 --k 7 --drafter mtp --target "
                       "deepseek-v3 --out mtp.json",
                       "specbatch acceptance make --rates 0.8,0.7,0.6 --out p.json"),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    mk.add_argument("--mal", type=float, default=None, help="mean accepted length at --k")
    mk.add_argument("--k", type=int, default=None, help="K, the drafted tokens of --mal")
    mk.add_argument("--rates", default=None, help="a_1,...,a_K: conditional rates")
    mk.add_argument("--survival", default=None, help="S_1,...,S_K: marginal rates "
                    "P(tau >= j), non-increasing")
    mk.add_argument("--drafter", default="unknown", help=DRAFTER_HELP)
    mk.add_argument("--draft", default=None, help="the drafter's name")
    mk.add_argument("--citation", default=None, help="where the numbers come from")
    _conditions_flags(mk)
    _out_flags(mk)
    mk.set_defaults(func=run_make)

    lst = verbs.add_parser("list", help="the bundled published profiles",
                           description="The bundled profiles: name, drafter, K, MAL at K, "
                           "pair, citation.")
    add_json_flag(lst)
    lst.set_defaults(func=run_list)


def _conditions_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--target", default=None, help="the target's name (default: model_name)")
    p.add_argument("--dataset", default=None, help="what the requests were (dataset)")
    p.add_argument("--temperature", type=float, default=None, help="sampling temperature")
    p.add_argument("--engine-version", default=None, help="vLLM's version")
    p.add_argument("--name", default=None, help="the profile's name (default: the file stem)")


def _out_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", required=True, metavar="FILE.json", help="the file to write")
    p.add_argument("--force", action="store_true", help="replace an existing --out file")
    add_json_flag(p)


def _claim_out(args: argparse.Namespace) -> Path:
    from specbatch.io import prepare_output_file

    path = prepare_output_file(args.out, "--out", (".json",))
    require(args.force or not path.exists(), f"--out {path}: exists; expected a new file (or "
            "--force to replace it)")
    return path


def run_import_vllm(args: argparse.Namespace) -> int:
    from specbatch.traces.acceptance.profile import DRAFTERS, write_profile
    from specbatch.traces.acceptance.vllm_metrics import read_metrics

    require(args.drafter in DRAFTERS, f"--drafter: expected one of {', '.join(DRAFTERS)}, got "
            f"{args.drafter!r}")
    out = _claim_out(args)
    conditions = {"dataset": args.dataset, "temperature": args.temperature, "engine": "vLLM",
                  "engine_version": args.engine_version}
    fields = {"drafter": args.drafter, "draft": args.draft,
              "conditions": {k: v for k, v in conditions.items() if v is not None},
              "name": args.name or Path(args.file).stem}
    if args.target:
        fields["target"] = args.target
    profile = read_metrics(args.file, args.before, args.model, **fields)
    write_profile(profile, out)
    return _report(profile, args, out)


def run_make(args: argparse.Namespace) -> int:
    from specbatch.traces.acceptance.library import constant_chain
    from specbatch.traces.acceptance.profile import (
        DRAFTERS,
        AcceptanceProfile,
        rates_from_survival,
        write_profile,
    )

    require(args.drafter in DRAFTERS, f"--drafter: expected one of {', '.join(DRAFTERS)}, got "
            f"{args.drafter!r}")
    given = [f for f, v in (("--mal", args.mal), ("--rates", args.rates),
                             ("--survival", args.survival)) if v is not None]
    require(len(given) == 1, "--mal/--rates/--survival: expected one of them, got "
            + (" and ".join(given) or "none"))
    if args.mal is not None:
        require(args.k is not None and args.k >= 1, f"--k: expected an integer >= 1 with "
                f"--mal, got {args.k}")
        require(1 <= args.mal <= args.k + 1, f"--mal: expected 1 <= MAL <= K + 1 = "
                f"{args.k + 1} (the bonus token included), got {args.mal}")
        alpha = constant_chain(args.mal, args.k)
        rates, how = (alpha,) * args.k, (f"constant chain alpha = {alpha:.6f} solving MAL("
                                         f"{args.k}) = {args.mal}")
        notes = ("made from a mean accepted length at K only: the decay with position is "
                 "not known",)
    else:
        flag, text = given[0], args.rates if args.rates is not None else args.survival
        require(args.k is None, f"--k: expected no --k with {flag} (K is their number)")
        try:
            values = tuple(float(x) for x in text.split(","))
        except ValueError:
            raise SpecbatchError(f"{flag}: expected comma-separated probabilities, got "
                                 f"{text!r}") from None
        require(all(0 <= v <= 1 for v in values), f"{flag}: expected probabilities in [0, 1], "
                f"got {text!r}")
        if flag == "--survival":
            require(all(a >= b for a, b in zip(values, values[1:])), "--survival: expected "
                    f"non-increasing P(tau >= j), got {text!r}")
            rates, how = rates_from_survival(values), "survival P(tau >= j) given"
        else:
            rates, how = values, "conditional rates given"
        notes = ()
    out = _claim_out(args)
    conditions = {"dataset": args.dataset, "temperature": args.temperature,
                  "engine_version": args.engine_version}
    try:
        profile = AcceptanceProfile(
            rates=rates, drafter=args.drafter, target=args.target, draft=args.draft,
            conditions={k: v for k, v in conditions.items() if v is not None},
            provenance={"source": "user", "derivation": how,
                        **({"citation": args.citation} if args.citation else {})},
            notes=notes, name=args.name or out.stem)
    except SpecbatchError as err:
        raise SpecbatchError(str(err).replace("AcceptanceProfile: field rates", "--rates")
                             ) from None
    write_profile(profile, out)
    return _report(profile, args, out)


def run_import_modelopt(args: argparse.Namespace) -> int:
    from specbatch.traces.acceptance.modelopt import read_modelopt
    from specbatch.traces.acceptance.profile import write_profile

    out = _claim_out(args)
    profile = read_modelopt(args.file)
    write_profile(profile, out)
    return _report(profile, args, out)


def run_export(args: argparse.Namespace) -> int:
    import json

    from specbatch.io import atomic_write
    from specbatch.traces.acceptance.modelopt import to_modelopt

    out = _claim_out(args)
    profile = load_source(args.source)
    atomic_write(out, json.dumps(to_modelopt(profile), indent=1) + "\n")
    return _report(profile, args, out)


def _report(profile, args: argparse.Namespace, out: Path) -> int:
    from specbatch.traces.acceptance.profile import to_dict

    summary = describe(profile)
    emit({**summary, "out": str(out), "profile": to_dict(profile)}, args.json,
         None if args.json else format_profile(summary) + f"\nwrote {out}")
    return 0


def load_source(text: str):
    """A profile file or bundled name, else a trace (its pooled TV law)."""
    from specbatch.traces.acceptance.library import bundled_names, resolve_profile

    path = Path(text)
    if (path.is_file() and path.suffix == ".json") or text in bundled_names():
        return resolve_profile(text)
    from specbatch.traces.acceptance.from_trace import profile_from_trace
    from specbatch.traces.format.files import read_trace, resolve_trace

    return profile_from_trace(read_trace(resolve_trace(text)))


def describe(profile) -> dict:
    """The numbers ``show`` prints: per position a_j, S_j, h_n; MAL at k = 0..K."""
    from specbatch.traces.acceptance.profile import mean_accepted_length, survival

    return {"name": profile.name, "pair": profile.pair, "drafter": profile.drafter,
            "K": profile.K, "source": profile.source, "conditions": profile.conditions,
            "rates": list(profile.rates), "survival": survival(profile),
            "histogram": None if profile.histogram is None else list(profile.histogram),
            "mal": [mean_accepted_length(profile, k) for k in range(profile.K + 1)],
            "provenance": profile.provenance, "notes": list(profile.notes)}


def format_profile(d: dict) -> str:
    cond = ", ".join(f"{k} {v}" for k, v in d["conditions"].items()) or "not stated"
    lines = [f"profile {d['name']}: {d['pair']} ({d['drafter']}, K = {d['K']})",
             f"source: {d['source']}", f"conditions: {cond}"]
    if d["provenance"].get("derivation"):
        lines.append(f"derivation: {d['provenance']['derivation']}")
    lines.append(f"{'j':>3} {'a_j':>8} {'P(tau>=j)':>10} {'P(tau=j)':>9} {'MAL(k=j)':>9}")
    hist = d["histogram"]
    lines.append(f"{0:>3} {'':>8} {1.0:>10.4f} "
                 f"{hist[0] if hist else float('nan'):>9.4f} {d['mal'][0]:>9.4f}")
    for j in range(1, d["K"] + 1):
        h = f"{hist[j]:>9.4f}" if hist else f"{'-':>9}"
        lines.append(f"{j:>3} {d['rates'][j - 1]:>8.4f} {d['survival'][j - 1]:>10.4f} {h} "
                     f"{d['mal'][j]:>9.4f}")
    lines += [f"note: {n}" for n in d["notes"]]
    return "\n".join(lines)


def run_show(args: argparse.Namespace) -> int:
    summary = describe(load_source(args.source))
    emit(summary, args.json, None if args.json else format_profile(summary))
    return 0


def run_list(args: argparse.Namespace) -> int:
    from specbatch.traces.acceptance.library import bundled_names, load_bundled
    from specbatch.traces.acceptance.profile import mean_accepted_length

    rows = []
    for name in bundled_names():
        p = load_bundled(name)
        rows.append({"name": name, "drafter": p.drafter, "K": p.K,
                     "mal": mean_accepted_length(p), "pair": p.pair,
                     "histogram": p.histogram is not None,
                     "citation": p.provenance.get("citation")})
    text = "\n".join(f"{r['name']:<38} {r['drafter']:<7} K={r['K']} MAL {r['mal']:.3f}  "
                     f"{r['pair']}\n{'':<40}{r['citation']}" for r in rows)
    emit({"profiles": rows}, args.json, text)
    return 0
