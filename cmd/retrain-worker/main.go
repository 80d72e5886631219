// Command retrain-worker is the production worker: `retrain worker` without
// the embedded Temporal server, Web UI and dev tooling, so the binary stays
// small and pulls in none of the server's dependencies.
package main

import (
	"github.com/retrain-ml/retrain/cmd/retrain-worker/command"
	"github.com/retrain-ml/retrain/internal/cli"
)

func main() {
	cli.Execute(command.NewRoot())
}
