#!/usr/bin/env bash
# Installs the Debian packages the interop tests and benchmarks use:
# real exporters (softflowd, pmacct), an independent decoder (tshark),
# a peer collector (nfdump), tcpdump, Prometheus + promtool (the rules'
# unit tests and the real-Prometheus tests; tests/support/prom.py starts its own
# instance on loopback, whatever the package's service does), headless
# Chromium with its chromedriver for the console's browser tests, and
# docker-compose (v1, only to run `docker-compose config` on docker-compose.yml
# in tests/unit/foundation/test_compose.py).
# Idempotent: does nothing when present.
set -euo pipefail
need=()
command -v softflowd >/dev/null || need+=(softflowd)
command -v pmacctd >/dev/null || need+=(pmacct)
command -v tshark >/dev/null || need+=(tshark)
command -v nfcapd >/dev/null || need+=(nfdump)
command -v tcpdump >/dev/null || need+=(tcpdump)
{ command -v prometheus >/dev/null && command -v promtool >/dev/null; } || need+=(prometheus)
command -v chromium >/dev/null || need+=(chromium)
command -v chromedriver >/dev/null || need+=(chromium-driver)
command -v docker-compose >/dev/null || need+=(docker-compose)
if [ ${#need[@]} -eq 0 ]; then
  echo "system deps: all present"
  exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null; then SUDO="sudo"; else
    echo "system deps: missing ${need[*]} and not root; exporter interop tests will be skipped" >&2
    exit 0
  fi
fi
echo "system deps: installing ${need[*]}"
export DEBIAN_FRONTEND=noninteractive
echo "wireshark-common wireshark-common/install-setuid boolean false" | $SUDO debconf-set-selections 2>/dev/null || true
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
echo "system deps: installed ${need[*]}"
