"""The built aic model kept in the cache folder (simulator.cost.measured.aic_cache): read back,
it prices every op and a whole run bit for bit as the freshly built one; a corrupt entry is
rebuilt silently; the key follows the curve files' contents and the building code."""

import dataclasses
import json

import numpy as np
import pytest

from specbatch.simulator.config.sim_config import load_config
from specbatch.simulator.cost.measured import aic_cache, aic_cost, aic_op_curves, aic_role_attention
from specbatch.simulator.cost.measured.aic_cost import curve_coverage
from specbatch.simulator.cost.measured.aic_op_curves import op_curve
from specbatch.simulator.cost.measured.aic_role_attention import attention_law
from specbatch.simulator.cost.registry import build_cost_model
from specbatch.simulator.run import simulate
from specbatch.traces.models.shapes import get_shape

#: (target, draft, tp): a dense pair, and a MoE at tp 2 (experts, router, all-reduce).
DEPLOYMENTS = (("llama-3.1-8b", "llama-3.2-1b", 1), ("mixtral-8x7b", "vicuna-68m", 2))


def forget() -> None:
    """Drop this process's memo of the built pieces (the cache folder is what is left)."""
    for memo in (op_curve, attention_law, curve_coverage):
        memo.cache_clear()


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECBATCH_CACHE", str(tmp_path))
    forget()
    yield tmp_path / "aic"
    forget()


def no_build(monkeypatch) -> None:
    """Make any build from the curves fail: what follows must come from the cache folder."""
    def refuse(*args, **kwargs):
        raise AssertionError(f"built from the curves: {args}")

    monkeypatch.setattr(aic_op_curves, "shape_curves", refuse)
    monkeypatch.setattr(aic_role_attention, "attention_fit", refuse)
    monkeypatch.setattr(aic_cost, "load_curves", refuse)


def assert_same_pricer(fresh, cached) -> None:
    """Every built piece of one role equal, arrays bit for bit (dtype included)."""
    assert fresh.curves.keys() == cached.curves.keys()
    pairs = [(fresh.head_curve, cached.head_curve),
             (fresh.allreduce_curve, cached.allreduce_curve),
             *((fresh.curves[k][1], cached.curves[k][1]) for k in fresh.curves)]
    for a, b in pairs:
        if a is None:
            assert b is None
            continue
        assert a.grid.dtype == b.grid.dtype == np.float64
        assert a.grid.tobytes() == b.grid.tobytes() and a.seconds.tobytes() == b.seconds.tobytes()
        assert (a.law, a.source, a.how) == (b.law, b.source, b.how)
        xs = np.concatenate([a.grid, a.grid * 1.37, [0.5, a.grid[-1] * 3.0, a.grid[-1] * 40.0]])
        assert [a.at(float(x)) for x in xs] == [b.at(float(x)) for x in xs]
    assert type(fresh.attention) is type(cached.attention)
    assert dataclasses.asdict(fresh.attention) == dataclasses.asdict(cached.attention)
    assert fresh.attention_how == cached.attention_how


@pytest.mark.parametrize("target,draft,tp", DEPLOYMENTS)
def test_a_model_read_back_prices_every_op_bit_for_bit(cache, monkeypatch, target, draft, tp):
    fresh = build_cost_model("aic", "h100", target, draft, tp=tp)
    assert any(cache.rglob("curve-*.json")) and any(cache.rglob("attention-*.json"))
    forget()
    no_build(monkeypatch)
    cached = build_cost_model("aic", "h100", target, draft, tp=tp)
    rng = np.random.default_rng(3)
    for role in ("target", "draft"):
        assert_same_pricer(fresh.roles[role], cached.roles[role])
        a, b = fresh.pass_table(role, 700), cached.pass_table(role, 700)
        for name in ("layers", "allreduce", "head"):
            assert getattr(a, name).tobytes() == getattr(b, name).tobytes()
        for _ in range(100):
            n = int(rng.integers(1, 40))
            q, c = rng.integers(1, 600, n), rng.integers(0, 9000, n)
            assert fresh.step_time(role, q, c) == cached.step_time(role, q, c)


