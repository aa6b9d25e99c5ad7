#!/usr/bin/env bash
# The whole test suite from scratch: venv, install, lint, types, unit + integration tests.
# Integration tests start a real Apache Kafka broker (fetched from Maven Central on first use,
# cached under ~/.cache/crawl-frontier); they are never skipped.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/pip install -q --upgrade pip
.venv/bin/pip install -q -e '.[test,bench]'
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy
.venv/bin/python -m pytest -q "$@"
