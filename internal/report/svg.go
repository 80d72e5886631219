package report

import (
	"fmt"
	"html"
	"html/template"
	"math"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/retrain-ml/retrain/activities/train"

	"github.com/retrain-ml/retrain/dags"
	"github.com/retrain-ml/retrain/runs"
)

var statusColor = map[runs.NodeStatus]string{
	runs.NodeSucceeded: "#c8ecc9",
	runs.NodeFailed:    "#f6c1c1",
	runs.NodeSkipped:   "#e4e4e4",
	runs.NodeCancelled: "#f3dfb3",
	runs.NodeRunning:   "#c6dcf5",
	runs.NodePending:   "#ffffff",
}

// dagMaxWidth is the widest the DAG is drawn: a deeper DAG wraps into
// bands, so that the page fits a 1280 px window.
const dagMaxWidth = 1200

// dagSVG draws the DAG left to right: a node's column is the length of the
// longest path of needs to it; nodes of a column are stacked in plan order.
// Columns that do not fit in dagMaxWidth wrap into another band below,
// edges into it running down through the gap between the bands. Boxes are
// as wide as their labels need, within limits; a longer label is cut
// short, the whole of it in the box's tooltip.
func dagSVG(nodes []runs.NodeState, edges dags.Edges) template.HTML {
	const bh, gx, gy, bandGap, pad, minW, maxW = 40, 36, 14, 34, 10, 110, 200
	level := map[string]int{}
	var depth func(id string, seen map[string]bool) int
	depth = func(id string, seen map[string]bool) int {
		if l, ok := level[id]; ok {
			return l
		}
		if seen[id] {
			return 0 // a cycle cannot pass validation; stay finite anyway
		}
		seen[id] = true
		l := 0
		for _, n := range edges.NeedsOf(id) {
			l = max(l, depth(n, seen)+1)
		}
		level[id] = l
		return l
	}
	bw := float64(minW)
	levels := 0
	for _, n := range nodes {
		levels = max(levels, depth(n.ID, map[string]bool{})+1)
		bw = max(bw, textWidth(n.ID, 12, true)+16, textWidth(subtitle(n), 11, false)+16)
	}
	bw = math.Min(bw, maxW)
	perBand := max(1, int((dagMaxWidth-2*pad+gx)/(bw+gx)))
	// The height of a band is that of its tallest column.
	height := map[int]int{}
	rows := map[int]int{}
	for _, n := range nodes {
		l := level[n.ID]
		rows[l]++
		height[l/perBand] = max(height[l/perBand], rows[l])
	}
	bandTop := make([]float64, levels/perBand+2)
	bandTop[0] = pad
	for k := 1; k < len(bandTop); k++ {
		bandTop[k] = bandTop[k-1] + float64(height[k-1])*(bh+gy) - gy + bandGap
	}
	type box struct {
		x, y float64
		band int
	}
	pos := map[string]box{}
	placed := map[int]int{}
	maxX, maxY := 0.0, 0.0
	for _, n := range nodes {
		l := level[n.ID]
		band := l / perBand
		p := box{x: pad + float64(l%perBand)*(bw+gx), y: bandTop[band] + float64(placed[l])*(bh+gy), band: band}
		placed[l]++
		pos[n.ID] = p
		maxX, maxY = math.Max(maxX, p.x+bw), math.Max(maxY, p.y+bh)
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" font-family="sans-serif" font-size="12">`, maxX+pad, maxY+pad)
	b.WriteString(`<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="6" markerHeight="6" orient="auto"><path d="M0,0 L10,5 L0,10 z" fill="#777"/></marker></defs>`)
	for _, n := range nodes {
		to := pos[n.ID]
		for _, need := range edges.NeedsOf(n.ID) {
			from, ok := pos[need]
			if !ok {
				continue
			}
			if from.band == to.band {
				fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#777" marker-end="url(#arrow)"/>`,
					from.x+bw, from.y+bh/2, to.x, to.y+bh/2)
				continue
			}
			// Down from the box, along the gap above the target's band,
			// down into the target.
			gapY := bandTop[to.band] - bandGap/2
			fmt.Fprintf(&b, `<polyline fill="none" points="%.1f,%.1f %.1f,%.1f %.1f,%.1f %.1f,%.1f" stroke="#777" marker-end="url(#arrow)"/>`,
				from.x+bw/2, from.y+bh, from.x+bw/2, gapY, to.x+bw/2, gapY, to.x+bw/2, to.y)
		}
	}
	for _, n := range nodes {
		p := pos[n.ID]
		color := statusColor[n.Status]
		if color == "" {
			color = "#fff"
		}
		fmt.Fprintf(&b, `<g><title>%s</title><rect x="%.1f" y="%.1f" width="%.1f" height="%d" rx="6" fill="%s" stroke="#555"/>`,
			html.EscapeString(n.ID+" ("+n.Type+"): "+string(n.Status)+" "+n.Error+n.Reason), p.x, p.y, bw, bh, color)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle" font-weight="bold">%s</text>`,
			p.x+bw/2, p.y+16, html.EscapeString(fitText(n.ID, bw-12, 12, true)))
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle" fill="#444" font-size="11">%s</text></g>`,
			p.x+bw/2, p.y+32, html.EscapeString(fitText(subtitle(n), bw-12, 11, false)))
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String()) // every text above is escaped
}

