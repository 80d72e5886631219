package models

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/retrain-ml/retrain/internal/s3store"
)

const modelFormat = 1

// Version is a complete, immutable model version: the content of its
// model.json.
type Version struct {
	Format  int    `json:"format"`
	Name    string `json:"name"`
	Version string `json:"version"`
	// Checksum identifies the artifacts as a whole: "sha256:" and the hex
	// SHA-256 of the sorted lines "<sha256> <size> <path>" of the files.
	Checksum string     `json:"checksum"`
	Files    []Artifact `json:"files"`
	Created  time.Time  `json:"created"`
	Meta
}

// Meta is what a registration records about a model besides its files.
type Meta struct {
	Metrics map[string]float64 `json:"metrics,omitempty"`
	// DataSnapshots identifies the training data, e.g. checkpoint or table
	// snapshot ids.
	DataSnapshots []string `json:"data_snapshots,omitempty"`
	// PipelineRun is the pipeline run that produced the model.
	PipelineRun string            `json:"pipeline_run,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	// LogicalTime is the time (RFC 3339) of the data the version was
	// trained for: its run's ${run.logical_time}. A backfill deploys the
	// versions of several dates in whatever order they finish; this is
	// what keeps an older date from replacing a newer one
	// ([Registry.Move]). Empty for versions registered without one: such
	// versions are not ordered.
	LogicalTime string `json:"logical_time,omitempty"`
	// Provenance is how the version was made, as the run that registered
	// it knew: nil for versions registered by hand, or before it was
	// recorded.
	Provenance *Provenance `json:"provenance,omitempty"`
}

// Provenance is what a model version was made of: the spec, params and
// retrain release of the run (Meta.PipelineRun) that registered it, and
// the nodes upstream of the registering node, each with the run that
// computed it (a rerun takes results over from an earlier run).
type Provenance struct {
	Pipeline     string         `json:"pipeline,omitempty"`
	Node         string         `json:"node,omitempty"`        // the node that registered the version
	SpecDigest   string         `json:"spec_digest,omitempty"` // "sha256:<hex>" of the spec's text
	Retrain      string         `json:"retrain,omitempty"`     // the release that resolved the run's plan
	Params       map[string]any `json:"params,omitempty"`      // every param of the run, bound
	ParamsDigest string         `json:"params_digest,omitempty"`
	// Trainer is the upstream node whose files the version holds (the
	// node its dir referred to), and TrainKey that node's content key;
	// TrainKey, like Origin.Key, is empty when the run knew no key.
	Trainer  string   `json:"trainer,omitempty"`
	TrainKey string   `json:"train_key,omitempty"`
	Upstream []Origin `json:"upstream,omitempty"`
}

// Origin is one node upstream of the node that registered a version.
type Origin struct {
	Node string `json:"node"`
	Type string `json:"type"`
	Run  string `json:"run"`           // the run that computed its result
	Key  string `json:"key,omitempty"` // its content key, when the run knew one
}

// LogicalDate is the date part of LogicalTime, or "".
func (m Meta) LogicalDate() string {
	if t, err := time.Parse(time.RFC3339, m.LogicalTime); err == nil {
		return t.Format(time.DateOnly)
	}
	return ""
}

// Artifact is one file of a version.
type Artifact struct {
	Path   string `json:"path"` // slash-separated, relative to the version's files
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"` // hex
	CRC32C string `json:"crc32c"` // base64, as S3 reports it
}

// Ref returns "name@version".
func (v Version) Ref() string { return v.Name + "@" + v.Version }

// Artifacts maps artifact paths (slash-separated, relative) to the local
// files holding them.
type Artifacts map[string]string

