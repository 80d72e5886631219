# screenshot-lib.sh: what scripts/screenshot-*.sh share. Source it from
# the repository root; it sets `work` (a temp dir removed on exit), builds
# retrain into `bin` unless RETRAIN names one, and defines start_dev and
# chromium_shot.
export GOTOOLCHAIN=local GOFLAGS=-buildvcs=false CGO_CFLAGS=${CGO_CFLAGS:-"-O2 -g -Wno-deprecated-declarations"}
chromium=${CHROMIUM:-chromium}
work=$(mktemp -d)
dev_pid=
cleanup() {
	if [[ -n $dev_pid ]]; then kill "$dev_pid" 2>/dev/null && wait "$dev_pid" 2>/dev/null || true; fi
	rm -rf "$work"
}
trap cleanup EXIT

bin=${RETRAIN:-}
if [[ -z $bin ]]; then
	go build -o "$work/retrain" ./cmd/retrain
	bin=$work/retrain
fi

# start_dev DATA_DIR: `retrain dev` on free ports (a stack already running
# is left alone); sets `address` (Temporal) and `reports` (the report URL
# template) from what it prints.
start_dev() {
	"$bin" dev --data-dir "$1" --port 0 --http-port 0 --ui-port 0 --s3-port 0 --report-port 0 >"$work/dev.log" 2>&1 &
	dev_pid=$!
	for _ in $(seq 600); do
		grep -q "stack is up" "$work/dev.log" && break
		kill -0 "$dev_pid" || { cat "$work/dev.log"; exit 1; }
		sleep 0.1
	done
	address=$(sed -n 's/^  Temporal: *\([^ ]*\) .*/\1/p' "$work/dev.log")
	reports=$(sed -n 's/^  Reports: *\(.*\)$/\1/p' "$work/dev.log")
}

# chromium_shot URL FILE WIDTH HEIGHT [CHROMIUM FLAGS...]: a headless
# screenshot. 256 colours (ImageMagick, when there is one) keep a page
# legible at a fraction of the size; otherwise Chromium's own PNG is kept.
chromium_shot() {
	local url=$1 file=$2 width=$3 height=$4
	shift 4
	"$chromium" --headless=new --no-sandbox --disable-gpu --disable-dev-shm-usage \
		--disable-background-networking --disable-component-update --no-first-run \
		--user-data-dir="$work/chrome" --window-size="$width,$height" "$@" \
		--screenshot="$work/shot.png" "$url" >/dev/null 2>&1
	convert "$work/shot.png" -colors 256 "PNG8:$file" 2>/dev/null || cp "$work/shot.png" "$file"
	echo "wrote $file ($(du -k "$file" | cut -f1) KB)"
}
