"""vLLM's Prometheus spec-decode counters -> profile (THEORY.md §13), on hand-made scrapes."""

from __future__ import annotations

import pytest

from specbatch.errors import SpecbatchError
from specbatch.traces.acceptance.profile import mean_accepted_length
from specbatch.traces.acceptance.vllm_metrics import (
    parse_counters,
    profile_from_counts,
    read_metrics,
)


def scrape(drafts, tokens, accepted, per_pos, model="m", engine="0", extra=""):
    """A /metrics text as vLLM writes it (HELP/TYPE lines, _created samples, labels)."""
    lab = f'engine="{engine}",model_name="{model}"'
    lines = ["# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.",
             "# TYPE vllm:spec_decode_num_drafts_total counter",
             f"vllm:spec_decode_num_drafts_total{{{lab}}} {drafts}",
             f"vllm:spec_decode_num_drafts_created{{{lab}}} 1.7e9",
             f"vllm:spec_decode_num_draft_tokens_total{{{lab}}} {tokens}",
             f"vllm:spec_decode_num_accepted_tokens_total{{{lab}}} {accepted}",
             'vllm:num_requests_running{model_name="m"} 3.0']
    lines += [f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{lab},position="{j}"}} {c}'
              for j, c in enumerate(per_pos)]
    return "\n".join(lines) + "\n" + extra


def test_worked_example_of_theory_section_13(tmp_path):
    # D = 1000, T = 3000, c = (800, 560, 392): a = (0.8, 0.7, 0.7), A = 1752, MAL = 2.752,
    # vLLM's acceptance rate A / T = 0.584.
    path = tmp_path / "m.prom"
    path.write_text(scrape(1000.0, 3000.0, 1752.0, (800.0, 560.0, 392.0)))
    p = read_metrics(path)
    assert p.rates == pytest.approx((0.8, 0.7, 0.7), abs=1e-12)
    assert mean_accepted_length(p) == pytest.approx(2.752, abs=1e-12)
    counters = p.provenance["counters"]
    assert counters["mean_accepted_length"] == pytest.approx(2.752)
    assert counters["draft_acceptance_rate"] == pytest.approx(0.584)
    assert p.target == "m" and p.provenance["source"] == "vllm-metrics" and not p.notes


def test_engines_are_summed_and_two_scrapes_give_the_window(tmp_path):
    before, after = tmp_path / "b.prom", tmp_path / "a.prom"
    before.write_text(scrape(100, 300, 150, (80, 50, 20)))
    # two data-parallel engines in the later scrape: 600 + 500 drafts in all
    after.write_text(scrape(600, 1800, 900, (480, 300, 120))
                     + scrape(500, 1500, 1002, (400, 316, 286), engine="1"))
    p = read_metrics(after, before)
    # window: D = 1000, c = (800, 566, 386)
    assert p.rates == pytest.approx((0.8, 566 / 800, 386 / 566))
    assert p.provenance["before"] == str(before)


def test_a_draft_shorter_than_k_is_said_to_leave_rates_unidentified():
    p = profile_from_counts(1000, 2500, 1000, [600, 300, 100])
    assert any("not identified" in n for n in p.notes)


@pytest.mark.parametrize("text, needle", [
    ("", "expected the counters"),
    ('vllm:spec_decode_num_drafts_total{model_name="m"} 10\n', "num_draft_tokens_total"),
    ('vllm:spec_decode_num_drafts_total{model_name="m"} ten\n', "expected a number"),
    ('vllm:spec_decode_num_drafts_total{model_name="m" 10\n', "expected"),
])
def test_bad_scrapes_are_one_line_errors(tmp_path, text, needle):
    path = tmp_path / "bad.prom"
    path.write_text(text)
    with pytest.raises(SpecbatchError, match=needle):
        read_metrics(path)


def test_inconsistent_counters_are_refused():
    with pytest.raises(SpecbatchError, match="sum of the per-position counts"):
        profile_from_counts(1000, 3000, 1700, [800, 560, 392])
    with pytest.raises(SpecbatchError, match="no more often"):
        profile_from_counts(1000, 3000, 1752, [800, 900, 52])
    with pytest.raises(SpecbatchError, match="at least one draft"):
        profile_from_counts(0, 0, 0, [0])


def test_a_restart_between_scrapes_is_refused(tmp_path):
    before, after = tmp_path / "b.prom", tmp_path / "a.prom"
    before.write_text(scrape(1000, 3000, 1752, (800, 560, 392)))
    after.write_text(scrape(10, 30, 17, (8, 5, 4)))
    with pytest.raises(SpecbatchError, match="restart"):
        read_metrics(after, before)


def test_several_models_need_a_choice(tmp_path):
    path = tmp_path / "m.prom"
    path.write_text(scrape(10, 30, 17, (8, 5, 4), model="a") + scrape(10, 30, 3, (3, 0, 0),
                                                                      model="b"))
    with pytest.raises(SpecbatchError, match="--model"):
        read_metrics(path)
    assert read_metrics(path, model="b").rates == pytest.approx((0.3, 0.0, 0.0))


def test_label_escapes_are_undone():
    text = ('vllm:spec_decode_num_drafts_total{model_name="a \\"quoted\\" \\\\ name"} 5\n')
    assert parse_counters(text, "x") == {("num_drafts", 'a "quoted" \\ name', None): 5.0}
