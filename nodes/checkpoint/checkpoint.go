package checkpoint

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/retrain-ml/retrain/nodes/internal/objects"
	"github.com/retrain-ml/retrain/nodes/internal/process"
	"github.com/retrain-ml/retrain/nodes/progenv"

	"github.com/parquet-go/parquet-go"

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

// parseColumns reads declared column types. A mapping has no order once
// decoded, so they come sorted by name, and [inHeaderOrder] puts them in
// the data's order.
func parseColumns(in map[string]string) ([]tabular.Column, error) {
	if len(in) == 0 {
		return nil, nil
	}
	cols := make([]tabular.Column, 0, len(in))
	for _, name := range slices.Sorted(maps.Keys(in)) {
		typ, err := tabular.ParseType(in[name])
		if err != nil {
			return nil, fmt.Errorf("columns: %s: %w", name, err)
		}
		cols = append(cols, tabular.Column{Name: name, Type: typ})
	}
	return cols, nil
}

// inHeaderOrder orders declared columns as a CSV header lists them, so that
// the Parquet files keep the source's column order. Declared columns the
// header lacks go last, and header names not declared are skipped: the CSV
// reader reports both.
func inHeaderOrder(columns []tabular.Column, header []string) []tabular.Column {
	pos := make(map[string]int, len(header))
	for i, name := range header {
		pos[name] = i
	}
	out := slices.Clone(columns)
	slices.SortStableFunc(out, func(a, b tabular.Column) int {
		pa, oka := pos[a.Name]
		pb, okb := pos[b.Name]
		switch {
		case oka && okb:
			return pa - pb
		case oka:
			return -1
		case okb:
			return 1
		}
		return 0
	})
	return out
}

// fileHeader reads the header row of the CSV file at path.
func fileHeader(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	header, err := tabular.CSVHeader(f)
	if err != nil {
		return nil, badData(fmt.Errorf("%s: %w", path, err))
	}
	return header, nil
}

// sourceFiles expands a file, folder or glob into data files, sorted.
func sourceFiles(source string) ([]string, error) {
	var files []string
	if st, err := os.Stat(source); err == nil && st.IsDir() {
		entries, err := os.ReadDir(source)
		if err != nil {
			return nil, fmt.Errorf("source: %w", err)
		}
		for _, e := range entries {
			if e.Type().IsRegular() && dataFormat(e.Name()) != "" {
				files = append(files, filepath.Join(source, e.Name()))
			}
		}
		if len(files) == 0 {
			return nil, fmt.Errorf("source: folder %s holds no .csv or .parquet files", source)
		}
		return files, nil
	} else if err == nil {
		return []string{source}, nil
	}
	matches, err := filepath.Glob(source)
	if err != nil {
		return nil, fmt.Errorf("source %q: %w", source, err)
	}
	for _, m := range matches {
		if st, err := os.Stat(m); err == nil && st.Mode().IsRegular() {
			files = append(files, m)
		}
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("source %q: no such file", source)
	}
	slices.Sort(files)
	return files, nil
}

func dataFormat(name string) string {
	switch strings.ToLower(filepath.Ext(name)) {
	case ".csv":
		return "csv"
	case ".parquet", ".pq":
		return "parquet"
	}
	return ""
}

func sourceFormat(format string, files []string) (string, error) {
	switch format {
	case "csv", "parquet":
		return format, nil
	case "":
	default:
		return "", fmt.Errorf("format %q: want csv or parquet", format)
	}
	if len(files) == 0 {
		return "csv", nil // a command prints CSV
	}
	for _, f := range files {
		got := dataFormat(f)
		if got == "" {
			return "", fmt.Errorf("source %s: cannot tell the format from the name; set format", f)
		}
		if format != "" && got != format {
			return "", fmt.Errorf("source mixes %s and %s files; set format or narrow source", format, got)
		}
		format = got
	}
	return format, nil
}

// inputsFingerprint digests the node's `with` block (upstream outputs in it
// are already resolved) and the contents of its source files: the same
// command, settings and data mean the same checkpoint.
func inputsFingerprint(with map[string]any, files []string) (string, error) {
	contents := make([]string, len(files))
	for i, path := range files {
		f, err := os.Open(path)
		if err != nil {
			return "", fmt.Errorf("source: %w", err)
		}
		h := sha256.New()
		_, err = io.Copy(h, f)
		f.Close()
		if err != nil {
			return "", fmt.Errorf("source: read %s: %w", path, err)
		}
		contents[i] = hex.EncodeToString(h.Sum(nil))
	}
	return checkpoint.Fingerprint(struct {
		With  map[string]any `json:"with"`
		Files []string       `json:"files,omitempty"`
	}{with, contents})
}

