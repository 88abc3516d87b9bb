"""A run's key hashes its acceptance profile's bytes: a profile edited in place is recomputed."""

from __future__ import annotations

from specbatch.analysis.sweep.runner import input_files, input_identity
from specbatch.traces.acceptance.library import LIBRARY_DIR
from specbatch.traces.acceptance.profile import AcceptanceProfile, write_profile


def test_the_profile_file_is_an_input(tmp_path):
    path = write_profile(AcceptanceProfile(rates=(0.8, 0.7)), tmp_path / "p.json")
    config = {"trace": "default", "acceptance_profile": str(path)}
    before = input_identity(config, {"default": "t"})
    write_profile(AcceptanceProfile(rates=(0.8, 0.6)), path)
    assert input_identity(config, {"default": "t"}) != before
    named = input_files({"acceptance_profile": "mtp-deepseek-v3-k1"})
    assert named == [("acceptance_profile", LIBRARY_DIR / "mtp-deepseek-v3-k1.json")]
