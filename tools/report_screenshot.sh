#!/usr/bin/env bash
# Renders a report (train --report FILE.html, or one of --report-dir's SVG files) to a PNG with headless
# Chromium, to look at it as a reader would. Chromium is not a dependency of Crumb: install Debian's
# package where you want screenshots (apt-get install -y chromium).
#   tools/report_screenshot.sh REPORT.html OUT.png [WIDTHxHEIGHT]   (default 1400x2400)
set -euo pipefail
if [ $# -lt 2 ]; then
  echo "usage: $0 REPORT.html|PICTURE.svg OUT.png [WIDTHxHEIGHT]" >&2
  exit 2
fi
input=$(realpath "$1")
out=$(realpath -m "$2")
size=${3:-1400x2400}
browser=$(command -v chromium || command -v chromium-browser || true)
if [ -z "$browser" ]; then
  echo "$0: chromium not found (Debian: apt-get install -y chromium)" >&2
  exit 1
fi
# A throwaway profile, so nothing is read from or left in the user's; --no-sandbox for root and containers.
profile=$(mktemp -d)
trap 'rm -rf "$profile"' EXIT
"$browser" --headless --no-sandbox --disable-gpu --hide-scrollbars --user-data-dir="$profile" \
  --window-size="${size/x/,}" --screenshot="$out" "file://$input" >/dev/null 2>&1
[ -s "$out" ] || { echo "$0: chromium wrote no screenshot to $out" >&2; exit 1; }
echo "$out"
