package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	canarynode "github.com/retrain-ml/retrain/activities/canary"
	lakenode "github.com/retrain-ml/retrain/activities/lake"
	"github.com/retrain-ml/retrain/activities/train"
	"github.com/retrain-ml/retrain/runs"
)

// followInterval is how often a followed run is polled: one describe and
// one state query a second, plus one history read per running child.
const followInterval = time.Second

// nodeProgress is what a running node reports beyond its status: a train
// node's heartbeated step, a child workflow's activities done.
type nodeProgress struct {
	Attempt     int32   // of the pending activity; > 1 when retrying
	Step        int64   // heartbeated training step
	Total       int64   // steps in all, when the heartbeat says
	StepsPerSec float64 // between the last two heartbeats that moved
	Done, Of    int     // units done of all (promotion's bucket groups)
	Unit        string
	Round       int       // promotion's round (> 1 after a conflicting commit)
	Text        string    // a canary's step and time left, said whole
	BeatAt      time.Time // when the step was heartbeated
}

// staleBeat is the age from which a step says how old it is: the SDK
// sends a step at most every 0.8 heartbeat timeouts, so with a 30 s
// timeout what the server holds can be 24 s old.
const staleBeat = 5 * time.Second

// stepSample is a node's last heartbeat, for its rate.
type stepSample struct {
	step int64
	at   time.Time
	rate float64
}

// follower polls one run's state and its running nodes' progress.
type follower struct {
	c       client.Client
	id      string
	samples map[string]stepSample
}

// poll returns the run's state, its running nodes' progress and whether
// the run has closed (then the state is its final result).
func (f *follower) poll(ctx context.Context) (*runs.Result, map[string]nodeProgress, bool, error) {
	desc, err := f.c.DescribeWorkflowExecution(ctx, f.id, "")
	if err != nil {
		return nil, nil, false, fmt.Errorf("run %s: %w", f.id, err)
	}
	if desc.GetWorkflowExecutionInfo().GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		res, err := runs.State(ctx, f.c, f.id)
		return res, nil, true, err
	}
	res, err := runs.State(ctx, f.c, f.id)
	if err != nil {
		return nil, nil, false, err
	}
	progress := map[string]nodeProgress{}
	for _, pa := range desc.GetPendingActivities() {
		node := pa.GetActivityId()
		p := nodeProgress{Attempt: pa.GetAttempt()}
		var hb map[string]any
		if d := pa.GetHeartbeatDetails().GetPayloads(); len(d) > 0 && converter.GetDefaultDataConverter().FromPayload(d[0], &hb) == nil {
			p.Step, p.Total = number(hb["step"]), number(cmpOr(hb["total"], hb["total_steps"]))
			if p.Step > 0 && pa.GetLastHeartbeatTime() != nil {
				p.BeatAt = pa.GetLastHeartbeatTime().AsTime()
				p.StepsPerSec = f.rate(node, p.Step, p.BeatAt)
			}
		}
		progress[node] = p
	}
	for _, pc := range desc.GetPendingChildren() {
		node, ok := strings.CutPrefix(pc.GetWorkflowId(), f.id+"/")
		if !ok {
			continue
		}
		if pc.GetWorkflowTypeName() == canarynode.Workflow {
			progress[node] = canaryProgress(ctx, f.c, pc.GetWorkflowId(), time.Now())
			continue
		}
		if pc.GetWorkflowTypeName() == train.GangWorkflow {
			progress[node] = f.gangProgress(ctx, node, pc.GetWorkflowId(), pc.GetRunId())
			continue
		}
		progress[node] = f.childProgress(ctx, pc.GetWorkflowId(), pc.GetRunId(), pc.GetWorkflowTypeName())
	}
	return res, progress, false, nil
}

// rate is the node's steps per second between its last two heartbeats
// that moved; heartbeats are throttled, so the poll's clock would lie.
func (f *follower) rate(node string, step int64, at time.Time) float64 {
	prev, ok := f.samples[node]
	switch {
	case !ok || step < prev.step: // the first heartbeat seen, or a retry went back
		f.samples[node] = stepSample{step: step, at: at}
	case step > prev.step && at.After(prev.at):
		f.samples[node] = stepSample{step: step, at: at, rate: float64(step-prev.step) / at.Sub(prev.at).Seconds()}
	}
	return f.samples[node].rate
}

