#!/usr/bin/env bash
# screenshot-report.sh reproduces the run report screenshots in
# docs/screenshots/:
#
#   report.png           the report of the demo's second ctr-retrain run:
#                        "Deployed ctr v2 (production: v1 -> v2)", the gate's
#                        verdict, links to the run in the Temporal Web UI,
#                        the stats pages and the model version, the split's
#                        windows, rows and null rates, and the ROC and
#                        calibration plots of the candidate and baseline v1
#   report-rejected.png  the third run's: not deployed, the gate rejected the
#                        candidate trained on a broken ad_quality feature
#
# It builds retrain, runs `retrain demo` in a fresh data dir (three runs),
# then starts `retrain dev` on that dir so the Web UI serves those runs, and
# rewrites the two reports with `retrain report`, whose Temporal links then
# point at the live UI. Headless Chromium (Debian: `apt-get install
# chromium`) renders each report in a 1280 px wide window, the width the
# report is laid out for; scrollbars are left visible, so a page wider than
# the window would show a horizontal one. Run from the repository root:
# scripts/screenshot-report.sh [OUT_DIR]   (default docs/screenshots)
set -euo pipefail

out=${1:-docs/screenshots}
source "$(dirname "$0")/screenshot-lib.sh"

"$bin" demo --data-dir "$work/data" >"$work/demo.out" 2>"$work/demo.err" || { cat "$work/demo.out" "$work/demo.err"; exit 1; }
mapfile -t ids < <(grep -o 'running ctr-retrain as [^ ]*' "$work/demo.err" | awk '{print $4}')
[[ ${#ids[@]} -eq 3 ]] || { cat "$work/demo.err"; echo "want three runs, got ${#ids[@]}"; exit 1; }

start_dev "$work/data"

shot() { # RUN FILE HEIGHT
	local html=$work/reports/$2.html
	"$bin" report "$1" --data-dir "$work/data" --address "$address" --out "$html" >/dev/null
	chromium_shot "file://$html" "$out/$2.png" 1280 "$3"
}
mkdir -p "$out" "$work/reports"
shot "${ids[1]}" report 2300
shot "${ids[2]}" report-rejected 1500
