package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/retrain-ml/retrain/activities/internal/objects"
	"github.com/retrain-ml/retrain/activities/progenv"

	"github.com/retrain-ml/retrain/dags"
	"github.com/retrain-ml/retrain/errtype"
	"github.com/retrain-ml/retrain/internal/checkpoint"
	"github.com/retrain-ml/retrain/internal/number"
	"github.com/retrain-ml/retrain/internal/s3store"
	"github.com/retrain-ml/retrain/internal/tabular"
	"github.com/retrain-ml/retrain/nodetype"
)

// Name is the checkpoint node type's name.
const Name = "checkpoint"

// CheckpointType is the `checkpoint` node type, for its name and schema;
// Type returns it with its run function.
var CheckpointType = Type(nil, nil).NodeType

// With is a checkpoint node's `with` block.
type With struct {
	Command []string          `json:"command" doc:"program and arguments that print the table as CSV with a header row on stdout"`
	Source  string            `json:"source" doc:"instead of command: a local CSV or Parquet file, a folder of them, or a glob"`
	Format  string            `json:"format" doc:"csv or parquet (default: from the source's file names; csv for a command)"`
	Columns map[string]string `json:"columns" doc:"CSV column types (int64, double, bool, string); default: inferred from the data. With a command, declared columns let rows stream to S3 while the command runs. The Parquet columns keep the CSV header's order (the first file's, for several)"`
	Inputs  any               `json:"inputs" doc:"values that identify the data (upstream snapshot ids, dates), part of the inputs fingerprint with the rest of this block and the source files' contents"`
	Dataset string            `json:"dataset" default:"data" doc:"dataset name within the checkpoint"`
	// MaxFileRows 0 leaves the file size to package checkpoint.
	MaxFileRows int64             `json:"max_file_rows" doc:"start a new Parquet file after this many rows (default: files of about 128 MiB)"`
	Env         map[string]string `json:"env" doc:"extra environment of the command (the worker's own is not inherited beyond PATH, HOME, locale and --pass-env); values may hold ${secret.NAME}"`
	Dir         string            `json:"dir" doc:"working directory of the command"`
}

// Outputs are a checkpoint node's outputs.
type Outputs struct {
	checkpointOutputs
	Fingerprint string `json:"fingerprint"` // of the inputs: the same fingerprint is the same checkpoint
	Reused      bool   `json:"reused"`      // found complete, not written by this attempt
	Summary     string `json:"summary"`     // one line for the run's node table
}

func (o Outputs) summary() string {
	verb := "checkpointed"
	if o.Reused {
		verb = "reused the checkpoint of"
	}
	return fmt.Sprintf("%s %s rows, %d columns (%d files, %s) of %s", verb, number.Count(o.Rows), len(o.Columns), o.Files, bytesText(o.Bytes), o.Dataset)
}

// bytesText writes a size in B, KiB, MiB or GiB.
func bytesText(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	f, i := float64(n)/unit, 0
	for f >= unit && i < 2 {
		f /= unit
		i++
	}
	return fmt.Sprintf("%.1f %ciB", f, "KMG"[i])
}

// checkpointOutputs are recorded in the manifest and returned on a hit.
type checkpointOutputs struct {
	URI      string   `json:"uri"`
	Manifest string   `json:"manifest"`
	Dataset  string   `json:"dataset"`
	Rows     int64    `json:"rows"`
	Files    int      `json:"files"`
	Bytes    int64    `json:"bytes"`
	Columns  []string `json:"columns"` // "name:type", in schema order, e.g. "u_recent_ads:list<int64>"
}

// check refuses, before any run, blocks no run could use: the schema has
// checked the fields' types.
func check(with map[string]any) error {
	_, cmd := with["command"]
	_, src := with["source"]
	if cmd == src {
		return errors.New("give exactly one of command and source")
	}
	if f, ok := with["format"].(string); ok && !dags.HasRef(f) && f != "csv" && f != "parquet" {
		return fmt.Errorf("format %q: want csv or parquet", f)
	}
	if cols, ok := with["columns"].(map[string]any); ok {
		for name, t := range cols {
			if s, ok := t.(string); ok && !dags.HasRef(s) {
				if _, err := tabular.ParseType(s); err != nil {
					return fmt.Errorf("columns: %s: %v", name, err)
				}
			}
		}
	}
	if d, ok := with["dataset"].(string); ok && d == "" {
		return errors.New("dataset is empty")
	}
	if n, ok := with["max_file_rows"].(float64); ok && n < 1 {
		return fmt.Errorf("max_file_rows must be at least 1, got %v", n)
	}
	return nil
}

