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
chromium=${CHROMIUM:-chromium}
port=${PORT:-17243} ui_port=${UI_PORT:-18243} s3_port=${S3_PORT:-17080} report_port=${REPORT_PORT:-18244}
work=$(mktemp -d)
dev_pid=
cleanup() {
	if [[ -n $dev_pid ]]; then kill "$dev_pid" 2>/dev/null && wait "$dev_pid" 2>/dev/null || true; fi
	rm -rf "$work"
}
trap cleanup EXIT

export GOTOOLCHAIN=local GOFLAGS=-buildvcs=false CGO_CFLAGS=${CGO_CFLAGS:-"-O2 -g -Wno-deprecated-declarations"}
bin=${RETRAIN:-}
if [[ -z $bin ]]; then
	go build -o "$work/retrain" ./cmd/retrain
	bin=$work/retrain
fi

"$bin" demo --data-dir "$work/data" >"$work/demo.out" 2>"$work/demo.err" || { cat "$work/demo.out" "$work/demo.err"; exit 1; }
mapfile -t ids < <(grep -o 'running ctr-retrain as [^ ]*' "$work/demo.err" | awk '{print $4}')
[[ ${#ids[@]} -eq 3 ]] || { cat "$work/demo.err"; echo "want three runs, got ${#ids[@]}"; exit 1; }

"$bin" dev --data-dir "$work/data" --port "$port" --ui-port "$ui_port" \
	--s3-port "$s3_port" --report-port "$report_port" >"$work/dev.log" 2>&1 &
dev_pid=$!
for _ in $(seq 600); do
	grep -q "stack is up" "$work/dev.log" && break
	kill -0 "$dev_pid" || { cat "$work/dev.log"; exit 1; }
	sleep 0.1
done

shot() { # RUN FILE HEIGHT
	local html=$work/reports/$2.html
	"$bin" report "$1" --data-dir "$work/data" --address "127.0.0.1:$port" --out "$html" >/dev/null
	"$chromium" --headless=new --no-sandbox --disable-gpu --disable-dev-shm-usage \
		--disable-background-networking --disable-component-update --no-first-run \
		--user-data-dir="$work/chrome" --window-size="1280,$3" \
		--screenshot="$work/shot.png" "file://$html" >/dev/null 2>&1
	# 256 colours (ImageMagick, when there is one) keep the page legible at
	# a fraction of the size; Chromium's own PNG is ~250 KB anyway.
	convert "$work/shot.png" -colors 256 "PNG8:$out/$2.png" 2>/dev/null || cp "$work/shot.png" "$out/$2.png"
	echo "wrote $out/$2.png ($(du -k "$out/$2.png" | cut -f1) KB) from $html"
}
mkdir -p "$out" "$work/reports"
shot "${ids[1]}" report 2300
shot "${ids[2]}" report-rejected 1500
