"""Replay a measured vLLM serving run through the simulator and report the error
(``specbatch validate --vllm DIR|NAME``; docs/fidelity.md).

The run (traces.public.vllm_runs: requests.jsonl, meta.json, timeseries.csv, config.json) gives the
workload (each request's arrival, prompt and output length, in file order), the engine settings
(analysis.validate.vllm_settings: mapped to SimConfig fields or listed as not modelled), the GPU (a
hardware preset: meta.json's ``hardware.device_name``, a bundled run's provenance, or ``hardware=``)
and the model (its config.json). It is simulated with ``ar`` under the vllm-v1 composer with the
cost model ``cost`` (default the roofline) and compared metric by metric
(analysis.validate.vllm_metrics). Nothing of the measured timing enters the simulation: the run is
an out-of-sample test of the cost model and the scheduler.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from specbatch.analysis.validate.vllm_metrics import METRICS, STATS, compare, timeseries
from specbatch.analysis.validate.vllm_settings import engine_settings
from specbatch.errors import SpecbatchError, require
from specbatch.simulator.cost.gpus.catalogue import DEVICE_NAMES, GPUS
from specbatch.simulator.cost.registry import run_cost
from specbatch.traces.public.vllm_runs import VllmRun, bundled_runs, load_run

#: The metrics ``--json`` always carries under ``metrics`` (issue 33).
HEADLINE = ("ttft_mean", "ttft_p99", "tpot_mean", "tpot_p99", "e2e_mean", "e2e_p99",
            "throughput")


def hardware_of(run: VllmRun, hardware: str | None) -> tuple[str, str]:
    """(preset, where it came from): ``hardware`` when given, else meta.json's device name
    (a catalogue row's ``device_names``, simulator.cost.gpus.catalogue), else the bundled run's
    provenance."""
    if hardware:
        return hardware, "--hardware"
    device = (run.meta.get("hardware") or {}).get("device_name")
    if device is not None:
        presets = {name: gpu for name, gpu in DEVICE_NAMES.items() if GPUS[gpu].preset}
        require(device in presets, f"vLLM run file {run.path / 'meta.json'}: field "
                f"hardware.device_name: expected one of {', '.join(presets)} (or pass "
                f"--hardware), got {device!r}")
        return presets[device], f"meta.json hardware.device_name {device!r}"
    if run.gpu:
        return run.gpu, "PROVENANCE.json (meta.json records no device)"
    raise SpecbatchError(f"vLLM run file {run.path / 'meta.json'}: field hardware.device_name: "
                         "expected the GPU's name, got none (pass --hardware)")


def model_of(run: VllmRun, model: str | None) -> str:
    """The model's config.json: ``model`` when given, else the run folder's config.json."""
    if model:
        return model
    require(run.model_config is not None, f"--vllm {run.path}: expected a config.json of the "
            f"served model {run.meta.get('model')!r} in the folder (or pass --model), got none")
    return str(run.model_config)


def cost_source(cost: str, preset: str) -> str:
    """What the run's step times were fitted on (never on the measured serving run)."""
    row = GPUS.get(preset)
    if cost == "calibrated" and row is not None and row.profiles == "llmservingsim":
        return ("calibrated: LLMServingSim's per-layer kernel profiles of this GPU (modules, "
                "LM head, sampler, MoE block; simulator.cost.measured.lss) and an attention law "
                "fitted on its Llama-3.1-8B attention table; PCIe all-reduce at the anchor's "
                "configured link; per-step host overhead assumed")
    if cost != "roofline":
        return f"cost model {cost!r} (its own source; see docs/simulate.md)"
    if row is not None and row.efficiencies_fitted:
        fitted_on = ("LLMServingSim's per-GEMM profiles" if row.profiles == "llmservingsim"
                     else "AIConfigurator's bf16 GEMM tables")
        return (f"roofline: datasheet peaks; compute/memory efficiencies fitted to {fitted_on} "
                "of this GPU (simulator.cost.measured.gemm_fit); per-step host overhead and "
                "all-reduce latency assumed")
    return "roofline: datasheet peaks with assumed efficiencies (simulator.cost.gpus.hardware)"


#: The replay's ``client_ttft_s`` and why (a row of the report's mapped settings): the
#: recorder's stamps are the engine core's, so no client-side share is in the measured TTFT.
CLIENT_ROW = ("client side of TTFT and e2e (not in the stamps)", 0.0,
              "client_ttft_s = 0: TTFT = first_token_ts - queued_ts and e2e = last_token_ts - "
              "queued_ts are vLLM's RequestStateStats stamps, both taken in the engine core "
              "(the scheduler's QUEUED event, the EngineCoreOutputs timestamp); LLMServingSim's "
              "bench drives AsyncLLM in process with pre-tokenised prompts (no HTTP server, no "
              "tokenisation), and queued_ts is after the input's trip into the engine core")


def sim_values(run: VllmRun, settings, hardware: str, model: str, cost: str) -> dict:
    """SimConfig values of the replay: the mapped settings, the run's arrivals (the workload
    file :func:`simulate_run` writes), the GPU and model, ``cost``, no client-side share of
    TTFT (:data:`CLIENT_ROW`). ``ar`` drafts nothing, so the acceptance trace is never read:
    the synthetic one stands in."""
    return {**settings.values, "arrival": "trace",
            "requests": int(len(run.requests)), "trace": "synth", "hardware": hardware,
            "target": model, "cost": cost, "seed": 0, "client_ttft_s": CLIENT_ROW[1]}


#: The workload file of a replay kept in a result folder (``validate --vllm --out``).
WORKLOAD_FILE = "workload.csv"


def simulate_run(run: VllmRun, values: dict, folder: str | Path | None = None,
                 final: str | Path | None = None):
    """The simulation of ``values`` (SimResult); the run's lengths and arrivals go through a
    workload file: ``folder``/workload.csv when a result folder is being written (its config
    then names ``final``/workload.csv, where the folder ends up, so ``simulate --config``
    re-runs it), else a temporary one."""
    import dataclasses

    from specbatch.simulator.config.sim_config import make_config
    from specbatch.simulator.run import simulate

    def replay(where: Path):
        path = where / WORKLOAD_FILE
        run.requests[["prompt_len", "output_len", "arrival"]].to_csv(path, index=False)
        return simulate(make_config({**values, "workload": str(path)}, f"vLLM run {run.name}"))

    if folder is None:
        with tempfile.TemporaryDirectory() as tmp:
            return replay(Path(tmp))
    sim = replay(Path(folder))
    kept = str(Path(final if final is not None else folder) / WORKLOAD_FILE)
    return dataclasses.replace(sim, config=dataclasses.replace(sim.config, workload=kept))


def check_plausible(run: VllmRun, settings, preset: str, target: str) -> None:
    """What the recorded run cannot have done, each a one-line error naming the file and
    field: a request longer than ``max_model_len`` (vLLM refuses the prompt and stops the
    output there), and a KV pool (``num_gpu_blocks`` x the bytes of one block of the target,
    simulator.cost.analytic.kv_groups) larger than the GPUs' memory (meta.json's
    ``hardware.device_total_memory_bytes``, else the preset's; per GPU: a pool block's bytes
    are split over tp, an MLA latent cache is held whole on each)."""
    from specbatch.simulator.cost.analytic.kv_groups import kv_layout
    from specbatch.simulator.cost.analytic.precision import kv_element_bytes
    from specbatch.simulator.cost.gpus.hardware import get_hardware
    from specbatch.traces.models.shapes import get_shape

    meta_file = run.path / "meta.json"
    limit = settings.values.get("max_model_len")
    if limit is not None:
        total = run.requests["prompt_len"] + run.requests["output_len"]
        if (total > limit).any():
            row = run.requests.loc[int((total > limit).to_numpy().argmax())]
            raise SpecbatchError(
                f"vLLM run file {run.requests_file} line {int(row['line'])}: field input_toks: "
                f"expected input_toks + output_toks <= max_model_len {limit} "
                f"({settings.origins.get('max_model_len')} in {meta_file}), got "
                f"{int(row['prompt_len'])} + {int(row['output_len'])}")
    tokens = settings.values.get("kv_capacity")
    if tokens is None:
        return
    hw, shape = get_hardware(preset), get_shape(target)
    kv_b = kv_element_bytes(settings.values.get("kv_cache_dtype", "auto"), hw)
    block_size = int(settings.values["block_size"])
    tp = int(settings.values.get("tp", 1))
    per_gpu = kv_layout(shape, None, kv_b, block_size).block_bytes / (1 if shape.is_mla else tp)
    memory = (run.meta.get("hardware") or {}).get("device_total_memory_bytes")
    if not (isinstance(memory, (int, float)) and not isinstance(memory, bool) and memory > 0):
        memory = hw.memory_bytes
    most = int(memory // per_gpu)
    blocks = tokens // block_size
    require(blocks <= most, f"vLLM run file {meta_file}: field "
            f"{settings.origins.get('kv_capacity', 'num_gpu_blocks')}: expected at most {most} "
            f"blocks (a block of {block_size} tokens takes {per_gpu:.0f} bytes on each GPU; "
            f"the GPU holds {memory:.4g} bytes), got {blocks}")


def validate_vllm(name_or_dir: str, cost: str = "roofline", hardware: str | None = None,
                  model: str | None = None, folder: str | Path | None = None,
                  final: str | Path | None = None) -> tuple[dict, object]:
    """Replay one run (module docstring); returns (report, SimResult). A model or setting the
    cost model cannot price (e.g. DeepSeek-V3.2's sparse indexer) is a one-line
    SpecbatchError. ``folder``/``final``: a result folder being written and where it ends up
    (:func:`simulate_run`)."""
    run = load_run(name_or_dir)
    settings = engine_settings(run.meta, f"vLLM run file {run.path / 'meta.json'}")
    preset, hw_origin = hardware_of(run, hardware)
    target = model_of(run, model)
    if Path(target).is_file():  # a config.json: absolute, so the written config re-runs anywhere
        target = str(Path(target).resolve())
    check_plausible(run, settings, preset, target)
    sim = simulate_run(run, sim_values(run, settings, preset, target, cost), folder, final)
    choice = run_cost(sim.config).to_dict()  # auto -> the source it resolved to
    ran = choice["ran"]
    unmodelled = [list(r) for r in settings.unmodelled] + moe_rows(target)
    measured = run.requests
    simulated = sim.requests.assign(output_len=sim.requests["tokens"])
    cmp = compare(measured, simulated)
    report = {
        "run": run.name, "path": str(run.path), "model": run.meta.get("model"),
        "vllm_version": run.meta.get("vllm_version"), "kind": run.kind,
        "hardware": preset, "hardware_from": hw_origin, "model_config": target, "cost": ran,
        "cost_choice": choice, "cost_source": cost_source(ran, preset),
        "requests": int(len(measured)),
        "metrics": {key: cmp["metrics"][key] for key in HEADLINE},
        "all_metrics": cmp["metrics"], "tests": cmp["tests"],
        "timeseries": timeseries(run.timeseries, simulated),
        "settings": {"mapped": [list(r) for r in settings.mapped] + [list(CLIENT_ROW)],
                     "not_modelled": unmodelled,
                     "not_read": list(settings.other)},
        "simulated_kv_capacity": sim.summary.get("kv_capacity"),
        "simulated_preemptions": int(sim.summary.get("preemptions", 0)),
        "anchor": run.anchor,
    }
    return report, sim


def moe_rows(model: str) -> list[list]:
    """The not-modelled row of a mixture-of-experts model: the run records no routing, so the
    experts a pass touches are priced under uniform routing (``routing_skew`` 0)."""
    from specbatch.traces.models.shapes import get_shape

    if not get_shape(model).is_moe:
        return []
    return [["expert routing (not recorded)", None, "experts touched per pass priced under "
             "uniform routing (routing_skew = 0); the real router's popularity skew is unknown"]]


def list_runs() -> dict:
    """The bundled runs: name -> gpu, model, kind."""
    return {name: {k: rec[k] for k in ("gpu", "model", "kind")}
            for name, rec in bundled_runs().items()}


def _pct(x: float) -> str:
    return "-" if x != x else f"{100 * x:+.1f} %"


def format_report(report: dict) -> str:
    """The plain-text report of :func:`validate_vllm`."""
    lines = [f"run         {report['run']} ({report['model']}, vLLM {report['vllm_version']}, "
             f"{report['requests']} requests)",
             f"simulated   ar under vllm-v1 on {report['hardware']} ({report['hardware_from']}), "
             f"cost {report['cost']}, KV {report['simulated_kv_capacity']} tokens, "
             f"{report['simulated_preemptions']} preemptions",
             f"fitted on   {report['cost_source']} (never on this run)", "",
             f"{'metric':<12}{'measured':>12}{'simulated':>12}{'error':>10}   anchor"]
    anchor = report.get("anchor") or {}
    for metric in METRICS:
        unit = 1e3
        for name, _ in STATS:
            key = f"{metric}_{name}"
            row = report["all_metrics"][key]
            a = anchor.get(key, {}).get("error", float("nan"))
            lines.append(f"{key + ' ms':<12}{row['measured'] * unit:>12.1f}"
                         f"{row['simulated'] * unit:>12.1f}{_pct(row['error']):>10}   {_pct(a)}")
    row = report["metrics"]["throughput"]
    lines.append(f"{'tok/s':<12}{row['measured']:>12.1f}{row['simulated']:>12.1f}"
                 f"{_pct(row['error']):>10}")
    lines.append("")
    lines.append("tests       KS D (p)          TOST +-10 % p (equivalent)")
    for metric in METRICS:
        t = report["tests"][metric]
        lines.append(f"{metric:<12}{t['ks']['D']:.3f} ({t['ks']['p']:.2g}){'':<6}"
                     f"{t['tost']['p']:.2g} ({'yes' if t['tost']['equivalent'] else 'no'})")
    ts = report["timeseries"]
    lines.append("")
    lines.append(f"over time   ({ts['ticks']} ticks of timeseries.csv; mean measured / "
                 "simulated, mean |gap|)")
    for name in ("running", "waiting"):
        r = ts[name]
        lines.append(f"{name:<12}{r['measured_mean']:.1f} / {r['simulated_mean']:.1f}, "
                     f"{r['mean_abs_gap']:.1f}")
    lines.append("")
    lines.append("not modelled (meta.json settings the simulation does not reproduce):")
    for origin, value, why in report["settings"]["not_modelled"]:
        lines.append(f"  {origin} = {value}: {why}")
    other = report["settings"]["not_read"]
    if other:
        groups = sorted({".".join(k.split(".")[:2]) for k in other})
        lines.append(f"  {len(other)} further recorded settings no rule reads (compilation, "
                     f"loading, logging, multimodal, ...; all named in --json "
                     f"settings.not_read), under: {', '.join(groups)}")
    return "\n".join(lines)


#: The PNG text chunk that marks a figure as :func:`latency_figure`'s (key, value).
FIGURE_MARK = ("specbatch", "validate --vllm latency figure")


def is_latency_figure(path: str | Path) -> bool:
    """Whether ``path`` is a PNG that :func:`latency_figure` wrote (its text chunk
    FIGURE_MARK, read from the file, never guessed from the name): such a file may be replaced
    by the next figure; any other file is someone else's."""
    from PIL import Image

    try:
        with Image.open(path) as image:
            text = dict(getattr(image, "text", {}) or {})
    except (OSError, ValueError, SyntaxError):  # not an image PIL reads (PIL raises these)
        return False
    return text.get(FIGURE_MARK[0]) == FIGURE_MARK[1]


def latency_figure(run_name: str, measured, simulated, path: str | Path) -> Path:
    """Measured and simulated per-request TTFT and e2e (by arrival order) and their CDFs,
    overlaid; written atomically as a PNG carrying FIGURE_MARK."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    from specbatch.analysis.validate.vllm_metrics import per_request
    from specbatch.io import atomic_write

    m, s = per_request(measured), per_request(simulated)
    fig, axes = plt.subplots(2, 2, figsize=(10, 6.5))
    for col, metric in enumerate(("ttft", "e2e")):
        ax = axes[0, col]
        ax.plot(m[metric], ".", ms=3, label="measured (vLLM)", color="tab:orange")
        ax.plot(s[metric], ".", ms=3, label="simulated", color="tab:blue")
        ax.set(xlabel="request (arrival order)", ylabel=f"{metric.upper()} (s)")
        ax.legend(fontsize=8)
        ax = axes[1, col]
        for values, label, color in ((m[metric], "measured", "tab:orange"),
                                     (s[metric], "simulated", "tab:blue")):
            xs = np.sort(values)
            ax.plot(xs, np.arange(1, xs.size + 1) / xs.size, label=label, color=color)
        ax.set(xlabel=f"{metric.upper()} (s)", ylabel="CDF")
    fig.suptitle(f"{run_name}: measured vs simulated per-request latency", fontsize=10)
    fig.tight_layout()
    path = Path(path)
    atomic_write(path, lambda tmp: fig.savefig(tmp, dpi=110, format="png",
                                               metadata=dict([FIGURE_MARK])))
    plt.close(fig)
    return path


#: Columns of the suite table: (report metric key, header).
SUITE_COLUMNS = (("ttft_mean", "TTFT mean"), ("tpot_mean", "TPOT mean"),
                 ("e2e_mean", "e2e mean"), ("ttft_p99", "TTFT p99"), ("tpot_p99", "TPOT p99"),
                 ("e2e_p99", "e2e p99"), ("throughput", "tok/s"))


def suite_row(name: str, cost: str) -> dict:
    """One bundled run's row of the fidelity table: its headline errors, TOST verdicts and
    the anchor's published mean errors; a run the cost model cannot price is a row with
    ``refused`` set to the one-line reason (never a number from another model)."""
    from specbatch.traces.public.vllm_runs import load_run

    run = load_run(name)
    row = {"run": name, "gpu": run.gpu, "kind": run.kind, "cost": cost,
           "anchor": {k: (run.anchor or {}).get(k, {}).get("error")
                      for k in ("ttft_mean", "tpot_mean", "e2e_mean")}}
    try:
        report, _ = validate_vllm(name, cost=cost)
    except SpecbatchError as exc:
        from specbatch.traces.public.vllm_runs import BUNDLED_DIR

        reason = str(exc).replace(str(BUNDLED_DIR), "traces/data/vllm_runs")
        if "mixture-of-experts" in reason:  # the cost model's own words, after the file name
            reason = "MoE not priced (" + reason.split(": ", 1)[-1] + ")"
        return {**row, "refused": reason}
    row["errors"] = {key: report["metrics"][key]["error"] for key, _ in SUITE_COLUMNS}
    row["tost"] = {m: report["tests"][m]["tost"]["equivalent"] for m in METRICS}
    row["preemptions"] = report["simulated_preemptions"]
    return row


def suite_table(rows: list[dict]) -> str:
    """The suite's Markdown table (errors y/x − 1 in %, TOST ±10 % verdicts, the anchor's
    mean errors)."""
    head = ["run", "cost"] + [h for _, h in SUITE_COLUMNS] + ["TOST ttft/tpot/e2e",
                                                             "anchor TTFT/TPOT/e2e mean"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        a = r["anchor"]
        anchor = " / ".join(_pct(a[k]) if a[k] is not None else "-"
                            for k in ("ttft_mean", "tpot_mean", "e2e_mean"))
        if "refused" in r:
            cells = [r["run"], r["cost"], f"refused: {r['refused']}"] + [""] * (
                len(SUITE_COLUMNS) - 1) + ["", anchor]
        else:
            tost = "/".join("yes" if r["tost"][m] else "no" for m in METRICS)
            cells = [r["run"], r["cost"]] + [_pct(r["errors"][k]) for k, _ in SUITE_COLUMNS] \
                + [tost, anchor]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
