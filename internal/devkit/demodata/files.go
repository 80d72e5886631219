package demodata

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/retrain-ml/retrain/internal/backfill"
)

// Folders of WriteFiles under its output folder: each holds one
// date=YYYY-MM-DD/ folder per day, whose files have no date column (the
// folder says it), as a team's daily exports look.
const (
	ClicksFolder  = "clicks"       // training rows: request_id, user_id, ad_id, event_ts, label
	SignalsFolder = "user_signals" // user_id, ts (published), SignalFeatureNames
	NoiseFolder   = "noise_daily"  // user_id, ts (published), NoiseFeatureNames
)

// FilesResult says what WriteFiles wrote.
type FilesResult struct {
	Dir          string
	Files        int
	TrainingRows int64
	FeatureRows  int64
	Start, End   backfill.Day // the training days
}

// clicksSchema is a day's training rows as files hold them.
var clicksSchema = arrow.NewSchema([]arrow.Field{
	{Name: "request_id", Type: arrow.PrimitiveTypes.Int64},
	{Name: "user_id", Type: arrow.PrimitiveTypes.Int64},
	{Name: "ad_id", Type: arrow.PrimitiveTypes.Int64},
	{Name: "event_ts", Type: &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}},
	{Name: "date", Type: arrow.FixedWidthTypes.Date32}, // dropped: the folder says it
	{Name: "label", Type: arrow.PrimitiveTypes.Int32},
}, nil)

// userFloatsArrow is a daily user feature group as files hold it.
func userFloatsArrow(names []string) *arrow.Schema {
	fields := []arrow.Field{
		{Name: "user_id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "date", Type: arrow.FixedWidthTypes.Date32},
		{Name: "ts", Type: &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}},
	}
	for _, n := range names {
		fields = append(fields, arrow.Field{Name: n, Type: arrow.PrimitiveTypes.Float64, Nullable: true})
	}
	return arrow.NewSchema(fields, nil)
}

// WriteFiles writes the demo data as Parquet files in Hive date folders
// under dir, for splits of files: the training rows (ClicksFolder) of
// the configured days and two daily user feature groups (SignalsFolder,
// NoiseFolder) from the day before the first, the same rows and values
// Write puts into ml.training, features.user_signals and
// features.noise_daily. The feature files keep no date column either.
func WriteFiles(dir string, cfg Config) (FilesResult, error) {
	g, err := NewGenerator(cfg)
	if err != nil {
		return FilesResult{}, err
	}
	cfg = g.Config()
	res := FilesResult{Dir: dir, Start: cfg.Start, End: cfg.Start + backfill.Day(cfg.Days) - 1}
	mem := memory.DefaultAllocator
	signals, noise := userFloatsArrow(SignalFeatureNames), userFloatsArrow(NoiseFeatureNames)
	for !g.Done() {
		day := g.Next()
		folder := "date=" + day.Day.String()
		if day.Impressions != nil {
			recs := trainingRecords(mem, clicksSchema, day)
			n, err := writeParquet(filepath.Join(dir, ClicksFolder, folder, "part-0.parquet"), recs, "date")
			if err != nil {
				return res, err
			}
			res.TrainingRows += n
			res.Files++
		}
		for _, f := range []struct {
			folder string
			rec    arrow.RecordBatch
		}{
			{SignalsFolder, signalRecord(mem, signals, day, g)},
			{NoiseFolder, noiseRecord(mem, noise, day, g)},
		} {
			n, err := writeParquet(filepath.Join(dir, f.folder, folder, "part-0.parquet"), []arrow.RecordBatch{f.rec}, "date")
			if err != nil {
				return res, err
			}
			res.FeatureRows += n
			res.Files++
		}
	}
	return res, nil
}

// writeParquet writes recs, without column drop, to one file (and
// releases them), as zstd Parquet with statistics.
func writeParquet(path string, recs []arrow.RecordBatch, drop string) (int64, error) {
	defer func() {
		for _, r := range recs {
			r.Release()
		}
	}()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return 0, err
	}
	f, err := os.Create(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var w *pqarrow.FileWriter
	var rows int64
	props := parquet.NewWriterProperties(parquet.WithStats(true), parquet.WithCompression(compress.Codecs.Zstd))
	for _, rec := range recs {
		if drop != "" {
			if idx := rec.Schema().FieldIndices(drop); len(idx) > 0 {
				fields := slices.Delete(slices.Clone(rec.Schema().Fields()), idx[0], idx[0]+1)
				cols := slices.Delete(slices.Clone(rec.Columns()), idx[0], idx[0]+1)
				r := array.NewRecordBatch(arrow.NewSchema(fields, nil), cols, rec.NumRows())
				defer r.Release()
				rec = r
			}
		}
		if w == nil {
			if w, err = pqarrow.NewFileWriter(rec.Schema(), f, props, pqarrow.DefaultWriterProps()); err != nil {
				return 0, fmt.Errorf("write %s: %w", path, err)
			}
		}
		if err := w.WriteBuffered(rec); err != nil {
			return 0, fmt.Errorf("write %s: %w", path, err)
		}
		rows += rec.NumRows()
	}
	if w == nil {
		return 0, nil
	}
	if err := w.Close(); err != nil {
		return 0, fmt.Errorf("write %s: %w", path, err)
	}
	return rows, nil
}
