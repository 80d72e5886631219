package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.temporal.io/sdk/client"

	"github.com/retrain-ml/retrain/schedules"
)

func TestSummarizeChanges(t *testing.T) {
	for _, tc := range []struct {
		changes []schedules.Change
		dryRun  bool
		want    string
	}{
		{nil, false, "no change (0 unchanged)"},
		{[]schedules.Change{{Action: schedules.Unchanged}, {Action: schedules.Unchanged}}, false, "no change (2 unchanged)"},
		{[]schedules.Change{{Action: schedules.Created}, {Action: schedules.Deleted}, {Action: schedules.Unchanged}}, false, "1 created, 1 deleted, 1 unchanged"},
		{[]schedules.Change{{Action: schedules.Updated}}, true, "1 to be updated"},
	} {
		if got := summarizeChanges(tc.changes, tc.dryRun); got != tc.want {
			t.Errorf("got %q, want %q", got, tc.want)
		}
	}
}

func TestLoadScheduleSpecs(t *testing.T) {
	dir := t.TempDir()
	write := func(name, src string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("a.yaml", "name: a\nschedules:\n  - {id: d, cron: \"@daily\"}\nnodes:\n  - {id: n, type: noop}\n")
	write("notes.txt", "not a spec")
	specs, files, err := loadScheduleSpecs([]string{dir})
	if err != nil || len(specs) != 1 || files["a"] != filepath.Join(dir, "a.yaml") {
		t.Fatalf("%v %v %v", specs, files, err)
	}
	write("b.yml", "name: a\nnodes:\n  - {id: n, type: noop}\n")
	write("c.yaml", "name: c\nschedules:\n  - {id: d, cron: \"99 * * * *\"}\nnodes:\n  - {id: n, type: noop}\n")
	_, _, err = loadScheduleSpecs([]string{dir})
	if err == nil || !strings.Contains(err.Error(), "pipeline a is also declared by") || !strings.Contains(err.Error(), "c.yaml:3:") {
		t.Errorf("error %v", err)
	}
}

// describe says when a when_ready schedule's runs start and their latest
// start; a plain schedule's show no such line.
func TestPrintScheduleWhenReady(t *testing.T) {
	desc := &client.ScheduleDescription{}
	var b strings.Builder
	rec := schedules.Record{Pipeline: "p", ID: "daily", Cron: "0 3 * * *", Timezone: "Europe/Paris", Overlap: "allow_all",
		TaskQueue: "q", WhenReady: true, Earliest: "00:30"}
	printSchedule(&App{Out: &b}, "retrain/p/daily", rec, desc)
	want := "when      ready: each date's run starts at 00:30 (cron 30 0 * * *) and waits for its data; 03:00 is its latest start\n"
	if !strings.Contains(b.String(), "fires     cron 0 3 * * * in Europe/Paris\n"+want) {
		t.Errorf("describe:\n%s", b.String())
	}
	b.Reset()
	rec.WhenReady, rec.Earliest = false, ""
	printSchedule(&App{Out: &b}, "retrain/p/daily", rec, desc)
	if strings.Contains(b.String(), "when ") {
		t.Errorf("plain schedule:\n%s", b.String())
	}
}