def test_a_whole_run_read_back_is_bit_identical(cache, monkeypatch):
    config = load_config(None, cost="aic", requests=12, target="llama-3.1-8b",
                         draft="llama-3.2-1b")
    fresh = simulate(config)
    forget()
    no_build(monkeypatch)
    cached = simulate(config)
    assert json.dumps(fresh.summary, sort_keys=True) == json.dumps(cached.summary,
                                                                    sort_keys=True)
    for name in ("requests", "steps"):
        a, b = getattr(fresh, name), getattr(cached, name)
        assert list(a.columns) == list(b.columns)
        for col in a.columns:
            assert a[col].to_numpy().tobytes() == b[col].to_numpy().tobytes(), (name, col)


@pytest.mark.parametrize("damage", [b"", b"{not json", b'{"key": "another", "value": {}}',
                                    b'{"key": null}', b"\xff\xfe\x00"])
def test_a_corrupt_entry_is_rebuilt_silently(cache, monkeypatch, capsys, damage):
    fresh = build_cost_model("aic", "h100", "llama-3.1-8b", "llama-3.2-1b")
    files = sorted(cache.rglob("*.json"))
    assert len(files) >= 5  # coverage, curves, attention laws
    for path in files:
        path.write_bytes(damage)
    forget()
    again = build_cost_model("aic", "h100", "llama-3.1-8b", "llama-3.2-1b")
    assert capsys.readouterr() == ("", "")
    for role in ("target", "draft"):
        assert_same_pricer(fresh.roles[role], again.roles[role])
    forget()
    no_build(monkeypatch)  # the rebuilt entries were written back whole
    build_cost_model("aic", "h100", "llama-3.1-8b", "llama-3.2-1b")


def test_an_entry_whose_stored_class_fails_to_decode_is_rebuilt(cache):
    law, how = attention_law("h100_sxm", "bfloat16", 32, 8, 128, 2.0, 32)
    (path,) = cache.rglob("attention-*.json")
    stored = json.loads(path.read_text())
    stored["value"]["law"]["fields"]["no_such_field"] = 1.0  # the class changed its fields
    path.write_text(json.dumps(stored))
    forget()
    assert attention_law("h100_sxm", "bfloat16", 32, 8, 128, 2.0, 32) == (law, how)
    stored["value"]["law"]["class"] = "os:system"  # never a class outside this package
    path.write_text(json.dumps(stored))
    forget()
    assert attention_law("h100_sxm", "bfloat16", 32, 8, 128, 2.0, 32) == (law, how)


def test_the_key_follows_the_code_and_the_curve_files_contents(cache, monkeypatch, tmp_path):
    key = aic_cache.entry_key("curve", "h100_sxm", ("gemm", "bfloat16", [4096, 4096]))
    assert key == aic_cache.entry_key("curve", "h100_sxm", ("gemm", "bfloat16", [4096, 4096]))
    assert key != aic_cache.entry_key("curve", "h100_sxm", ("gemm", "fp8", [4096, 4096]))
    monkeypatch.setattr(aic_cache, "code_digest", lambda: "an edited aic_attention.py")
    assert key != aic_cache.entry_key("curve", "h100_sxm", ("gemm", "bfloat16", [4096, 4096]))
    # the data digest reads the files' bytes: one byte changed is another digest
    data = tmp_path / "data"
    (data / "curves" / "gpu").mkdir(parents=True)
    gemm = data / "curves" / "gpu" / "gemm.parquet"
    gemm.write_bytes(b"rows")
    (data / "laws.json").write_text("{}")
    before = aic_cache.data_digest("gpu", str(data))
    aic_cache.data_digest.cache_clear()
    gemm.write_bytes(b"rowz")
    assert aic_cache.data_digest("gpu", str(data)) != before
    aic_cache.data_digest.cache_clear()


def test_every_aic_module_and_the_tabulated_form_are_in_the_code_digest():
    names = {p.name for p in aic_cache.CODE_DIR.glob("aic_*.py")}
    assert {"aic_attention.py", "aic_laws.py", "aic_ops.py", "aic_pricer.py"} <= names
    assert aic_cache.TABULATED.is_file()


def test_a_gpu_without_tables_is_refused_without_reading_a_curve(monkeypatch):
    def refuse(*args):
        raise AssertionError("read the curves")

    monkeypatch.setattr(aic_cost, "load_curves", refuse)
    reason = aic_cost.aic_covers("rtx4090", get_shape("llama-3.1-8b"), None, 1)
    assert "rtx4090" in reason and "h100" in reason
