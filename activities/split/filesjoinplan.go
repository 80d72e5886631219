package split

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/retrain-ml/retrain/internal/backfill"
	"github.com/retrain-ml/retrain/internal/s3store"
)

// JoinKeys are a join's key columns: a list of names both sides have, or
// a map of training column to the other side's where names differ.
type JoinKeys map[string]string

// UnmarshalJSON reads a list of names or a map.
func (k *JoinKeys) UnmarshalJSON(b []byte) error {
	var list []string
	if err := json.Unmarshal(b, &list); err == nil {
		m := make(JoinKeys, len(list))
		for _, n := range list {
			m[n] = n
		}
		*k = m
		return nil
	}
	var m map[string]string
	if err := json.Unmarshal(b, &m); err != nil {
		return fmt.Errorf("keys: want a list of column names or a map of training column to the joined side's column")
	}
	*k = m
	return nil
}

// fileSideSource opens a join entry's files: all of them, pruned by folder
// day at each read. dateCol is the column its days are by.
func fileSideSource(ctx context.Context, store *s3store.Store, files []sourceFile, patterns []string, dateCol string, loc *time.Location) (*filesSource, error) {
	src := &filesSource{store: store, dateCol: dateCol, loc: loc, files: files, side: true, read: &FilesRead{Patterns: patterns, Matched: len(files)}}
	for _, f := range files {
		if _, err := src.folderInWindow(f.Name); err != nil {
			return nil, err
		}
	}
	pf, closer, err := src.open(ctx, files[0])
	if err != nil {
		return nil, err
	}
	defer closer.Close()
	sch, err := fileSchema(pf)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", errSplitInput, files[0].Name, err)
	}
	src.raw = src.withFolders(sch, files[0].Name)
	// Without its time column, want stays raw: planSide says what is
	// missing.
	if src.want, err = src.normalSchema(src.raw, files[0].Name); err != nil {
		src.want = src.raw
	}
	*src.read = FilesRead{Patterns: patterns, Matched: len(files)}
	return src, nil
}

// planFilesJoin checks a split of files' join entries against the
// training files (train: their schema, the date column as in the files)
// and opens each side. Everything wrong that the files' schemas show
// fails here, before a row is read, naming the file.
func (s *Splits) planFilesJoin(ctx context.Context, w With, train *filesSource) (*filesJoin, error) {
	if len(w.Join) == 0 {
		return nil, nil
	}
	j := &filesJoin{window: train.window}
	taken := map[string]bool{}
	for _, f := range train.raw.Fields() {
		taken[f.Name] = true
	}
	for i, e := range w.Join {
		side, err := s.planSide(ctx, i, e, w, train)
		if err != nil {
			return nil, err
		}
		for _, f := range side.fields {
			if taken[f.Name] {
				return nil, fmt.Errorf("%w: join[%d] %s: column %q is in the training files already (or joined twice): give a prefix", errSplitInput, i, side.name, f.Name)
			}
			taken[f.Name] = true
		}
		j.sides = append(j.sides, side)
	}
	return j, nil
}

