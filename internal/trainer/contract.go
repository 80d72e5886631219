package trainer

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strconv"
)

// Environment variables a command trainer is started with.
const (
	// EnvTrainData locates the training data (a Parquet file, a directory
	// of them, or an s3:// prefix).
	EnvTrainData = "RETRAIN_TRAIN_DATA"
	// EnvEvalData locates held-out data, like EnvTrainData.
	EnvEvalData = "RETRAIN_EVAL_DATA"
	// EnvCheckpointURI is where the trainer writes checkpoints (a local
	// directory or an s3:// prefix); it prints each one's URI.
	EnvCheckpointURI = "RETRAIN_CHECKPOINT_URI"
	// EnvResumeFrom, when set, is the URI of the checkpoint to resume from:
	// the last one the trainer printed before an earlier attempt ended.
	EnvResumeFrom = "RETRAIN_RESUME_FROM"
	// EnvModelOut is where the trainer writes the final model.
	EnvModelOut = "RETRAIN_MODEL_OUT"
)

// Environment variables a command evaluator (an evaluate node's argv) is
// started with, once per model it scores. EnvEvalData locates the data to
// score, in the node's data_format.
const (
	// EnvModelDir is a local folder holding the model's files: what its
	// trainer wrote to EnvModelOut, as registered.
	EnvModelDir = "RETRAIN_MODEL_DIR"
	// EnvMetricsOut is the path of the JSON file the evaluator writes:
	// {"rows": N, "overall": {"auc": ..., ...}, "slices": {"<value>": {"rows": n, ...}}}.
	EnvMetricsOut = "RETRAIN_METRICS_OUT"
	// EnvPredictionsOut is where the evaluator may write its predictions
	// as a .npy file: float32 [N], the probability of label 1 of each row
	// of the data, in the data's order.
	EnvPredictionsOut = "RETRAIN_PREDICTIONS_OUT"
	// EnvModelRole is candidate or baseline.
	EnvModelRole = "RETRAIN_MODEL_ROLE"
)

// QuoteNonFinite quotes the bare NaN, Infinity and -Infinity tokens that
// Python's json module writes for non-finite floats (not JSON), so that
// encoding/json reads a program's output; strings are left alone.
func QuoteNonFinite(b []byte) []byte { return quoteNonFinite(b) }

// Env is a command trainer's environment.
type Env struct {
	TrainData     string
	EvalData      string
	CheckpointURI string
	ResumeFrom    string
	ModelOut      string
}

// Environ returns e as NAME=value entries, for exec.Cmd.Env; empty values
// are left out, so a first attempt has no RETRAIN_RESUME_FROM at all.
func (e Env) Environ() []string {
	var env []string
	for _, kv := range [...][2]string{
		{EnvTrainData, e.TrainData},
		{EnvEvalData, e.EvalData},
		{EnvCheckpointURI, e.CheckpointURI},
		{EnvResumeFrom, e.ResumeFrom},
		{EnvModelOut, e.ModelOut},
	} {
		if kv[1] != "" {
			env = append(env, kv[0]+"="+kv[1])
		}
	}
	return env
}

// Progress is a training progress record: the builtin trainer reports one
// per step (or every ProgressEvery steps), and a command trainer prints them
// as JSON lines with these field names.
type Progress struct {
	Step           int64   `json:"step"`                 // steps completed
	Loss           float64 `json:"loss"`                 // mean training loss of the step's batch
	EmbMaxNorm     float64 `json:"emb_max_norm"`         // largest L2 norm of an embedding row updated since the last record
	ExamplesPerSec float64 `json:"examples_per_sec"`     // throughput since the last record
	CheckpointURI  string  `json:"checkpoint,omitempty"` // checkpoint written at this step, if any
	// Total is the step training will end at, when the trainer knows it
	// (epochs × steps per epoch): `retrain status --follow`, the Web UI
	// and the report then show a bar, steps/s and an ETA.
	Total int64 `json:"total,omitempty"`
	// ShardEpoch and ShardDone are, with shard_data, where the ranks
	// stood in their shares at this line's checkpoint: the epoch, and
	// per rank (or one figure for every rank) how many rows of its share
	// of that epoch (of its rest share, in the rest's epoch) it had
	// trained, counted in the share's own row order. A gang resumed with
	// another world size trains the rest of that epoch from there.
	ShardEpoch int     `json:"shard_epoch,omitempty"`
	ShardDone  []int64 `json:"shard_done,omitempty"`
}

// EventKind tells a progress record from a log line.
type EventKind uint8

