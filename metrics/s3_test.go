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

// TestS3RequestsScraped: requests and bytes by operation and node type.
func TestS3RequestsScraped(t *testing.T) {
	reg := NewRegistry(map[string]string{S3Requests: S3RequestsHelp, S3Bytes: S3BytesHelp})
	reg.CountS3Request("GetObject", "split", 100)
	reg.CountS3Request("GetObject", "split", 50)
	reg.CountS3Request("PutObject", "stage_features", 0)
	var p expfmt.TextParser
	fams, err := p.TextToMetricFamilies(bytes.NewReader(scrape(t, reg)))
	if err != nil {
		t.Fatal(err)
	}
	req, byt := fams[S3Requests], fams[S3Bytes]
	if req == nil || req.GetHelp() != S3RequestsHelp || len(req.Metric) != 2 {
		t.Fatalf("%s = %v", S3Requests, req)
	}
	if byt == nil || len(byt.Metric) != 1 || byt.Metric[0].GetCounter().GetValue() != 150 {
		t.Fatalf("%s = %v, want one series of 150", S3Bytes, byt)
	}
}
