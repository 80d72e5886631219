package worker

import "testing"

func TestCheckReportURL(t *testing.T) {
	for template, ok := range map[string]bool{
		"":                                   true, // no report server
		"http://127.0.0.1:8234/runs/{run}":   true,
		"https://reports.example/r?id={run}": true,
		"http://127.0.0.1:8234/runs/":        false, // nowhere for the run id
		"ftp://host/{run}":                   false,
		"/runs/{run}":                        false, // not absolute: the UI could not follow it
	} {
		if err := checkReportURL(template); (err == nil) != ok {
			t.Errorf("checkReportURL(%q) = %v, want ok=%v", template, err, ok)
		}
	}
}