const (
	LogLine       EventKind = iota // any line that is not a progress record
	ProgressEvent                  // a JSON object with an integer "step"
)

// Field is a set of the optional fields of a progress line.
type Field uint8

// The optional fields of a progress line, by their JSON names: loss,
// emb_max_norm, examples_per_sec, checkpoint, total.
const (
	FieldLoss Field = 1 << iota
	FieldEmbMaxNorm
	FieldExamplesPerSec
	FieldCheckpoint
	FieldTotal
	FieldShard // shard_epoch and shard_done, both
)

// Event is one line of a command trainer's output.
type Event struct {
	Kind     EventKind
	Line     string   // the line as printed, without its line ending
	Progress Progress // for a ProgressEvent
	Fields   Field    // the fields the line set, besides step
}

// Has reports whether the line set field f.
func (e Event) Has(f Field) bool { return e.Fields&f != 0 }

// ParseLine parses one line of a command trainer's output. A line is a
// progress record when it is a JSON object with an integer "step"; any other
// line, JSON or not, is a log line. The numbers may be NaN, Infinity or
// -Infinity, bare as Python's json.dumps prints them or quoted, so that a
// diverging trainer's record is read, not mistaken for a log line.
func ParseLine(line string) Event {
	e := Event{Kind: LogLine, Line: line}
	b := bytes.TrimSpace([]byte(line))
	if len(b) < 2 || b[0] != '{' {
		return e
	}
	var rec struct {
		Step           json.RawMessage `json:"step"`
		Loss           json.RawMessage `json:"loss"`
		EmbMaxNorm     json.RawMessage `json:"emb_max_norm"`
		ExamplesPerSec json.RawMessage `json:"examples_per_sec"`
		Checkpoint     *string         `json:"checkpoint"`
		Total          json.RawMessage `json:"total"`
		ShardEpoch     json.RawMessage `json:"shard_epoch"`
		ShardDone      json.RawMessage `json:"shard_done"`
	}
	if json.Unmarshal(quoteNonFinite(b), &rec) != nil {
		return e
	}
	step, ok := parseNumber(rec.Step)
	if !ok || step != float64(int64(step)) {
		return e
	}
	e.Progress.Step = int64(step)
	for _, f := range []struct {
		raw   json.RawMessage
		dst   *float64
		field Field
	}{
		{rec.Loss, &e.Progress.Loss, FieldLoss},
		{rec.EmbMaxNorm, &e.Progress.EmbMaxNorm, FieldEmbMaxNorm},
		{rec.ExamplesPerSec, &e.Progress.ExamplesPerSec, FieldExamplesPerSec},
	} {
		if v, ok := parseNumber(f.raw); ok {
			*f.dst = v
			e.Fields |= f.field
		}
	}
	if rec.Checkpoint != nil && *rec.Checkpoint != "" {
		e.Progress.CheckpointURI = *rec.Checkpoint
		e.Fields |= FieldCheckpoint
	}
	// A total that is not a positive whole number is ignored, as an
	// unknown total: it only draws a bar.
	if t, ok := parseNumber(rec.Total); ok && t > 0 && t == float64(int64(t)) {
		e.Progress.Total = int64(t)
		e.Fields |= FieldTotal
	}
	if epoch, done, ok := parseShardPosition(rec.ShardEpoch, rec.ShardDone); ok {
		e.Progress.ShardEpoch, e.Progress.ShardDone = epoch, done
		e.Fields |= FieldShard
	}
	e.Kind = ProgressEvent
	return e
}

// maxShardDone bounds the ranks a shard_done list may name.
const maxShardDone = 1 << 16

// parseShardPosition reads shard_epoch (a whole number, 0 or more) and
// shard_done (a whole number, or a list of them, each 0 or more); a
// position with anything else is absent, as a checkpoint without one.
func parseShardPosition(epochRaw, doneRaw json.RawMessage) (int, []int64, bool) {
	epoch, ok := parseNumber(epochRaw)
	if !ok || epoch < 0 || epoch != float64(int64(epoch)) || epoch > 1<<30 {
		return 0, nil, false
	}
	whole := func(v float64) bool { return v >= 0 && v == float64(int64(v)) && v < 1<<62 }
	if v, ok := parseNumber(doneRaw); ok {
		if !whole(v) {
			return 0, nil, false
		}
		return int(epoch), []int64{int64(v)}, true
	}
	var list []any
	d := json.NewDecoder(bytes.NewReader(doneRaw))
	d.UseNumber()
	if len(doneRaw) == 0 || d.Decode(&list) != nil || len(list) == 0 || len(list) > maxShardDone {
		return 0, nil, false
	}
	done := make([]int64, len(list))
	for i, x := range list {
		n, ok := x.(json.Number) // not a string that reads as one
		if !ok {
			return 0, nil, false
		}
		v, err := n.Float64()
		if err != nil || !whole(v) {
			return 0, nil, false
		}
		done[i] = int64(v)
	}
	return int(epoch), done, true
}