// Checkpoints runs checkpoint nodes.
type Checkpoints struct {
	Store  *s3store.Store // nil: no object store configured
	Logger *slog.Logger
	// AllowCommands are the programs this worker's operator lets a
	// checkpoint's command start (its --allow-commands); empty allows any.
	AllowCommands []string
	// Env is what a checkpoint's command sees of the worker (its
	// environment and secrets) and where a source may lie (AllowPaths).
	Env progenv.Policy
}

// Deps are what the checkpoint node type needs from its worker.
type Deps struct {
	Store         *s3store.Store // nil: no object store configured
	Logger        *slog.Logger
	AllowCommands []string       // see Checkpoints.AllowCommands
	Env           progenv.Policy // see Checkpoints.Env
}

// rowBatch is how many rows move from a source to the encoder at once.
// Small enough that rows a command prints reach S3 while it still runs.
const rowBatch = 256

// Run runs a checkpoint node.
func (c *Checkpoints) Run(ctx context.Context, in nodetype.Input, w With) (Outputs, error) {
	if (len(w.Command) == 0) == (w.Source == "") {
		return Outputs{}, nodetype.Permanent(errtype.BadInput, "give exactly one of command and source")
	}
	if w.Dataset == "" {
		return Outputs{}, nodetype.Permanent(errtype.BadInput, "dataset is empty")
	}
	columns, err := parseColumns(w.Columns)
	if err != nil {
		return Outputs{}, nodetype.Permanent(errtype.BadInput, "%v", err)
	}
	var files []string
	if w.Source != "" {
		// Before any file is read: a starter must not copy what it likes
		// off the worker into the store.
		if err := c.Env.CheckPath("source", w.Source); err != nil {
			return Outputs{}, err
		}
		if files, err = sourceFiles(w.Source); err != nil {
			return Outputs{}, nodetype.Permanent(errtype.BadInput, "%v", err)
		}
		for _, f := range files { // a link inside an allowed folder may lead out of it
			if err := c.Env.CheckPath("source", f); err != nil {
				return Outputs{}, err
			}
		}
	}
	format, err := sourceFormat(w.Format, files)
	if err != nil {
		return Outputs{}, nodetype.Permanent(errtype.BadInput, "%v", err)
	}
	if format == "parquet" && columns != nil {
		return Outputs{}, nodetype.Permanent(errtype.BadInput, "columns only apply to CSV: a Parquet file carries its schema")
	}
	if c.Store == nil {
		return Outputs{}, objects.NoStore()
	}
	for _, seg := range []string{in.Pipeline, in.RunID, in.Node} {
		// Each is one folder of the checkpoint's key.
		if err := s3store.ValidateKey(seg); err != nil || strings.Contains(seg, "/") {
			return Outputs{}, nodetype.Permanent(errtype.BadInput, "cannot checkpoint pipeline %q, run %q, node %q: each must be a single key segment", in.Pipeline, in.RunID, in.Node)
		}
	}
	// The block as given, not w with its defaults: so the fingerprints of
	// checkpoints written before a default was declared still match.
	fingerprint, err := inputsFingerprint(in.With, files)
	if err != nil {
		return Outputs{}, nodetype.Permanent(errtype.BadInput, "%v", err)
	}
	log := c.Logger.With("pipeline", in.Pipeline, "run", in.RunID, "node", in.Node)
	key := checkpoint.Key{Pipeline: in.Pipeline, Run: in.RunID, Node: in.Node}
	opts := checkpoint.Options{MaxFileRows: w.MaxFileRows}

	out, hit, err := checkpoint.Do(ctx, c.Store, key, fingerprint, func(ctx context.Context, cw *checkpoint.Writer) (checkpointOutputs, error) {
		var ref checkpoint.Ref
		var err error
		switch {
		case len(w.Command) > 0:
			ref, err = c.fromCommand(ctx, cw, in, w, columns, opts, log)
		case format == "parquet":
			ref, err = fromParquet(cw, w.Dataset, files, opts)
		default:
			ref, err = fromCSVFiles(cw, w.Dataset, files, columns, opts)
		}
		if err != nil {
			return checkpointOutputs{}, err
		}
		return checkpointOutputs{URI: c.Store.URI().Join(ref.Manifest).String(), Manifest: ref.Manifest, Dataset: ref.Dataset}, nil
	})
	if err != nil {
		if errors.Is(err, errBadData) || errors.Is(err, s3store.ErrInvalidKey) {
			return Outputs{}, nodetype.Permanent(errtype.BadInput, "%v", err)
		}
		return Outputs{}, err
	}
	// Sizes and counts come from the manifest: the step's outputs were
	// fixed before its files were sealed.
	m, err := checkpoint.Load(ctx, c.Store, key, fingerprint)
	if err != nil {
		return Outputs{}, err
	}
	ds, _ := m.Dataset(out.Dataset)
	out.Rows, out.Files = ds.Rows, len(ds.Files)
	for _, f := range ds.Files {
		out.Bytes += f.Size
	}
	out.Columns = columnStrings(ds)
	log.Info("checkpoint ready", "uri", out.URI, "rows", out.Rows, "files", out.Files, "reused", hit)
	o := Outputs{checkpointOutputs: out, Fingerprint: fingerprint, Reused: hit}
	o.Summary = o.summary()
	return o, nil
}

