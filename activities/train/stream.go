package train

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/retrain-ml/retrain/activities/split"
	"github.com/retrain-ml/retrain/errtype"
	"github.com/retrain-ml/retrain/internal/dataset"
	"github.com/retrain-ml/retrain/nodetype"
)

// runStreaming runs the trainer program while this host's ranks' shares
// are still being read (stream_data): their Parquet files (or npy
// folders, one a piece) appear in their folders as their row groups
// arrive, and .complete once all have.
// A share that cannot be read stops the ranks and fails the attempt
// naming the file (what was written stays for the retry); a trainer that
// ends well without waiting for the rest stops the reading.
func (r *trainRun) runStreaming(ctx context.Context, cmd *exec.Cmd, n int, g *gangHost, plan *shardPlan, schema dataset.Schema, format string, read *DataRead) (programResult, error) {
	runCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	readCtx, stopRead := context.WithCancel(ctx)
	defer stopRead()
	// An earlier attempt's .complete would tell the trainer its share is
	// all in while this one still writes it.
	for _, rs := range plan.shares() {
		if err := os.Remove(filepath.Join(rs.dir, ".complete")); err != nil && !os.IsNotExist(err) {
			return programResult{}, err
		}
	}
	var readErr error
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		d, err := plan.localize(readCtx, r.t.Store, schema, format)
		r.mu.Lock()
		*read = d
		r.mu.Unlock()
		if err != nil {
			if readCtx.Err() == nil { // failed, not stopped
				readErr = err
				stopRun()
			}
			return
		}
		r.logShares(d)
	}()
	res, err := r.runProgram(runCtx, cmd, n, g)
	stopRead()
	<-finished
	if readErr != nil && ctx.Err() == nil {
		// The reading failed and stopped the ranks: its error names the
		// file.
		return res, fmt.Errorf("stream the ranks' shares: %w", readErr)
	}
	return res, err
}

// waitWindow waits, with a window, until the folder out is to be written
// in holds fewer than window piece files (the trainer removes each once
// read), or ctx ends.
func (p *shardPlan) waitWindow(ctx context.Context, out string) error {
	if !p.stream || p.window <= 0 {
		return nil
	}
	dir := filepath.Dir(out)
	for {
		if n, err := pieceFiles(dir); err != nil || n < p.window {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// asPiece writes a piece at out with write, or with npyPieces as an npy
// folder: the piece's Parquet written by write beside it, converted into a
// hidden folder, which is then renamed to out, so that a trainer never
// sees half of it.
func asPiece(out string, npyPieces bool, schema dataset.Schema, write func(string) error) error {
	if !npyPieces {
		return write(out)
	}
	dir, base := filepath.Split(out)
	tmpPQ, tmpDir := filepath.Join(dir, "."+base+".parquet"), filepath.Join(dir, "."+base+".npy")
	defer os.Remove(tmpPQ)
	defer os.RemoveAll(tmpDir)
	if err := write(tmpPQ); err != nil {
		return err
	}
	rows, err := readAll(tmpPQ)
	if err != nil {
		return fmt.Errorf("read the piece %s: %w", base, err)
	}
	d, err := dataset.LoadBatch(schema, rows)
	if err != nil {
		return nodetype.Permanent(errtype.BadInput, "%s data: %v", split.TrainDataset, err)
	}
	if _, err := d.WriteNPY(tmpDir, schema); err != nil {
		return fmt.Errorf("write the piece %s as npy: %w", base, err)
	}
	return os.Rename(tmpDir, out)
}

// dropPieces removes the npy piece folders in dir (dirs), or else the
// Parquet piece files.
func dropPieces(dir string, dirs bool) {
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "part-") && e.IsDir() == dirs {
			_ = os.RemoveAll(filepath.Join(dir, e.Name()))
		}
	}
}

// pieceFiles counts the whole piece files (or npy folders) in dir, not
// one being written.
func pieceFiles(dir string) (int, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "part-") && (e.IsDir() || strings.HasSuffix(e.Name(), ".parquet")) {
			n++
		}
	}
	return n, nil
}