// parseNumber reads a JSON number, or a string strconv reads as a float
// ("NaN", "Infinity", "-inf", "1e3"); null and anything else are absent.
func parseNumber(raw json.RawMessage) (float64, bool) {
	if len(raw) == 0 {
		return 0, false
	}
	s := string(raw)
	if raw[0] == '"' {
		if err := json.Unmarshal(raw, &s); err != nil {
			return 0, false
		}
	}
	v, err := strconv.ParseFloat(s, 64)
	return v, err == nil
}

// quoteNonFinite quotes the bare NaN, Infinity and -Infinity tokens Python
// writes for non-finite floats, which are not JSON, leaving strings alone.
func quoteNonFinite(b []byte) []byte {
	if !bytes.Contains(b, []byte("NaN")) && !bytes.Contains(b, []byte("Infinity")) {
		return b
	}
	out := make([]byte, 0, len(b)+8)
	inString, escaped := false, false
	for i := 0; i < len(b); i++ {
		c := b[i]
		if inString {
			out = append(out, c)
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
			continue
		}
		if c == '"' {
			inString = true
			out = append(out, c)
			continue
		}
		for _, tok := range []string{"NaN", "-Infinity", "Infinity"} {
			if bytes.HasPrefix(b[i:], []byte(tok)) {
				out = append(out, '"')
				out = append(out, tok...)
				out = append(out, '"')
				i += len(tok) - 1
				c = 0
				break
			}
		}
		if c != 0 {
			out = append(out, c)
		}
	}
	return out
}

// MaxLine is the longest line ReadEvents passes on whole; the rest of a
// longer line is dropped, so that a trainer printing a huge line can neither
// exhaust memory nor stop the stream.
const MaxLine = 64 << 10

