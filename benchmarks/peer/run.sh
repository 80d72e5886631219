#!/usr/bin/env bash
# The peer benchmark: retrain's stage 1 (previous_day, as_of) and bucketed
# promotion against DuckDB's SQL for the same joins on the same Parquet
# files. Flags go to the Go program (--rows, --days, --rounds, --dir,
# --only); see README.md.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
duckdb_version="1.5.6-r.1"

# DuckDB stays out of the Go module: the Node.js package lives in
# benchmarks/peer/.node (gitignored), installed on first use.
if [ ! -f "$here/.node/node_modules/@duckdb/node-api/package.json" ] ||
   ! grep -q "\"version\": \"$duckdb_version\"" "$here/.node/node_modules/@duckdb/node-api/package.json"; then
  echo "peer: installing @duckdb/node-api@$duckdb_version into $here/.node" >&2
  npm install --silent --no-audit --no-fund --prefix "$here/.node" "@duckdb/node-api@$duckdb_version" >&2
fi

cd "$root"
go build -o "$here/.node/peer" ./benchmarks/peer/
exec "$here/.node/peer" --script "$here/duck.mjs" "$@"
