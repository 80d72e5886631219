package features

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/apache/iceberg-go/table"

	"github.com/retrain-ml/retrain/internal/backfill"
	"github.com/retrain-ml/retrain/internal/colstats"
	"github.com/retrain-ml/retrain/internal/dataset"
	"github.com/retrain-ml/retrain/internal/lake"
)

// StatsSpec asks for a profile of feature columns of a table, optionally
// with thresholds that fail the step.
type StatsSpec struct {
	Table      string   `json:"table"`
	Columns    []string `json:"columns,omitempty"` // default: the staged features, or every non-key column
	StartDate  string   `json:"start_date,omitempty"`
	EndDate    string   `json:"end_date,omitempty"`
	DateColumn string   `json:"date_column,omitempty"` // default "date"
	// SnapshotID, when set, profiles only the data files that snapshot
	// added: what the stage node that committed it wrote, not partitions
	// earlier runs left in the staging table.
	SnapshotID int64 `json:"-"`
	colstats.Thresholds
}

// StatsResult points at the report; the report itself stays in the lake.
type StatsResult struct {
	ReportURI string   `json:"report_uri"`
	HTMLURI   string   `json:"html_uri"`
	Rows      int64    `json:"rows"`
	Columns   []string `json:"columns"`
	Snapshot  int64    `json:"snapshot_id,string"`
	// Scope says which rows were profiled, in words; Dates are the dates
	// they hold and Files how many data files were read.
	Scope string   `json:"scope"`
	Dates []string `json:"dates"`
	Files int      `json:"files"`
}

// Stats profiles feature columns of a table and writes the report, as JSON
// and as an HTML page, next to the table (under its location, stats/). If
// a figure is outside a threshold it returns a CheckFailedError naming the
// column and the figure, after writing the report so it can be looked at.
func Stats(ctx context.Context, cat *lake.Catalog, spec StatsSpec, log *slog.Logger) (StatsResult, error) {
	if log == nil {
		log = slog.Default()
	}
	if spec.DateColumn == "" {
		spec.DateColumn = "date"
	}
	var res StatsResult
	tbl, err := loadInput(ctx, cat, "table", spec.Table)
	if err != nil {
		return res, err
	}
	cols := spec.Columns
	if len(cols) == 0 {
		if cols, err = defaultFeatureColumns(tbl); err != nil {
			return res, err
		}
	}
	for _, c := range cols {
		if _, ok := tbl.Schema().FindFieldByName(c); !ok {
			return res, badInput("column %s is not in table %s", c, spec.Table)
		}
	}
	var opts []table.ScanOption
	filter := ""
	if spec.StartDate != "" || spec.EndDate != "" {
		rng, err := backfill.ParseDateRange(spec.StartDate, spec.EndDate)
		if err != nil {
			return res, badInput("%v", err)
		}
		opts = append(opts, table.WithRowFilter(lake.DateRange(spec.DateColumn, int32(rng.Start), int32(rng.End))))
		filter = fmt.Sprintf("%s in %s", spec.DateColumn, rng)
	}
	if spec.MaxNullRate != nil && (*spec.MaxNullRate < 0 || *spec.MaxNullRate > 1) {
		return res, badInput("max_null_rate %v is not between 0 and 1", *spec.MaxNullRate)
	}
	rep := colstats.Report{Table: spec.Table, Generated: time.Now().UTC()}
	accs := map[string]*colstats.Accumulator{}
	snap := tbl.CurrentSnapshot()
	if spec.SnapshotID != 0 {
		if snap = tbl.Metadata().SnapshotByID(spec.SnapshotID); snap == nil {
			return res, badInput("table %s has no snapshot %d", spec.Table, spec.SnapshotID)
		}
		opts = append(opts, table.WithSnapshotID(spec.SnapshotID))
	}
	days := map[int32]bool{}
	if snap != nil {
		rep.Snapshot = snap.SnapshotID
		_, hasDate := tbl.Schema().FindFieldByName(spec.DateColumn)
		selected := cols
		if hasDate && !slices.Contains(cols, spec.DateColumn) {
			selected = append(slices.Clone(cols), spec.DateColumn)
		}
		scan := lake.Scan(ctx, tbl, append(opts, table.WithSelectedFields(selected...))...)
		tasks, err := scan.PlanFiles(ctx)
		if err == nil && spec.SnapshotID != 0 {
			tasks, err = lake.AddedBy(ctx, tbl, spec.SnapshotID, tasks)
		}
		if err != nil {
			return res, fmt.Errorf("plan %s: %w", spec.Table, err)
		}
		res.Files = len(tasks)
		_, recs, err := scan.ReadTasks(ctx, tasks)
		if err != nil {
			return res, fmt.Errorf("scan %s: %w", spec.Table, err)
		}
		for rec, err := range recs {
			if err != nil {
				return res, fmt.Errorf("scan %s: %w", spec.Table, err)
			}
			for _, c := range cols {
				arr, err := column(rec, c)
				if err != nil {
					rec.Release()
					return res, err
				}
				acc, ok := accs[c]
				if !ok {
					acc = colstats.NewAccumulator(c, arr.DataType())
					accs[c] = acc
				}
				if err := acc.Add(arr); err != nil {
					rec.Release()
					return res, err
				}
			}
			if hasDate {
				ds, err := dataset.Dates(rec, spec.DateColumn)
				if err != nil {
					rec.Release()
					return res, err
				}
				for _, d := range ds {
					days[d] = true
				}
			}
			rep.Rows += rec.NumRows()
			rec.Release()
		}
	}
	for _, d := range slices.Sorted(maps.Keys(days)) {
		res.Dates = append(res.Dates, backfill.Day(d).String())
	}
	res.Scope = statsScope(spec, rep.Snapshot, filter, res.Dates)
	rep.Filter = res.Scope
	for _, c := range cols {
		if acc, ok := accs[c]; ok {
			rep.Columns = append(rep.Columns, acc.Result())
		} else {
			rep.Columns = append(rep.Columns, colstats.Column{Name: c})
		}
	}
	jsonBytes, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return res, err
	}
	html, err := rep.HTML()
	if err != nil {
		return res, err
	}
	base := fmt.Sprintf("%s/stats/%d-%d", strings.TrimRight(tbl.Location(), "/"), rep.Snapshot, rep.Generated.UnixNano())
	res.ReportURI, res.HTMLURI, res.Rows, res.Columns, res.Snapshot = base+".json", base+".html", rep.Rows, cols, rep.Snapshot
	if err := lake.WriteObject(ctx, tbl, res.ReportURI, jsonBytes); err != nil {
		return res, err
	}
	if err := lake.WriteObject(ctx, tbl, res.HTMLURI, html); err != nil {
		return res, err
	}
	log.Info("stats: report written", "table", spec.Table, "scope", res.Scope, "rows", rep.Rows, "html", res.HTMLURI)
	if v := rep.Violations(spec.Thresholds); len(v) > 0 {
		return res, &CheckFailedError{Err: fmt.Errorf("feature check failed on %s, %s: %s (report %s)", spec.Table, res.Scope, strings.Join(v, "; "), res.HTMLURI)}
	}
	return res, nil
}