// ReadEvents reads a command trainer's output line by line and calls fn with
// each line's event, until r ends (it returns nil) or fails or fn returns an
// error (it returns that error). The caller typically applies a [Guard] and
// heartbeats in fn, and kills the trainer when fn fails.
func ReadEvents(r io.Reader, fn func(Event) error) error {
	br := bufio.NewReaderSize(r, MaxLine)
	for {
		line, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			// Keep the first MaxLine bytes, drop the rest of the line.
			kept := string(line)
			for errors.Is(err, bufio.ErrBufferFull) {
				_, err = br.ReadSlice('\n')
			}
			line = []byte(kept)
		}
		if len(line) > 0 {
			line = bytes.TrimSuffix(line, []byte("\n"))
			line = bytes.TrimSuffix(line, []byte("\r"))
			if ferr := fn(ParseLine(string(line))); ferr != nil {
				return ferr
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// Environment variables of a rank that holds only its share of the
// training data (a train node's shard_data): RETRAIN_TRAIN_DATA is then
// that share alone, and these say which it is, so that a trainer can plan
// its steps and scale its learning rate.
const (
	// EnvShardIndex is the share's index, the rank's global rank.
	EnvShardIndex = "RETRAIN_SHARD_INDEX"
	// EnvShardCount is how many shares the epoch's rows were cut into
	// (WORLD_SIZE).
	EnvShardCount = "RETRAIN_SHARD_COUNT"
	// EnvShardRows is the rows of this rank's share.
	EnvShardRows = "RETRAIN_SHARD_ROWS"
	// EnvShardMinRows is the rows of the smallest share: a synchronous
	// trainer runs the same number of steps on every rank, planned from it
	// (and gives the rest a weight of zero, or runs on; it must not drop
	// rows to keep every row once).
	EnvShardMinRows = "RETRAIN_SHARD_MIN_ROWS"
	// EnvGlobalRows is the rows of every share together: the epoch.
	EnvGlobalRows = "RETRAIN_GLOBAL_ROWS"
	// EnvShardEpoch is the epoch the assignment was drawn for.
	EnvShardEpoch = "RETRAIN_SHARD_EPOCH"
)

// A gang resumed with another world size than the one that wrote its
// checkpoint, mid-epoch, gets besides its share (for the later epochs)
// its share of the rest of the interrupted epoch: the rows of that epoch
// the checkpoint had not trained, assigned afresh to the new ranks. The
// trainer trains these first, then goes on with the next epoch on
// RETRAIN_TRAIN_DATA. The node knows the position only from the
// checkpoint's progress line (Progress.ShardEpoch and ShardDone).
const (
	// EnvShardRestData is the rank's share of the rest, a folder in the
	// node's data_format (possibly of no rows).
	EnvShardRestData = "RETRAIN_SHARD_REST_DATA"
	// EnvShardRestEpoch is the interrupted epoch.
	EnvShardRestEpoch = "RETRAIN_SHARD_REST_EPOCH"
	// EnvShardRestRows, EnvShardRestMinRows and EnvShardRestGlobalRows
	// are the rest's as EnvShardRows and so on are the epoch's.
	EnvShardRestRows       = "RETRAIN_SHARD_REST_ROWS"
	EnvShardRestMinRows    = "RETRAIN_SHARD_REST_MIN_ROWS"
	EnvShardRestGlobalRows = "RETRAIN_SHARD_REST_GLOBAL_ROWS"
	// EnvShardRestDone is how many rows of its rest share the rank had
	// trained at the checkpoint (a gang of the same size resumed within
	// the rest); it goes on after them.
	EnvShardRestDone = "RETRAIN_SHARD_REST_DONE"
)

// ShardRest is a rank's share of the rest of an interrupted epoch.
type ShardRest struct {
	Data                      string
	Epoch                     int
	Rows, MinRows, GlobalRows int64
	Done                      int64
	Files                     int // with Stream, the files its folder will hold
}

// With stream_data the trainer starts before its share is local: each
// Parquet file of its folder appears whole (never partly written), in the
// order of the names the share's rows are in, and a file .complete once
// they all have; the trainer reads them as they come.
const (
	// EnvShardStream is 1 when the share's files arrive while the
	// trainer runs.
	EnvShardStream = "RETRAIN_SHARD_STREAM"
	// EnvShardFiles is the Parquet files RETRAIN_TRAIN_DATA will hold;
	// EnvShardRestFiles those of RETRAIN_SHARD_REST_DATA.
	EnvShardFiles     = "RETRAIN_SHARD_FILES"
	EnvShardRestFiles = "RETRAIN_SHARD_REST_FILES"
	// EnvShardWindow, when set, is the most files each of the rank's
	// folders holds at once: the host writes the next only once the
	// trainer has removed one it read, which it must do.
	EnvShardWindow = "RETRAIN_SHARD_WINDOW"
)

// ShardEnv is a rank's share of the training data.
type ShardEnv struct {
	Data                      string // its folder: RETRAIN_TRAIN_DATA
	Index, Count              int
	Rows, MinRows, GlobalRows int64
	Epoch                     int
	Rest                      *ShardRest // nil: no rest to train first
	Stream                    bool       // the files arrive while the trainer runs
	Files                     int        // with Stream, the files Data will hold
	Window                    int        // with Stream, above 0: the files a folder holds at once
}

// Environ returns the share as NAME=value entries; RETRAIN_TRAIN_DATA among
// them overrides the whole split's.
func (s ShardEnv) Environ() []string {
	env := []string{
		EnvTrainData + "=" + s.Data,
		EnvShardIndex + "=" + strconv.Itoa(s.Index),
		EnvShardCount + "=" + strconv.Itoa(s.Count),
		EnvShardRows + "=" + strconv.FormatInt(s.Rows, 10),
		EnvShardMinRows + "=" + strconv.FormatInt(s.MinRows, 10),
		EnvGlobalRows + "=" + strconv.FormatInt(s.GlobalRows, 10),
		EnvShardEpoch + "=" + strconv.Itoa(s.Epoch),
	}
	if s.Stream {
		env = append(env, EnvShardStream+"=1", EnvShardFiles+"="+strconv.Itoa(s.Files))
		if s.Window > 0 {
			env = append(env, EnvShardWindow+"="+strconv.Itoa(s.Window))
		}
	}
	if r := s.Rest; r != nil {
		if s.Stream {
			env = append(env, EnvShardRestFiles+"="+strconv.Itoa(r.Files))
		}
		env = append(env,
			EnvShardRestData+"="+r.Data,
			EnvShardRestEpoch+"="+strconv.Itoa(r.Epoch),
			EnvShardRestRows+"="+strconv.FormatInt(r.Rows, 10),
			EnvShardRestMinRows+"="+strconv.FormatInt(r.MinRows, 10),
			EnvShardRestGlobalRows+"="+strconv.FormatInt(r.GlobalRows, 10),
			EnvShardRestDone+"="+strconv.FormatInt(r.Done, 10),
		)
	}
	return env
}
