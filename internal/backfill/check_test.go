package backfill

import (
	"reflect"
	"strings"
	"testing"

	"github.com/apache/iceberg-go"
)

func schema(ids []int, fields ...iceberg.NestedField) *iceberg.Schema {
	return iceberg.NewSchemaWithIdentifiers(0, ids, fields...)
}

var (
	trainingSchema = schema([]int{1},
		iceberg.NestedField{ID: 1, Name: "request_id", Type: iceberg.PrimitiveTypes.Int64, Required: true},
		iceberg.NestedField{ID: 2, Name: "user_id", Type: iceberg.PrimitiveTypes.Int64, Required: true},
		iceberg.NestedField{ID: 3, Name: "event_ts", Type: iceberg.PrimitiveTypes.TimestampTz, Required: true},
		iceberg.NestedField{ID: 4, Name: "date", Type: iceberg.PrimitiveTypes.Date, Required: true},
		iceberg.NestedField{ID: 5, Name: "label", Type: iceberg.PrimitiveTypes.Int32, Required: true},
	)
	trainingSpec = []SpecField{{"date", "identity"}, {"user_id", "bucket[16]"}}
	userFeatures = schema(nil,
		iceberg.NestedField{ID: 1, Name: "user_id", Type: iceberg.PrimitiveTypes.Int64},
		iceberg.NestedField{ID: 2, Name: "date", Type: iceberg.PrimitiveTypes.Date},
		iceberg.NestedField{ID: 3, Name: "ts", Type: iceberg.PrimitiveTypes.TimestampTz},
		iceberg.NestedField{ID: 4, Name: "ctr", Type: iceberg.PrimitiveTypes.Float64},
		iceberg.NestedField{ID: 5, Name: "label", Type: iceberg.PrimitiveTypes.Float64},
	)
)

func stageCheck() StageCheck {
	return StageCheck{
		Training: "ml.training", Feature: "features.user_daily",
		TrainingSchema: trainingSchema, FeatureSchema: userFeatures, TrainingSpec: trainingSpec,
		Keys: []string{"user_id"}, Alignment: PreviousDay,
		DateColumn: "date", EventTimeColumn: "event_ts", FeatureTimeColumn: "ts",
		Features: []string{"ctr"},
	}
}

