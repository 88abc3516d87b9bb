"""``specbatch acceptance``: import, export, show, list; one JSON object; one-line errors."""

from __future__ import annotations

import json

import pytest

from specbatch.traces.acceptance.profile import read_profile
from tests.cli.oneline import assert_one_line_error, run_cli, run_main
from tests.simulator.replay.test_profile_replay import COUNTERS


def test_import_vllm_metrics_then_show_then_export(tmp_path, capsys):
    (tmp_path / "m.prom").write_text(COUNTERS)
    out = tmp_path / "p.json"
    code, stdout, _ = run_main(capsys, ["acceptance", "import-vllm-metrics",
                                        str(tmp_path / "m.prom"), "--drafter", "eagle3",
                                        "--dataset", "mt-bench", "--out", str(out)])
    assert code == 0 and "wrote" in stdout
    p = read_profile(out)
    assert p.drafter == "eagle3" and p.conditions["dataset"] == "mt-bench"
    code, stdout, _ = run_main(capsys, ["acceptance", "show", str(out)])
    assert "2.7520" in stdout and "0.8000" in stdout
    mo = tmp_path / "speculation_profile.json"
    code, _, _ = run_main(capsys, ["acceptance", "export-profile", str(out), "--out", str(mo)])
    assert json.loads(mo.read_text())["conditional_accept_rates"] == [0.8, 0.7, 0.7]
    back = tmp_path / "back.json"
    code, _, _ = run_main(capsys, ["acceptance", "import-profile", str(mo), "--out", str(back)])
    assert read_profile(back).rates == p.rates


def test_json_is_one_object_and_errors_are_one_line(tmp_path):
    done = run_cli(["acceptance", "show", "ngram-llama3.1-8b-code-edit", "--json"], tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["K"] == 5
    done = run_cli(["acceptance", "list", "--json"], tmp_path)
    assert len(json.loads(done.stdout)["profiles"]) >= 5
    (tmp_path / "bad.prom").write_text("vllm:spec_decode_num_drafts_total 1\n")
    done = run_cli(["acceptance", "import-vllm-metrics", "bad.prom", "--out", "p.json"],
                   tmp_path)
    assert_one_line_error(done.returncode, done.stderr, "num_draft_tokens_total")
    (tmp_path / "p.json").write_text("keep me")
    (tmp_path / "m.prom").write_text(COUNTERS)
    done = run_cli(["acceptance", "import-vllm-metrics", "m.prom", "--out", "p.json"], tmp_path)
    assert_one_line_error(done.returncode, done.stderr, "exists")
    assert (tmp_path / "p.json").read_text() == "keep me"


def test_make_from_a_mean_accepted_length_or_rates(tmp_path, capsys):
    out = tmp_path / "m.json"
    code, stdout, _ = run_main(capsys, ["acceptance", "make", "--mal", "3.2", "--k", "7",
                                        "--drafter", "mtp", "--target", "deepseek-v3",
                                        "--out", str(out)])
    p = read_profile(out)
    assert code == 0 and p.K == 7 and len(set(p.rates)) == 1
    from specbatch.traces.acceptance.profile import mean_accepted_length

    assert abs(mean_accepted_length(p) - 3.2) < 1e-9
    code, _, _ = run_main(capsys, ["acceptance", "make", "--rates", "0.8,0.7",
                                   "--out", str(tmp_path / "r.json")])
    assert read_profile(tmp_path / "r.json").rates == (0.8, 0.7)
    code, _, _ = run_main(capsys, ["acceptance", "make", "--survival", "0.8,0.56",
                                   "--out", str(tmp_path / "s.json")])
    assert read_profile(tmp_path / "s.json").rates == pytest.approx((0.8, 0.7))
    code, _, err = run_main(capsys, ["acceptance", "make", "--rates", "0.8,1.7",
                                     "--out", str(tmp_path / "bad.json")])
    assert_one_line_error(code, err, "--rates")
    code, _, err = run_main(capsys, ["acceptance", "make", "--mal", "9", "--k", "2",
                                     "--out", str(tmp_path / "bad.json")])
    assert_one_line_error(code, err, "--mal")
    assert not (tmp_path / "bad.json").exists()
