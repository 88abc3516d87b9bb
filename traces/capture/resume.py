"""A capture's resumable state: per-request status, chunking, and the files rewritten after
every chunk.

:func:`start_run` builds the state of a new run or reads it back from ``meta.json`` for
``--resume`` (same content fingerprint required, the interrupted run's chunking and batch size
kept so the result is bit-identical); :func:`flush_run` rewrites ``requests.parquet`` and
``meta.json``'s ``completion`` after each chunk, so the directory is always a valid trace of
the completed requests. Used by :func:`specbatch.traces.capture.chain.capture`.
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from specbatch.errors import SpecbatchError, require
from specbatch.inputs import load_json_file

if TYPE_CHECKING:  # a type only: capture imports this module
    from specbatch.traces.capture.chain import CaptureConfig

STATUS_DONE, STATUS_PENDING = "done", "pending"


def start_run(out: Path, resume: bool, fingerprint: str, cfg: CaptureConfig, n_req: int) -> dict:
    """The run's state: ``status`` per request, ``store`` (request index -> request row),
    ``cfg``, ``fingerprint``; read back from ``out/meta.json`` when resuming.

    A resumed run keeps the interrupted run's chunking and batch size, so its float results
    are bit-identical to an uninterrupted run.
    """
    run = {"status": [STATUS_PENDING] * n_req, "store": {}, "cfg": cfg,
           "fingerprint": fingerprint, "n_req": n_req}
    require(not out.exists() or out.is_dir(), f"--out {out}: exists and is not a directory")
    if not (out.exists() and any(out.iterdir())):
        require(not resume, f"--resume: {out} holds no capture to resume (run without --resume "
                            "to start one)")
        return run
    require(resume, f"--out {out}: expected a new or empty directory (or --resume), "
            "got an existing non-empty directory")
    meta_path = out / "meta.json"
    require(meta_path.is_file(), f"file {meta_path}: expected a capture's meta.json to "
            "resume from, got no such file")
    meta = load_json_file(meta_path, "a capture's meta.json")
    comp = (meta.get("completion") if isinstance(meta, dict) else None) or {}
    require(isinstance(comp, dict) and comp.get("fingerprint") == fingerprint,
            f"file {meta_path}: field completion.fingerprint: expected {fingerprint} (same "
            f"models, prompts and content options), got "
            f"{comp.get('fingerprint') if isinstance(comp, dict) else comp!r:.40}")
    try:
        status = list(comp.get("requests", run["status"]))
        store = {int(k): dict(v) for k, v in comp.get("request_rows", {}).items()}
        sizes = {"chunk_requests": int(comp["chunk_requests"]),
                 "batch_size": int(comp.get("batch_size", cfg.batch_size))}
    except (TypeError, ValueError, KeyError, AttributeError) as exc:
        raise SpecbatchError(f"file {meta_path}: field completion: expected the state a "
                             f"capture writes, got a damaged one ({type(exc).__name__})") from None
    require(len(status) == n_req and set(status) <= {STATUS_DONE, STATUS_PENDING}
            and min(sizes.values()) >= 1, f"file {meta_path}: field completion: expected "
            f"{n_req} request states and positive sizes, got a damaged state")
    run["status"], run["store"] = status, store
    run["cfg"] = replace(cfg, **sizes)
    return run


def split_chunks(n_req: int, size: int) -> list[list[int]]:
    """Request indices 0..n_req-1 in consecutive chunks of ``size`` (one positions file each)."""
    return [list(range(a, min(n_req, a + size))) for a in range(0, n_req, size)]


def flush_run(out: Path, meta: dict, run: dict) -> None:
    """Rewrite ``requests.parquet`` (completed requests) and ``meta.json`` (completion state)."""
    from specbatch.traces.format.files import write_meta, write_requests

    store, status, cfg = run["store"], run["status"], run["cfg"]
    idx = sorted(store)
    rows = [store[i] for i in idx]
    requests = {"request_id": np.array(idx, dtype=np.int64),
                "prompt_len": np.array([r["prompt_len"] for r in rows], dtype=np.int64),
                "output_len": np.array([r["output_len"] for r in rows], dtype=np.int64),
                "category": np.array([r["category"] for r in rows], dtype=object)}
    meta["completion"] = {
        "status": "complete" if all(s == STATUS_DONE for s in status) else "partial",
        "fingerprint": run["fingerprint"], "chunk_requests": cfg.chunk_requests,
        "batch_size": cfg.batch_size,
        "done": int(sum(s == STATUS_DONE for s in status)), "total": run["n_req"],
        "requests": status, "request_rows": {str(i): store[i] for i in idx},
    }
    meta["capture_time"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    write_requests(out, requests)
    write_meta(out, meta)
