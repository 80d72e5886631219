package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/retrain-ml/retrain/dags"
	"github.com/retrain-ml/retrain/dags/examples"
	"github.com/retrain-ml/retrain/worker"
)

// dryRunOptions are what `retrain run --dry-run` resolves a plan with.
type dryRunOptions struct {
	target      string         // a spec file, or a pipeline's name
	params      map[string]any // -p
	logicalDate string         // --logical-date; "" is now
	id          string         // --id; "" leaves ${run.id} unresolved
	schedule    string         // --schedule: a run as this schedule of the spec starts it
	pipelines   string         // folder of named pipelines; "" is the built-in examples
	asJSON      bool
	now         time.Time
}

// dryRun prints what a run would do, as far as its params and run values
// decide it, and starts nothing: it reads the spec from the file or the
// pipelines folder here, so it needs no server, worker or object store.
func dryRun(out io.Writer, o dryRunOptions) error {
	file, data, err := readPipeline(o.target, o.pipelines)
	if err != nil {
		return err
	}
	spec, err := dags.Parse(file, data)
	if err != nil {
		return err
	}
	params, tz := o.params, ""
	if o.schedule != "" {
		if params, tz, err = scheduleParams(spec, o.schedule, o.params); err != nil {
			return err
		}
	}
	plan, err := dags.Compile(spec, worker.Types(), params)
	if err != nil {
		return err
	}
	rv, err := dryRunValues(plan.Pipeline, tz, o)
	if err != nil {
		return err
	}
	d, err := dags.NewDryRun(plan, rv, worker.Types())
	if err != nil {
		return err
	}
	if o.asJSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(d)
	}
	return printDryRun(out, d)
}

// readPipeline reads a spec file, or the file of the named pipeline in
// the pipelines folder (the built-in examples without one, as `retrain
// dev`'s worker has them).
func readPipeline(target, dir string) (file string, data []byte, err error) {
	if isFile(target) {
		data, err := os.ReadFile(target)
		return target, data, err
	}
	var fsys fs.FS = examples.FS
	where := "the built-in examples"
	if dir != "" {
		fsys, where = os.DirFS(dir), dir
	}
	name, data, err := dags.NewLibrary(fsys).Find(target)
	if err != nil {
		return "", nil, fmt.Errorf("%w (in %s; --pipelines DIR names the folder a worker runs pipelines from)", err, where)
	}
	if dir == "" {
		return "built-in example " + name, data, nil
	}
	return strings.TrimSuffix(dir, "/") + "/" + name, data, nil
}

// scheduleParams are the params a run of the spec's schedule id gets: the
// schedule's, with those given on the command line over them, and the
// time zone its logical dates are taken in.
func scheduleParams(spec *dags.Spec, id string, given map[string]any) (map[string]any, string, error) {
	var ids []string
	for _, sc := range spec.Schedules {
		if sc.ID == id {
			params := maps.Clone(sc.Params)
			if params == nil {
				params = map[string]any{}
			}
			maps.Copy(params, given)
			return params, sc.Timezone, nil
		}
		ids = append(ids, sc.ID)
	}
	if len(ids) == 0 {
		return nil, "", fmt.Errorf("--schedule %q: pipeline %s has no schedules", id, spec.Name)
	}
	return nil, "", fmt.Errorf("--schedule %q: pipeline %s has no such schedule; its schedules: %s", id, spec.Name, strings.Join(ids, ", "))
}

// dryRunValues are the run values the workflow computes: the logical date
// given (a date is midnight in the time zone tz, default UTC), else the
// time the run starts, now.
func dryRunValues(pipeline, tz string, o dryRunOptions) (dags.RunValues, error) {
	loc := time.UTC
	if tz != "" {
		l, err := time.LoadLocation(tz)
		if err != nil {
			return dags.RunValues{}, fmt.Errorf("schedule time zone %q: %w", tz, err)
		}
		loc = l
	}
	t := o.now
	if o.logicalDate != "" {
		var err error
		if t, err = time.ParseInLocation(time.DateOnly, o.logicalDate, loc); err != nil {
			if t, err = time.Parse(time.RFC3339Nano, o.logicalDate); err != nil {
				return dags.RunValues{}, fmt.Errorf("--logical-date %q: want YYYY-MM-DD or an RFC 3339 time", o.logicalDate)
			}
		}
	}
	t = t.In(loc)
	return dags.RunValues{ID: o.id, Pipeline: pipeline, LogicalTime: t.Format(time.RFC3339), LogicalDate: t.Format(time.DateOnly)}, nil
}

