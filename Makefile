# Two commands a newcomer needs: `make run` and `make test`. Everything else is a helper.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DEV_STAMP := $(VENV)/.installed-dev

.PHONY: run test install install-dev browser lint check clean stop

# No fallback key in the code: a random one is generated into .data/secret_key on first use, for the
# commands that run the app (the tests make their own, and write nothing into .data/).
run lint stop: export SECRET_KEY ?= $(shell scripts/secret_key)

# What runs (requirements.txt), then the tools for tests, lint and benchmarks on top.
# The Python client (clients/python) too: the README's agent examples import it from .venv/.
$(STAMP): requirements.txt clients/python/pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -r requirements.txt
	$(BIN)/pip install --quiet -e ./clients/python
	touch $(STAMP)

$(DEV_STAMP): $(STAMP) requirements-dev.txt
	$(BIN)/pip install --quiet -r requirements-dev.txt
	touch $(DEV_STAMP)

install: $(STAMP)

install-dev: $(DEV_STAMP)

# Debian's Chromium drives the browser tests (Playwright never downloads a browser here).
browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  echo "Installing Debian's chromium for the browser tests"; \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
	  || echo "Could not install chromium: browser tests will fail"; }

# scripts/run migrates, collects static files, seeds the demo data and starts uvicorn, the worker and beat.
run: install
	scripts/run

# One worker per core (at most 4), tests handed out one by one. Not --dist loadfile: it keys tests by
# node id, and schemathesis gives every API operation the same one, so 14 of its 15 tests never ran.
# --maxschedchunk 1: a worker is given the next test when it has fewer than two waiting (xdist's default
# hands each worker a quarter of its share up front, so the `slow` tests, which run first, all landed on one).
test: install-dev browser
	$(BIN)/pytest -q -n logical --maxprocesses=4 --dist load --maxschedchunk 1 $(PYTEST_ARGS)

lint: install-dev
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python manage.py makemigrations --check --dry-run

clean:
	rm -rf $(VENV) .data staticfiles

# The embedded PostgreSQL keeps running between commands (a restart costs seconds); this stops it.
stop:
	$(BIN)/python manage.py embedded_db stop