// statsScope says in words which rows a profile covers.
func statsScope(spec StatsSpec, snap int64, filter string, dates []string) string {
	var b strings.Builder
	if spec.SnapshotID != 0 {
		fmt.Fprintf(&b, "files added by snapshot %d", snap)
	} else {
		fmt.Fprintf(&b, "the whole table at snapshot %d", snap)
	}
	if filter != "" {
		fmt.Fprintf(&b, ", %s", filter)
	}
	switch len(dates) {
	case 0:
		b.WriteString(" (no rows)")
	case 1:
		fmt.Fprintf(&b, " (date %s)", dates[0])
	default:
		fmt.Fprintf(&b, " (%d dates, %s..%s)", len(dates), dates[0], dates[len(dates)-1])
	}
	return b.String()
}

// defaultFeatureColumns are the staged features of a staging table, or
// else every column that is neither a key nor a partition source.
func defaultFeatureColumns(tbl *table.Table) ([]string, error) {
	if staged := splitList(tbl.Properties()[PropStagingFeature]); len(staged) > 0 {
		return staged, nil
	}
	_, fields, err := specOf(tbl)
	if err != nil {
		return nil, err
	}
	var skip []string
	for _, f := range fields {
		skip = append(skip, f.Source)
	}
	for _, id := range tbl.Schema().IdentifierFieldIDs {
		if n, ok := tbl.Schema().FindColumnName(id); ok {
			skip = append(skip, n)
		}
	}
	var out []string
	for _, f := range tbl.Schema().Fields() {
		if !slices.Contains(skip, f.Name) {
			out = append(out, f.Name)
		}
	}
	if len(out) == 0 {
		return nil, badInput("table %s has no feature columns to profile", lake.Name(tbl.Identifier()))
	}
	return out, nil
}
