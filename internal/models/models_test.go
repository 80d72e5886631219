package models_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/retrain-ml/retrain/internal/devkit/s3test"
	"github.com/retrain-ml/retrain/internal/models"
)

// artifacts writes files into a new directory and returns them.
func artifacts(t *testing.T, files map[string]string) models.Artifacts {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	a, err := models.DirArtifacts(dir)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func newRegistry(t *testing.T) (*models.Registry, *s3test.Server) {
	srv := s3test.Start(t)
	return models.New(srv.Open(t, "registry")), srv
}

var bot = models.Actor{Name: "retrain-worker", Run: "run-42"}

func TestRegisterGetDownload(t *testing.T) {
	t.Parallel()
	reg, _ := newRegistry(t)
	ctx := t.Context()
	files := map[string]string{"model.onnx": "weights", "config/params.json": `{"depth":6}`}
	meta := models.Meta{Metrics: map[string]float64{"auc": 0.91}, DataSnapshots: []string{"snap-1"}, PipelineRun: "run-42"}
	v, err := reg.Register(ctx, "fraud", artifacts(t, files), "", meta)
	if err != nil {
		t.Fatal(err)
	}
	if v.Version != "v1" || v.Name != "fraud" || !strings.HasPrefix(v.Checksum, "sha256:") || len(v.Files) != 2 || v.Metrics["auc"] != 0.91 {
		t.Fatalf("Register = %+v", v)
	}
	got, err := reg.Get(ctx, "fraud", "v1")
	if err != nil || got.Checksum != v.Checksum || got.PipelineRun != "run-42" || !got.Created.Equal(v.Created) {
		t.Fatalf("Get = %+v, %v", got, err)
	}
	dir := t.TempDir()
	if err := reg.Download(ctx, got, dir); err != nil {
		t.Fatal(err)
	}
	for name, content := range files {
		b, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(name)))
		if err != nil || string(b) != content {
			t.Errorf("downloaded %s = %q, %v", name, b, err)
		}
	}
	v2, err := reg.Register(ctx, "fraud", artifacts(t, map[string]string{"model.onnx": "better weights"}), "", models.Meta{})
	if err != nil || v2.Version != "v2" {
		t.Fatalf("second Register = %+v, %v", v2, err)
	}
	list, err := reg.List(ctx, "fraud")
	if err != nil || len(list) != 2 || list[0].Version != "v1" || list[1].Version != "v2" {
		t.Fatalf("List = %v, %v", list, err)
	}
	names, err := reg.Models(ctx)
	if err != nil || !slices.Equal(names, []string{"fraud"}) {
		t.Errorf("Models = %q, %v", names, err)
	}
	if _, err := reg.Get(ctx, "fraud", "v9"); !errors.Is(err, models.ErrNotFound) {
		t.Errorf("Get of a missing version = %v", err)
	}
}

func TestRegisterIsIdempotent(t *testing.T) {
	t.Parallel()
	reg, _ := newRegistry(t)
	ctx := t.Context()
	a := artifacts(t, map[string]string{"m.bin": "same"})
	first, err := reg.Register(ctx, "churn", a, "", models.Meta{PipelineRun: "r1"})
	if err != nil {
		t.Fatal(err)
	}
	// A retry after a crash between registration and promotion.
	again, err := reg.Register(ctx, "churn", a, "", models.Meta{PipelineRun: "r1"})
	if err != nil || again.Version != first.Version || !again.Created.Equal(first.Created) {
		t.Fatalf("retry = %+v, %v; want the first registration %+v", again, err, first)
	}
	same, err := reg.Register(ctx, "churn", a, first.Version, models.Meta{})
	if err != nil || same.Version != first.Version {
		t.Fatalf("same version and checksum = %+v, %v", same, err)
	}
	other := artifacts(t, map[string]string{"m.bin": "different"})
	_, err = reg.Register(ctx, "churn", other, first.Version, models.Meta{})
	if !errors.Is(err, models.ErrVersionExists) || !strings.Contains(err.Error(), first.Checksum) {
		t.Fatalf("same version, other checksum = %v; want ErrVersionExists naming %s", err, first.Checksum)
	}
	if list, _ := reg.List(ctx, "churn"); len(list) != 1 {
		t.Errorf("%d versions, want 1", len(list))
	}
}

