package models

import (
	"context"
	"fmt"
	"strconv"
	"strings"
)

// TrainedSnapshots returns the table snapshot ids that model versions
// record in DataSnapshots, each with the versions ("name@version") that
// trained on it, so that table maintenance keeps those snapshots readable.
// Entries that are not snapshot ids (checkpoint or split URIs) are
// skipped. An entry may also name its table, "ns.table@ID"; ids alone are
// matched against every table's snapshots, which is safe because snapshot
// ids are random 63-bit numbers.
func (r *Registry) TrainedSnapshots(ctx context.Context) (map[int64][]string, error) {
	names, err := r.Models(ctx)
	if err != nil {
		return nil, err
	}
	out := map[int64][]string{}
	for _, name := range names {
		versions, err := r.List(ctx, name)
		if err != nil {
			return nil, fmt.Errorf("models: versions of %s: %w", name, err)
		}
		for _, v := range versions {
			for _, s := range v.DataSnapshots {
				if id, ok := SnapshotIDOf(s); ok {
					out[id] = append(out[id], v.Ref())
				}
			}
		}
	}
	return out, nil
}

// SnapshotIDOf reads a DataSnapshots entry as a table snapshot id: a
// decimal id, or "TABLE@ID".
func SnapshotIDOf(s string) (int64, bool) {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '@'); i >= 0 {
		s = s[i+1:]
	}
	if s == "" || strings.ContainsAny(s, "+-") {
		return 0, false
	}
	id, err := strconv.ParseInt(s, 10, 64)
	return id, err == nil
}