// childProgress counts a child workflow's activities from its history,
// which for the children nodes run is short: promotion's bucket groups
// done of its current round, or any child's activities done.
func (f *follower) childProgress(ctx context.Context, id, runID, typ string) nodeProgress {
	promote := typ == lakenode.PromoteWorkflow
	p := nodeProgress{Unit: "activities"}
	if promote {
		p.Unit = "bucket groups"
	}
	counted := map[int64]bool{}
	it := f.c.GetWorkflowHistory(ctx, id, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			return p
		}
		if a := ev.GetActivityTaskScheduledEventAttributes(); a != nil {
			name := a.GetActivityType().GetName()
			switch {
			case promote && name == lakenode.PromotePlanActivity:
				// A new round plans again: count its groups afresh.
				p.Round++
				p.Done, p.Of = 0, 0
				clear(counted)
			case !promote || name == lakenode.PromoteBucketsActivity:
				counted[ev.GetEventId()] = true
				p.Of++
			}
		}
		if a := ev.GetActivityTaskCompletedEventAttributes(); a != nil && counted[a.GetScheduledEventId()] {
			p.Done++
		}
	}
	return p
}

// follow polls run id every followInterval until it closes, showing its
// nodes on view, and returns the final result.
func follow(ctx context.Context, c client.Client, id string, view liveView) (*runs.Result, error) {
	f := &follower{c: c, id: id, samples: map[string]stepSample{}}
	tick := time.NewTicker(followInterval)
	defer tick.Stop()
	for {
		res, progress, closed, err := f.poll(ctx)
		if err != nil {
			return nil, err
		}
		if closed {
			view.Done(res)
			return res, nil
		}
		view.Show(res, progress, time.Now())
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-tick.C:
		}
	}
}

// liveView shows a run as it goes.
type liveView interface {
	Show(res *runs.Result, progress map[string]nodeProgress, now time.Time)
	Done(res *runs.Result)
}

