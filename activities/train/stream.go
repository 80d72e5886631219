package train

import (
	"context"
	"fmt"
	"os/exec"

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