// errBadData marks input that no retry will fix: unparsable CSV, files
// with different schemas.
var errBadData = errors.New("bad input data")

func badData(err error) error { return fmt.Errorf("%w: %w", errBadData, err) }

// columnStrings lists a dataset's columns as "name:type" in schema order.
func columnStrings(ds checkpoint.Dataset) []string {
	if len(ds.Columns) == 0 {
		// A manifest written before columns were recorded in it.
		return schemaColumns(ds.Schema)
	}
	cols := make([]string, len(ds.Columns))
	for i, c := range ds.Columns {
		cols[i] = c.String()
	}
	return cols
}

// schemaColumns lists a Parquet schema's leaf columns as "name:type", from
// the text form recorded in the manifest, e.g. "optional int64 user_id;".
func schemaColumns(schema string) []string {
	var cols []string
	for line := range strings.SplitSeq(schema, "\n") {
		f := strings.Fields(strings.TrimSuffix(strings.TrimSpace(line), ";"))
		if len(f) >= 3 && (f[0] == "optional" || f[0] == "required" || f[0] == "repeated") && f[1] != "group" {
			typ := f[1]
			if len(f) > 3 && f[3] == "(STRING)" {
				typ = "string"
			}
			cols = append(cols, f[2]+":"+typ)
		}
	}
	return cols
}

// Type returns the checkpoint node type; store is nil on a worker without
// an object store (its nodes then fail as bad input).
func Type(store *s3store.Store, logger *slog.Logger) nodetype.Type {
	return TypeWith(Deps{Store: store, Logger: logger})
}

// TypeWith returns the checkpoint node type with a worker's deps.
func TypeWith(d Deps) nodetype.Type {
	c := &Checkpoints{Store: d.Store, Logger: d.Logger, AllowCommands: d.AllowCommands, Env: d.Env}
	return nodetype.New(dags.NodeType{
		Name: Name,
		Doc: "Materialise a table as Parquet in the object store, under checkpoints/<pipeline>/<run>/<node>/, " +
			"from the CSV a command prints on stdout or from local CSV or Parquet files. " +
			"The checkpoint is complete once its manifest is written; a retry, or a rerun of the run (same run id) with the same inputs, " +
			"finds it and returns its outputs without running the command or reading the files again. " +
			"Downstream nodes read the manifest at ${nodes.ID.outputs.uri}, which lists the Parquet files with their row counts and checksums.",
		Check: check,
	}, c.Run)
}
