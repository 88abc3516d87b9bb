"""docs/config.md is the text generated from the config fields' own declarations."""

from __future__ import annotations

from pathlib import Path

from specbatch.analysis.config_docs import config_page
from specbatch.simulator.config.sim_config import specs

PAGE = Path(__file__).resolve().parents[2] / "docs" / "config.md"


def test_committed_page_is_the_generated_page():
    assert PAGE.read_text() == config_page(), (
        "docs/config.md is stale: python -m specbatch.analysis.config_docs > docs/config.md")


def test_page_has_one_row_per_field_with_aliases():
    page = config_page()
    for name in specs():
        assert f"| `{name}`" in page, name
    assert "| `num_speculative_tokens` (`k`) | int | `3` | a number >= 0 |" in page
    assert "| `max_num_seqs` | int | `64` | a number >= 1 | running requests per replica |" in page
