// Command retrain-worker is the production worker: `retrain worker` without
// the embedded Temporal server, Web UI and dev tooling, so the binary stays
// small and pulls in none of the server's dependencies.
package main

import (
	"github.com/retrain-ml/retrain/gpu/nvmlhost"
	"github.com/retrain-ml/retrain/internal/cli"
)

func main() {
	// GPU hosts run this binary: it is the one that always links NVML.
	cli.Execute(cli.NewWorkerRoot(&cli.App{GPUs: nvmlhost.Opener()}, "retrain-worker"))
}