// DirArtifacts returns every regular file below dir, by its path relative to
// dir.
func DirArtifacts(dir string) (Artifacts, error) {
	a := Artifacts{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.Type().IsRegular() {
			return nil
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		a[filepath.ToSlash(rel)] = path
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("models: read artifacts: %w", err)
	}
	return a, nil
}

// FileArtifacts returns the given files by their base names.
func FileArtifacts(paths ...string) (Artifacts, error) {
	a := Artifacts{}
	for _, p := range paths {
		base := filepath.Base(p)
		if prev, dup := a[base]; dup {
			return nil, fmt.Errorf("models: artifacts %s and %s have the same name", prev, p)
		}
		a[base] = p
	}
	return a, nil
}

// Register stores artifacts as version of model name and returns the
// version. An empty version means the next free "vN".
//
// Register is idempotent: registering the same artifacts again, under the
// same version or with an empty version, returns the existing version
// (its recorded meta included) instead of creating another. A version that
// holds, or is being registered with, other artifacts fails with
// [ErrVersionExists].
func (r *Registry) Register(ctx context.Context, name string, artifacts Artifacts, version string, meta Meta) (Version, error) {
	if err := validateName("model", name); err != nil {
		return Version{}, err
	}
	if version != "" {
		if err := validateName("version", version); err != nil {
			return Version{}, err
		}
	}
	if len(artifacts) == 0 {
		return Version{}, errors.New("models: register: no artifacts")
	}
	files, err := hashArtifacts(artifacts)
	if err != nil {
		return Version{}, err
	}
	checksum := digest(files)
	log := r.log.With("model", name, "checksum", checksum)

	if version == "" {
		if version, err = r.claimNumber(ctx, name, checksum, meta.PipelineRun); err != nil {
			return Version{}, err
		}
	} else if err := r.claimVersion(ctx, name, version, checksum, meta.PipelineRun); err != nil {
		return Version{}, err
	}
	log = log.With("version", version)

	if v, err := r.Get(ctx, name, version); err == nil {
		log.InfoContext(ctx, "models: version already registered")
		return v, nil
	} else if !errors.Is(err, ErrNotFound) {
		return Version{}, err
	}

	// The claim makes this version ours to write: any other writer of its
	// files has the same checksum, so writes the same bytes.
	for _, f := range files {
		if err := r.upload(ctx, name, version, artifacts[f.Path], f); err != nil {
			return Version{}, err
		}
	}
	v := Version{
		Format:   modelFormat,
		Name:     name,
		Version:  version,
		Checksum: checksum,
		Files:    files,
		Created:  r.now().UTC(),
		Meta:     meta,
	}
	body, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return Version{}, fmt.Errorf("models: encode %s: %w", v.Ref(), err)
	}
	_, err = r.store.PutIfAbsent(ctx, modelKey(name, version), strings.NewReader(string(body)))
	if errors.Is(err, s3store.ErrExists) {
		// A concurrent registration of the same artifacts finished first.
		return r.Get(ctx, name, version)
	}
	if err != nil {
		return Version{}, fmt.Errorf("models: register %s: %w", v.Ref(), err)
	}
	// Explicitly named versions are indexed too, so that registering the
	// same artifacts without a version later finds this one.
	if _, err := r.indexDigest(ctx, name, checksum, version); err != nil {
		log.WarnContext(ctx, "models: cannot index version by checksum", "error", err)
	}
	log.InfoContext(ctx, "models: registered", "files", len(files))
	return v, nil
}

// upload stores one artifact unless an earlier attempt already did.
func (r *Registry) upload(ctx context.Context, name, version, local string, f Artifact) error {
	key := fileKey(name, version, f.Path)
	if info, err := r.store.Head(ctx, key); err == nil && info.Size == f.Size && info.CRC32C == f.CRC32C {
		return nil
	}
	file, err := os.Open(local)
	if err != nil {
		return fmt.Errorf("models: upload %s: %w", f.Path, err)
	}
	defer file.Close()
	info, err := r.store.Put(ctx, key, file)
	if err != nil {
		return fmt.Errorf("models: upload %s: %w", f.Path, err)
	}
	if info.Size != f.Size || info.CRC32C != f.CRC32C {
		return fmt.Errorf("models: %s changed while being registered", local)
	}
	return nil
}

// hashArtifacts reads every file once for its size and checksums.
func hashArtifacts(artifacts Artifacts) ([]Artifact, error) {
	files := make([]Artifact, 0, len(artifacts))
	for _, path := range slices.Sorted(maps.Keys(artifacts)) {
		if err := s3store.ValidateKey(path); err != nil {
			return nil, fmt.Errorf("models: artifact path: %w", err)
		}
		f, err := os.Open(artifacts[path])
		if err != nil {
			return nil, fmt.Errorf("models: %w", err)
		}
		sha := sha256.New()
		crc := crc32.New(crc32.MakeTable(crc32.Castagnoli))
		n, err := io.Copy(io.MultiWriter(sha, crc), f)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("models: read %s: %w", artifacts[path], err)
		}
		files = append(files, Artifact{
			Path:   path,
			Size:   n,
			SHA256: hex.EncodeToString(sha.Sum(nil)),
			CRC32C: base64.StdEncoding.EncodeToString(crc.Sum(nil)),
		})
	}
	return files, nil
}

