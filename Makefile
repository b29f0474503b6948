# Set-up and the two entry points of the README: `make run` (the main job) and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# CPU-only ONNX Runtime for development and CI; users on GPUs install onnxformer[gpu] instead.
EXTRAS ?= cpu,builder,dev
STAMP := $(VENV)/.installed

.PHONY: setup run test lint clean

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e ".[$(EXTRAS)]"
	touch $@

setup: $(STAMP)

run: $(STAMP)
	$(BIN)/onnxformer train gpt --out runs/gpt
	$(BIN)/onnxformer train bert --out runs/bert
	$(BIN)/onnxformer train t5 --out runs/t5
	$(BIN)/onnxformer export-blocks --out runs/blocks
	$(BIN)/onnxformer verify runs/blocks

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

test: lint
	$(BIN)/python -m pytest

clean:
	rm -rf runs .pytest_cache .ruff_cache