func TestConcurrentCreatesOfOneVersion(t *testing.T) {
	t.Parallel()
	reg, srv := newRegistry(t)
	const n = 8
	arts := make([]models.Artifacts, n)
	for i := range n {
		arts[i] = artifacts(t, map[string]string{"model.bin": fmt.Sprintf("weights %d", i), "extra.txt": strings.Repeat("x", i)})
	}
	var wg sync.WaitGroup
	errs := make([]error, n)
	vs := make([]models.Version, n)
	for i := range n {
		wg.Go(func() { vs[i], errs[i] = reg.Register(t.Context(), "ranker", arts[i], "v1", models.Meta{}) })
	}
	wg.Wait()
	winner := s3test.Winner(t, errs, models.ErrVersionExists)
	// The version holds the winner's files, and only them.
	got, err := reg.Get(t.Context(), "ranker", "v1")
	if err != nil || got.Checksum != vs[winner].Checksum {
		t.Fatalf("Get = %+v, %v", got, err)
	}
	dir := t.TempDir()
	if err := reg.Download(t.Context(), got, dir); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(filepath.Join(dir, "model.bin"))
	if string(b) != fmt.Sprintf("weights %d", winner) {
		t.Errorf("model.bin = %q, want the winner's (%d)", b, winner)
	}
	var files []string
	for _, k := range srv.Keys(t) {
		if strings.Contains(k, "/files/") {
			files = append(files, k)
		}
	}
	if len(files) != 2 {
		t.Errorf("version files %q, want the winner's 2", files)
	}
}

func TestConcurrentAutomaticVersions(t *testing.T) {
	t.Parallel()
	reg, _ := newRegistry(t)
	const n = 8
	var wg sync.WaitGroup
	vs := make([]models.Version, 2*n)
	errs := make([]error, 2*n)
	same := artifacts(t, map[string]string{"m": "identical"})
	for i := range n {
		a := artifacts(t, map[string]string{"m": fmt.Sprint(i)})
		wg.Go(func() { vs[i], errs[i] = reg.Register(t.Context(), "auto", a, "", models.Meta{}) })
		// Identical artifacts registered concurrently are one version.
		wg.Go(func() { vs[n+i], errs[n+i] = reg.Register(t.Context(), "auto", same, "", models.Meta{}) })
	}
	wg.Wait()
	seen := map[string]string{}
	for i, err := range errs {
		if err != nil {
			t.Fatalf("registration %d: %v", i, err)
		}
		if prev, dup := seen[vs[i].Version]; dup && prev != vs[i].Checksum {
			t.Errorf("version %s given to two different artifacts", vs[i].Version)
		}
		seen[vs[i].Version] = vs[i].Checksum
	}
	if len(seen) != n+1 {
		t.Errorf("%d distinct versions, want %d: %v", len(seen), n+1, seen)
	}
	list, err := reg.List(t.Context(), "auto")
	if err != nil || len(list) != n+1 {
		t.Fatalf("List: %d versions, %v", len(list), err)
	}
}

// register registers n versions v1..vn of model name.
func register(t *testing.T, reg *models.Registry, name string, n int) {
	t.Helper()
	for i := range n {
		if _, err := reg.Register(t.Context(), name, artifacts(t, map[string]string{"m": fmt.Sprint(i)}), "", models.Meta{}); err != nil {
			t.Fatal(err)
		}
	}
}

