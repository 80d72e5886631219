package report

import (
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/retrain-ml/retrain/activities/evaluate"
	gatenode "github.com/retrain-ml/retrain/activities/gate"
	lakenode "github.com/retrain-ml/retrain/activities/lake"
	modelsnode "github.com/retrain-ml/retrain/activities/models"

	"github.com/retrain-ml/retrain/runs"
)

// deployView is the page's headline: what a deploy node did to its alias.
type deployView struct {
	Deployed bool
	Text     string // "Deployed ctr v3" or "Not deployed"
	Detail   string // "production: v2 → v3", or why not
	URI      string // the model version's folder
	Command  string // the command that describes the version
}

// deployments says, for each deploy node, what the run deployed or why it
// deployed nothing: the gate's verdict when a gate stopped it.
func deployments(res *runs.Result) []deployView {
	var out []deployView
	for _, n := range res.Nodes {
		if n.Type != modelsnode.DeployType.Name {
			continue
		}
		str := func(k string) string { s, _ := n.Outputs[k].(string); return s }
		model, alias, version, prev := str("model"), str("alias"), str("version"), str("previous_version")
		if n.Status == runs.NodeSucceeded && version != "" {
			d := deployView{Deployed: true, Text: "Deployed " + model + " " + version, URI: str("uri")}
			if prev == "" {
				prev = "none"
			}
			d.Detail = fmt.Sprintf("%s: %s → %s", alias, prev, version)
			if n.Outputs["moved"] == false {
				d.Detail = fmt.Sprintf("%s already named %s: nothing moved", alias, version)
			}
			if ref := str("ref"); ref != "" {
				d.Command = "retrain model show " + ref
			}
			for _, c := range res.Compensations {
				if c.Compensates == n.ID && c.Status == runs.NodeSucceeded {
					d.Deployed = false
					d.Text = "Deployed " + model + " " + version + ", then rolled back"
					d.Detail += fmt.Sprintf("; %s undid it when the run failed", c.ID)
				}
			}
			out = append(out, d)
			continue
		}
		d := deployView{Text: "Not deployed"}
		switch {
		case n.Status == runs.NodeFailed:
			d.Detail = n.ID + " failed: " + n.Error
		case n.Status == runs.NodePending || n.Status == runs.NodeRunning:
			d.Text, d.Detail = "Not deployed yet", n.ID+" is "+string(n.Status)
		default:
			d.Detail = n.ID + " " + string(n.Status)
			if n.Reason != "" {
				d.Detail += ": " + n.Reason
			}
		}
		// A gate that stopped the run says why better than the skipped
		// deploy; its verdict follows the banner.
		for _, g := range res.Nodes {
			if g.Type != gatenode.GateType.Name {
				continue
			}
			if g.Status == runs.NodeFailed || g.Status == runs.NodeSucceeded && g.Outputs["passed"] == false {
				d.Detail = gateName(g.ID) + " rejected the candidate"
			}
		}
		out = append(out, d)
	}
	return out
}

// gateName names a gate node in a sentence: "the gate" for the usual id.
func gateName(id string) string {
	if id == "gate" {
		return "the gate"
	}
	return "gate " + id
}

// linkView is one of the page's links; a link without Href shows Text.
type linkView struct {
	Label, Href, Text, Command string
}

// links are the run in the Temporal Web UI, the feature statistics pages
// and the deployed model versions.
func links(res *runs.Result, o Options, deploys []deployView) []linkView {
	var out []linkView
	run := linkView{Label: "Temporal run", Text: res.ID + " (no Web UI address given)"}
	if o.UIBase != "" {
		base := strings.TrimRight(o.UIBase, "/") + "/namespaces/" + url.PathEscape(o.Namespace) + "/workflows"
		if o.TemporalRunID != "" {
			run.Href = base + "/" + url.PathEscape(res.ID) + "/" + url.PathEscape(o.TemporalRunID) + "/history"
		} else {
			run.Href = base + "?query=" + url.QueryEscape(fmt.Sprintf("WorkflowId=%q", res.ID))
		}
		run.Text = res.ID
	}
	out = append(out, run)
	for _, n := range res.Nodes {
		uri, _ := n.Outputs["html_uri"].(string)
		if n.Type != lakenode.FeatureStatsType.Name || uri == "" {
			continue
		}
		l := linkView{Label: "Feature statistics " + n.ID, Text: uri}
		if href := o.StatsPages[n.ID]; href != "" {
			l.Href, l.Text = href, "page"
		}
		out = append(out, l)
	}
	for _, d := range deploys {
		if d.URI != "" {
			out = append(out, linkView{Label: "Model version", Text: d.URI, Command: d.Command})
		}
	}
	return out
}

