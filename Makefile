# Corral's set-up contract. Everything runs from .venv, which `make install` creates (and re-creates when
# pyproject.toml changes, through the stamp file). See docs/operations.md, "Set-up".
#
#   make run     demo on http://127.0.0.1:8000: web, worker, beat and two agents with 4 simulated GPUs each
#   make test    ruff, the migrations check and the whole pytest suite on a throw-away PostgreSQL and Redis
#   make lint    ruff check + format --check, mypy    make fmt     ruff format + ruff check --fix
#   make clean   removes var/ and caches              make distclean   ... and .venv

SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= $(shell command -v python3.11 2>/dev/null || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-corral
PYTEST_ARGS ?=

.PHONY: help install run test test-in-services test-services lint fmt clean distclean

help:
	@sed -n '4,7s/^# \{0,1\}//p' $(MAKEFILE_LIST)

install: $(STAMP)

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' 2>/dev/null \
		|| { echo "Corral needs Python 3.11; set PYTHON=/path/to/python3.11" >&2; exit 1; }
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --editable '.[dev]'
	@touch $@

# Demo: migrate, seed (tenants, users, nodes local-1/local-2 and their agent tokens), then supervise the five
# processes. DATABASE_URL / REDIS_URL in the environment switch from SQLite and the filesystem broker.
run: $(STAMP)
	$(BIN)/python manage.py migrate --noinput
	$(BIN)/python manage.py collectstatic --noinput --verbosity 0
	$(BIN)/python manage.py seed_demo
	$(BIN)/python scripts/run_dev.py

# Lint first (it needs no servers and fails fast), then the rest against PostgreSQL and Redis that
# scripts/test_servers.py starts on loopback and always tears down. It exports DATABASE_URL and REDIS_URL.
test: $(STAMP) lint
	$(BIN)/python scripts/test_servers.py -- $(MAKE) --no-print-directory test-in-services

test-in-services:
	@test -n "$$DATABASE_URL" -a -n "$$REDIS_URL" \
		|| { echo "run through 'make test' (it starts PostgreSQL and Redis)" >&2; exit 2; }
	$(BIN)/python manage.py makemigrations --check --dry-run
	$(BIN)/python -m pytest $(PYTEST_ARGS)

# For developers: start the same PostgreSQL and Redis, print the exports, wait for Ctrl-C.
test-services: $(STAMP)
	$(BIN)/python scripts/test_servers.py --no-chromium

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

fmt: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

clean:
	rm -rf var staticfiles .pytest_cache .ruff_cache .mypy_cache
	find . -path ./$(VENV) -prune -o -name __pycache__ -type d -prune -exec rm -rf {} +

distclean: clean
	rm -rf $(VENV) *.egg-info