func TestConcurrentPromotes(t *testing.T) {
	t.Parallel()
	reg, _ := newRegistry(t)
	const n = 8
	register(t, reg, "fraud", n)
	var wg sync.WaitGroup
	moves := make([]models.Move, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			moves[i], errs[i] = reg.Promote(t.Context(), "fraud", "production", fmt.Sprintf("v%d", i+1),
				models.Actor{Name: fmt.Sprintf("deployer-%d", i)}, "concurrent")
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("Promote %d: %v", i, err)
		}
		if !moves[i].Changed || moves[i].To != fmt.Sprintf("v%d", i+1) {
			t.Errorf("Promote %d = %+v", i, moves[i])
		}
	}
	history, err := reg.History(t.Context(), "fraud", "production")
	if err != nil {
		t.Fatal(err)
	}
	if len(history) != n {
		t.Fatalf("history has %d moves, want %d: %+v", len(history), n, history)
	}
	targets := map[string]int{}
	for i, m := range history {
		// Each move starts where the one before it ended: a chain of
		// compare-and-swaps, none lost or applied twice.
		prev := ""
		if i > 0 {
			prev = history[i-1].To
		}
		if m.Seq != int64(i+1) || m.From != prev {
			t.Errorf("move %d = #%d %q -> %q, want #%d from %q", i, m.Seq, m.From, m.To, i+1, prev)
		}
		targets[m.To]++
	}
	for i := range n {
		if v := fmt.Sprintf("v%d", i+1); targets[v] != 1 {
			t.Errorf("%s appears %d times in the history", v, targets[v])
		}
	}
	cur, err := reg.Resolve(t.Context(), "fraud")
	if err != nil || cur.Version != history[n-1].To {
		t.Errorf("production = %s, %v; history ends at %s", cur.Version, err, history[n-1].To)
	}
	for i, m := range moves {
		if history[m.Seq-1].Actor.Name != fmt.Sprintf("deployer-%d", i) {
			t.Errorf("move #%d recorded for %s, returned to deployer-%d", m.Seq, history[m.Seq-1].Actor.Name, i)
		}
	}
}

