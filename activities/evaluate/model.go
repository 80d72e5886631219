package evaluate

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/retrain-ml/retrain/activities/internal/objects"
	"github.com/retrain-ml/retrain/activities/split"
	"github.com/retrain-ml/retrain/activities/train"
	"github.com/retrain-ml/retrain/errtype"
	"github.com/retrain-ml/retrain/internal/dataset"
	"github.com/retrain-ml/retrain/internal/models"
	"github.com/retrain-ml/retrain/internal/s3store"
	"github.com/retrain-ml/retrain/internal/trainer"
	"github.com/retrain-ml/retrain/nodetype"
)

// The roles an evaluator program is told (RETRAIN_MODEL_ROLE).
const (
	RoleCandidate = "candidate"
	RoleBaseline  = "baseline"
)

// attempt is one attempt of an evaluate node: the rows it scores and the
// local files an evaluator program gets, made on first use and removed
// when the attempt ends.
type attempt struct {
	e   *evaluator
	in  nodetype.Input
	w   With
	log *slog.Logger
	sd  *split.Data
	// data is the dataset in memory, loaded only for an evaluator program
	// (evalData); the builtin scorer streams it.
	data *dataset.Data

	dir      string // scratch folder; "" until needed
	dataDir  string // the rows in w.DataFormat, once written
	fileRows []int  // for parquet: data row i is row fileRows[i] of the files
}

// scratch returns the attempt's scratch folder, creating it.
func (a *attempt) scratch() (string, error) {
	if a.dir == "" {
		dir, err := os.MkdirTemp("", "retrain-evaluate-")
		if err != nil {
			return "", err
		}
		a.dir = dir
	}
	return a.dir, nil
}

func (a *attempt) cleanup() {
	if a.dir != "" {
		os.RemoveAll(a.dir)
	}
}

// notBuiltin is the error for a model without the builtin trainer's model
// file when the node has no evaluator program to score it with.
func notBuiltin(what string) error {
	return nodetype.Permanent(errtype.BadInput,
		"%s has no %s, so it is not a model of the builtin trainer: to score it with your evaluator program set evaluator: command and argv",
		what, train.ModelFile)
}

// scoreCandidate scores the candidate folder: with the builtin scorer when
// it holds the builtin trainer's model file, else with the evaluator
// program. It returns the candidate's id too: a digest of its files.
func (a *attempt) scoreCandidate(ctx context.Context) (scored, string, error) {
	store := a.e.store
	key, err := objects.StoreKey(store, a.w.Candidate)
	if err != nil {
		return scored{}, "", nodetype.Permanent(errtype.BadInput, "candidate: %v", err)
	}
	prefix := strings.TrimSuffix(key, "/") + "/"
	uri := objects.KeyURI(store, prefix)
	raw, err := objects.ReadObject(ctx, store, prefix+train.ModelFile)
	switch {
	case err == nil:
		m, err := trainer.ReadModel(bytes.NewReader(raw))
		if err != nil {
			return scored{}, "", nodetype.Permanent(errtype.BadInput, "candidate %s: %v", objects.KeyURI(store, prefix+train.ModelFile), err)
		}
		if a.w.Evaluator == CommandEvaluator {
			a.log.Info("the candidate is a model of the builtin trainer: scored by the builtin scorer, not argv", "candidate", uri)
		}
		sum := sha256.Sum256(raw)
		s, err := a.score(ctx, m, "candidate")
		if err != nil {
			return scored{}, "", err
		}
		return s, "sha256:" + hex.EncodeToString(sum[:8]), nil
	case !errors.Is(err, s3store.ErrNotFound):
		return scored{}, "", objects.StoreError("candidate: read "+objects.KeyURI(store, prefix+train.ModelFile), err)
	}

	what := "candidate " + uri
	if len(a.w.Argv) == 0 {
		return scored{}, "", notBuiltin(what)
	}
	dir, err := a.modelDir(RoleCandidate)
	if err != nil {
		return scored{}, "", err
	}
	defer os.RemoveAll(dir)
	if _, err := objects.DownloadPrefix(ctx, store, prefix, dir); err != nil {
		return scored{}, "", objects.StoreError("candidate: download "+uri, err)
	}
	id, err := dirDigest(dir)
	if err != nil {
		return scored{}, "", fmt.Errorf("candidate: %w", err)
	}
	s, err := a.runEvaluator(ctx, RoleCandidate, what, dir)
	return s, id, err
}

// scoreBaseline scores a registered version: with the builtin scorer when
// it holds the builtin trainer's model file, else with the evaluator
// program.
func (a *attempt) scoreBaseline(ctx context.Context, reg *models.Registry, v models.Version) (scored, error) {
	what := fmt.Sprintf("baseline %s@%s (version %s)", a.w.Model, a.w.Baseline, v.Version)
	if slices.ContainsFunc(v.Files, func(f models.Artifact) bool { return f.Path == train.ModelFile }) {
		m, err := openVersionModel(ctx, reg, v)
		if err != nil {
			return scored{}, err
		}
		s, err := a.score(ctx, m, "baseline "+v.Ref())
		if err != nil {
			return scored{}, err
		}
		return s, nil
	}
	if len(a.w.Argv) == 0 {
		return scored{}, notBuiltin(what)
	}
	dir, err := a.modelDir(RoleBaseline)
	if err != nil {
		return scored{}, err
	}
	defer os.RemoveAll(dir)
	if err := reg.Download(ctx, v, dir); err != nil {
		return scored{}, fmt.Errorf("%s: %w", what, err)
	}
	return a.runEvaluator(ctx, RoleBaseline, what, dir)
}

// modelDir is the local folder a model's files are downloaded to.
func (a *attempt) modelDir(role string) (string, error) {
	scratch, err := a.scratch()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(scratch, "model-"+role)
	return dir, os.MkdirAll(dir, 0o755)
}

// openVersionModel reads the builtin model of a registered version.
func openVersionModel(ctx context.Context, reg *models.Registry, v models.Version) (*trainer.Model, error) {
	body, err := reg.Open(ctx, v, train.ModelFile)
	if err != nil {
		return nil, fmt.Errorf("baseline %s: %w", v.Ref(), err)
	}
	defer body.Close()
	m, err := trainer.ReadModel(body)
	if err != nil {
		return nil, nodetype.Permanent(errtype.BadInput, "baseline %s: %v", v.Ref(), err)
	}
	return m, nil
}

// dirDigest identifies a model folder by its files: their paths and
// contents, as "sha256:" and 16 hex digits like a builtin model's id.
func dirDigest(dir string) (string, error) {
	var paths []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			paths = append(paths, p)
		}
		return err
	})
	if err != nil {
		return "", err
	}
	slices.Sort(paths)
	h := sha256.New()
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			return "", err
		}
		fh := sha256.New()
		_, err = io.Copy(fh, f)
		f.Close()
		if err != nil {
			return "", err
		}
		rel, _ := filepath.Rel(dir, p)
		fmt.Fprintf(h, "%s\x00%x\n", filepath.ToSlash(rel), fh.Sum(nil))
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)[:8]), nil
}
