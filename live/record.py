"""What a live run records, and its output directory.

:class:`Recorder` collects, as the loop runs, one row per forward pass (the latency-profile columns
of :mod:`specbatch.simulator.cost.registry`, query/KV tokens counted as the simulator counts them,
plus the padded ``cache_slots`` actually attended), one row per step
(:class:`specbatch.simulator.engine.request_state.StepRecord`), the per-request counters of
:mod:`specbatch.simulator.metrics`, the generated tokens, and the drafted path's statistics
(THEORY.md §3: q, pt, Z, and the draft's temperature-1 signals) at every visited output position.
Times are on the live clock (:mod:`specbatch.live.pool`: arrivals' axis); ``throughput`` = output
tokens / makespan as in :func:`specbatch.simulator.metrics.summarize`.

:func:`write_live` writes ``OUT/``: ``requests.parquet``, ``steps.parquet``, ``summary.json``
(the simulator's tables), ``live.json`` (the manifest: models, prompt source and lengths,
settings, depth), ``config.toml`` (the equivalent :class:`SimConfig`), ``profile.csv`` (the
passes), ``outputs.jsonl`` (prompt and generated token ids) and ``trace/`` (a trace whose row
at every visited output position holds the drafted path's statistics; rows never visited hold
a filler the replay never reads). :func:`read_live` reads it back with one-line errors.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from specbatch.errors import SpecbatchError, require
from specbatch.inputs import check_regular_file, load_json_file
from specbatch.io import write_json
from specbatch.live.config import LiveConfig
from specbatch.traces.capture.ngram import NGRAM

#: Columns of ``profile.csv``: one row per forward pass.
PASS_COLUMNS = ("model", "role", "device", "dtype", "batch_size", "query_tokens", "kv_tokens",
                "latency_s", "cache_slots", "step", "sum_q", "sum_kv", "sum_qkv", "sum_qq")
#: Per-position statistics recorded at every visited output position (trace list columns).
TRACE_FIELDS = ("draft_token", "q", "pt", "z", "draft_conf", "entropy", "top1")
OUTPUT_FILES = ["requests.parquet", "steps.parquet", "summary.json", "profile.csv",
                "outputs.jsonl", "trace/", "config.toml"]
#: Every name a live output directory holds (an older one without a result marker holds only
#: these).
LIVE_FILES = (*(name.rstrip("/") for name in OUTPUT_FILES), "live.json", "profile_grid.csv")


@dataclass
class LiveResult:
    """Tables of one live run (column definitions: :mod:`specbatch.simulator.metrics`)."""

    config: LiveConfig
    requests: pd.DataFrame
    steps: pd.DataFrame
    summary: dict
    passes: pd.DataFrame  # one row per forward pass (PASS_COLUMNS)
    outputs: list  # generated token ids per request
    trace_rows: dict  # uid -> {position: (TRACE_FIELDS values, each # [K]; proposed)}
    prompt_ids: list = field(default_factory=list)


class Recorder:
    """The records of one live run as it goes (module docstring).

    ``pos`` # [N]: tokens emitted per request so far, i.e. its current output position t;
    ``out_len`` # [N]: output tokens each request generates; ``arrival`` # [N] seconds.
    """

    def __init__(self, prompt_ids: list[list[int]], max_new_tokens: int, names: tuple[str, str],
                 device: str, dtype: str) -> None:
        n = len(prompt_ids)
        self.prompt_ids = [list(map(int, p)) for p in prompt_ids]
        self.prompt_len = np.array([len(p) for p in prompt_ids], dtype=np.int64)  # [N]
        self.out_len = np.full(n, int(max_new_tokens), dtype=np.int64)
        self.arrival = np.zeros(n)
        self.names, self.device, self.dtype = names, device, dtype
        self.first_token, self.finish = np.full(n, np.nan), np.full(n, np.nan)
        self.pos = np.zeros(n, dtype=np.int64)
        self.counts = {name: np.zeros(n, dtype=np.int64)
                       for name in ("steps", "drafted", "verified", "accepted")}
        self.outputs: list[list[int]] = [[] for _ in range(n)]
        self.trace_rows: dict[int, dict] = {i: {} for i in range(n)}
        self.passes: list[tuple] = []
        self.step_rows: list = []  # simulator.engine.request_state.StepRecord per step

    def add_pass(self, role: str, query: np.ndarray, kv: np.ndarray, seconds: float,
                 slots: int) -> None:
        """One forward pass of ``role``: request i adds ``query`` # [n] tokens to ``kv`` # [n]
        cached ones (the simulator's counts); recorded with the step it belongs to."""
        from specbatch.simulator.cost.interface import batch_sums

        name = self.names[0] if role == "draft" else self.names[1]
        n, sq, skv, sqkv, sqq = batch_sums(np.asarray(query, dtype=np.int64),
                                           np.asarray(kv, dtype=np.int64))
        self.passes.append((name, role, self.device, self.dtype, int(n), sq / n, skv / n,
                            float(seconds), int(slots), len(self.step_rows), float(sq),
                            float(skv), float(sqkv), float(sqq)))

    def add_positions(self, act: np.ndarray, x: np.ndarray, stats: dict, tau: np.ndarray,
                      y: np.ndarray, emitted: np.ndarray, proposed: np.ndarray) -> None:
        """Requests ``act`` # [n] verified drafts ``x`` # [n, K] with path statistics
        ``stats`` (TRACE_FIELDS but draft_token, each # [n, K]) of which ``proposed`` # [n]
        are real tokens (K for model drafts), accepted ``tau`` # [n] and drew the extra token
        ``y`` # [n]; they emit ``emitted`` # [n] tokens."""
        for i, u in enumerate(act.tolist()):
            t = int(self.pos[u])
            self.trace_rows[u][t] = (x[i], *(stats[name][i] for name in TRACE_FIELDS[1:]),
                                     int(proposed[i]))
            self.outputs[u].extend([int(v) for v in x[i, :tau[i]]] + [int(y[i])])
            del self.outputs[u][t + int(emitted[i]):]
        self.pos[act] += emitted

    def count_step(self, act: np.ndarray, drafted: np.ndarray, verified: np.ndarray,
                   accepted: np.ndarray) -> None:
        """Per-request counters of one decode step (``drafted``, ``verified``, ``accepted``
        # [n])."""
        for name, value in (("steps", 1), ("drafted", drafted), ("verified", verified),
                            ("accepted", accepted)):
            self.counts[name][act] += value

    def result(self, cfg: LiveConfig, verifier: str) -> LiveResult:
        """The run's tables; ``verifier`` names the code that decided τ."""
        from specbatch.simulator.metrics import step_frame, summarize

        n = self.pos.shape[0]
        requests = pd.DataFrame({
            "uid": np.arange(n, dtype=np.int64), "trace_index": np.arange(n, dtype=np.int64),
            "replica": np.zeros(n, dtype=np.int64), "prompt_len": self.prompt_len,
            "output_len": self.out_len.copy(),
            "arrival": self.arrival.copy(), "first_token": self.first_token, "finish": self.finish,
            "tokens": self.pos.copy(), **self.counts,
        })
        steps = step_frame(self.step_rows)
        summary = summarize(requests, steps)
        decode = steps[steps["batch"] > 0]
        mean = (lambda s: float(s.mean())) if len(decode) else (lambda s: float("nan"))
        summary.update({
            "policy": cfg.policy, "verify": cfg.verify, "scheduler": cfg.scheduler,
            "max_num_batched_tokens": cfg.token_budget, "live": True, "device": self.device,
            "verifier": verifier, "dtype": cfg.dtype, "arrival": cfg.arrival,
            "max_num_seqs": cfg.slots(n),
            "step_latency_mean": float((steps["end"] - steps["time"]).mean()),
            "decode_step_latency_mean": mean(decode["end"] - decode["time"]),
            "overhead_per_decode_step": mean(decode["overhead_time"]),
        })
        return LiveResult(config=cfg, requests=requests, steps=steps, summary=summary,
                          passes=pd.DataFrame(self.passes, columns=list(PASS_COLUMNS)),
                          outputs=self.outputs, trace_rows=self.trace_rows,
                          prompt_ids=self.prompt_ids)


def build_trace(result: LiveResult, meta_extra: dict | None = None):
    """A :class:`traces.format.files.Trace` of the live run: row t of request r holds the statistics
    of the path drafted at output position t (visited positions); other rows hold a filler
    (q = 1, pt = 0, confidence 1, and the Z of those one-hot rows: ``Z_1 = 1``, 0 after) that a
    replay of the same run never reads. An n-gram
    run's trace carries the ``proposed`` column (0 on unvisited rows), its fillers recorded as
    capture records them (:mod:`specbatch.live.ngram`)."""
    from specbatch.traces.format.trace import default_meta, make_trace

    cfg = result.config
    k = cfg.depth
    n_req = len(result.prompt_ids)
    out_len = result.requests["output_len"].to_numpy()
    rows = int(out_len.sum())
    cols = {"draft_token": np.zeros((rows, k), dtype=np.int32), "q": np.ones((rows, k)),
            "pt": np.zeros((rows, k)), "z": np.eye(1, k).repeat(rows, axis=0),
            "draft_conf": np.ones((rows, k)), "entropy": np.zeros((rows, k)),
            "top1": np.ones((rows, k))}
    proposed = np.zeros(rows, dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(out_len)])
    visited = 0
    for r in range(n_req):
        for t, (*values, m) in result.trace_rows[r].items():
            for name, v in zip(TRACE_FIELDS, values):
                cols[name][offsets[r] + t] = v
            proposed[offsets[r] + t] = m
            visited += 1
    if cfg.draft == NGRAM:
        cols["proposed"] = proposed
    meta = default_meta(cfg.temperature, k, source="specbatch live", visited_rows=visited,
                        **(meta_extra or {}))
    requests = {"request_id": np.arange(n_req, dtype=np.int64),
                "prompt_len": result.requests["prompt_len"].to_numpy(),
                "output_len": out_len, "category": np.array(["live"] * n_req, dtype=object),
                "arrival": result.requests["arrival"].to_numpy()}
    return make_trace(meta, requests, cols)


