// Package splittest writes splits for tests of the nodes that read them
// (train, evaluate), the way a split node writes them.
package splittest

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/parquet-go/parquet-go"

	"github.com/retrain-ml/retrain/activities/internal/objects"
	"github.com/retrain-ml/retrain/activities/split"
	"github.com/retrain-ml/retrain/internal/backfill"
	"github.com/retrain-ml/retrain/internal/checkpoint"
	"github.com/retrain-ml/retrain/internal/dataset"
	"github.com/retrain-ml/retrain/internal/s3store"
)

// Schema is the layout of the test splits: one dense feature and a
// user id, labels drawn from sigmoid(2x + user effect).
var Schema = dataset.Schema{
	Label: "label", Date: "date", RequestID: "request_id", Slice: "date",
	Columns: []dataset.Column{{Name: "x", Kind: dataset.Dense}, {Name: "user_id", Kind: dataset.ID}},
}

// Write stores a split checkpoint the way a split node does and
// returns its URI.
func Write(t *testing.T, st *s3store.Store, run string, trainRows, evalRows int) string {
	t.Helper()
	return WriteFiles(t, st, run, trainRows, evalRows, 0)
}

// WriteFiles is Write with a new Parquet file every fileRows rows (0: one
// file per dataset), as a split with max_file_rows writes them. The
// request_id of train row i is 1<<32|i.
func WriteFiles(t *testing.T, st *s3store.Store, run string, trainRows, evalRows int, fileRows int64) string {
	t.Helper()
	return WriteOptions(t, st, run, trainRows, evalRows, checkpoint.Options{MaxFileRows: fileRows})
}

// WriteOptions is Write with the checkpoint's file options (file and row
// group sizes).
func WriteOptions(t *testing.T, st *s3store.Store, run string, trainRows, evalRows int, opts checkpoint.Options) string {
	t.Helper()
	r := rand.New(rand.NewPCG(1, 2))
	users := make([]float64, 50)
	for i := range users {
		users[i] = r.NormFloat64()
	}
	typ := Schema.RowType()
	row := func(id int64, day int32) any {
		v := reflect.New(typ).Elem()
		x := r.NormFloat64()
		u := int64(r.IntN(len(users)))
		var y float32
		if r.Float64() < 1/(1+math.Exp(-(2*x+users[u]-1))) {
			y = 1
		}
		day2 := fmt.Sprint(day)
		v.Field(0).SetInt(id)
		v.Field(1).SetInt(int64(day))
		v.Field(2).SetFloat(float64(y))
		v.Field(3).Set(reflect.ValueOf(&x))
		v.Field(4).Set(reflect.ValueOf(&u))
		v.Field(5).Set(reflect.ValueOf(&day2))
		return v.Interface()
	}
	key := checkpoint.Key{Pipeline: "test", Run: run, Node: "split"}
	out, _, err := checkpoint.Do(context.Background(), st, key, "f1", func(ctx context.Context, w *checkpoint.Writer) (split.Record, error) {
		pq := parquet.SchemaOf(reflect.New(typ).Interface())
		var ref checkpoint.Ref
		for _, ds := range []struct {
			name string
			n    int
			day  int32
		}{{split.TrainDataset, trainRows, 1}, {split.EvalDataset, evalRows, 2}} {
			d, err := checkpoint.CreateRows(w, ds.name, pq, opts)
			if err != nil {
				return split.Record{}, err
			}
			rows := make([]any, ds.n)
			for i := range rows {
				rows[i] = row(int64(ds.day)<<32|int64(i), ds.day)
			}
			if _, err := d.Write(rows); err != nil {
				return split.Record{}, err
			}
			if ref, err = d.Close(); err != nil {
				return split.Record{}, err
			}
		}
		return split.Record{
			URI: objects.KeyURI(st, ref.Manifest), Manifest: ref.Manifest, TrainRows: int64(trainRows), EvalRows: int64(evalRows), Schema: Schema,
			Window:     dataset.Window{Start: backfill.Day(1).String(), End: backfill.Day(2).String()},
			TrainDates: []string{backfill.Day(1).String()}, EvalDates: []string{backfill.Day(2).String()},
		}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out.URI
}