// newLiveView redraws a frame on a terminal and prints changes as lines
// anywhere else (a log, a pipe).
func newLiveView(w io.Writer) liveView {
	if isTerminal(w) {
		return &frameView{w: w}
	}
	return &lineView{p: NewProgress(w), printed: map[string]time.Time{}, last: map[string]string{}}
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok || os.Getenv("TERM") == "dumb" {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// frameView redraws the whole node table in place.
type frameView struct {
	w     io.Writer
	lines int // lines of the frame on screen
}

func (v *frameView) Show(res *runs.Result, progress map[string]nodeProgress, now time.Time) {
	v.clear()
	frame := Frame(res, progress, now)
	v.lines = strings.Count(frame, "\n")
	io.WriteString(v.w, frame)
}

// Done erases the frame: the summary printed next says it all.
func (v *frameView) Done(*runs.Result) { v.clear() }

func (v *frameView) clear() {
	if v.lines > 0 {
		fmt.Fprintf(v.w, "\x1b[%dA\x1b[J", v.lines)
		v.lines = 0
	}
}

// lineView prints status changes, and a running node's progress at most
// every progressEvery, so a log gets a line, not a frame, per change.
type lineView struct {
	p       *Progress
	printed map[string]time.Time
	last    map[string]string
}

const progressEvery = 10 * time.Second

func (v *lineView) Show(res *runs.Result, progress map[string]nodeProgress, now time.Time) {
	v.p.Update(res)
	for _, n := range res.Nodes {
		p, ok := progress[n.ID]
		if !ok || n.Status != runs.NodeRunning {
			continue
		}
		text := progressText(p, 20, now)
		if text == "" || text == v.last[n.ID] || now.Sub(v.printed[n.ID]) < progressEvery {
			continue
		}
		v.last[n.ID], v.printed[n.ID] = text, now
		fmt.Fprintf(v.p.w, "  %-24s %s\n", n.ID, text)
	}
}

func (v *lineView) Done(res *runs.Result) { v.p.Update(res) }

// Frame renders a running run: a header and one line per node with its
// status, time so far and progress.
func Frame(res *runs.Result, progress map[string]nodeProgress, now time.Time) string {
	var b strings.Builder
	fmt.Fprintf(&b, "run %s (%s): %s %s\n", res.ID, res.Pipeline, statusWord(res.Status), shortDuration(now.Sub(res.StartedAt)))
	for _, w := range res.Waiting {
		b.WriteString("  " + w.Text(now) + "\n")
	}
	nodes := slices.Concat(res.Nodes, res.Compensations)
	width := len("NODE")
	for _, n := range nodes {
		width = max(width, len(n.ID))
	}
	for _, n := range nodes {
		line := fmt.Sprintf("  %-*s  %-9s  %7s", width, n.ID, n.Status, nodeTime(n, now))
		if p, ok := progress[n.ID]; ok && n.Status == runs.NodeRunning {
			if t := progressText(p, 24, now); t != "" {
				line += "  " + t
			}
		} else if n.Status == runs.NodeFailed && n.Error != "" {
			line += "  " + firstLine(n.Error, 80)
		} else if n.Cache != nil {
			line += "  " + firstLine(n.Cache.Note(now), 80)
		}
		b.WriteString(strings.TrimRight(line, " ") + "\n")
	}
	return b.String()
}

// nodeTime is how long a node took, or has been running.
func nodeTime(n runs.NodeState, now time.Time) string {
	switch {
	case n.StartedAt != nil && n.EndedAt != nil:
		return shortDuration(n.EndedAt.Sub(*n.StartedAt))
	case n.Status == runs.NodeRunning && n.StartedAt != nil:
		return shortDuration(now.Sub(*n.StartedAt))
	case n.Status == runs.NodeRunning && n.ScheduledAt != nil:
		return shortDuration(now.Sub(*n.ScheduledAt))
	}
	return ""
}

// progressText is a running node's progress: a bar when the total is
// known, the step and its rate when it is not, and the attempt if retried.
func progressText(p nodeProgress, barWidth int, now time.Time) string {
	if p.Text != "" {
		return p.Text
	}
	var parts []string
	switch {
	case p.Of > 0:
		s := fmt.Sprintf("%s %d/%d %s", Bar(p.Done, p.Of, barWidth), p.Done, p.Of, p.Unit)
		if p.Round > 1 {
			s += fmt.Sprintf(" (round %d)", p.Round)
		}
		parts = append(parts, s)
	case p.Total > 0:
		parts = append(parts, fmt.Sprintf("%s step %d/%d", Bar(int(p.Step), int(p.Total), barWidth), p.Step, p.Total))
	case p.Step > 0:
		parts = append(parts, fmt.Sprintf("step %d", p.Step))
	}
	if p.StepsPerSec > 0 {
		parts = append(parts, fmt.Sprintf("%.0f steps/s", p.StepsPerSec))
		if p.Total > p.Step && p.Of == 0 {
			left := time.Duration(float64(p.Total-p.Step) / p.StepsPerSec * float64(time.Second))
			parts = append(parts, "ETA "+shortDuration(left.Round(time.Second)))
		}
	}
	if p.Step > 0 && !p.BeatAt.IsZero() && now.Sub(p.BeatAt) >= staleBeat {
		parts = append(parts, "as of "+shortDuration(now.Sub(p.BeatAt).Truncate(time.Second))+" ago")
	}
	if p.Attempt > 1 {
		parts = append(parts, fmt.Sprintf("attempt %d", p.Attempt))
	}
	return strings.Join(parts, ", ")
}

// Bar is a progress bar of width cells: [#####.....].
func Bar(done, total, width int) string {
	if total <= 0 || width <= 0 {
		return ""
	}
	done = min(max(done, 0), total)
	full := done * width / total
	return "[" + strings.Repeat("#", full) + strings.Repeat(".", width-full) + "]"
}

func firstLine(s string, n int) string {
	s, _, _ = strings.Cut(s, "\n")
	if len(s) > n {
		s = s[:n-3] + "..."
	}
	return s
}

// number reads a JSON number (float64 after decoding) as an int.
func number(v any) int64 {
	switch x := v.(type) {
	case float64:
		return int64(x)
	case json.Number:
		n, _ := x.Int64()
		return n
	}
	return 0
}

func cmpOr(vs ...any) any {
	for _, v := range vs {
		if v != nil {
			return v
		}
	}
	return nil
}

// canaryProgress asks a running canary where it is: its step, the time
// left of the bake and its checks' latest verdicts.
func canaryProgress(ctx context.Context, c client.Client, id string, now time.Time) nodeProgress {
	v, err := c.QueryWorkflow(ctx, id, "", canarynode.StateQuery)
	var st canarynode.State
	if err != nil || v.Get(&st) != nil {
		return nodeProgress{}
	}
	return nodeProgress{Text: CanaryText(st, now)}
}

// CanaryText says a canary's state in a line: "step 2/3 at 25%, bake
// 40s left; ctr pass, p99_latency pass".
func CanaryText(st canarynode.State, now time.Time) string {
	refused := ""
	if n := len(st.Refused); n > 0 {
		refused = "; " + st.Refused[n-1] // the run keeps waiting: say why the decision did not count
	}
	if st.Phase != "baking" {
		return st.Phase + refused
	}
	s := fmt.Sprintf("canary %s: step %d/%d at %g%%", st.Version, st.Step, st.Steps, st.Percent)
	if left := st.BakeEnds.Sub(now); left > 0 {
		s += ", bake " + left.Round(time.Second).String() + " left"
	}
	var checks []string
	for _, c := range st.Checks {
		checks = append(checks, c.Name+" "+c.Status)
	}
	if len(checks) > 0 {
		s += "; " + strings.Join(checks, ", ")
	}
	return s + refused
}
