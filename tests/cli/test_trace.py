"""``specbatch trace info | validate | synth``."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

import specbatch.traces.format.files as fmt
from specbatch.cli import main
from specbatch.traces.format.files import read_trace


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def synth_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("cli") / "synth"
    assert main(["trace", "synth", "--out", str(path), "--requests", "12", "--depth", "5",
                 "--output-mean", "30", "--seed", "3"]) == 0
    return path


def test_synth_writes_a_valid_trace_with_the_knobs(synth_dir):
    trace = read_trace(synth_dir)
    assert trace.n_requests == 12 and trace.K == 5 and trace.temperature == 1.0
    assert trace.meta["synth"]["seed"] == 3


def test_synth_json_output(tmp_path, capsys):
    code, out, _ = run(capsys, "trace", "synth", "--out", str(tmp_path / "t0"), "--requests", "3",
                       "--temperature", "0", "--surrogate", "perfect", "--json")
    assert code == 0
    result = json.loads(out)
    assert result["requests"] == 3 and result["temperature"] == 0.0
    assert np.all(read_trace(tmp_path / "t0").q == 1.0)


def test_info_json_has_per_position_means_and_mal(synth_dir, capsys):
    code, out, _ = run(capsys, "trace", "info", str(synth_dir), "--json")
    assert code == 0
    info = json.loads(out)
    trace = read_trace(synth_dir)
    assert (info["requests"], info["positions"], info["K"]) == (12, trace.n_rows, 5)
    assert info["temperature"] == 1.0
    assert info["models"] == {"draft": "synthetic-draft", "target": "synthetic-target"}
    pp = info["per_position"]
    assert pp["i"] == [1, 2, 3, 4, 5]
    assert np.allclose(pp["accept_mean"], np.minimum(trace.pt / trace.q, 1).mean(axis=0))
    assert np.allclose(pp["p_mean"], trace.p.mean(axis=0))
    assert np.allclose(pp["r_mean"], (trace.pt / trace.q).mean(axis=0))
    mal = info["mal"]
    assert mal["gamma"] == list(range(6))
    assert mal["tv"][0] == 1.0 and mal["bv"][0] == 1.0
    assert mal["tv"][1] == pytest.approx(mal["bv"][1])  # BV = TV at γ = 1
    assert mal["tv"][5] == pytest.approx(1 + trace.accept_tv.sum(axis=1).mean())
    assert mal["bv"][5] == pytest.approx(1 + trace.p.sum(axis=1).mean())
    assert all(b >= t - 1e-12 for t, b in zip(mal["tv"], mal["bv"]))


def test_info_mal_matches_the_constant_acceptance_formula(tmp_path, capsys):
    alpha = 0.7
    main(["trace", "synth", "--out", str(tmp_path / "a"), "--requests", "4",
          "--constant-alpha", str(alpha), "--depth", "6"])
    capsys.readouterr()
    _, out, _ = run(capsys, "trace", "info", str(tmp_path / "a"), "--json")
    mal = json.loads(out)["mal"]
    for gamma in range(7):
        expected = (1 - alpha ** (gamma + 1)) / (1 - alpha)
        assert mal["tv"][gamma] == pytest.approx(expected, rel=1e-12)
        assert mal["bv"][gamma] == pytest.approx(expected, rel=1e-12)


def test_info_text(synth_dir, capsys):
    code, out, _ = run(capsys, "trace", "info", str(synth_dir))
    assert code == 0
    assert "requests     12" in out and "K            5" in out
    assert "implied mean accepted length" in out and "min(1,r)" in out


def test_validate_ok(synth_dir, capsys):
    code, out, _ = run(capsys, "trace", "validate", str(synth_dir))
    assert code == 0 and out.startswith("ok: ")
    code, out, _ = run(capsys, "trace", "validate", str(synth_dir), "--json")
    assert json.loads(out)["ok"] is True


def test_a_partial_capture_fails_validation_and_shows_in_info(synth_dir, tmp_path, capsys):
    import shutil

    part = tmp_path / "part"
    shutil.copytree(synth_dir, part)
    meta = json.loads((part / "meta.json").read_text())
    meta["completion"] = {"status": "partial", "done": 12, "total": 20}
    (part / "meta.json").write_text(json.dumps(meta))
    code, out, _ = run(capsys, "trace", "validate", str(part))
    assert code == 1 and out.startswith("partial capture")
    code, out, _ = run(capsys, "trace", "info", str(part))
    assert code == 0 and "status       partial" in out
    code, _, err = run(capsys, "simulate", "--trace", str(part), "--requests", "4")
    assert code == 2 and "--allow-partial" in err and err.count("\n") == 1


def test_validate_bad_trace_is_one_line_exit_2(synth_dir, tmp_path, capsys):
    bad = tmp_path / "bad"
    main(["trace", "synth", "--out", str(bad), "--requests", "2"])
    meta = json.loads((bad / "meta.json").read_text())
    meta["version"] = 99
    (bad / "meta.json").write_text(json.dumps(meta))
    capsys.readouterr()
    code, out, err = run(capsys, "trace", "validate", str(bad))
    assert code == 2 and out == ""
    assert (
        err.count("\n") == 1
        and "meta.json: field version: expected 1 (chains) or 2 (trees), got 99" in err
    )


def test_default_resolves_to_the_bundled_trace(synth_dir, tmp_path, monkeypatch, capsys):
    bundled = tmp_path / "data"
    bundled.mkdir()
    (bundled / "default").symlink_to(synth_dir, target_is_directory=True)
    monkeypatch.setattr(fmt, "BUNDLED_DIR", bundled)
    code, out, _ = run(capsys, "trace", "info", "default", "--json")
    assert code == 0 and json.loads(out)["requests"] == 12


def test_unknown_trace_name(capsys):
    code, _, err = run(capsys, "trace", "info", "no-such-trace")
    assert code == 2 and "no-such-trace" in err and err.count("\n") == 1


def test_bad_knob_exit_2(tmp_path, capsys):
    code, _, err = run(capsys, "trace", "synth", "--out", str(tmp_path / "x"), "--vocab", "1")
    assert code == 2 and "vocab" in err


def test_help_has_examples(capsys):
    for verb in ("info", "validate", "synth"):
        with pytest.raises(SystemExit) as exc:
            main(["trace", verb, "--help"])
        assert exc.value.code == 0 and "example:" in capsys.readouterr().out


def test_process_exit_code_and_one_line_error(synth_dir):
    result = subprocess.run([sys.executable, "-m", "specbatch", "trace", "validate",
                             str(synth_dir / "missing")], capture_output=True, text=True)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