// dataView is what a split node read: its windows, rows and null rates.
type dataView struct {
	Node, Window, TrainDates, EvalDates, TrainDatesAll, EvalDatesAll string
	TrainRows, EvalRows                                              int64
	Reused                                                           bool
	Features                                                         []coverageRow
}

type coverageRow struct {
	Feature, Kind, Train, Eval, Limit string
	TrainPct, EvalPct                 string // bar widths, as CSS percentages
	Over                              bool
}

func dataRows(id string, s *Split) dataView {
	v := dataView{Node: id, Window: s.Window.String(), TrainRows: s.TrainRows, EvalRows: s.EvalRows, Reused: s.Reused,
		TrainDates: dateList(s.TrainDates), EvalDates: dateList(s.EvalDates),
		TrainDatesAll: strings.Join(s.TrainDates, " "), EvalDatesAll: strings.Join(s.EvalDates, " ")}
	for _, f := range s.Coverage {
		row := coverageRow{Feature: f.Feature, Kind: f.Kind, Train: pct(f.TrainNullRate), Eval: pct(f.EvalNullRate), Limit: "none",
			TrainPct: barPct(f.TrainNullRate), EvalPct: barPct(f.EvalNullRate)}
		if f.MaxNullRate != nil {
			row.Limit = pct(*f.MaxNullRate)
			row.Over = f.TrainNullRate > *f.MaxNullRate || f.EvalNullRate > *f.MaxNullRate
		}
		v.Features = append(v.Features, row)
	}
	return v
}

func pct(f float64) string {
	if f > 0 && f < 0.001 {
		return fmt.Sprintf("%.3f%%", 100*f)
	}
	return fmt.Sprintf("%.1f%%", 100*f)
}

func barPct(f float64) string { return fmt.Sprintf("%.1f%%", 100*clamp01(f)) }

// dateList writes dates briefly: a run of consecutive days as its first
// and last, a short list whole, a long one cut in the middle.
func dateList(dates []string) string {
	switch {
	case len(dates) == 0:
		return "none"
	case len(dates) == 1:
		return dates[0]
	case consecutive(dates):
		return fmt.Sprintf("%s .. %s (%d days)", dates[0], dates[len(dates)-1], len(dates))
	case len(dates) <= 6:
		return strings.Join(dates, ", ")
	}
	return fmt.Sprintf("%s, … %s (%d dates)", strings.Join(dates[:2], ", "), strings.Join(dates[len(dates)-2:], ", "), len(dates))
}

func consecutive(dates []string) bool {
	prev, err := time.Parse(time.DateOnly, dates[0])
	if err != nil {
		return false
	}
	for _, d := range dates[1:] {
		t, err := time.Parse(time.DateOnly, d)
		if err != nil || !t.Equal(prev.AddDate(0, 0, 1)) {
			return false
		}
		prev = t
	}
	return true
}

// evalScope describes the rows an evaluation scored.
func evalScope(e *evaluate.EvaluationReport) string {
	s := fmt.Sprintf("%d held-out rows", e.Rows)
	if len(e.Dates) > 0 {
		s += " of " + dateList(e.Dates)
	} else if e.Window.Start != "" {
		s += " of " + e.Window.String()
	}
	if e.RunWindow.Start != "" {
		s += ", in the run's window " + e.RunWindow.String()
	}
	return s
}
