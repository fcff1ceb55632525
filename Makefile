# The README's commands. Each creates the virtual environment it needs on first use.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
EXTRAS ?= dev

.PHONY: venv demo serve test test-fast lint format clean

$(VENV)/.installed-$(EXTRAS): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[$(EXTRAS)]"
	touch $@

venv: $(VENV)/.installed-$(EXTRAS)

## demo: run the Song-lyrics demo (reads .env; see .env.example)
demo: venv
	$(PY) examples/song_lyrics.py

## serve: serve langgraph.json's graphs on LangGraph's in-memory dev server (PORT=2024)
PORT ?= 2024
serve: venv
	LANGGRAPH_CLI_NO_ANALYTICS=1 $(VENV)/bin/langgraph dev --no-browser --host 127.0.0.1 --port $(PORT)

## test: run the whole test suite
test: venv
	$(PY) -m pytest

## test-fast: the offline tests only (no real servers)
test-fast: venv
	$(PY) -m pytest -m "not slow"

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
