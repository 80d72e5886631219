package evaluate

import (
	"encoding/json"
	"fmt"
	"slices"

	"github.com/retrain-ml/retrain/activities/split"
	"github.com/retrain-ml/retrain/nodetype"

	"github.com/retrain-ml/retrain/errtype"
	"github.com/retrain-ml/retrain/internal/dataset"
)

// EvalScope says which rows a model was scored on: the split (its URI
// names one checkpoint of rows), the dataset of it, the date window and
// dates of those rows and their count. An evaluate node records it for the
// candidate and the baseline, and the gate refuses to compare metrics
// whose scopes differ.
type EvalScope struct {
	Split   string         `json:"split"`
	Dataset string         `json:"dataset"`
	Window  dataset.Window `json:"window"`
	Dates   []string       `json:"dates"`
	Rows    int            `json:"rows"`
}

// evalScope is the scope of rows of a split's dataset.
func evalScope(sd *split.Data, uri, name string, rows int) (EvalScope, error) {
	dates := sd.Record.EvalDates
	if name == split.TrainDataset {
		dates = sd.Record.TrainDates
	}
	if sd.Record.Window.Start == "" || len(dates) == 0 {
		return EvalScope{}, nodetype.Permanent(errtype.BadInput,
			"data: the split at %s records no date window (it was made by an older retrain); rerun its split node", uri)
	}
	return EvalScope{
		Split: uri, Dataset: name, Rows: rows, Dates: slices.Clone(dates),
		Window: dataset.Window{Start: dates[0], End: dates[len(dates)-1]},
	}, nil
}

// String is the scope in words.
func (s EvalScope) String() string {
	return fmt.Sprintf("%d %s rows of %s (%s)", s.Rows, s.Dataset, s.Window, s.Split)
}

// ParseScope reads a scope from an output value (nil: none given).
func ParseScope(what string, v any) (*EvalScope, error) {
	if v == nil {
		return nil, nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	var s EvalScope
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("%s: want an evaluation's data record {split, dataset, window, dates, rows}: %v", what, err)
	}
	return &s, nil
}

// SameScope fails when the candidate and the baseline were scored on
// different rows: a gate over such metrics would compare models on
// different data and could pass a worse model.
func SameScope(cand, base *EvalScope) error {
	if cand == nil || base == nil {
		return nil
	}
	if cand.Split == base.Split && cand.Dataset == base.Dataset && cand.Rows == base.Rows && slices.Equal(cand.Dates, base.Dates) {
		return nil
	}
	return fmt.Errorf("refusing to compare: the candidate was evaluated on %s and the baseline on %s; "+
		"evaluate both on the same split, dataset and dates", cand, base)
}