// subtitle is a DAG box's second line.
func subtitle(n runs.NodeState) string { return n.Type + " · " + string(n.Status) }

// textWidth estimates the width in pixels of s in a sans-serif font of
// the given size: the widths of Helvetica/Arial/DejaVu Sans glyphs, in
// classes, as fractions of the size, rounded up (a box a little too wide
// beats a label spilling out of it).
func textWidth(s string, size float64, bold bool) float64 {
	var em float64
	for _, r := range s {
		switch {
		case strings.ContainsRune("ijl.,:;'|!I", r):
			em += 0.32
		case strings.ContainsRune("ftr-() ", r):
			em += 0.42
		case strings.ContainsRune("mwMW@", r):
			em += 0.95
		case r >= 'A' && r <= 'Z', r == '_':
			em += 0.72
		case r < 0x80:
			em += 0.62
		default:
			em += 1 // wide scripts, symbols
		}
	}
	if bold {
		em *= 1.1
	}
	return em * size
}

// fitText cuts s to what fits in width pixels, ending it with "…".
func fitText(s string, width, size float64, bold bool) string {
	if textWidth(s, size, bold) <= width {
		return s
	}
	r := []rune(s)
	for len(r) > 0 && textWidth(string(r)+"…", size, bold) > width {
		r = r[:len(r)-1]
	}
	return string(r) + "…"
}

// truncate cuts s to n runes, ending it with "…".
func truncate(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return string([]rune(s)[:n-1]) + "…"
}

// timelineSVG draws one bar per node that ran, on the run's time axis.
func timelineSVG(res *runs.Result) template.HTML {
	const w, rowH, label = 700, 18, 130
	start := res.StartedAt
	end := start
	var ran []runs.NodeState
	for _, n := range append(slices.Clone(res.Nodes), res.Compensations...) {
		if n.StartedAt == nil || n.EndedAt == nil {
			continue
		}
		ran = append(ran, n)
		if n.EndedAt.After(end) {
			end = *n.EndedAt
		}
		if start.IsZero() || n.StartedAt.Before(start) {
			start = *n.StartedAt
		}
	}
	if len(ran) == 0 {
		return ""
	}
	span := max(end.Sub(start).Seconds(), 1e-3)
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="11">`, label+w+70, rowH*len(ran)+24)
	for i, n := range ran {
		x0 := label + int(float64(w)*n.StartedAt.Sub(start).Seconds()/span)
		x1 := label + int(float64(w)*n.EndedAt.Sub(start).Seconds()/span)
		y := 4 + i*rowH
		color := statusColor[n.Status]
		fmt.Fprintf(&b, `<text x="0" y="%d"><title>%s</title>%s</text><rect x="%d" y="%d" width="%d" height="%d" fill="%s" stroke="#555"/><text x="%d" y="%d" fill="#444">%s</text>`,
			y+12, html.EscapeString(n.ID), html.EscapeString(fitText(n.ID, label-6, 11, false)), x0, y, max(x1-x0, 2), rowH-4, color, max(x1, x0+2)+4, y+12,
			n.EndedAt.Sub(*n.StartedAt).Round(time.Millisecond))
	}
	fmt.Fprintf(&b, `<text x="%d" y="%d" fill="#444">0</text><text x="%d" y="%d" text-anchor="end" fill="#444">%.1fs</text>`,
		label, rowH*len(ran)+20, label+w, rowH*len(ran)+20, span)
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

// curveSVG plots loss against step.
func curveSVG(c []train.CurvePoint) template.HTML {
	if len(c) == 0 {
		return ""
	}
	const w, h, left, bottom = 640, 240, 60, 30
	minS, maxS := c[0].Step, c[len(c)-1].Step
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, p := range c {
		lo, hi = math.Min(lo, p.Loss), math.Max(hi, p.Loss)
	}
	if hi == lo {
		hi = lo + 1
	}
	if maxS == minS {
		maxS = minS + 1
	}
	var pts []string
	for _, p := range c {
		x := left + float64(w)*float64(p.Step-minS)/float64(maxS-minS)
		y := 10 + float64(h)*(1-(p.Loss-lo)/(hi-lo))
		pts = append(pts, fmt.Sprintf("%.1f,%.1f", x, y))
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="11">`, left+w+20, h+bottom+20)
	fmt.Fprintf(&b, `<line x1="%d" y1="10" x2="%d" y2="%d" stroke="#999"/><line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#999"/>`,
		left, left, h+10, left, h+10, left+w, h+10)
	fmt.Fprintf(&b, `<text x="%d" y="16" text-anchor="end">%.4f</text><text x="%d" y="%d" text-anchor="end">%.4f</text>`, left-4, hi, left-4, h+10, lo)
	fmt.Fprintf(&b, `<text x="%d" y="%d">step %d</text><text x="%d" y="%d" text-anchor="end">step %d</text>`, left, h+26, minS, left+w, h+26, maxS)
	fmt.Fprintf(&b, `<polyline fill="none" stroke="#1f6fb5" stroke-width="1.5" points="%s"/>`, strings.Join(pts, " "))
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}
