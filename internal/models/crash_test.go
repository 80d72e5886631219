package models

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/retrain-ml/retrain/internal/devkit/s3test"
)

// These tests stop the registry's protocols midway, as a crashed process
// would, and check that the next caller finishes or ignores the work.

func newTestRegistry(t *testing.T) *Registry {
	srv := s3test.Start(t)
	return New(srv.Open(t, ""))
}

func writeArtifacts(t *testing.T, content string) Artifacts {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "model.bin"), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	a, err := DirArtifacts(dir)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestRegisterAfterCrashBeforeModelJSON(t *testing.T) {
	t.Parallel()
	r := newTestRegistry(t)
	ctx := t.Context()
	a := writeArtifacts(t, "weights")
	files, err := hashArtifacts(a)
	if err != nil {
		t.Fatal(err)
	}
	sum := digest(files)
	// The crashed registration claimed v1, indexed it and uploaded the
	// files, but never wrote model.json.
	v, err := r.claimNumber(ctx, "m", sum, "run-1")
	if err != nil || v != "v1" {
		t.Fatalf("claimNumber = %q, %v", v, err)
	}
	if err := r.upload(ctx, "m", v, a["model.bin"], files[0]); err != nil {
		t.Fatal(err)
	}
	if list, _ := r.List(ctx, "m"); len(list) != 0 {
		t.Fatalf("incomplete version is visible: %+v", list)
	}
	if _, err := r.Resolve(ctx, "m@v1"); err == nil {
		t.Fatal("incomplete version resolves")
	}
	// The retry completes the same version instead of creating v2.
	got, err := r.Register(ctx, "m", a, "", Meta{PipelineRun: "run-1"})
	if err != nil || got.Version != "v1" {
		t.Fatalf("retry = %+v, %v; want v1", got, err)
	}
	if list, _ := r.List(ctx, "m"); len(list) != 1 {
		t.Fatalf("%d versions after the retry, want 1", len(list))
	}
	// Other artifacts cannot take over the claimed version.
	if _, err := r.Register(ctx, "m", writeArtifacts(t, "other"), "v1", Meta{}); err == nil {
		t.Fatal("other artifacts registered as v1")
	}
}

func TestMoveRecordedButNotApplied(t *testing.T) {
	t.Parallel()
	r := newTestRegistry(t)
	ctx := t.Context()
	for _, c := range []string{"one", "two", "three"} {
		if _, err := r.Register(ctx, "m", writeArtifacts(t, c), "", Meta{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := r.Promote(ctx, "m", "production", "v1", Actor{Name: "a"}, ""); err != nil {
		t.Fatal(err)
	}
	// A mover recorded move #2 and crashed before swapping the alias.
	m := Move{Seq: 2, Model: "m", Alias: "production", From: "v1", To: "v2", Kind: "promote",
		Actor: Actor{Name: "crashed"}, Time: time.Now().UTC()}
	body, _ := json.Marshal(m)
	if _, err := r.store.PutIfAbsent(ctx, historyKey("m", "production", 2), strings.NewReader(string(body))); err != nil {
		t.Fatal(err)
	}
	// Readers see the recorded move: the alias and its history agree.
	v, err := r.Resolve(ctx, "m")
	if err != nil || v.Version != "v2" {
		t.Fatalf("Resolve = %s, %v; want v2", v.Version, err)
	}
	// The next move builds on it.
	next, err := r.Promote(ctx, "m", "production", "v3", Actor{Name: "b"}, "")
	if err != nil || next.Seq != 3 || next.From != "v2" {
		t.Fatalf("Promote = %+v, %v; want #3 from v2", next, err)
	}
	history, err := r.History(ctx, "m", "production")
	if err != nil || len(history) != 3 {
		t.Fatalf("History = %+v, %v", history, err)
	}
}
