#!/usr/bin/env bash
# The Scrapy add-on (workers/scrapy) on the oldest Scrapy pyproject.toml claims (scrapy>=2.13):
# a venv of its own, .venv-scrapy-oldest, with the pins of tests/scrapy-oldest.txt, (re)built
# only when that file or pyproject.toml changed; then pytest in it.
#   tests/scrapy_oldest.sh               the Scrapy unit and integration tests (a real local broker)
#   tests/scrapy_oldest.sh ARGS...       pytest ARGS in that venv
#   tests/scrapy_oldest.sh --setup-only  build the venv and stop (e.g. beside the main venv's setup;
#                                        two pip installs of this tree at once are not safe)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=.venv-scrapy-oldest
PINS=tests/scrapy-oldest.txt
stamp=$(cat "$PINS" pyproject.toml | sha256sum | cut -d' ' -f1)
if [ "$(cat "$VENV/.pins-stamp" 2>/dev/null)" != "$stamp" ] || ! "$VENV/bin/python" -c '' 2>/dev/null; then
  echo "tests/scrapy_oldest.sh: building $VENV with $(grep -v '^#' "$PINS" | xargs)"
  [ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
  rm -f "$VENV/.pins-stamp"
  "$VENV/bin/pip" install -q --upgrade pip
  "$VENV/bin/pip" install -q -c "$PINS" -e '.[test,scrapy]'
  echo "$stamp" >"$VENV/.pins-stamp"
fi
"$VENV/bin/python" -c 'import scrapy, twisted; print(f"tests/scrapy_oldest.sh: Scrapy {scrapy.__version__}, Twisted {twisted.__version__}")'
if [ "${1:-}" = "--setup-only" ]; then
  exit 0
fi
if [ "$#" -eq 0 ]; then
  set -- tests/test_scrapy_addon.py tests/test_scrapy_records.py \
    tests/integration/test_scrapy.py tests/integration/test_scrapy_edges.py
  [ ! -e tests/integration/test_scrapy_spiders.py ] || set -- "$@" tests/integration/test_scrapy_spiders.py
fi
exec "$VENV/bin/python" -m pytest -q -p no:cacheprovider "$@"
