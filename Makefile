# Two self-contained entry points (each creates .venv on first use):
#   make demo   - install and run the main job on the bundled default trace
#   make test   - install and run the test suite
PY := .venv/bin/python
STAMP := .venv/.installed

.PHONY: demo test lint bench clean

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv .venv
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e ".[dev,dist]"
	touch $(STAMP)

demo: $(STAMP)
	.venv/bin/specbatch demo

test: $(STAMP)
	$(PY) -m pytest

lint: $(STAMP)
	.venv/bin/ruff check .

bench: $(STAMP)
	for f in benchmarks/*.py; do $(PY) $$f || exit 1; done

clean:
	rm -rf .venv build *.egg-info .pytest_cache .ruff_cache .hypothesis
