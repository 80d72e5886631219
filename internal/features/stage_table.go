package features

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"

	"github.com/retrain-ml/retrain/internal/lake"
)

// stagingSchema is the training table's key and partition columns (as in
// the training table) followed by the staged features (optional).
func (j *stageJob) stagingSchema() (*iceberg.Schema, error) {
	var fields []iceberg.NestedField
	id := 0
	next := func() int { id++; return id }
	var identifiers []int
	for _, name := range j.plan.CarryColumns {
		f, _ := j.training.Schema().FindFieldByName(name)
		nf := iceberg.NestedField{ID: next(), Name: name, Type: f.Type, Required: f.Required, Doc: f.Doc}
		if slices.Contains(j.plan.PrimaryKey, name) {
			identifiers = append(identifiers, nf.ID)
		}
		fields = append(fields, nf)
	}
	for i, src := range j.plan.FeatureSource {
		f, _ := j.feature.Schema().FindFieldByName(src)
		typ, err := freshIDs(f.Type, next)
		if err != nil {
			return nil, badInput("feature column %s: %v", src, err)
		}
		fields = append(fields, iceberg.NestedField{ID: next(), Name: j.plan.FeatureNames[i], Type: typ, Doc: f.Doc})
	}
	return iceberg.NewSchemaWithIdentifiers(0, identifiers, fields...), nil
}

// freshIDs copies a type, giving nested fields new ids.
func freshIDs(t iceberg.Type, next func() int) (iceberg.Type, error) {
	switch t := t.(type) {
	case *iceberg.ListType:
		el, err := freshIDs(t.Element, next)
		if err != nil {
			return nil, err
		}
		return &iceberg.ListType{ElementID: next(), Element: el, ElementRequired: t.ElementRequired}, nil
	case *iceberg.MapType:
		k, err := freshIDs(t.KeyType, next)
		if err != nil {
			return nil, err
		}
		v, err := freshIDs(t.ValueType, next)
		if err != nil {
			return nil, err
		}
		return &iceberg.MapType{KeyID: next(), KeyType: k, ValueID: next(), ValueType: v, ValueRequired: t.ValueRequired}, nil
	case *iceberg.StructType:
		out := &iceberg.StructType{}
		for _, f := range t.FieldList {
			ft, err := freshIDs(f.Type, next)
			if err != nil {
				return nil, err
			}
			out.FieldList = append(out.FieldList, iceberg.NestedField{ID: next(), Name: f.Name, Type: ft, Required: f.Required})
		}
		return out, nil
	default:
		return t, nil
	}
}

// stagingSpec is the training table's partition spec over the staging
// schema's columns.
func (j *stageJob) stagingSpec() (iceberg.PartitionSpec, error) {
	var fields []iceberg.PartitionField
	tspec := j.training.Spec()
	for _, f := range tspec.Fields() {
		src, _ := j.training.Schema().FindColumnName(f.SourceID())
		sf, ok := j.schema.FindFieldByName(src)
		if !ok {
			return iceberg.PartitionSpec{}, fmt.Errorf("partition source %s missing from staging schema", src)
		}
		fields = append(fields, iceberg.PartitionField{SourceIDs: []int{sf.ID}, FieldID: f.FieldID, Name: f.Name, Transform: f.Transform})
	}
	return iceberg.NewPartitionSpec(fields...), nil
}

// stagingTable creates the staging table, or reuses it if it has the
// shape this job writes. A staging table of another shape (an earlier job
// staged other features into it) is dropped and recreated: a staging
// table belongs to the job that names it.
func (j *stageJob) stagingTable(ctx context.Context, cat *lake.Catalog, log *slog.Logger) (*table.Table, error) {
	spec, err := j.stagingSpec()
	if err != nil {
		return nil, err
	}
	props := iceberg.Properties{
		PropStagingOf:      j.spec.Training,
		PropStagingFrom:    j.spec.Feature,
		PropStagingAlign:   string(j.align),
		PropStagingKeys:    strings.Join(j.plan.PrimaryKey, ","),
		PropStagingFeature: strings.Join(j.plan.FeatureNames, ","),
	}
	existing, err := cat.Load(ctx, j.spec.Staging)
	switch {
	case err == nil:
		if sameShape(existing.Schema(), j.schema) && sameSpecOf(existing, j.training) && existing.Properties()[PropStagingOf] == j.spec.Training {
			return existing, nil
		}
		log.Info("stage: staging table has another shape; recreating it", "table", j.spec.Staging)
		if err := cat.DropTable(ctx, j.spec.Staging); err != nil {
			return nil, err
		}
	case !errors.Is(err, lake.ErrNoSuchTable):
		return nil, err
	}
	tbl, err := cat.CreateTable(ctx, j.spec.Staging, j.schema, lake.TableSpec{Partition: &spec, Properties: props})
	if err != nil {
		// Another run of this job may have created it concurrently.
		if again, lerr := cat.Load(ctx, j.spec.Staging); lerr == nil && sameShape(again.Schema(), j.schema) {
			return again, nil
		}
		return nil, err
	}
	return tbl, nil
}

func sameShape(a, b *iceberg.Schema) bool {
	af, bf := a.Fields(), b.Fields()
	if len(af) != len(bf) {
		return false
	}
	for i := range af {
		if af[i].Name != bf[i].Name || af[i].Type.String() != bf[i].Type.String() || af[i].Required != bf[i].Required {
			return false
		}
	}
	return true
}

func sameSpecOf(a, b *table.Table) bool {
	as, _, err1 := specOf(a)
	bs, _, err2 := specOf(b)
	return err1 == nil && err2 == nil && slices.Equal(as, bs)
}
