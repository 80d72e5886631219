package cli

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/retrain-ml/retrain/gpu"
)

// inventoryHost is what `retrain gpus` needs of a GPU host.
type inventoryHost interface {
	Inventory() (gpu.Inventory, error)
	Close() error
}

// NewGPUsCommand returns `retrain gpus`: the host's NVIDIA GPUs and their
// health, as a worker started with --gpu would see them. In a binary
// without NVML (app.GPUs nil) it fails with gpu.ErrNoNVML.
func NewGPUsCommand(app *App) *cobra.Command {
	return newGPUsCommand(app, func() (inventoryHost, error) {
		if app.GPUs == nil {
			return nil, gpu.ErrNoNVML
		}
		h, err := app.GPUs()
		if err != nil {
			return nil, err // no Host: nothing to close, and no NVML call may follow
		}
		return h, nil
	})
}

func newGPUsCommand(app *App, open func() (inventoryHost, error)) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "gpus",
		Short: "List this host's NVIDIA GPUs: memory, utilization, temperature, power, ECC errors, processes and health",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			h, err := open()
			if errors.Is(err, gpu.ErrNoDriver) {
				if asJSON {
					return json.NewEncoder(app.Out).Encode(gpu.Inventory{Devices: []gpu.Device{}})
				}
				fmt.Fprintf(app.Out, "no NVIDIA driver found: this host has no GPUs for retrain (%v)\n", err)
				return nil
			}
			if err != nil {
				return err
			}
			defer h.Close()
			inv, err := h.Inventory()
			if err != nil {
				return err
			}
			if asJSON {
				enc := json.NewEncoder(app.Out)
				enc.SetIndent("", "  ")
				return enc.Encode(inv)
			}
			return gpu.Format(app.Out, inv)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the inventory as JSON")
	return cmd
}
