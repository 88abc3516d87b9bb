"""AIConfigurator's vLLM tables: the importer (layout, reuse.yaml, newest full version) and the
per-op laws (a table generated from a known law is recovered exactly, held out included)."""

import numpy as np
import pandas as pd
import pytest

from specbatch.errors import SpecbatchError
from specbatch.simulator.cost.measured.aic_laws import fit_family, fit_tables
from specbatch.traces.public.aiconfigurator import import_aiconfigurator, newest_full_version


def gemm_rows(a=5e-6, pi=5e14, beta=2e12):
    rows = [(m, n, k) for m in (1, 16, 256, 4096) for n in (1024, 4096, 8192)
            for k in (1024, 4096)]
    f = pd.DataFrame(rows, columns=["m", "n", "k"])
    t = a + 2.0 * f.m * f.n * f.k / pi + (2.0 * (f.m * f.k + f.n * f.k) + 2.0 * f.m * f.n) / beta
    return f.assign(kernel_source="torch", gemm_dtype="bfloat16", latency=t * 1e3)


def write(root, system, folder, version, name, frame):
    d = root / system / folder / "vllm" / version
    d.mkdir(parents=True, exist_ok=True)
    frame.to_parquet(d / f"{name}.parquet")


def decode_rows():
    rows = [(b, c, h, 8, 128) for b in (1, 8, 64) for c in (127, 1023) for h in (8, 16, 32, 64)]
    f = pd.DataFrame(rows, columns=["batch_size", "step", "num_heads", "num_key_value_heads",
                                    "head_dim"])
    kv = 2.0 * f.batch_size * (f.step + 1) * 8 * 128 * 2
    t = 1e-5 + 2e-7 * f.batch_size + kv / 3e12
    return f.assign(kernel_source="fa3", kv_cache_dtype="bfloat16", window_size=0,
                    latency=t * 1e3)


@pytest.fixture
def tables(tmp_path):
    write(tmp_path, "gpu", "gemm", "0.1.0", "gemm_perf", gemm_rows())
    write(tmp_path, "gpu", "attention", "0.1.0", "generation_attention_perf", decode_rows())
    write(tmp_path, "gpu", "attention", "0.1.0", "context_attention_perf", pd.DataFrame(
        {"kernel_source": ["fa3"], "batch_size": [1], "isl": [16], "num_heads": [8],
         "num_key_value_heads": [8], "head_dim": [128], "kv_cache_dtype": ["bfloat16"],
         "window_size": [0], "latency": [0.01]}))
    write(tmp_path, "gpu", "comm", "0.1.0", "custom_allreduce_perf", pd.DataFrame(
        {"kernel_source": "k", "allreduce_dtype": "bfloat16", "num_gpus": 2,
         "message_size": [1024, 4096], "backend": "vllm_graph", "latency": [0.005, 0.006]}))
    write(tmp_path, "gpu", "moe", "0.1.0", "moe_perf", pd.DataFrame(
        {"kernel_source": "k", "moe_dtype": "bfloat16", "num_tokens": [1], "hidden_size": 4096,
         "inter_size": 1024, "topk": 2, "num_experts": 8, "moe_tp_size": 1, "moe_ep_size": 1,
         "distribution": "balanced", "latency": [0.05]}))
    # a newer version with a gemm table of its own and nothing else: not a full set
    write(tmp_path, "gpu", "gemm", "0.2.0", "gemm_perf", gemm_rows())
    # 0.10.0 reuses every table of 0.1.0 (reuse.yaml), a full set, and newer than 0.2.0
    for folder, stems in (("gemm", ["gemm_perf"]), ("comm", ["custom_allreduce_perf"]),
                          ("moe", ["moe_perf"]),
                          ("attention", ["context_attention_perf",
                                         "generation_attention_perf"])):
        d = tmp_path / "gpu" / folder / "vllm" / "0.10.0"
        d.mkdir(parents=True)
        (d / "reuse.yaml").write_text("schema_version: 1\nreuse:\n" + "".join(
            f"- table: {s}\n  from_version: 0.1.0\n  reason: r\n  approved_by: a\n"
            for s in stems))
    return tmp_path


def test_newest_full_version_follows_reuse(tables):
    assert newest_full_version(tables, "gpu") == "0.10.0"
    t = import_aiconfigurator(tables, "gpu", commit="abc")
    assert t.version == "0.10.0"
    assert t.provenance["commit"] == "abc" and t.provenance["licence"] == "Apache-2.0"
    paths = {f["family"]: f["path"] for f in t.provenance["files"]}
    assert paths["gemm"] == "gpu/gemm/vllm/0.1.0/gemm_perf.parquet"
    assert t.frames["gemm"]["latency_s"].iloc[0] == pytest.approx(
        gemm_rows()["latency"].iloc[0] * 1e-3)


