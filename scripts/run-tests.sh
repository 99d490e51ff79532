#!/usr/bin/env bash
# Start the embedded services, run the whole pytest suite, stop the services,
# and return pytest's status. Extra arguments go to pytest.
set -uo pipefail
cd "$(dirname "$0")/.."
BIN=${VENV:-.venv}/bin
STATE=$(mktemp -d -t fabricflow-test-XXXXXX)
export FABRICFLOW_STACK__STATE_DIR="$STATE"
export FABRICFLOW_STACK__KAFKA_PORT=${FABRICFLOW_TEST_KAFKA_PORT:-29092}
export FABRICFLOW_STACK__S3_PORT=${FABRICFLOW_TEST_S3_PORT:-28333}
export FABRICFLOW_STACK__S3_BASE_PORT=${FABRICFLOW_TEST_S3_BASE_PORT:-28400}
export FABRICFLOW_REQUIRE_BROKER=1
# the console's browser tests must run where Chromium is installed (scripts/install-system-deps.sh)
if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then export FABRICFLOW_REQUIRE_BROWSER=1; fi

stop() {
  "$BIN/fabricflow" stack down || true
  rm -rf "$STATE"
}
trap stop EXIT

if [ "${FABRICFLOW_TEST_BACKEND:-embedded}" = "embedded" ]; then
  "$BIN/fabricflow" stack up || { echo "could not start the embedded stack" >&2; exit 1; }
  export FABRICFLOW_TEST_BOOTSTRAP="127.0.0.1:$FABRICFLOW_STACK__KAFKA_PORT"
  export FABRICFLOW_TEST_S3_ENDPOINT="http://127.0.0.1:$FABRICFLOW_STACK__S3_PORT"
fi
# The tests' own broker/S3 instances (outage tests) must not inherit the stack settings.
env -u FABRICFLOW_STACK__STATE_DIR -u FABRICFLOW_STACK__KAFKA_PORT -u FABRICFLOW_STACK__S3_PORT -u FABRICFLOW_STACK__S3_BASE_PORT \
  "$BIN/python" -m pytest -p no:cacheprovider "$@"
rc=$?
if [ $rc -eq 5 ]; then
  echo "pytest collected no tests: that is a broken suite, not a pass" >&2
  rc=1
fi
exit $rc
