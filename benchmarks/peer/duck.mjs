// DuckDB's side of the peer benchmark: runs one job described by the JSON
// file named on the command line and prints its timing (or a checksum) as
// JSON on stdout. main.go writes the job; run.sh installs @duckdb/node-api.
import { mkdirSync, readFileSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';

// ES modules ignore NODE_PATH: resolve the package from the folder run.sh
// installed it in (DUCKDB_NODE_MODULES), then import it.
const require = createRequire(join(process.env.DUCKDB_NODE_MODULES, 'x.js'));
const { DuckDBInstance } = require('@duckdb/node-api');

const job = JSON.parse(readFileSync(process.argv[2], 'utf8'));
const db = await DuckDBInstance.create(':memory:');
const con = await db.connect();
// Dates cast to timestamps (the as_of lookback) must mean UTC midnight,
// as retrain's windows do.
await con.run(`SET TimeZone = 'UTC'`);

if (job.mode === 'copy') {
  rmSync(job.out, { recursive: true, force: true });
  mkdirSync(dirname(job.out), { recursive: true });
  const sql = `COPY (${job.sql}) TO '${job.out}' (FORMAT parquet, COMPRESSION zstd, PARTITION_BY (${job.partition_by.join(', ')}))`;
  const cpu0 = process.cpuUsage();
  const t0 = process.hrtime.bigint();
  await con.run(sql);
  const wall = Number(process.hrtime.bigint() - t0) / 1e9;
  const cpu = process.cpuUsage(cpu0);
  console.log(JSON.stringify({ wall_s: wall, cpu_s: (cpu.user + cpu.system) / 1e6 }));
} else if (job.mode === 'checksum') {
  // Order-independent: a sum of per-row hashes, with the row count.
  // exprs, when given, are SQL expressions (casts to one type on both
  // sides of a comparison); else columns are hashed as they are.
  const cols = job.exprs ?? job.columns.map((c) => (c === 'date' ? 'date::DATE' : `"${c}"`));
  const r = await con.runAndReadAll(
    `SELECT count(*)::VARCHAR AS n, coalesce(sum(hash(${cols.join(', ')})::HUGEINT), 0)::VARCHAR AS h FROM ${job.from}`);
  const [row] = r.getRowObjects();
  console.log(JSON.stringify({ rows: row.n, hash: row.h }));
} else {
  throw new Error(`unknown mode ${job.mode}`);
}
