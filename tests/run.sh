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
if [ "$#" -gt 0 ]; then  # a selection: one pytest run
  exec .venv/bin/python -m pytest -q --durations=30 "$@"
fi
# Everything, in two groups at once (each with its own local Kafka broker): the unit tests and the
# CPU-bound programs (benchmark smoke runs, Scrapy, the URLFrontier suite, the three-minute retry
# and budget crawls, the crawls' tests: about as long as the other group), and the other
# integration tests. CI must stay under 30 minutes; one group alone took 25 (2 cores).
logs=$(mktemp -d)
SLOW=(tests/integration/test_benchmarks.py tests/integration/test_scrapy.py tests/integration/test_scrapy_edges.py
      tests/integration/test_urlfrontier.py tests/integration/test_retries.py tests/integration/test_budgets.py
      tests/integration/test_crawls.py)
# the cluster on one machine (network namespaces, as root, three brokers; its tests and a short
# chaos soak): alone, once both groups are over (run beside them, its load failed the rate and
# pause tests: measured)
CLUSTER=(tests/integration/test_cluster.py)
# the tests most sensitive to a loaded machine (rates reached, freezes) run last, once the first
# group (about 10 minutes) is over
LAST=(tests/integration/test_throttling.py tests/integration/test_pauses.py)
rest=()
for f in tests/integration/test_*.py; do
  case " ${SLOW[*]} ${LAST[*]} ${CLUSTER[*]} " in *" $f "*) ;; *) rest+=("$f") ;; esac
done
.venv/bin/python -m pytest -q --durations=20 -p no:cacheprovider tests/test_*.py "${SLOW[@]}" \
  >"$logs/a.log" 2>&1 &
a=$!
.venv/bin/python -m pytest -q --durations=30 -p no:cacheprovider "${rest[@]}" "${LAST[@]}" >"$logs/b.log" 2>&1 &
b=$!
status=0
wait "$a" || status=1
wait "$b" || status=1
.venv/bin/python -m pytest -q --durations=10 -p no:cacheprovider "${CLUSTER[@]}" >"$logs/c.log" 2>&1 || status=1
echo "== unit tests and the slow programs"; cat "$logs/a.log"
echo "== integration tests"; cat "$logs/b.log"
echo "== the cluster on one machine"; cat "$logs/c.log"
exit "$status"
