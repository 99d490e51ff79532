#!/usr/bin/env bash
# Refreshes the console's vendored Apache ECharts from npm (build time only; the console never
# fetches anything at run time). Usage: scripts/vendor-echarts.sh [VERSION]   (default: the pinned one)
set -euo pipefail
VERSION="${1:-6.1.0}"
DEST="$(cd "$(dirname "$0")/.." && pwd)/console/static/vendor"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
(cd "$TMP" && npm init -y >/dev/null && npm install --no-audit --no-fund "echarts@$VERSION" >/dev/null)
cp "$TMP/node_modules/echarts/dist/echarts.min.js" "$DEST/echarts.min.js"
cp "$TMP/node_modules/echarts/LICENSE" "$DEST/LICENSE-echarts"
cp "$TMP/node_modules/echarts/NOTICE" "$DEST/NOTICE-echarts"
echo "echarts $VERSION -> $DEST"
