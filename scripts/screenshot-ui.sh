#!/usr/bin/env bash
# screenshot-ui.sh reproduces the Web UI screenshots in docs/screenshots/:
#
#   ui-timeline.png  the hello run's Timeline tab in the Temporal Web UI:
#                    each activity reads "command • greet", "command •
#                    count", ... (type and node id), not "command" alone
#   ui-details.png   the same run's User Metadata tab: its summary and
#                    "Current Details", the node table and the link to the
#                    run's report served by `retrain dev`
#
# It builds retrain, starts `retrain dev` on spare ports in a fresh data
# dir, runs dags/examples/hello.yaml, and points headless Chromium (Debian:
# `apt-get install chromium`) at the run's page. Run from the repository
# root: scripts/screenshot-ui.sh [OUT_DIR]   (default docs/screenshots)
set -euo pipefail

out=${1:-docs/screenshots}
chromium=${CHROMIUM:-chromium}
work=$(mktemp -d)
dev_pid=
cleanup() {
	if [[ -n $dev_pid ]]; then kill "$dev_pid" 2>/dev/null && wait "$dev_pid" 2>/dev/null || true; fi
	rm -rf "$work"
}
trap cleanup EXIT

export GOTOOLCHAIN=local GOFLAGS=-buildvcs=false CGO_CFLAGS=${CGO_CFLAGS:-"-O2 -g -Wno-deprecated-declarations"}
go build -o "$work/retrain" ./cmd/retrain

# Free ports everywhere, so a `retrain dev` already running is left alone.
"$work/retrain" dev --data-dir "$work/data" --port 0 --ui-port 0 --s3-port 0 --report-port 0 >"$work/dev.log" 2>&1 &
dev_pid=$!
for _ in $(seq 600); do
	grep -q "stack is up" "$work/dev.log" && break
	kill -0 "$dev_pid" || { cat "$work/dev.log"; exit 1; }
	sleep 0.1
done
address=$(sed -n 's/^  Temporal: *\([^ ]*\) .*/\1/p' "$work/dev.log")

# `retrain run` prints the run's page on the UI the dev stack publishes.
"$work/retrain" run dags/examples/hello.yaml --wait --address "$address" 2>"$work/run.log" >/dev/null
link=$(grep -o 'http://[^ ]*/history' "$work/run.log" | head -1)
[[ -n $link ]] || { cat "$work/run.log"; exit 1; }
echo "run page: $link"

shot() { # URL FILE HEIGHT [WIDTH]
	"$chromium" --headless=new --no-sandbox --disable-gpu --disable-dev-shm-usage \
		--disable-background-networking --disable-component-update --no-first-run \
		--user-data-dir="$work/chrome" --window-size="${4:-1280},$3" --virtual-time-budget=15000 \
		--hide-scrollbars --screenshot="$work/shot.png" "$1" >/dev/null 2>&1
	cp "$work/shot.png" "$2"
	echo "wrote $2 ($(du -k "$2" | cut -f1) KB)"
}
# The report link in the run's details must answer.
run_id=$(sed -n 's/^run \([^ ]*\) started$/\1/p' "$work/run.log")
report=$(sed -n 's/^  Reports: *\(.*\)$/\1/p' "$work/dev.log")
report=${report/\{run\}/$run_id}
curl -sf -o "$work/report.html" "$report" || { echo "report $report does not answer"; exit 1; }
echo "report: $report ($(wc -c <"$work/report.html") bytes)"

mkdir -p "$out"
shot "${link%/history}/timeline" "$out/ui-timeline.png" 1150
shot "${link%/history}/user-metadata" "$out/ui-details.png" 1000 1600