func TestStageCheck(t *testing.T) {
	p, err := stageCheck().Check()
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"request_id", "date", "user_id"}; !reflect.DeepEqual(p.CarryColumns, want) {
		t.Errorf("carry %v, want %v", p.CarryColumns, want)
	}
	if want := []string{"ctr"}; !reflect.DeepEqual(p.FeatureNames, want) {
		t.Errorf("features %v, want %v", p.FeatureNames, want)
	}
	all := stageCheck()
	all.Features, all.Prefix = nil, "u_"
	p, err = all.Check()
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"u_ctr", "u_label"}; !reflect.DeepEqual(p.FeatureNames, want) {
		t.Errorf("default features %v, want %v (keys, date and ts are not features)", p.FeatureNames, want)
	}

	otherKeyType := schema(nil,
		iceberg.NestedField{ID: 1, Name: "user_id", Type: iceberg.PrimitiveTypes.String},
		iceberg.NestedField{ID: 2, Name: "date", Type: iceberg.PrimitiveTypes.Date},
		iceberg.NestedField{ID: 3, Name: "ctr", Type: iceberg.PrimitiveTypes.Float64},
	)
	for _, tc := range []struct {
		name string
		edit func(*StageCheck)
		want string
	}{
		{"key absent from features", func(c *StageCheck) { c.Keys = []string{"ad_id"} }, "column ad_id is not in table ml.training"},
		{"key of another type", func(c *StageCheck) { c.FeatureSchema = otherKeyType }, "column user_id is long in table ml.training but string in table features.user_daily"},
		{"no keys", func(c *StageCheck) { c.Keys = nil }, "no entity key"},
		{"missing feature", func(c *StageCheck) { c.Features = []string{"nope"} }, "feature column nope is not in feature table features.user_daily"},
		{"feature shadows a key", func(c *StageCheck) { c.Features = []string{"date"}; c.DateColumn = "date" }, "date"},
		{"as_of without ts", func(c *StageCheck) { c.Alignment = AsOf; c.FeatureTimeColumn = "nope" }, "feature time column nope is not in table features.user_daily"},
		{"as_of on a date", func(c *StageCheck) { c.Alignment = AsOf; c.EventTimeColumn = "date" }, "event time column date of table ml.training is date"},
		{"no primary key", func(c *StageCheck) { c.TrainingSchema = userFeatures }, "has no primary key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := stageCheck()
			tc.edit(&c)
			_, err := c.Check()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func stagingSchema(feature iceberg.NestedField) *iceberg.Schema {
	return iceberg.NewSchema(0,
		iceberg.NestedField{ID: 1, Name: "request_id", Type: iceberg.PrimitiveTypes.Int64, Required: true},
		iceberg.NestedField{ID: 2, Name: "date", Type: iceberg.PrimitiveTypes.Date, Required: true},
		iceberg.NestedField{ID: 3, Name: "user_id", Type: iceberg.PrimitiveTypes.Int64, Required: true},
		feature,
	)
}

func TestPromoteCheck(t *testing.T) {
	ctr := iceberg.NestedField{ID: 4, Name: "u_ctr", Type: iceberg.PrimitiveTypes.Float64}
	ad := iceberg.NestedField{ID: 4, Name: "a_ctr", Type: iceberg.PrimitiveTypes.Float64}
	good := PromoteCheck{
		Training: "ml.training", TrainingSchema: trainingSchema, TrainingSpec: trainingSpec,
		Staging: []Staging{
			{Name: "ml.s1", Schema: stagingSchema(ctr), Spec: trainingSpec},
			{Name: "ml.s2", Schema: stagingSchema(ad), Spec: trainingSpec},
		},
	}
	p, err := good.Check()
	if err != nil {
		t.Fatal(err)
	}
	if p.BucketColumn != "user_id" || p.Buckets != 16 || len(p.Columns) != 2 || p.Columns[1].Staging != 1 {
		t.Errorf("plan %+v", p)
	}

	withPromoted := schema([]int{1}, append(trainingSchema.Fields(), iceberg.NestedField{ID: 6, Name: "u_ctr", Type: iceberg.PrimitiveTypes.Float64})...)
	again := good
	again.TrainingSchema, again.Promoted = withPromoted, []string{"u_ctr"}
	if p, err := again.Check(); err != nil || !p.Columns[0].Existing {
		t.Errorf("re-promotion of a promoted column: %+v %v", p, err)
	}

	for _, tc := range []struct {
		name string
		edit func(*PromoteCheck)
		want string
	}{
		{"spec differs", func(c *PromoteCheck) {
			c.Staging[0].Spec = []SpecField{{"date", "identity"}, {"user_id", "bucket[8]"}}
		}, "staging table ml.s1 is partitioned by identity(date), bucket[8](user_id) but training table ml.training by identity(date), bucket[16](user_id)"},
		{"key of another type", func(c *PromoteCheck) {
			c.Staging[0].Schema = iceberg.NewSchema(0,
				iceberg.NestedField{ID: 1, Name: "request_id", Type: iceberg.PrimitiveTypes.String, Required: true},
				iceberg.NestedField{ID: 2, Name: "date", Type: iceberg.PrimitiveTypes.Date, Required: true},
				iceberg.NestedField{ID: 3, Name: "user_id", Type: iceberg.PrimitiveTypes.Int64, Required: true}, ctr)
		}, "column request_id is long in table ml.training but string in table ml.s1"},
		{"key absent", func(c *PromoteCheck) {
			c.Staging[0].Schema = iceberg.NewSchema(0,
				iceberg.NestedField{ID: 2, Name: "date", Type: iceberg.PrimitiveTypes.Date, Required: true},
				iceberg.NestedField{ID: 3, Name: "user_id", Type: iceberg.PrimitiveTypes.Int64, Required: true}, ctr)
		}, "column request_id is not in table ml.s1"},
		{"same feature twice", func(c *PromoteCheck) { c.Staging[1].Schema = stagingSchema(ctr) }, "feature column u_ctr is in both staging tables ml.s1 and ml.s2"},
		{"overwrites the label", func(c *PromoteCheck) {
			c.Staging[0].Schema = stagingSchema(iceberg.NestedField{ID: 4, Name: "label", Type: iceberg.PrimitiveTypes.Int32})
		}, "would overwrite column label of training table ml.training"},
		{"promoted column of another type", func(c *PromoteCheck) {
			c.TrainingSchema, c.Promoted = schema([]int{1}, append(trainingSchema.Fields(), iceberg.NestedField{ID: 6, Name: "u_ctr", Type: iceberg.PrimitiveTypes.Int64})...), []string{"u_ctr"}
		}, "feature column u_ctr is double in staging table ml.s1 but long in training table ml.training"},
		{"no staging", func(c *PromoteCheck) { c.Staging = nil }, "no staging tables"},
		{"not bucketed", func(c *PromoteCheck) {
			c.TrainingSpec = []SpecField{{"date", "identity"}}
			for i := range c.Staging {
				c.Staging[i].Spec = c.TrainingSpec
			}
		}, "needs a bucket partition"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := good
			c.Staging = append([]Staging(nil), good.Staging...)
			tc.edit(&c)
			_, err := c.Check()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestDateRange(t *testing.T) {
	r, err := ParseDateRange("2026-11-01", "2026-11-03")
	if err != nil || r.Days() != 3 || r.String() != "2026-11-01..2026-11-03" {
		t.Errorf("%v %v", r, err)
	}
	if _, err := ParseDateRange("2026-11-03", "2026-11-01"); err == nil || !strings.Contains(err.Error(), "empty date range") {
		t.Errorf("empty range: %v", err)
	}
	if _, err := ParseDateRange("2026-11-3x", "2026-11-01"); err == nil {
		t.Error("bad date accepted")
	}
	if _, err := ParseAlignment("yesterday"); err == nil {
		t.Error("bad alignment accepted")
	}
	d, _ := ParseDay("2026-11-02")
	w := AsOf.Window(d, 2)
	if w.FromMicros != (d-2).Micros() || w.ToMicros != (d+1).Micros()-1 {
		t.Errorf("as_of window %+v", w)
	}
	if w := PreviousDay.Window(d, 0); w.FromDay != d-1 || w.ToDay != d-1 {
		t.Errorf("previous_day window %+v", w)
	}
}

func TestGroupBuckets(t *testing.T) {
	rows := map[int]int64{0: 100, 1: 10, 2: 90, 3: 20, 5: 50}
	got := GroupBuckets(rows, 2)
	want := [][]int{{0, 1, 3}, {2, 5}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("groups %v, want %v", got, want)
	}
	if got := GroupBuckets(rows, 99); len(got) != 5 {
		t.Errorf("more groups than buckets: %v", got)
	}
	if got := GroupBuckets(nil, 4); got != nil {
		t.Errorf("no buckets: %v", got)
	}
	if got := StagingTableName("ml.training", "features.user_daily"); got != "ml.training__stage__features_user_daily" {
		t.Errorf("staging name %s", got)
	}
}

func TestSameTypeIgnoresNestedFieldIDs(t *testing.T) {
	list := func(id int, elem iceberg.Type, required bool) iceberg.Type {
		return &iceberg.ListType{ElementID: id, Element: elem, ElementRequired: required}
	}
	structOf := func(id int, name string, typ iceberg.Type) iceberg.Type {
		return &iceberg.StructType{FieldList: []iceberg.NestedField{{ID: id, Name: name, Type: typ}}}
	}
	long, str := iceberg.PrimitiveTypes.Int64, iceberg.PrimitiveTypes.String
	cases := []struct {
		name string
		a, b iceberg.Type
		same bool
	}{
		{"primitive", long, long, true},
		{"primitive differs", long, str, false},
		{"list, other element id", list(7, long, false), list(21, long, false), true},
		{"list, other element type", list(7, long, false), list(7, str, false), false},
		{"list, other element nullability", list(7, long, true), list(7, long, false), false},
		{"map, other ids", &iceberg.MapType{KeyID: 1, KeyType: str, ValueID: 2, ValueType: long},
			&iceberg.MapType{KeyID: 8, KeyType: str, ValueID: 9, ValueType: long}, true},
		{"map, other value type", &iceberg.MapType{KeyID: 1, KeyType: str, ValueID: 2, ValueType: long},
			&iceberg.MapType{KeyID: 1, KeyType: str, ValueID: 2, ValueType: str}, false},
		{"struct, other field id", structOf(3, "x", long), structOf(30, "x", long), true},
		{"struct, other field name", structOf(3, "x", long), structOf(3, "y", long), false},
		{"list of struct, other ids", list(4, structOf(5, "x", long), false), list(40, structOf(50, "x", long), false), true},
		{"list vs primitive", list(4, long, false), long, false},
	}
	for _, c := range cases {
		if got := SameType(c.a, c.b); got != c.same {
			t.Errorf("%s: SameType = %v, want %v", c.name, got, c.same)
		}
	}
}
