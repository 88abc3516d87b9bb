"""The bundled published profiles: each loads, cites its source and reproduces what the
source printed."""

from __future__ import annotations

import pytest

from specbatch.errors import SpecbatchError
from specbatch.traces.acceptance.library import (
    bundled_names,
    chain_mal,
    constant_chain,
    load_bundled,
    resolve_profile,
    survival_from_mal_table,
)
from specbatch.traces.acceptance.profile import mean_accepted_length


@pytest.mark.parametrize("name", bundled_names())
def test_each_entry_reproduces_its_published_numbers(name):
    p = load_bundled(name)
    prov = p.provenance
    assert prov["source"] == "published" and prov["citation"] and p.conditions
    published = prov["published"]
    if "tau" in published:  # MAL at K of the first-listed condition
        first = next(iter(published["tau"].values()))
        assert mean_accepted_length(p) == pytest.approx(first, abs=1e-9)
        assert prov["derivation"].startswith("constant chain")
    if "mean_acceptance_length" in published:  # vLLM's printout rounds to two digits
        assert mean_accepted_length(p) == pytest.approx(
            1 + published["num_accepted_tokens"] / published["num_drafts"], abs=1e-6)
        assert round(mean_accepted_length(p), 2) == published["mean_acceptance_length"]
    if "mean_accept_length_at_k" in published:
        table = published["mean_accept_length_at_k"]
        got = [mean_accepted_length(p, k) for k in range(1, p.K + 1)]
        assert got == pytest.approx(table, abs=1e-9)


def test_ngram_entry_is_bimodal_and_matches_the_printed_step_mean():
    p = load_bundled("ngram-llama3.1-8b-code-edit")
    h = p.histogram
    assert h[0] > 0.5 and h[-1] > 0.3 and max(h[1:-1]) < 0.05
    # vLLM printed 'seq normalized acceptance length: 2.96' = 5376 tokens / 1814 steps
    assert mean_accepted_length(p) == pytest.approx(5376 / 1814, abs=3e-3)


def test_constant_chain_inverts_chain_mal():
    alpha = constant_chain(3.53, 7)
    assert chain_mal(alpha, 7) == pytest.approx(3.53, abs=1e-12)
    with pytest.raises(SpecbatchError, match="mal"):
        constant_chain(9.0, 7)


def test_survival_from_a_flat_table_ends_at_zero():
    assert survival_from_mal_table([1.5, 1.75, 1.75]) == pytest.approx([0.5, 0.25, 0.0])


def test_unknown_names_list_the_library(tmp_path):
    with pytest.raises(SpecbatchError, match="eagle3-llama3.1-8b-mtbench-t0"):
        resolve_profile("no-such-profile")
    with pytest.raises(SpecbatchError, match="no such file"):
        resolve_profile(str(tmp_path / "missing.json"))
