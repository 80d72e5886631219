package features_test

import (
	"context"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apache/iceberg-go"

	"github.com/retrain-ml/retrain/internal/features"
	"github.com/retrain-ml/retrain/internal/lake"
)

// snapshotFiles lists every file under the warehouse with its size.
func (e *env) snapshotFiles(t *testing.T) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	err := filepath.WalkDir(filepath.Join(e.dir, "warehouse"), func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		out[p] = info.Size()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestBadInputFailsBeforeAnyWrite runs stage 1 and stage 2 on bad input of
// every kind and checks each fails with a BadInputError naming the problem
// and that not one file appeared or changed under the warehouse.
func TestBadInputFailsBeforeAnyWrite(t *testing.T) {
	e := newEnv(t, 600, 2)
	ctx := context.Background()
	e.stage(t, "features.user_daily", "ml.s_user", []string{"user_id"}, "u_", 0, 1)

	// A feature table whose user_id is a string, and staging tables
	// partitioned differently or keyed by another type.
	strUsers := iceberg.NewSchema(0,
		iceberg.NestedField{ID: 1, Name: "user_id", Type: iceberg.PrimitiveTypes.String, Required: true},
		iceberg.NestedField{ID: 2, Name: "date", Type: iceberg.PrimitiveTypes.Date, Required: true},
		iceberg.NestedField{ID: 3, Name: "score", Type: iceberg.PrimitiveTypes.Float64},
	)
	if _, err := e.cat.CreateTable(ctx, "features.user_str", strUsers, lake.TableSpec{}); err != nil {
		t.Fatal(err)
	}
	staging := func(keyType iceberg.Type, buckets int) (*iceberg.Schema, lake.TableSpec) {
		s := iceberg.NewSchemaWithIdentifiers(0, []int{1},
			iceberg.NestedField{ID: 1, Name: "request_id", Type: keyType, Required: true},
			iceberg.NestedField{ID: 2, Name: "date", Type: iceberg.PrimitiveTypes.Date, Required: true},
			iceberg.NestedField{ID: 3, Name: "user_id", Type: iceberg.PrimitiveTypes.Int64, Required: true},
			iceberg.NestedField{ID: 4, Name: "z", Type: iceberg.PrimitiveTypes.Float64},
		)
		spec := iceberg.NewPartitionSpec(
			iceberg.PartitionField{SourceIDs: []int{2}, FieldID: 1000, Name: "date", Transform: iceberg.IdentityTransform{}},
			iceberg.PartitionField{SourceIDs: []int{3}, FieldID: 1001, Name: "user_id_bucket", Transform: iceberg.BucketTransform{NumBuckets: buckets}},
		)
		return s, lake.TableSpec{Partition: &spec}
	}
	s8, spec8 := staging(iceberg.PrimitiveTypes.Int64, 8)
	if _, err := e.cat.CreateTable(ctx, "ml.s_bucket8", s8, spec8); err != nil {
		t.Fatal(err)
	}
	sKey, specKey := staging(iceberg.PrimitiveTypes.String, 16)
	if _, err := e.cat.CreateTable(ctx, "ml.s_strkey", sKey, specKey); err != nil {
		t.Fatal(err)
	}

	good := features.StageSpec{
		Training: "ml.training", Feature: "features.user_daily", Keys: []string{"user_id"},
		StartDate: e.day(0), EndDate: e.day(1), Alignment: "previous_day", Staging: "ml.s_new",
	}
	stageCases := []struct {
		name string
		edit func(*features.StageSpec)
		want string
	}{
		{"missing training table", func(s *features.StageSpec) { s.Training = "ml.nope" }, "training table ml.nope does not exist"},
		{"missing feature table", func(s *features.StageSpec) { s.Feature = "features.nope" }, "feature table features.nope does not exist"},
		{"key column absent", func(s *features.StageSpec) { s.Keys = []string{"session_id"} }, "column session_id is not in table ml.training"},
		{"key column of another type", func(s *features.StageSpec) { s.Feature = "features.user_str" }, "column user_id is long in table ml.training but string in table features.user_str"},
		{"empty date range", func(s *features.StageSpec) { s.StartDate, s.EndDate = e.day(1), e.day(0) }, "empty date range"},
		{"unknown alignment", func(s *features.StageSpec) { s.Alignment = "tomorrow" }, "unknown alignment"},
		{"missing feature column", func(s *features.StageSpec) { s.Features = []string{"nope"} }, "feature column nope is not in feature table"},
		{"staging over an input", func(s *features.StageSpec) { s.Staging = "ml.training" }, "would overwrite an input table"},
	}
	goodPromote := features.PromoteSpec{Training: "ml.training", Staging: []string{"ml.s_user"}, StartDate: e.day(0), EndDate: e.day(1)}
	promoteCases := []struct {
		name string
		edit func(*features.PromoteSpec)
		want string
	}{
		{"missing training table", func(s *features.PromoteSpec) { s.Training = "ml.nope" }, "training table ml.nope does not exist"},
		{"missing staging table", func(s *features.PromoteSpec) { s.Staging = []string{"ml.s_user", "ml.gone"} }, "staging table ml.gone does not exist"},
		{"staging partition spec differs", func(s *features.PromoteSpec) { s.Staging = []string{"ml.s_bucket8"} }, "staging table ml.s_bucket8 is partitioned by identity(date), bucket[8](user_id) but training table ml.training by identity(date), bucket[16](user_id)"},
		{"staging key of another type", func(s *features.PromoteSpec) { s.Staging = []string{"ml.s_strkey"} }, "column request_id is long in table ml.training but string in table ml.s_strkey"},
		{"empty date range", func(s *features.PromoteSpec) { s.StartDate, s.EndDate = e.day(1), e.day(0) }, "empty date range"},
		{"no rows in range", func(s *features.PromoteSpec) { s.StartDate, s.EndDate = "2020-01-01", "2020-01-02" }, "has no rows between"},
		{"no staging tables", func(s *features.PromoteSpec) { s.Staging = nil }, "no staging tables"},
	}

	before := e.snapshotFiles(t)
	check := func(t *testing.T, err error, want string) {
		t.Helper()
		if !features.IsBadInput(err) {
			t.Fatalf("got %v, want a bad input error", err)
		}
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
		after := e.snapshotFiles(t)
		for p, size := range after {
			if old, ok := before[p]; !ok || old != size {
				t.Errorf("file written despite bad input: %s", p)
			}
		}
		if len(after) != len(before) {
			t.Errorf("%d files before, %d after", len(before), len(after))
		}
	}
	for _, tc := range stageCases {
		t.Run("stage/"+tc.name, func(t *testing.T) {
			spec := good
			tc.edit(&spec)
			_, err := features.Stage(ctx, e.cat, spec, nil)
			check(t, err, tc.want)
		})
	}
	for _, tc := range promoteCases {
		t.Run("promote/"+tc.name, func(t *testing.T) {
			spec := goodPromote
			tc.edit(&spec)
			_, err := features.Promote(ctx, e.cat, spec, "bad", 1, nil)
			check(t, err, tc.want)
		})
	}
	t.Run("stats/missing column", func(t *testing.T) {
		_, err := features.Stats(ctx, e.cat, features.StatsSpec{Table: "ml.s_user", Columns: []string{"nope"}}, nil)
		check(t, err, "column nope is not in table ml.s_user")
	})
	t.Run("rollback/unknown snapshot", func(t *testing.T) {
		_, err := e.cat.Rollback(ctx, "ml.training", 12345)
		if err == nil || !strings.Contains(err.Error(), "has no snapshot 12345") {
			t.Errorf("rollback to an unknown snapshot: %v", err)
		}
	})
}

// TestStageIsIdempotent reruns a stage job and checks the staging table
// has each row once, with the same content.
func TestStageIsIdempotent(t *testing.T) {
	e := newEnv(t, 800, 3)
	first := e.stage(t, "features.user_daily", "ml.s", []string{"user_id"}, "", 0, 2)
	sum := e.checksum(t, "ml.s")
	second := e.stage(t, "features.user_daily", "ml.s", []string{"user_id"}, "", 0, 2)
	again := e.checksum(t, "ml.s")
	if sum.Digest != again.Digest || again.Rows != 800 || first.Rows != second.Rows {
		t.Errorf("rerun changed the staging table: %+v then %+v", sum, again)
	}
	// A narrower rerun replaces only its own days.
	e.stage(t, "features.user_daily", "ml.s", []string{"user_id"}, "", 1, 1)
	if got := e.checksum(t, "ml.s"); got.Digest != sum.Digest {
		t.Errorf("rerun of one day changed the table: %+v", got)
	}
	rowsOf(t, e.cat, "ml.s", "request_id") // fails on a duplicate
}
