"""What a ``specbatch tune`` output folder holds: the report, the engines' advice lines and
SGLang's adaptive config, written atomically; and how a folder an earlier tune wrote is
recognised (so a rerun may replace it)."""

from __future__ import annotations

import json
from pathlib import Path

from specbatch.io import atomic_write, dumps

#: The report's file in a tune output directory (the directory's marker is
#: specbatch.io.RESULT_MARKER, kind "tune").
MARKER = "tune.json"
#: What a tune output directory holds.
TUNE_FILES = (MARKER, "settings.txt", "workload.csv", "sglang_adaptive.json")


def is_tune_result(out: Path) -> bool:
    """Whether ``out`` holds an earlier tune's files written before results carried a marker:
    its tune.json is a tune report (read, not guessed from the name). Such a folder may be
    replaced; files someone else named tune.json are not."""
    try:
        report = json.loads((out / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(report, dict) and {"question", "buckets", "engines_verdict"} <= set(report)


def write_tune(report: dict, out: Path) -> None:
    """OUT/tune.json (the report), OUT/settings.txt (one advice line per engine) and, where
    SGLang takes one, OUT/sglang_adaptive.json (the file its flags name), atomic."""
    if report.get("sglang_config") is not None:
        atomic_write(out / "sglang_adaptive.json", dumps(report["sglang_config"], indent=1))
    atomic_write(out / "settings.txt", "".join(
        f"{engine}: {v['advice']}\n" for engine, v in report["engines_verdict"].items()))
    atomic_write(out / MARKER, dumps(report, indent=1))
