package report

import (
	"fmt"
	"html"
	"html/template"
	"math"
	"strings"

	"github.com/retrain-ml/retrain/internal/trainer"
)

// A plotted model: its name in the legend, its colour and its figures.
// The baseline is dashed, with hollow markers, and drawn after the
// candidate, so where the two coincide both stay visible.
type plotSeries struct {
	Name   string
	Color  string
	Dashed bool
	ROC    []trainer.ROCPoint
	Bins   []trainer.CalibrationBin
	AUC    string // for the ROC legend
}

// Colours of the candidate and the baseline in every plot.
const (
	candidateColor = "#1f6fb5"
	baselineColor  = "#d9731a"
)

// The plots' frame: a square plot area with room for ticks, axis labels
// and a legend of up to three lines below it (outside the plot, where no
// curve can hide it); two fit side by side in a 1280 px window.
const (
	plotSide    = 300
	plotLeft    = 56
	plotTop     = 12
	plotLegend  = plotTop + plotSide + 44 // top of the legend
	legendLineH = 16
	plotWidth   = plotLeft + plotSide + 16
	plotHeight  = plotLegend + 3*legendLineH + 4
)

// frame draws the axes of a unit square scaled to [0, top] on both axes,
// the diagonal, ticks and axis labels, and returns the point mapping.
func frame(b *strings.Builder, top float64, xLabel, yLabel string) func(x, y float64) (float64, float64) {
	at := func(x, y float64) (float64, float64) {
		return plotLeft + plotSide*x/top, plotTop + plotSide*(1-y/top)
	}
	fmt.Fprintf(b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="11">`, plotWidth, plotHeight)
	fmt.Fprintf(b, `<rect x="%d" y="%d" width="%d" height="%d" fill="#fcfcfc" stroke="#999"/>`, plotLeft, plotTop, plotSide, plotSide)
	for i := 0; i <= 4; i++ {
		v := top * float64(i) / 4
		x, y := at(v, v)
		if i > 0 && i < 4 {
			fmt.Fprintf(b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#eee"/><line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#eee"/>`,
				x, plotTop, x, plotTop+plotSide, plotLeft, y, plotLeft+plotSide, y)
		}
		fmt.Fprintf(b, `<text x="%.1f" y="%d" text-anchor="middle" fill="#444">%s</text>`, x, plotTop+plotSide+14, tick(v))
		fmt.Fprintf(b, `<text x="%d" y="%.1f" text-anchor="end" fill="#444">%s</text>`, plotLeft-4, y+4, tick(v))
	}
	x0, y0 := at(0, 0)
	x1, y1 := at(top, top)
	fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#888" stroke-dasharray="4 3"/>`, x0, y0, x1, y1)
	fmt.Fprintf(b, `<text x="%d" y="%d" text-anchor="middle">%s</text>`, plotLeft+plotSide/2, plotTop+plotSide+32, html.EscapeString(xLabel))
	fmt.Fprintf(b, `<text transform="translate(14 %d) rotate(-90)" text-anchor="middle">%s</text>`, plotTop+plotSide/2, html.EscapeString(yLabel))
	return at
}

func tick(v float64) string {
	s := fmt.Sprintf("%.3f", v)
	s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	return s
}

// A legend entry: a line of the series' style, then its text.
type legendEntry struct {
	color, dash, text string
}

// dashOf is a series' stroke-dasharray attribute.
func dashOf(s plotSeries) string {
	if s.Dashed {
		return ` stroke-dasharray="7 4"`
	}
	return ""
}

// chance is the legend entry of the grey diagonal.
func chance(text string) legendEntry {
	return legendEntry{color: "#888", dash: ` stroke-dasharray="4 3"`, text: text}
}

