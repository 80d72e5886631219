package metrics

import (
	"bytes"
	"testing"

	"github.com/prometheus/common/expfmt"
)

// TestS3RetriesScraped: retries counted by operation and reason appear in
// the scrape as one counter family with those two labels.
func TestS3RetriesScraped(t *testing.T) {
	reg := NewRegistry(map[string]string{S3Retries: S3RetriesHelp})
	reg.CountS3Retry("PutObject", "throttled")
	reg.CountS3Retry("PutObject", "throttled")
	reg.CountS3Retry("GetObject", "connection")

	var p expfmt.TextParser
	fams, err := p.TextToMetricFamilies(bytes.NewReader(scrape(t, reg)))
	if err != nil {
		t.Fatal(err)
	}
	f := fams[S3Retries]
	if f == nil || f.GetHelp() != S3RetriesHelp || len(f.Metric) != 2 {
		t.Fatalf("%s = %v", S3Retries, f)
	}
	got := map[string]float64{}
	for _, m := range f.Metric {
		labels := map[string]string{}
		for _, l := range m.Label {
			labels[l.GetName()] = l.GetValue()
		}
		if len(labels) != 2 {
			t.Errorf("labels %v, want operation and reason only", labels)
		}
		got[labels["operation"]+"/"+labels["reason"]] = m.GetCounter().GetValue()
	}
	if got["PutObject/throttled"] != 2 || got["GetObject/connection"] != 1 {
		t.Fatalf("counts %v", got)
	}
}
