"""The compact AIConfigurator curves: what `cost import-aiconfigurator` writes besides the laws
(selection, narrowing, provenance) and that the bundled copy stays small and traceable."""

import hashlib
import json
import re
from pathlib import Path

import numpy as np
import pandas as pd

from specbatch.simulator.cost.measured.aic_curves import (
    BUNDLED,
    compact_frame,
    load_curves,
)
from specbatch.simulator.cost.measured.aic_import import COMMON_SYSTEMS, import_laws, write_laws

SLICE = Path(__file__).parents[3] / "traces" / "data" / "aic_slice"


def test_import_writes_compact_curves_with_their_provenance(tmp_path):
    result = import_laws(SLICE, commit="abc")
    out = write_laws(result, tmp_path / "laws")
    prov = json.loads((out / "PROVENANCE.json").read_text())
    records = {r["family"]: r for r in prov["curves"]}
    assert set(records) == {"gemm", "attention_decode", "attention_prefill", "allreduce", "moe"}
    for r in records.values():
        path = out / r["path"]
        assert hashlib.sha256(path.read_bytes()).hexdigest() == r["sha256"]
        assert re.fullmatch(r"[0-9a-f]{64}", r["source_sha256"])
        assert r["source_path"].startswith("gpu/")
    raw = pd.read_parquet(out / records["gemm"]["path"])
    assert raw["latency_s"].dtype == np.float32 and raw["m"].dtype == np.int32
    curves = load_curves("gpu", str(out))
    gemm = curves["gemm"]
    # the slice's 24 bf16 rows (n, k in 1024 / 4096, latency in ms) come back in seconds
    assert len(gemm) == 24 and gemm["latency_s"].dtype == np.float64
    first = gemm[(gemm.m == 1) & (gemm.n == 1024) & (gemm.k == 1024)]["latency_s"].iloc[0]
    assert abs(first - 0.0060548183040000005e-3) < 1e-12
    assert list(curves["allreduce"]["elements"]) == [1024, 4096]


def test_compaction_keeps_only_the_default_groups():
    frame = pd.DataFrame({
        "dtype": ["bfloat16", "bfloat16", "fp8_block", "bfloat16"],
        "kernel": ["t", "t", "deepgemm", "t"], "m": [1, 2, 1, 1], "n": [1024, 1024, 1024, 128],
        "k": [512, 512, 512, 512], "latency_s": [1e-5, 2e-5, 1e-5, 1e-5]})
    kept = compact_frame("gemm", frame)
    assert list(kept["m"]) == [1, 2]  # fp8_block and n < 256 dropped
    att = pd.DataFrame({"kv_dtype": ["bfloat16"] * 3, "kernel": ["fa3", "fa3", "fa4"],
                        "batch": [1, 2, 1], "context": [7, 7, 7], "heads": [8] * 3,
                        "kv_heads": [8] * 3, "head_dim": [128] * 3, "window": [0, 0, 0],
                        "latency_s": [1e-5] * 3})
    assert list(compact_frame("attention_decode", att)["kernel"]) == ["fa3", "fa3"]


def test_the_bundled_curves_are_small_and_traced():
    prov = json.loads((BUNDLED / "PROVENANCE.json").read_text())
    total = 0
    for r in prov["curves"]:
        path = BUNDLED / r["path"]
        assert hashlib.sha256(path.read_bytes()).hexdigest() == r["sha256"]
        assert r["source_path"].startswith(r["system"] + "/")
        total += path.stat().st_size
    assert total < 3.2e6
    assert {r["system"] for r in prov["curves"]} == set(COMMON_SYSTEMS)
