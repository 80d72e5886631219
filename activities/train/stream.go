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
	"github.com/retrain-ml/retrain/internal/dataset"
)

// runStreaming runs the trainer program while this host's ranks' shares
// are still being read (stream_data): their Parquet files appear in
// their folders as their row groups arrive, and .complete once all have.
// A share that cannot be read stops the ranks and fails the attempt
// naming the file (what was written stays for the retry); a trainer that
// ends well without waiting for the rest stops the reading.
func (r *trainRun) runStreaming(ctx context.Context, cmd *exec.Cmd, n int, g *gangHost, plan *shardPlan, schema dataset.Schema, read *DataRead) (programResult, error) {
	runCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	readCtx, stopRead := context.WithCancel(ctx)
	defer stopRead()
	var readErr error
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		d, err := plan.localize(readCtx, r.t.Store, schema, split.FormatParquet)
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

// pieceFiles counts the whole piece files in dir (not one being written).
func pieceFiles(dir string) (int, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "part-") && strings.HasSuffix(e.Name(), ".parquet") {
			n++
		}
	}
	return n, nil
}