func (s *Splits) planSide(ctx context.Context, i int, e JoinEntry, w With, train *filesSource) (*joinSide, error) {
	if e.Table != "" {
		return nil, fmt.Errorf("%w: join[%d]: a split of files joins files (files:), not table %s", errSplitInput, i, e.Table)
	}
	patterns, err := filePatterns(e.Files)
	if err == nil && len(patterns) == 0 {
		err = fmt.Errorf("give the feature files (files:)")
	}
	if err != nil {
		return nil, fmt.Errorf("%w: join[%d]: %v", errSplitInput, i, err)
	}
	side := &joinSide{i: i, name: patterns[0], lookback: e.LookbackDays, loc: train.loc}
	if len(patterns) > 1 {
		side.name = fmt.Sprintf("%s (+%d patterns)", patterns[0], len(patterns)-1)
	}
	if side.lookback <= 0 {
		side.lookback = 7
	}
	if side.align, err = backfill.ParseAlignment(e.Alignment); err != nil {
		return nil, fmt.Errorf("%w: join[%d] %s: alignment: %v", errSplitInput, i, side.name, err)
	}
	if len(e.Keys) == 0 {
		return nil, fmt.Errorf("%w: join[%d] %s: give keys, the entity columns both sides have (e.g. [user_id])", errSplitInput, i, side.name)
	}
	side.trainKey = slices.Sorted(maps.Keys(e.Keys))
	for _, k := range side.trainKey {
		side.featKey = append(side.featKey, e.Keys[k])
	}
	side.timeCol = cmpOr(e.DateColumn, w.DateColumn)
	if !side.align.UsesDate() {
		side.timeCol = cmpOr(e.TimeColumn, "ts")
		side.eventCol = cmpOr(e.EventTimeColumn, "event_ts")
	}
	files, err := expandFiles(ctx, s.Store, s.Env, patterns)
	if err != nil {
		return nil, err
	}
	if side.src, err = fileSideSource(ctx, s.Store, files, patterns, side.timeCol, train.loc); err != nil {
		return nil, err
	}
	feat, featFile := side.src.raw, files[0].Name
	trainFile := train.files[0].Name
	for n, k := range side.trainKey {
		tf, ok := field(train.raw, k)
		if !ok {
			return nil, fmt.Errorf("%w: join[%d] %s: key %q is not a column of the training files (%s)", errSplitInput, i, side.name, k, trainFile)
		}
		ff, ok := field(feat, side.featKey[n])
		if !ok {
			return nil, fmt.Errorf("%w: join[%d]: key %q is not a column of the joined files (%s)", errSplitInput, i, side.featKey[n], featFile)
		}
		if !sameKeyType(tf.Type, ff.Type) {
			return nil, fmt.Errorf("%w: join[%d]: key %q is %s in the training files (%s) but %q is %s in the joined files (%s): key types must match",
				errSplitInput, i, k, tf.Type, trainFile, side.featKey[n], ff.Type, featFile)
		}
	}
	tc, ok := field(feat, side.timeCol)
	switch {
	case !ok && side.align.UsesDate():
		return nil, fmt.Errorf("%w: join[%d]: the joined files (%s) have no date column %q (date_column) and no %s=YYYY-MM-DD folder: %s needs the day each feature row is for",
			errSplitInput, i, featFile, side.timeCol, side.timeCol, side.align)
	case !ok:
		return nil, fmt.Errorf("%w: join[%d]: the joined files (%s) have no publication time column %q (time_column): as_of needs when each feature row was published",
			errSplitInput, i, featFile, side.timeCol)
	case side.align.UsesDate():
		if err := dateType(tc.Type); err != nil {
			return nil, fmt.Errorf("%w: join[%d]: %s: date column %q is %s: %v", errSplitInput, i, featFile, side.timeCol, tc.Type, err)
		}
	default:
		pt, ok := tc.Type.(*arrow.TimestampType)
		if !ok {
			return nil, fmt.Errorf("%w: join[%d]: %s: publication time column %q is %s, want a TIMESTAMP", errSplitInput, i, featFile, side.timeCol, tc.Type)
		}
		ec, ok := field(train.raw, side.eventCol)
		if !ok {
			return nil, fmt.Errorf("%w: join[%d] %s: the training files (%s) have no event time column %q (event_time_column): as_of joins the feature row published last before each event",
				errSplitInput, i, side.name, trainFile, side.eventCol)
		}
		et, ok := ec.Type.(*arrow.TimestampType)
		if !ok {
			return nil, fmt.Errorf("%w: join[%d]: %s: event time column %q is %s, want a TIMESTAMP", errSplitInput, i, trainFile, side.eventCol, ec.Type)
		}
		if (et.TimeZone == "") != (pt.TimeZone == "") {
			return nil, fmt.Errorf("%w: join[%d]: event time %q (%s, in %s) and publication time %q (%s, in %s) must both be instants (with a zone) or both wall-clock times",
				errSplitInput, i, side.eventCol, et, trainFile, side.timeCol, pt, featFile)
		}
		side.loc = zoneOf(pt, train.loc)
	}
	if err := side.pickColumns(e, feat, featFile, cmpOr(e.DateColumn, w.DateColumn), cmpOr(e.TimeColumn, "ts")); err != nil {
		return nil, err
	}
	return side, nil
}

// pickColumns sets the side's joined columns: the entry's columns, or
// all but its keys, date and publication time columns (as stage_features
// takes all but keys and time columns).
func (s *joinSide) pickColumns(e JoinEntry, feat *arrow.Schema, featFile, dateCol, timeCol string) error {
	s.sources = e.Columns
	if len(s.sources) == 0 {
		for _, f := range feat.Fields() {
			if !slices.Contains(s.featKey, f.Name) && !slices.Contains([]string{dateCol, timeCol, "date"}, f.Name) {
				s.sources = append(s.sources, f.Name)
			}
		}
	}
	if len(s.sources) == 0 {
		return fmt.Errorf("%w: join[%d]: the joined files (%s) have no column besides their keys and time", errSplitInput, s.i, featFile)
	}
	for _, c := range s.sources {
		f, ok := field(feat, c)
		if !ok {
			return fmt.Errorf("%w: join[%d]: column %q is not in the joined files (%s)", errSplitInput, s.i, c, featFile)
		}
		f.Name, f.Nullable = e.Prefix+c, true
		s.fields = append(s.fields, f)
	}
	return nil
}

func field(sch *arrow.Schema, name string) (arrow.Field, bool) {
	fs, ok := sch.FieldsByName(name)
	if !ok || len(fs) == 0 {
		return arrow.Field{}, false
	}
	return fs[0], true
}

// sameKeyType reports whether two key columns' values can match: the
// same type, or integers of any width (package backfill reads both as
// int64).
func sameKeyType(a, b arrow.DataType) bool {
	ints := func(t arrow.DataType) bool {
		switch t.ID() {
		case arrow.INT16, arrow.INT32, arrow.INT64:
			return true
		}
		return false
	}
	return arrow.TypeEqual(a, b) || ints(a) && ints(b)
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