def write_live(result: LiveResult, out: str | Path, manifest: dict,
               final: str | Path | None = None) -> Path:
    """Write the tables, manifest, profile, outputs and trace into ``out`` (module docstring).

    ``final``: where the folder will be once complete when ``out`` is a temporary folder
    (:func:`specbatch.io.result_dir`); ``config.toml`` names the trace and profile there.
    """
    from specbatch.simulator.config.sim_config import make_config
    from specbatch.simulator.config.toml_writer import to_toml
    from specbatch.traces.format.files import write_trace

    out = Path(out)
    final = Path(final if final is not None else out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    result.requests.to_parquet(out / "requests.parquet", index=False)
    result.steps.to_parquet(out / "steps.parquet", index=False)
    write_json(out / "summary.json", result.summary)
    result.passes.to_csv(out / "profile.csv", index=False)
    with open(out / "outputs.jsonl", "w") as fh:
        for i, toks in enumerate(result.outputs):
            fh.write(json.dumps({"uid": i, "prompt_ids": result.prompt_ids[i],
                                 "output_ids": toks}) + "\n")
    write_trace(build_trace(result, {"live_manifest": "../live.json"}), out / "trace")
    cfg = result.config
    values = cfg.sim_values(len(result.prompt_ids))
    values.update(trace=str(final / "trace"), cost="profiled",
                  profile=str(final / "profile.csv"))
    (out / "config.toml").write_text(to_toml(make_config(values, "live config")))
    write_json(out / "live.json", {
        **manifest, "settings": asdict(cfg), "depth": cfg.depth,
        "requests": len(result.prompt_ids), "prompt_len": result.requests["prompt_len"].tolist(),
        "kv_cache": "slot cache (specbatch.live.cache): one row per running request, "
                    "written in place; rejected tokens overwritten; finished rows leave",
        "files": OUTPUT_FILES})
    return out


def read_live(live_dir: str | Path) -> dict:
    """The manifest, tables and trace of a ``specbatch live`` output directory (one-line
    errors naming the file)."""
    from specbatch.traces.format.files import read_trace

    d = Path(live_dir)
    require(d.is_dir(), f"LIVE_DIR {d}: expected the output directory of `specbatch live`, "
            "got no such directory")
    for name in ("live.json", "requests.parquet", "steps.parquet", "profile.csv", "trace"):
        require((d / name).exists(), f"file {d / name}: expected a `specbatch live` output, "
                "got no such file")
    for name in ("requests.parquet", "steps.parquet", "profile.csv"):  # never a FIFO
        check_regular_file(d / name, "a `specbatch live` output file")
    manifest = load_json_file(d / "live.json", "the live run's manifest (JSON)")
    require(isinstance(manifest, dict) and isinstance(manifest.get("settings"), dict),
            f"file {d / 'live.json'}: field settings: expected the live settings, got none")
    try:
        requests = pd.read_parquet(d / "requests.parquet")
        steps = pd.read_parquet(d / "steps.parquet")
    except Exception as exc:  # noqa: BLE001 - any reader failure is a bad file
        raise SpecbatchError(f"LIVE_DIR {d}: cannot read the tables: "
                             f"{str(exc).splitlines()[0][:160]}") from None
    return {"dir": d, "manifest": manifest, "requests": requests, "steps": steps,
            "trace": read_trace(d / "trace")}
