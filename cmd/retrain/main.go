// Command retrain runs ML retrain -> validate -> deploy pipelines as DAGs on
// Temporal. This binary carries the embedded dev stack (`retrain dev`,
// `retrain demo`, `retrain bench`); production workers use retrain-worker.
package main

import (
	"github.com/retrain-ml/retrain/cmd/retrain/command"
	"github.com/retrain-ml/retrain/internal/cli"
	"github.com/retrain-ml/retrain/internal/devkit/devstack/s3server"
)

func main() {
	s3server.Main() // the dev stack's S3 server runs as this program started again
	cli.Execute(command.NewRoot())
}
