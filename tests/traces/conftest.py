"""Fixtures shared by the trace tests."""

from __future__ import annotations

import shutil

import pytest


@pytest.fixture
def trace_dir(captured, tmp_path):
    """A private copy of the module's ``captured`` trace directory (tests corrupt it)."""
    out = tmp_path / "t"
    shutil.copytree(captured, out)
    return out