func digest(files []Artifact) string {
	h := sha256.New()
	for _, f := range files {
		fmt.Fprintf(h, "%s %d %s\n", f.SHA256, f.Size, f.Path)
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

// Get returns a complete version, or an error wrapping ErrNotFound.
func (r *Registry) Get(ctx context.Context, name, version string) (Version, error) {
	if err := validateName("model", name); err != nil {
		return Version{}, err
	}
	if err := validateName("version", version); err != nil {
		return Version{}, err
	}
	b, _, err := r.store.GetBytes(ctx, modelKey(name, version))
	if errors.Is(err, s3store.ErrNotFound) {
		return Version{}, fmt.Errorf("%w: version %s@%s", ErrNotFound, name, version)
	}
	if err != nil {
		return Version{}, fmt.Errorf("models: get %s@%s: %w", name, version, err)
	}
	var v Version
	if err := json.Unmarshal(b, &v); err != nil {
		return Version{}, fmt.Errorf("models: decode %s@%s: %w", name, version, err)
	}
	if v.Format != modelFormat {
		return Version{}, fmt.Errorf("models: %s@%s has format %d, this version reads %d", name, version, v.Format, modelFormat)
	}
	return v, nil
}

// List returns the complete versions of model name, oldest first.
func (r *Registry) List(ctx context.Context, name string) ([]Version, error) {
	if err := validateName("model", name); err != nil {
		return nil, err
	}
	dirs, err := r.store.ListPrefixes(ctx, modelDir(name)+"versions/")
	if err != nil {
		return nil, fmt.Errorf("models: list %s: %w", name, err)
	}
	var versions []Version
	for _, d := range dirs {
		v, err := r.Get(ctx, name, d)
		if errors.Is(err, ErrNotFound) {
			continue // incomplete: invisible
		}
		if err != nil {
			return nil, err
		}
		versions = append(versions, v)
	}
	slices.SortFunc(versions, func(a, b Version) int {
		return cmp.Or(a.Created.Compare(b.Created), compareVersions(a.Version, b.Version))
	})
	return versions, nil
}

// compareVersions orders "v2" before "v10", and other names as strings.
func compareVersions(a, b string) int {
	na, oka := versionNumber(a)
	nb, okb := versionNumber(b)
	if oka && okb {
		return cmp.Compare(na, nb)
	}
	return strings.Compare(a, b)
}

// Models returns the names of all models.
func (r *Registry) Models(ctx context.Context) ([]string, error) {
	names, err := r.store.ListPrefixes(ctx, root)
	if err != nil {
		return nil, fmt.Errorf("models: list models: %w", err)
	}
	return names, nil
}

// Open streams one artifact of a version. The Store verifies the object's
// checksum; the caller may compare the bytes with Artifact.SHA256.
func (r *Registry) Open(ctx context.Context, v Version, path string) (io.ReadCloser, error) {
	for _, f := range v.Files {
		if f.Path == path {
			body, _, err := r.store.Get(ctx, fileKey(v.Name, v.Version, path))
			if err != nil {
				return nil, fmt.Errorf("models: open %s of %s: %w", path, v.Ref(), err)
			}
			return body, nil
		}
	}
	return nil, fmt.Errorf("%w: %s has no artifact %q", ErrNotFound, v.Ref(), path)
}

// Download writes the artifacts of v below dir, verifying each file's size
// and SHA-256; a file appears under its final name only once verified.
func (r *Registry) Download(ctx context.Context, v Version, dir string) error {
	for _, f := range v.Files {
		if err := r.download(ctx, v, f, dir); err != nil {
			return err
		}
	}
	return nil
}

func (r *Registry) download(ctx context.Context, v Version, f Artifact, dir string) error {
	// model.json is data from the bucket: its paths must not reach
	// outside dir, whoever wrote it.
	if err := s3store.ValidateKey(f.Path); err != nil {
		return fmt.Errorf("models: download %s: artifact path: %w", v.Ref(), err)
	}
	dst := filepath.Join(dir, filepath.FromSlash(f.Path))
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return fmt.Errorf("models: download %s: %w", f.Path, err)
	}
	body, err := r.Open(ctx, v, f.Path)
	if err != nil {
		return err
	}
	defer body.Close()
	tmp, err := os.CreateTemp(filepath.Dir(dst), ".download-*")
	if err != nil {
		return fmt.Errorf("models: download %s: %w", f.Path, err)
	}
	defer os.Remove(tmp.Name())
	sha := sha256.New()
	n, err := io.Copy(io.MultiWriter(tmp, sha), body)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("models: download %s of %s: %w", f.Path, v.Ref(), err)
	}
	if n != f.Size || hex.EncodeToString(sha.Sum(nil)) != f.SHA256 {
		return fmt.Errorf("models: download %s of %s: content does not match model.json", f.Path, v.Ref())
	}
	return os.Rename(tmp.Name(), dst)
}
