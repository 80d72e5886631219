package readiness

import (
	"strings"
	"testing"
	"time"
)

func TestTable(t *testing.T) {
	at := func(s string) time.Time {
		tm, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return tm
	}
	base := TableFacts{Table: "features.user_daily", Date: "2026-11-27", HasSnapshot: true, SnapshotID: 42,
		CommittedAt: at("2026-11-27T01:12:00Z"), PrevRows: 2341}
	for _, tc := range []struct {
		name  string
		facts func(f *TableFacts)
		want  TableWant
		ready bool
		saw   string
	}{
		{"no snapshot", func(f *TableFacts) { f.HasSnapshot = false }, TableWant{MinRows: 1}, false,
			"features.user_daily has no snapshot yet"},
		{"no rows", func(f *TableFacts) {}, TableWant{MinRows: 1}, false,
			"features.user_daily has no rows for 2026-11-27 (last snapshot 11-27 01:12, 2,341 rows for 11-26)"},
		{"too few", func(f *TableFacts) { f.Rows = 500 }, TableWant{MinRows: 1000}, false,
			"features.user_daily has 500 rows for 2026-11-27, fewer than min_rows 1,000 (snapshot 42 at 11-27 01:12)"},
		{"enough", func(f *TableFacts) { f.Rows = 1000 }, TableWant{MinRows: 1000}, true,
			"features.user_daily has 1,000 rows for 2026-11-27 in snapshot 42"},
		{"not complete yet", func(f *TableFacts) { f.Rows = 5000; f.CommittedAt = at("2026-11-28T00:30:00Z") },
			TableWant{MinRows: 1, CompleteAfter: time.Hour}, false,
			"but its last snapshot (11-28 00:30) is before 2026-11-28 01:00 UTC"},
		{"complete", func(f *TableFacts) { f.Rows = 5000; f.CommittedAt = at("2026-11-28T01:00:00Z") },
			TableWant{MinRows: 1, CompleteAfter: time.Hour}, true, "5,000 rows"},
	} {
		f := base
		tc.facts(&f)
		obs, err := Table(f, tc.want)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if obs.Ready != tc.ready || !strings.Contains(obs.Saw, tc.saw) {
			t.Errorf("%s: %+v, want ready %v and %q", tc.name, obs, tc.ready, tc.saw)
		}
		if tc.ready && obs.SnapshotID != 42 {
			t.Errorf("%s: a condition that held records its snapshot: %+v", tc.name, obs)
		}
	}
	if _, err := Table(TableFacts{Date: "27/11/2026"}, TableWant{}); err == nil {
		t.Error("a bad date is an error")
	}
}

func TestFiles(t *testing.T) {
	matches := []string{"/d/2026-11-27/a.parquet", "/d/2026-11-27/_SUCCESS", "/d/2026-11-27/b/c.parquet"}
	if got := MarkerFolders(matches, "_SUCCESS"); strings.Join(got, ",") != "/d/2026-11-27,/d/2026-11-27/b" {
		t.Errorf("MarkerFolders = %v", got)
	}
	obs := Files(FileFacts{Pattern: "/d/*/*", Matches: []string{"/d/x/_SUCCESS"}, Marker: "_SUCCESS"})
	if obs.Ready || obs.Saw != "no files match /d/*/*" {
		t.Errorf("a lone marker is no data: %+v", obs)
	}
	obs = Files(FileFacts{Pattern: "/d/*", Matches: matches, Marker: "_SUCCESS", MissingMarkers: []string{"/d/2026-11-27/b"}})
	if obs.Ready || !strings.Contains(obs.Saw, "2 files match /d/*, but /d/2026-11-27/b has no _SUCCESS") {
		t.Errorf("missing marker: %+v", obs)
	}
	obs = Files(FileFacts{Pattern: "/d/*", Matches: matches, Marker: "_SUCCESS"})
	if !obs.Ready || obs.Saw != "2 files match /d/* with _SUCCESS" {
		t.Errorf("ready: %+v", obs)
	}
	if obs := Files(FileFacts{Pattern: "/d/*", Matches: []string{"/d/a"}}); !obs.Ready {
		t.Errorf("no marker asked: %+v", obs)
	}
}

func TestCommand(t *testing.T) {
	if obs := Command([]string{"check"}, 0, "ok"); !obs.Ready {
		t.Errorf("exit 0: %+v", obs)
	}
	obs := Command([]string{"check"}, 3, "looking\nfeed has 10 of 24 hours\n")
	if obs.Ready || obs.Saw != "check exited 3: feed has 10 of 24 hours" {
		t.Errorf("exit 3: %+v", obs)
	}
}
