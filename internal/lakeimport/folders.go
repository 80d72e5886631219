package lakeimport

import (
	"fmt"
	"slices"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/retrain-ml/retrain/internal/hivepath"
)

// DefaultDateColumn is the folder key that reads as a DATE column
// (date=2026-11-21/) unless Options.DateColumn names another.
const DefaultDateColumn = "date"

// folderColumns are the columns the files' Hive-style key=value folders
// add (date=2026-11-21/region=eu/part-0.parquet: date and region), in
// path order: the date column's key as a DATE, any other as a string. A
// key the files hold as a column of their own adds nothing: the file's
// column wins, as when split reads them. Every file must sit under the
// same keys as the first one, and a date folder must hold a date; either
// error names the file or the folder, before anything is written.
func folderColumns(files []string, schema *arrow.Schema, dateCol string) ([]arrow.Field, error) {
	if len(files) == 0 {
		return nil, nil
	}
	keys := func(name string) []string {
		var ks []string
		for _, p := range hivepath.Parts(name) {
			ks = append(ks, p.Key)
		}
		return ks
	}
	first := keys(files[0])
	for _, name := range files {
		ks := keys(name)
		if !slices.Equal(ks, first) {
			return nil, fmt.Errorf("%w: %s sits under the folder keys %v, %s under %v: every file needs the same key=value folders; nothing was imported",
				ErrBadInput, name, ks, files[0], first)
		}
		if schema.HasField(dateCol) {
			continue
		}
		if v, ok := hivepath.Value(hivepath.Parts(name), dateCol); ok {
			if _, err := hivepath.ParseDate(v); err != nil {
				return nil, fmt.Errorf("%w: folder %s=%s/ of %s: the date column's folder value must be YYYY-MM-DD; nothing was imported", ErrBadInput, dateCol, v, name)
			}
		}
	}
	var fields []arrow.Field
	for _, k := range first {
		if !schema.HasField(k) {
			fields = append(fields, hivepath.Field(k, dateCol))
		}
	}
	return fields, nil
}
