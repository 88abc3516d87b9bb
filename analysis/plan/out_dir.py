"""The planner's output directory: whose it is, one plan at a time, and a default folder.

A plan's ``--out`` holds the user's answer (``plan.json``, ``plan.toml``, ``frontier.png``),
the workload it drew (``workload.csv``) and its stored runs (``runs/``). Before anything is
written there:

- the folder must be new, empty, or one this same question claimed earlier (a rerun resumes
  and reuses its runs). The claim is a marker file (:data:`MARKER`) holding the question's
  identity (:func:`question_identity`), created atomically (write to a temporary file,
  rename) as the first write of a fresh plan; a folder holding anything else, including
  files that merely carry a plan's names (a ``workload.csv`` of the user's), or another
  question's marker is refused in one line, every byte left in place;
- one plan at a time: the folder's lock (:func:`specbatch.io.dir_lock`, a POSIX lock that
  dies with its process) is held from the claim to the last write, so two concurrent plans
  into one folder never mix their runs; the second is refused in one line, and the check
  is repeated under the lock (the first may have claimed the folder meanwhile).

The identity hashes what the plan's files depend on: the question's shared run fields with
a workload file's and a ``config.json`` model's *contents* (not their paths), the length
distributions drawn, the search space, the SLOs, ``levels_after``, the acceptance band, an
acceptance profile's contents, the seeds compared and whether break-even is computed.
Execution flags (workers, scheduler, progress) and ``--exhaustive`` (the same answer, more
runs) are not part of it.

Without ``--out`` (``plan --json`` as ``simulate --json`` needs none) the plan goes to
``<cache>/plan/<identity>`` (:func:`default_out`; the cache is ``$SPECBATCH_CACHE`` or
``~/.cache/specbatch``), so asking the same question again reuses its runs.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from specbatch.errors import SpecbatchError, require
from specbatch.io import atomic_write, check_output_dir, dir_lock, dumps, prepare_output_dir

if TYPE_CHECKING:
    from specbatch.analysis.plan.planner import Question

#: The claim: ``{"kind": "plan", "identity": ..., "question": ...}``, written first.
MARKER = ".specbatch-plan.json"
#: The lock file :func:`specbatch.io.dir_lock` creates (the only file a refused run may leave).
LOCK = ".specbatch.lock"


def question_identity(question: Question) -> str:
    """Hash of what the plan's files depend on (module docstring); 24 hex digits."""
    return hashlib.sha256(dumps(identity_fields(question)).encode()).hexdigest()[:24]


def identity_fields(question: Question) -> dict:
    """The question as the identity hashes it: file paths replaced by their contents' hash."""
    import dataclasses

    from specbatch.analysis.sweep.points import plain

    base = dict(question.base)
    for key in ("target", "draft"):
        base[key] = _model_identity(base.get(key))
    if base.get("workload"):
        base["workload"] = _file_identity("--workload", base["workload"])
    if base.get("acceptance_profile"):  # its contents, wherever the file is
        from specbatch.traces.acceptance.library import profile_path

        base["acceptance_profile"] = _file_identity(
            "--acceptance-profile", profile_path(base["acceptance_profile"]))
    lengths = None if question.lengths is None else [d.describe() for d in question.lengths]
    fields = {
        "base": base, "lengths": lengths,
        "space": {f.name: getattr(question.space, f.name)
                  for f in dataclasses.fields(question.space)},
        "slos": dataclasses.asdict(question.slos), "levels_after": question.levels_after,
        "band": question.band}
    if question.seeds != 1 or question.breakeven:  # a one-seed plan keeps its identity
        fields.update(seeds=question.seeds, breakeven=question.breakeven)
    return plain(fields)


def _model_identity(model):
    """A shape name as it is; a ``config.json`` path (or its folder) as its bytes' hash."""
    if model is None:
        return None
    path = Path(str(model))
    if path.is_dir():
        path = path / "config.json"
    if path.is_file():
        return _file_identity(f"model {model}", path)
    return str(model)


def _file_identity(what: str, name) -> str:
    from specbatch.simulator.workload.arrivals import resolve_workload

    path = resolve_workload(str(name)) if what == "--workload" else Path(name)
    try:
        return "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError as exc:
        raise SpecbatchError(f"{what}: cannot read {path} ({exc.strerror or exc})") from None


def check_plan_dir(out: str | Path, identity: str, flag: str = "--out") -> Path:
    """Refuse (one line) an ``out`` this question may not write into; create nothing."""
    out = Path(out)
    check_output_dir(out, flag, allow_existing=True)
    if not out.is_dir():
        return out
    names = sorted(p.name for p in out.iterdir() if p.name != LOCK)
    if not names:
        return out
    marker = read_marker(out)
    if marker is None:
        shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
        raise SpecbatchError(f"{flag} {out}: holds files that are not a plan's ({shown}); "
                             "choose an empty or new directory")
    require(marker.get("identity") == identity,
            f"{flag} {out}: holds the plan of another question ({_difference(marker)}); "
            "choose another directory (or rerun that question there)")
    return out


def _difference(marker: dict) -> str:
    """What the earlier question was, in a few words."""
    q = marker.get("question") or {}
    base = q.get("base") or {}
    parts = [f"{k} {base[k]}" for k in ("target", "rate", "arrival", "requests") if k in base]
    if q.get("lengths"):
        parts.append("lengths " + " / ".join(map(str, q["lengths"])))
    return ", ".join(parts) or "unknown"


def read_marker(out: Path) -> dict | None:
    """The claim in ``out``, or None when there is none (or it is not one of ours)."""
    try:
        marker = json.loads((Path(out) / MARKER).read_bytes())
    except (OSError, ValueError):
        return None
    return marker if isinstance(marker, dict) and marker.get("kind") == "plan" else None


@contextlib.contextmanager
def claimed_plan_dir(out: str | Path, question: Question, flag: str = "--out") -> Iterator[Path]:
    """Check ``out`` (nothing written when refused), create it, hold its lock, check again
    under the lock, write the claim if it is new, and yield the folder."""
    identity = question_identity(question)
    out = check_plan_dir(out, identity, flag)
    prepare_output_dir(out, flag, allow_existing=True)
    with dir_lock(out, flag, what="plan", name=LOCK):
        check_plan_dir(out, identity, flag)
        if read_marker(out) is None:
            atomic_write(out / MARKER, dumps({"kind": "plan", "identity": identity,
                                              "question": identity_fields(question)}, indent=1))
        yield out


def default_out(question: Question) -> Path:
    """Where a plan without ``--out`` goes: ``<cache>/plan/<identity>`` (module docstring)."""
    from specbatch.traces.models.weights import cache_dir

    return cache_dir() / "plan" / question_identity(question)
