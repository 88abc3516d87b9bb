"""``--prompts`` sources shared by capture and live (traces.capture.prompts.resolve_prompts)."""

from __future__ import annotations

import pytest

from specbatch.errors import SpecbatchError
from specbatch.traces.capture.prompts import resolve_prompts


def test_text_sources_default_and_file(tmp_path):
    prompts, source = resolve_prompts("default:4:1", None)
    assert len(prompts) == 4 and "seed 1" in source
    path = tmp_path / "p.txt"
    path.write_text("one\ntwo\n")
    assert [p.text for p in resolve_prompts(str(path), None)[0]] == ["one", "two"]


def test_random_token_ids_are_refused_with_the_text_sources():
    with pytest.raises(SpecbatchError, match=r"--prompts random:4:16: random token ids are for "
                                             r"`specbatch live`; expected .*default:N\[:SEED\]"):
        resolve_prompts("random:4:16", None)