func TestPromoteRollbackHistory(t *testing.T) {
	t.Parallel()
	reg, _ := newRegistry(t)
	ctx := t.Context()
	register(t, reg, "fraud", 2)

	if _, err := reg.Move(ctx, models.MoveRequest{Model: "fraud", Alias: "production", Kind: models.KindRollback, By: bot, Reason: "nothing to roll back"}); !errors.Is(err, models.ErrNotFound) {
		t.Errorf("Rollback of an unset alias = %v, want ErrNotFound", err)
	}
	before := time.Now()
	m1, err := reg.Promote(ctx, "fraud", "production", "v1", bot, "first deploy")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Move(ctx, models.MoveRequest{Model: "fraud", Alias: "production", Kind: models.KindRollback, By: bot, Reason: "nothing before v1"}); !errors.Is(err, models.ErrNoPrevious) {
		t.Errorf("Rollback after one move = %v, want ErrNoPrevious", err)
	}
	m2, err := reg.Promote(ctx, "fraud", "production", "v2", bot, "better auc")
	if err != nil {
		t.Fatal(err)
	}
	// Promoting to the current version is a no-op.
	noop, err := reg.Promote(ctx, "fraud", "production", "v2", bot, "retry")
	if err != nil || noop.Changed || noop.Seq != m2.Seq {
		t.Errorf("repeated Promote = %+v, %v; want the unchanged move #%d", noop, err, m2.Seq)
	}
	m3, err := reg.Move(ctx, models.MoveRequest{Model: "fraud", Alias: "production", Kind: models.KindRollback, By: models.Actor{Name: "oncall"}, Reason: "latency regression"})
	if err != nil {
		t.Fatal(err)
	}
	if m3.From != "v2" || m3.To != "v1" || m3.Kind != "rollback" {
		t.Errorf("Rollback = %+v, want v2 -> v1", m3)
	}
	cur, err := reg.Resolve(ctx, "fraud@production")
	if err != nil || cur.Version != "v1" {
		t.Fatalf("after rollback production = %s, %v; want v1", cur.Version, err)
	}

	history, err := reg.History(ctx, "fraud", "production")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range history {
		got = append(got, fmt.Sprintf("#%d %s %s->%s %s %q", m.Seq, m.Kind, m.From, m.To, m.Actor.Name, m.Reason))
	}
	want := []string{
		`#1 promote ->v1 retrain-worker "first deploy"`,
		`#2 promote v1->v2 retrain-worker "better auc"`,
		`#3 rollback v2->v1 oncall "latency regression"`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("history\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if history[0].Actor.Run != "run-42" {
		t.Errorf("actor run not recorded: %+v", history[0].Actor)
	}

	between := func(a, b time.Time) time.Time { return a.Add(b.Sub(a) / 2) }
	for _, tc := range []struct {
		at   time.Time
		want string
	}{
		{m1.Time, "v1"},
		{between(m1.Time, m2.Time), "v1"},
		{m2.Time, "v2"},
		{between(m2.Time, m3.Time), "v2"},
		{m3.Time.Add(time.Hour), "v1"},
	} {
		m, err := reg.AliasAt(ctx, "fraud", "production", tc.at)
		if err != nil || m.To != tc.want {
			t.Errorf("AliasAt(%s) = %s, %v; want %s", tc.at.Format(time.RFC3339Nano), m.To, err, tc.want)
		}
	}
	if _, err := reg.AliasAt(ctx, "fraud", "production", before.Add(-time.Second)); !errors.Is(err, models.ErrNotFound) {
		t.Errorf("AliasAt before the first move = %v, want ErrNotFound", err)
	}
}

func TestResolve(t *testing.T) {
	t.Parallel()
	reg, _ := newRegistry(t)
	ctx := t.Context()
	register(t, reg, "fraud", 3)
	if _, err := reg.Resolve(ctx, "fraud"); !errors.Is(err, models.ErrNotFound) {
		t.Errorf("Resolve before any promotion = %v, want ErrNotFound", err)
	}
	mustPromote := func(alias, version string) {
		if _, err := reg.Promote(ctx, "fraud", alias, version, bot, ""); err != nil {
			t.Fatal(err)
		}
	}
	mustPromote("production", "v2")
	mustPromote("staging", "v3")
	// An alias named like a version cannot redirect that version.
	mustPromote("v1", "v3")
	for ref, want := range map[string]string{
		"fraud":            "v2",
		"fraud@production": "v2",
		"fraud@staging":    "v3",
		"fraud@v1":         "v1",
		"fraud@v3":         "v3",
	} {
		v, err := reg.Resolve(ctx, ref)
		if err != nil || v.Version != want {
			t.Errorf("Resolve(%q) = %s, %v; want %s", ref, v.Version, err, want)
		}
	}
	for _, ref := range []string{"fraud@nope", "other", "fraud@", "@v1", "fraud@../x", "fraud@a@b"} {
		if _, err := reg.Resolve(ctx, ref); err == nil {
			t.Errorf("Resolve(%q) succeeded", ref)
		}
	}
	aliases, err := reg.Aliases(ctx, "fraud")
	if err != nil || len(aliases) != 3 {
		t.Errorf("Aliases = %+v, %v", aliases, err)
	}
	if _, err := reg.Promote(ctx, "fraud", "production", "v9", bot, ""); !errors.Is(err, models.ErrNotFound) {
		t.Errorf("Promote to a missing version = %v, want ErrNotFound", err)
	}
}

func TestNamesAreValidated(t *testing.T) {
	t.Parallel()
	reg, srv := newRegistry(t)
	ctx := context.Background()
	a := artifacts(t, map[string]string{"m": "x"})
	for _, name := range []string{"", "../x", "a/b", "a@b", ".hidden", "has space"} {
		if _, err := reg.Register(ctx, name, a, "", models.Meta{}); err == nil {
			t.Errorf("Register accepted model name %q", name)
		}
		if _, err := reg.Register(ctx, "ok", a, name+"!", models.Meta{}); err == nil {
			t.Errorf("Register accepted version %q", name+"!")
		}
	}
	if _, err := reg.Register(ctx, "ok", models.Artifacts{"../escape": "/etc/hostname"}, "", models.Meta{}); err == nil {
		t.Error("Register accepted artifact path ../escape")
	}
	if keys := srv.Keys(t); len(keys) != 0 {
		t.Errorf("rejected registrations wrote %q", keys)
	}
}
