package gpu

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// Format writes inv as the table `retrain gpus` prints: one row per GPU,
// "-" for figures NVML could not read, and the reasons a GPU is excluded.
func Format(w io.Writer, inv Inventory) error {
	if len(inv.Devices) == 0 {
		_, err := fmt.Fprintf(w, "no GPUs (driver %s)\n", orDash(inv.DriverVersion))
		return err
	}
	healthy := 0
	for _, d := range inv.Devices {
		if d.Health.Healthy {
			healthy++
		}
	}
	cuda := "-"
	if v := inv.CUDADriverVersion; v > 0 {
		cuda = fmt.Sprintf("%d.%d", v/1000, v%1000/10)
	}
	if _, err := fmt.Fprintf(w, "driver %s, CUDA %s, %d GPUs, %d healthy\n\n", orDash(inv.DriverVersion), cuda, len(inv.Devices), healthy); err != nil {
		return err
	}

	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "IDX\tUUID\tNAME\tMEMORY\tUTIL\tMEM-UTIL\tTEMP\tPOWER\tECC\tPROCS\tHEALTH")
	for _, d := range inv.Devices {
		cell := func(field, s string) string {
			if _, ok := d.Unavailable[field]; ok {
				return "-"
			}
			return s
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n",
			d.Index,
			orDash(d.UUID),
			cell(FieldName, d.Name),
			cell(FieldMemory, fmt.Sprintf("%s / %s", gib(d.MemoryUsed), gib(d.MemoryTotal))),
			cell(FieldUtilization, fmt.Sprintf("%d%%", d.Utilization.GPU)),
			cell(FieldUtilization, fmt.Sprintf("%d%%", d.Utilization.Memory)),
			cell(FieldTemperature, fmt.Sprintf("%dC", d.TemperatureC)),
			cell(FieldPower, fmt.Sprintf("%dW", d.PowerMilliwatts/1000)),
			cell(FieldECC, fmt.Sprint(d.ECCUncorrected)),
			cell(FieldProcesses, fmt.Sprint(len(d.Processes))),
			healthCell(d.Health),
		)
	}
	return tw.Flush()
}

func healthCell(h Health) string {
	if h.Healthy {
		return "ok"
	}
	rs := make([]string, len(h.Reasons))
	for i, r := range h.Reasons {
		rs[i] = r.Detail
	}
	return "EXCLUDED: " + strings.Join(rs, "; ")
}

func gib(b uint64) string { return fmt.Sprintf("%.1f GiB", float64(b)/(1<<30)) }

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
