"""Fixtures shared by the CLI tests."""

from __future__ import annotations

import json

import pytest

#: The block-verification paper's two-token pair (p = (1/3, 2/3), q = (2/3, 1/3)).
PAPER = {"vocab": 2, "draft": {"iid": ["2/3", "1/3"]}, "target": {"iid": ["1/3", "2/3"]}}


@pytest.fixture
def paper_file(tmp_path):
    """PAPER written as a pair file; its path."""
    path = tmp_path / "pair.json"
    path.write_text(json.dumps(PAPER))
    return str(path)
