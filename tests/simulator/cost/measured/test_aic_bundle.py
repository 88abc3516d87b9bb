"""The bundled AIConfigurator laws (traces/data/aiconfigurator): provenance, and the held-out
table docs/fidelity.md shows is the one benchmarks/cost_vs_aic.py prints from them."""

import json
import math
import re
import sys
from pathlib import Path

from specbatch.simulator.cost.measured.aic_import import BUNDLED, COMMON_SYSTEMS, load_laws

ROOT = Path(__file__).resolve().parents[4]


def test_the_common_gpus_are_bundled_with_provenance():
    laws = load_laws()
    assert set(laws) == set(COMMON_SYSTEMS)
    prov = json.loads((BUNDLED / "PROVENANCE.json").read_text())
    assert re.fullmatch(r"[0-9a-f]{40}", prov["commit"]) and prov["licence"] == "Apache-2.0"
    for f in prov["files"]:
        assert re.fullmatch(r"[0-9a-f]{64}", f["sha256"]) and f["rows"] > 0
        assert f["path"].split("/")[0] in COMMON_SYSTEMS
    for _, fitted in laws.values():
        for law in fitted:
            assert all(c >= 0 for c in law.coef)
            assert math.isfinite(law.mape_loso) and math.isfinite(law.mape_transfer)


def test_the_docs_table_is_the_benchmark_output():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        from cost_vs_aic import summary
    finally:
        sys.path.pop(0)
    page = (ROOT / "docs" / "fidelity.md").read_text()
    for line in summary(load_laws()):
        assert line in page, line


def test_the_docs_aic_table_is_the_validation_output():
    from specbatch.simulator.cost.measured.aic_cost import validation

    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        from aic_validate import table
    finally:
        sys.path.pop(0)
    page = (ROOT / "docs" / "fidelity.md").read_text()
    for line in table(validation()):
        assert line in page, line
