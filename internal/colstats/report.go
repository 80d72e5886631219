package colstats

import (
	"bytes"
	"fmt"
	"html/template"
	"math"
	"strings"
	"time"
)

// Report is the profile of some columns of one table version.
type Report struct {
	Table     string    `json:"table"`
	Snapshot  int64     `json:"snapshot_id,string"`
	Filter    string    `json:"filter,omitempty"`
	Rows      int64     `json:"rows"`
	Generated time.Time `json:"generated"`
	Columns   []Column  `json:"columns"`
}

// Thresholds are optional limits a report must stay within. Nil means no
// limit.
type Thresholds struct {
	MaxNullRate *float64 `json:"max_null_rate,omitempty"`
	MinDistinct *int64   `json:"min_distinct,omitempty"`
	MinStd      *float64 `json:"min_std,omitempty"`
}

// Violations lists every column figure outside the thresholds, each naming
// the column, the figure and the limit.
func (r Report) Violations(t Thresholds) []string {
	var out []string
	for _, c := range r.Columns {
		if t.MaxNullRate != nil && c.NullRate > *t.MaxNullRate {
			out = append(out, fmt.Sprintf("column %s: null rate %.4f exceeds max_null_rate %.4f (%d of %d rows null)", c.Name, c.NullRate, *t.MaxNullRate, c.Nulls, c.Rows))
		}
		if t.MinDistinct != nil && c.Distinct < *t.MinDistinct {
			out = append(out, fmt.Sprintf("column %s: about %d distinct values, below min_distinct %d", c.Name, c.Distinct, *t.MinDistinct))
		}
		if t.MinStd != nil && c.Std != nil && *c.Std < *t.MinStd {
			out = append(out, fmt.Sprintf("column %s: standard deviation %.6g below min_std %.6g", c.Name, *c.Std, *t.MinStd))
		}
	}
	return out
}

// HTML renders the report as one self-contained page: a table of figures
// and an inline SVG histogram per column.
func (r Report) HTML() ([]byte, error) {
	var b bytes.Buffer
	if err := page.Execute(&b, r); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

func fmtNum(p *float64) string {
	if p == nil {
		return "–"
	}
	v := *p
	if v == math.Trunc(v) && math.Abs(v) < 1e15 {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.4g", v)
}

// svg draws a histogram as bars scaled to the tallest bin.
func svg(c Column) template.HTML {
	if len(c.Histogram) == 0 {
		return template.HTML(`<span class="muted">no numeric values</span>`)
	}
	const w, h = 320, 80
	var top int64 = 1
	for _, b := range c.Histogram {
		top = max(top, b.Count)
	}
	bw := float64(w) / float64(len(c.Histogram))
	var s strings.Builder
	fmt.Fprintf(&s, `<svg width="%d" height="%d" viewBox="0 0 %d %d" role="img" aria-label="histogram of %s">`, w, h+14, w, h+14, template.HTMLEscapeString(c.Name))
	for i, b := range c.Histogram {
		bh := float64(b.Count) / float64(top) * h
		fmt.Fprintf(&s, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="#4a7bd0"><title>[%.4g, %.4g): ~%d</title></rect>`,
			float64(i)*bw+0.5, h-bh, bw-1, bh, b.Lo, b.Hi, b.Count)
	}
	lo, hi := c.Histogram[0].Lo, c.Histogram[len(c.Histogram)-1].Hi
	fmt.Fprintf(&s, `<text x="0" y="%d" font-size="10">%.4g</text><text x="%d" y="%d" font-size="10" text-anchor="end">%.4g</text></svg>`, h+12, lo, w, h+12, hi)
	return template.HTML(s.String())
}

var page = template.Must(template.New("report").Funcs(template.FuncMap{
	"num": fmtNum,
	"svg": svg,
	"pct": func(f float64) string { return fmt.Sprintf("%.2f%%", 100*f) },
}).Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Feature statistics: {{.Table}}</title>
<style>
body{font-family:system-ui,sans-serif;margin:2em;color:#222}
table{border-collapse:collapse;margin-bottom:2em}
td,th{border-bottom:1px solid #ddd;padding:4px 10px;text-align:right}
th:first-child,td:first-child{text-align:left}
.muted{color:#888}
.col{display:inline-block;margin:0 2em 2em 0;vertical-align:top}
</style></head><body>
<h1>Feature statistics: {{.Table}}</h1>
<p class="muted">snapshot {{.Snapshot}}{{if .Filter}} · {{.Filter}}{{end}} · {{.Rows}} rows · generated {{.Generated.Format "2006-01-02 15:04:05 MST"}}</p>
<table>
<tr><th>column</th><th>type</th><th>count</th><th>null rate</th><th>mean</th><th>std</th><th>min</th><th>p50</th><th>p99</th><th>max</th><th>~distinct</th></tr>
{{range .Columns}}<tr><td>{{.Name}}{{if .Of}} <span class="muted">({{.Of}})</span>{{end}}</td><td>{{.Type}}</td><td>{{.Count}}</td><td>{{pct .NullRate}}</td><td>{{num .Mean}}</td><td>{{num .Std}}</td><td>{{num .Min}}</td><td>{{num .P50}}</td><td>{{num .P99}}</td><td>{{num .Max}}</td><td>{{.Distinct}}</td></tr>
{{end}}</table>
{{range .Columns}}<div class="col"><h3>{{.Name}}</h3>{{svg .}}</div>
{{end}}</body></html>
`))