// legend draws its entries below the plot, one a line.
func legend(b *strings.Builder, entries []legendEntry) {
	x := plotLeft - 6
	for i, e := range entries {
		ly := plotLegend + legendLineH*i + legendLineH/2
		fmt.Fprintf(b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2.5"%s/>`, x+6, ly, x+32, ly, e.color, e.dash)
		fmt.Fprintf(b, `<text x="%d" y="%d">%s</text>`, x+38, ly+4, html.EscapeString(truncate(e.text, 48)))
	}
}

// rocSVG plots the ROC curves of the models with the diagonal of a model
// that ranks at random.
func rocSVG(series []plotSeries) template.HTML {
	var b strings.Builder
	at := frame(&b, 1, "false positive rate", "true positive rate")
	var entries []legendEntry
	for _, s := range series {
		if len(s.ROC) == 0 {
			continue
		}
		pts := make([]string, len(s.ROC))
		for i, p := range s.ROC {
			x, y := at(clamp01(p.FPR), clamp01(p.TPR))
			pts[i] = fmt.Sprintf("%.1f,%.1f", x, y)
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="2"%s points="%s"><title>%s</title></polyline>`,
			s.Color, dashOf(s), strings.Join(pts, " "), html.EscapeString(s.Name+" ROC, AUC "+s.AUC))
		entries = append(entries, legendEntry{s.Color, dashOf(s), s.Name + " (AUC " + s.AUC + ")"})
	}
	entries = append(entries, chance("random (AUC 0.5)"))
	legend(&b, entries)
	b.WriteString(`</svg>`)
	return template.HTML(b.String()) // every text above is escaped
}

// calibrationSVG draws the reliability diagram: each bin's mean label
// against its mean prediction, a marker's area proportional to the bin's
// rows. The axes end at the largest bin edge or mean label, rounded up to
// a tenth, so click-through rates of a few percent are not squeezed into
// a corner.
func calibrationSVG(series []plotSeries) template.HTML {
	top, most := 0.1, 0
	for _, s := range series {
		for _, bin := range s.Bins {
			top = math.Max(top, math.Max(bin.Hi, bin.MeanLabel))
			most = max(most, bin.Count)
		}
	}
	top = math.Min(math.Ceil(top*10-1e-9)/10, 1)
	var b strings.Builder
	at := frame(&b, top, "mean prediction", "observed click rate (mean label)")
	var entries []legendEntry
	for _, s := range series {
		if len(s.Bins) == 0 {
			continue
		}
		pts := make([]string, len(s.Bins))
		var marks strings.Builder
		for i, bin := range s.Bins {
			x, y := at(math.Min(clamp01(bin.MeanPrediction), top), math.Min(clamp01(bin.MeanLabel), top))
			pts[i] = fmt.Sprintf("%.1f,%.1f", x, y)
			r := 2.5 + 5*math.Sqrt(float64(bin.Count)/float64(max(most, 1)))
			paint := fmt.Sprintf(`fill="%s" fill-opacity="0.75"`, s.Color)
			if s.Dashed {
				paint = fmt.Sprintf(`fill="none" stroke="%s" stroke-width="2"`, s.Color)
			}
			fmt.Fprintf(&marks, `<circle cx="%.1f" cy="%.1f" r="%.1f" %s><title>%s</title></circle>`, x, y, r, paint,
				html.EscapeString(fmt.Sprintf("%s, predictions %s–%s: %d rows, mean prediction %.4f, mean label %.4f",
					s.Name, tick(bin.Lo), tick(bin.Hi), bin.Count, bin.MeanPrediction, bin.MeanLabel)))
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="1.5"%s points="%s"/>%s`, s.Color, dashOf(s), strings.Join(pts, " "), marks.String())
		entries = append(entries, legendEntry{s.Color, dashOf(s), s.Name})
	}
	entries = append(entries, chance("perfectly calibrated"))
	legend(&b, entries)
	b.WriteString(`</svg>`)
	return template.HTML(b.String()) // every text above is escaped
}

func clamp01(f float64) float64 {
	if !(f >= 0) {
		return 0
	}
	return math.Min(f, 1)
}
