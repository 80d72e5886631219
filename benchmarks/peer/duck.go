package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// duckJob is a DuckDB COPY of a query's rows into a partitioned, zstd
// Parquet folder: DuckDB's counterpart of a retrain job.
type duckJob struct {
	SQL         string   `json:"sql"`
	Out         string   `json:"out"`
	PartitionBy []string `json:"partition_by"`
}

// node runs duck.mjs on a job and decodes what it prints.
func (b *bench) node(ctx context.Context, job any, out any) error {
	raw, err := json.Marshal(job)
	if err != nil {
		return err
	}
	f := filepath.Join(b.dir, "duck-job.json")
	if err := os.WriteFile(f, raw, 0o644); err != nil {
		return err
	}
	script, err := filepath.Abs(b.o.script)
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, b.o.node, script, f)
	// The script imports @duckdb/node-api from the folder run.sh
	// installs it in, next to the script.
	cmd.Env = append(os.Environ(), "DUCKDB_NODE_MODULES="+filepath.Join(filepath.Dir(script), ".node", "node_modules"))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %s: %w: %s", b.o.node, script, err, stderr.String())
	}
	if err := json.Unmarshal(stdout.Bytes(), out); err != nil {
		return fmt.Errorf("duck.mjs printed %q: %w", stdout.String(), err)
	}
	return nil
}

func (b *bench) duck(ctx context.Context, j duckJob) (sample, error) {
	var got struct {
		Wall float64 `json:"wall_s"`
		CPU  float64 `json:"cpu_s"`
	}
	err := b.node(ctx, struct {
		Mode string `json:"mode"`
		duckJob
	}{"copy", j}, &got)
	return sample{wall: got.Wall, cpu: got.CPU}, err
}

// checksum is the row count and order-independent hash of a DuckDB
// relation's columns, as "ROWS HASH".
func (b *bench) checksum(ctx context.Context, from string, columns []string) (string, error) {
	var got struct {
		Rows string `json:"rows"`
		Hash string `json:"hash"`
	}
	err := b.node(ctx, map[string]any{"mode": "checksum", "from": from, "columns": columns}, &got)
	return got.Rows + " " + got.Hash, err
}
