#!/usr/bin/env bash
# The whole test suite from scratch: venv, install, lint, types, unit + integration tests.
# Integration tests start a real Apache Kafka broker (fetched from Maven Central on first use,
# cached under ~/.cache/crawl-frontier); they are never skipped.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
# The live page's test renders it in a real headless Chromium (Debian's package).
if ! command -v chromium >/dev/null 2>&1; then
  echo "tests/run.sh: installing chromium (Debian package) for the browser test"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q chromium >/dev/null
fi
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/pip install -q --upgrade pip
.venv/bin/pip install -q -e '.[test,bench,scrapy]'
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy
.venv/bin/python -m pytest -q --durations=30 "$@"