// rowSource is what a dataset is copied from.
type rowSource interface {
	ReadRows([]parquet.Row) (int, error)
}

// copyRows moves every row of src into d.
func copyRows(d *checkpoint.RowWriter, src rowSource) error {
	buf := make([]parquet.Row, rowBatch)
	for {
		n, err := src.ReadRows(buf)
		if n > 0 {
			if _, werr := d.WriteRows(buf[:n]); werr != nil {
				return werr
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

func fromCSVFiles(cw *checkpoint.Writer, name string, files []string, columns []tabular.Column, opts checkpoint.Options) (checkpoint.Ref, error) {
	if columns == nil {
		var err error
		if columns, err = inferFiles(files); err != nil {
			return checkpoint.Ref{}, err
		}
	} else {
		header, err := fileHeader(files[0])
		if err != nil {
			return checkpoint.Ref{}, err
		}
		columns = inHeaderOrder(columns, header)
	}
	schema, err := tabular.Schema(columns)
	if err != nil {
		return checkpoint.Ref{}, badData(err)
	}
	d, err := checkpoint.CreateRows(cw, name, schema, opts)
	if err != nil {
		return checkpoint.Ref{}, err
	}
	for _, path := range files {
		if err := copyCSVFile(d, path, columns); err != nil {
			return checkpoint.Ref{}, err
		}
	}
	return d.Close()
}

func copyCSVFile(d *checkpoint.RowWriter, path string, columns []tabular.Column) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	r, err := tabular.NewCSVReader(f, columns)
	if err != nil {
		return badData(fmt.Errorf("%s: %w", path, err))
	}
	if err := copyRows(d, r); err != nil {
		if isTabular(err) {
			return badData(fmt.Errorf("%s: %w", path, err))
		}
		return err
	}
	return nil
}

// isTabular tells a data error of package tabular from a write error.
func isTabular(err error) bool { return strings.HasPrefix(err.Error(), "tabular: ") }

// inferFiles infers the columns of CSV files, which must share a header
// (in any order): a column takes the widest type any file needs, and the
// columns the first file's order.
func inferFiles(files []string) ([]tabular.Column, error) {
	var cols []tabular.Column
	for _, path := range files {
		f, err := os.Open(path)
		if err != nil {
			return nil, err
		}
		got, err := tabular.InferCSV(f)
		f.Close()
		if err != nil {
			return nil, badData(fmt.Errorf("%s: %w", path, err))
		}
		if cols == nil {
			cols = got
			continue
		}
		if cols, err = widen(cols, got); err != nil {
			return nil, badData(fmt.Errorf("%s: %w", path, err))
		}
	}
	return cols, nil
}

func widen(a, b []tabular.Column) ([]tabular.Column, error) {
	if len(a) != len(b) {
		return nil, fmt.Errorf("has %d columns, the first file %d", len(b), len(a))
	}
	rank := map[tabular.Type]int{tabular.Int64: 0, tabular.Double: 1, tabular.Bool: 2, tabular.String: 3}
	byName := make(map[string]tabular.Type, len(b))
	for _, c := range b {
		byName[c.Name] = c.Type
	}
	out := slices.Clone(a)
	for i, c := range out {
		t, ok := byName[c.Name]
		if !ok {
			return nil, fmt.Errorf("has no column %q, which the first file has", c.Name)
		}
		switch {
		case t == c.Type:
		case rank[t] <= rank[tabular.Double] && rank[c.Type] <= rank[tabular.Double]:
			out[i].Type = tabular.Double // int64 and double mix as double
		default:
			out[i].Type = tabular.String
		}
	}
	return out, nil
}

func fromParquet(cw *checkpoint.Writer, name string, files []string, opts checkpoint.Options) (checkpoint.Ref, error) {
	var d *checkpoint.RowWriter
	var first string
	for _, path := range files {
		pf, err := tabular.OpenParquet(path)
		if err != nil {
			return checkpoint.Ref{}, badData(err)
		}
		if d == nil {
			first = path
			if d, err = checkpoint.CreateRows(cw, name, pf.Schema(), opts); err != nil {
				pf.Close()
				return checkpoint.Ref{}, err
			}
		} else if !parquet.EqualNodes(d.Schema(), pf.Schema()) {
			pf.Close()
			return checkpoint.Ref{}, badData(fmt.Errorf("%s has another schema than %s", path, first))
		}
		err = copyRows(d, pf)
		pf.Close()
		if err != nil {
			if isTabular(err) {
				return checkpoint.Ref{}, badData(err)
			}
			return checkpoint.Ref{}, err
		}
	}
	return d.Close()
}

// fromCommand runs the command and checkpoints the CSV it prints. With
// declared columns the rows stream into Parquet files, and those to S3, as
// the command prints them; otherwise the output is spooled to a temporary
// file first, since types are inferred from all of it.
func (c *Checkpoints) fromCommand(ctx context.Context, cw *checkpoint.Writer, in nodetype.Input, w With,
	columns []tabular.Column, opts checkpoint.Options, log *slog.Logger) (checkpoint.Ref, error) {
	if err := process.CheckProgram(c.AllowCommands, w.Command); err != nil {
		return checkpoint.Ref{}, err
	}
	cmd, secrets, err := process.CommandEnv(ctx, in, w.Command, w.Dir, c.Env, w.Env)
	if err != nil {
		return checkpoint.Ref{}, err
	}
	stderr := process.NewTailWriter(process.OutputTail, log, "stderr").Mask(secrets)
	cmd.Stderr = stderr
	// A pipe of our own rather than StdoutPipe: Wait closes that one as
	// soon as the command exits, possibly before its output is read, and
	// Wait runs concurrently with the reading here so that a cancelled
	// node kills the command.
	stdout, pw, err := os.Pipe()
	if err != nil {
		return checkpoint.Ref{}, err
	}
	defer stdout.Close()
	cmd.Stdout = pw
	log.Info("checkpoint command starting", "argv", w.Command)
	err = cmd.Start()
	pw.Close()
	if err != nil {
		return checkpoint.Ref{}, nodetype.Permanent(errtype.BadInput, "start %q: %v", w.Command[0], err)
	}
	// The command is waited for whatever happens below; a failed read
	// kills it rather than leave it blocked on a full pipe.
	done := make(chan error, 1)
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { done <- process.WaitOrKill(cctx, cmd, log) }()

	ref, readErr := readCommandCSV(cw, w.Dataset, stdout, columns, opts)
	if readErr != nil {
		cancel()
	} else {
		io.Copy(io.Discard, stdout) // a header-only table still lets the command finish
	}
	waitErr := <-done
	stderr.Flush()
	if ctx.Err() != nil {
		return checkpoint.Ref{}, ctx.Err()
	}
	// A command that failed by itself is reported as such (and retried),
	// even if what it printed was also unreadable; one killed because its
	// output was unreadable is reported by what was wrong with the output.
	switch code := cmd.ProcessState.ExitCode(); {
	case code > 0:
		return checkpoint.Ref{}, fmt.Errorf("%s exited with code %d; stderr: %s", w.Command[0], code, process.LastLines(stderr.Tail(), 5))
	case code < 0 && readErr == nil:
		return checkpoint.Ref{}, fmt.Errorf("%s: %v; stderr: %s", w.Command[0], waitErr, process.LastLines(stderr.Tail(), 5))
	}
	if readErr != nil {
		if isTabular(readErr) {
			return checkpoint.Ref{}, badData(fmt.Errorf("output of %s: %w", w.Command[0], readErr))
		}
		return checkpoint.Ref{}, readErr
	}
	return ref, nil
}

func readCommandCSV(cw *checkpoint.Writer, name string, stdout io.Reader, columns []tabular.Column, opts checkpoint.Options) (checkpoint.Ref, error) {
	if columns == nil {
		spool, err := os.CreateTemp("", "retrain-checkpoint-*.csv")
		if err != nil {
			return checkpoint.Ref{}, err
		}
		defer os.Remove(spool.Name())
		defer spool.Close()
		if _, err := io.Copy(spool, stdout); err != nil {
			return checkpoint.Ref{}, fmt.Errorf("spool command output: %w", err)
		}
		if err := spool.Sync(); err != nil {
			return checkpoint.Ref{}, err
		}
		return fromCSVFiles(cw, name, []string{spool.Name()}, nil, opts)
	}
	// The header is read ahead to order the columns, and read again by
	// the CSV reader from a copy of what reading it took from the pipe.
	var head bytes.Buffer
	header, err := tabular.CSVHeader(io.TeeReader(stdout, &head))
	if err != nil {
		return checkpoint.Ref{}, err
	}
	r, err := tabular.NewCSVReader(io.MultiReader(&head, stdout), inHeaderOrder(columns, header))
	if err != nil {
		return checkpoint.Ref{}, err
	}
	d, err := checkpoint.CreateRows(cw, name, r.Schema(), opts)
	if err != nil {
		return checkpoint.Ref{}, err
	}
	if err := copyRows(d, r); err != nil {
		return checkpoint.Ref{}, err
	}
	return d.Close()
}

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