// dryMarks are the words the plan's table uses for each decision.
var dryMarks = map[string]string{
	dags.DryRun:        "run",
	dags.DrySkipped:    "skip",
	dags.DryUndecided:  "depends",
	dags.DryFails:      "FAILS",
	dags.DryNotStarted: "not started",
	dags.DryOnFailure:  "on failure",
}

// printDryRun prints a dry run for people: the run values and params,
// then each node with what it would do and its resolved with.
func printDryRun(w io.Writer, d *dags.DryRunPlan) error {
	source := ""
	if d.Source != "" {
		source = " (" + d.Source + ")"
	}
	fmt.Fprintf(w, "dry run of pipeline %s%s: nothing is started\n", d.Pipeline, source)
	fmt.Fprintf(w, "logical date %s (logical time %s)", d.LogicalDate, d.LogicalTime)
	if d.RunID != "" {
		fmt.Fprintf(w, ", run id %s", d.RunID)
	}
	fmt.Fprintln(w)
	if len(d.Params) > 0 {
		fmt.Fprintf(w, "params (digest %s):\n", d.ParamsDigest)
		if err := printYAML(w, d.Params, "  "); err != nil {
			return err
		}
	}
	counts := map[string]int{}
	fmt.Fprintln(w, "\nnodes, in the order they can start:")
	for _, n := range d.Nodes {
		counts[n.Decision]++
		if err := printDryNode(w, n, "  "); err != nil {
			return err
		}
	}
	if len(d.OnFailure) > 0 {
		fmt.Fprintln(w, "\non_failure:")
		for _, n := range d.OnFailure {
			if err := printDryNode(w, n, "  "); err != nil {
				return err
			}
		}
	}
	fmt.Fprintf(w, "\n%d nodes: %d run, %d skipped, %d depend on outputs known only when the run gets there",
		len(d.Nodes), counts[dags.DryRun], counts[dags.DrySkipped], counts[dags.DryUndecided])
	if n := counts[dags.DryFails]; n > 0 {
		fmt.Fprintf(w, ", %d would fail the run (%d not started)", n, counts[dags.DryNotStarted])
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "${nodes...} are outputs the run resolves; ${secret.NAME} is resolved by the worker that runs the node, never here")
	return nil
}

func printDryNode(w io.Writer, n dags.DryNode, indent string) error {
	line := fmt.Sprintf("%s%-11s %s (%s)", indent, dryMarks[n.Decision], n.ID, n.Type)
	if n.Reason != "" {
		line += ": " + n.Reason
	}
	fmt.Fprintln(w, line)
	sub := indent + strings.Repeat(" ", 12)
	if f := n.Foreach; f != nil && f.Count >= 0 && n.Decision != dags.DryFails && f.Expr != "" {
		fmt.Fprintf(w, "%sforeach %s: %d instances\n", sub, f.Expr, f.Count)
		const shown = 20
		for i, in := range f.Instances {
			if i == shown {
				fmt.Fprintf(w, "%s... %d more (--json lists up to %d)\n", sub, f.Count-shown, dags.MaxDryInstances)
				break
			}
			item, _ := json.Marshal(in.Foreach.Item)
			in.ID = fmt.Sprintf("%s item %s", in.ID, item)
			if err := printDryNode(w, in, sub); err != nil {
				return err
			}
		}
		return nil
	}
	if len(n.With) > 0 && n.Decision != dags.DrySkipped {
		fmt.Fprintf(w, "%swith:\n", sub)
		if err := printYAML(w, n.With, sub+"  "); err != nil {
			return err
		}
	}
	return nil
}

// printYAML prints v as YAML, each line indented.
func printYAML(w io.Writer, v any, indent string) error {
	var b strings.Builder
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(v); err != nil {
		return err
	}
	for line := range strings.SplitSeq(strings.TrimRight(b.String(), "\n"), "\n") {
		fmt.Fprintf(w, "%s%s\n", indent, line)
	}
	return nil
}