def test_a_known_law_is_recovered_held_out_too(tables):
    t = import_aiconfigurator(tables, "gpu", "0.1.0")
    (law,) = fit_family("gemm", t.frames["gemm"])
    assert law.coef == pytest.approx((5e-6, 1 / 5e14, 1 / 2e12), rel=1e-6)
    assert law.mape_loso < 1e-6 and law.shapes == 6
    (dec,) = fit_family("attention_decode", t.frames["attention_decode"])
    assert dec.coef[0] == pytest.approx(1e-5, rel=1e-6)
    assert dec.coef[1] == pytest.approx(2e-7, rel=1e-6)
    assert dec.coef[3] == pytest.approx(1 / 3e12, rel=1e-6)
    assert dec.mape_loso < 1e-6 and dec.mape_transfer < 1e-6
    assert {law.family for law in fit_tables(t)} >= {"gemm", "attention_decode"}


def test_bad_input_is_one_line(tables):
    with pytest.raises(SpecbatchError, match="no such system"):
        import_aiconfigurator(tables, "nope")
    with pytest.raises(SpecbatchError, match="version '9.9.9'"):
        import_aiconfigurator(tables, "gpu", "9.9.9")
    write(tables, "bad", "gemm", "0.1.0", "gemm_perf", gemm_rows().drop(columns=["k"]))
    with pytest.raises(SpecbatchError, match="column 'k' missing"):
        import_aiconfigurator(tables, "bad", "0.1.0")


def test_fitted_rows_positive(tables):
    t = import_aiconfigurator(tables, "gpu", "0.1.0")
    assert (t.frames["gemm"]["latency_s"] > 0).all()
    assert np.isfinite(t.frames["attention_decode"]["latency_s"]).all()


def mla_rows(module: bool, decode: bool) -> pd.DataFrame:
    f = pd.DataFrame({"kernel_source": "FLASH_ATTN_MLA", "mla_dtype": "bfloat16",
                      "kv_cache_dtype": "bfloat16", "num_heads": [16, 16, 128],
                      "batch_size": [1, 4, 8], "isl": [1, 1, 1] if decode else [16, 64, 256],
                      "step": [2, 1024, 4096] if decode else [0, 0, 0],
                      "latency": [0.2, 0.3, -1.0]})
    if module:
        f = f.assign(model="deepseek-ai/DeepSeek-V3", gemm_type="bfloat16")
    return f


def test_mla_tables_prefer_the_module_table_and_follow_reuse(tables):
    # 0.1.0 holds the kernel-only tables; 0.10.0 a module decode table of its own and a
    # reuse.yaml sending the kernel-only prefill table back to 0.1.0
    write(tables, "gpu", "mla", "0.1.0", "generation_mla_perf", mla_rows(False, True))
    write(tables, "gpu", "mla", "0.1.0", "context_mla_perf", mla_rows(False, False))
    write(tables, "gpu", "mla", "0.10.0", "mla_generation_module_perf", mla_rows(True, True))
    (tables / "gpu" / "mla" / "vllm" / "0.10.0" / "reuse.yaml").write_text(
        "reuse:\n- table: context_mla_perf\n  from_version: 0.1.0\n  reason: r\n"
        "  approved_by: a\n")
    t = import_aiconfigurator(tables, "gpu")
    dec, pre = t.frames["mla_decode"], t.frames["mla_prefill"]
    assert set(dec["scope"]) == {"module"} and set(pre["scope"]) == {"kernel"}
    # a decode row's step counts its query token: 2 and 1024 -> 1 and 1023 cached tokens;
    # the row of negative latency is dropped
    assert dec["context"].tolist() == [1, 1023] and dec["heads"].tolist() == [16, 16]
    assert dec["latency_s"].tolist() == pytest.approx([2e-4, 3e-4])
    assert pre["prompt"].tolist() == [16, 64] and set(pre["gemm_dtype"]) == {"none"}
    paths = {f["family"]: (f["path"], f.get("scope")) for f in t.provenance["files"]}
    assert paths["mla_prefill"] == ("gpu/mla/vllm/0.1.0/context_mla_perf.parquet", "kernel")
    # the MLA tables do not decide the newest full version
    assert newest_full_version(tables, "gpu") == "0.10.0"


@pytest.mark.parametrize("bad, says", [
    (lambda f: f.drop(columns="gemm_type"), "column 'gemm_type' missing"),
    (lambda f: f.assign(num_heads=[16.5, 16, 128]), "column 'num_heads' holds a value that"),
    (lambda f: f.assign(step=[0, 1024, 4096]), "column 'step' holds a value below 1"),
])
def test_a_malformed_mla_table_is_refused_in_one_line_naming_file_and_field(tables, bad, says):
    write(tables, "gpu", "mla", "0.1.0", "mla_generation_module_perf",
          bad(mla_rows(True, True)))
    with pytest.raises(SpecbatchError) as err:
        import_aiconfigurator(tables, "gpu", "0.1.0")
    msg = str(err.value)
    assert "mla_generation_module_perf.parquet" in msg and says in msg and "\n" not in msg
