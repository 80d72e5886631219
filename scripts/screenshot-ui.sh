#!/usr/bin/env bash
# screenshot-ui.sh reproduces the Web UI screenshots in docs/screenshots/:
#
#   ui-timeline.png  the hello run's Timeline tab in the Temporal Web UI:
#                    each activity reads "command • greet", "command •
#                    count", ... (type and node id), not "command" alone
#
# (ui-details.png and ui-progress.png are of a ctr-retrain run
# mid-training, taken by hand: headless Chromium's --screenshot never
# finishes on the page of a running workflow, which keeps polling.)
#
# It builds retrain, starts `retrain dev` on spare ports in a fresh data
# dir, runs dags/examples/hello.yaml, and points headless Chromium (Debian:
# `apt-get install chromium`) at the run's page. Run from the repository
# root: scripts/screenshot-ui.sh [OUT_DIR]   (default docs/screenshots)
set -euo pipefail

out=${1:-docs/screenshots}
source "$(dirname "$0")/screenshot-lib.sh"
start_dev "$work/data"

# `retrain run` prints the run's page on the UI the dev stack publishes.
"$bin" run dags/examples/hello.yaml --wait --address "$address" 2>"$work/run.log" >/dev/null
link=$(grep -o 'http://[^ ]*/history' "$work/run.log" | head -1)
[[ -n $link ]] || { cat "$work/run.log"; exit 1; }
echo "run page: $link"

# The report link in the run's details must answer.
run_id=$(sed -n 's/^run \([^ ]*\) started$/\1/p' "$work/run.log")
report=${reports/\{run\}/$run_id}
curl -sf -o "$work/report.html" "$report" || { echo "report $report does not answer"; exit 1; }
echo "report: $report ($(wc -c <"$work/report.html") bytes)"

mkdir -p "$out"
shot() { chromium_shot "$1" "$2" "$3" "$4" --virtual-time-budget=15000 --hide-scrollbars; }
shot "${link%/history}/timeline" "$out/ui-timeline.png" 1280 1150
