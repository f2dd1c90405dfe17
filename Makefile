# The two set-up commands a newcomer runs on a fresh machine:
#   make demo   fetch the default model pair and run CodeCue on real code (engine + language server)
#   make test   run every test: engine, prompt builder, server, replay harness, editors, real-model smoke
# Under CI=true (.ci/run sets it; make passes the environment on to every recipe) a skipped test fails.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-python test-editors test-remote models venv bench clean

venv: $(STAMP)

# Reinstall only when the dependency list changes. torch is pinned to ==2.13.0 so pip takes the CPU wheel.
# llama-cpp-python has no wheels on PyPI: pip builds llama.cpp for this CPU (~4 min on 2 cores), only the library.
LLAMA_CMAKE_ARGS := -DGGML_NATIVE=ON -DLLAVA_BUILD=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
	-DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF
$(STAMP): pyproject.toml
	@command -v c++ >/dev/null || { echo "make: no C++ compiler (pip builds llama.cpp): apt-get install build-essential" >&2; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(BIN)/pip install -q -e ".[test,llamacpp]"
	touch $(STAMP)

models: $(STAMP)
	$(BIN)/codecue-models fetch --pair default

# Part 1: real snippets through the engine, target alone vs speculative. Part 2: a real typing trace (282
# keystrokes of HumanEval solutions) replayed at its real timing against the real language server, twice.
demo: models
	$(BIN)/python -m engine.testing.demo
	mkdir -p out
	$(BIN)/codecue-replay run tests/data/replay_humaneval_demo.jsonl \
		--compare "target-alone=--drafter none" --compare "speculative=--drafter auto" \
		--json out/demo-replay.json --html out/demo-replay.html
	@echo "report: out/demo-replay.html"

test: test-python test-editors

test-python: models
	$(BIN)/lint-imports  # the layering contracts in pyproject.toml (docs/architecture.md)
	$(BIN)/pytest -q -rs -m "not editor and not remote"

# `codecue-lsp --engine URL` against a real llama-server, alone and from both editors: needs scripts/build-llama-cpp.sh's build (.ci/run builds it, then runs this after `make test`).
test-remote: models
	$(BIN)/pytest -q -rs -m remote tests/test_remote_llama.py
	VENV=$(CURDIR)/$(VENV) bash editor-clients/test-remote.sh

test-editors: $(STAMP)
	VENV=$(CURDIR)/$(VENV) bash editor-clients/test.sh

# On a quiet machine, never in CI: llama.cpp is built once (the peer), then every engine mode next to it on the same
# GGUF and prompts, and per-keystroke latency of the real server next to llama-server's /infill.
# Results go to out/, named by what they measure: make cannot know the machine kind, so a result that
# docs/performance.md keeps is copied by hand to docs/results/<what>-<machine-kind>.json.
bench: models
	bash scripts/build-llama-cpp.sh
	mkdir -p out
	$(BIN)/codecue-bench engine --pair default --json out/bench-engine.json
	$(BIN)/codecue-bench server engine/decode/speculative.py --pair default --keystrokes 16 \
		--json out/bench-server.json

clean:
	rm -rf $(VENV) .pytest_cache
