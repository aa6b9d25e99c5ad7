#!/usr/bin/env bash
# Debian's Prometheus (prometheus, promtool) for the monitoring tests, printed as the directory that
# holds both: the installed one when both are on PATH (apt-get install prometheus), else the
# package unpacked (apt-get download + dpkg-deb -x, no service started, nothing installed
# system-wide) into ${CRAWL_PROMETHEUS_HOME:-~/.cache/crawl-frontier/prometheus}, once: later calls
# find it there. Fetches Debian's package lists first (apt-get update, as root or with sudo) only if
# the download fails without them. Used by tests/test_monitoring.py and
# tests/integration/test_monitoring.py; run it ahead to keep the download out of a timed test run:
#   bash deploy/monitoring/install-prometheus.sh
set -euo pipefail
if command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1; then
  dirname "$(command -v promtool)"
  exit 0
fi
home=${CRAWL_PROMETHEUS_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/crawl-frontier/prometheus}
bin=$home/usr/bin
mkdir -p "$(dirname "$home")"
exec 9>"$home.lock"
flock 9  # one download at a time (test processes in parallel)
if [ ! -x "$bin/prometheus" ] || [ ! -x "$bin/promtool" ]; then
  work=$(mktemp -d "$home.XXXXXX")
  trap 'rm -rf "$work"' EXIT
  if ! (cd "$work" && apt-get download -q prometheus >/dev/null 2>&1); then
    SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
    $SUDO apt-get update -q >/dev/null
    (cd "$work" && apt-get download -q prometheus >/dev/null 2>&1)
  fi
  dpkg-deb -x "$work"/prometheus_*.deb "$work/root"
  "$work/root/usr/bin/promtool" --version >/dev/null  # it runs here
  rm -rf "$home"
  mv "$work/root" "$home"
fi
echo "$bin"
