package dags

import (
	"errors"
	"os"
	"reflect"
	"strings"
	"testing"
	"testing/fstest"
)

func TestLibrary(t *testing.T) {
	fsys := fstest.MapFS{
		"train.yaml":        {Data: []byte("name: retrain-daily\nnodes: []\n")},
		"eval.yml":          {Data: []byte("# no name: found by file name\nnodes: []\n")},
		"broken.yaml":       {Data: []byte("name: [unclosed\n")},
		"json.yaml":         {Data: []byte(`{"name": "from-json", "nodes": []}`)},
		"notes.txt":         {Data: []byte("name: not-a-pipeline\n")},
		".hidden.yaml":      {Data: []byte("name: hidden\n")},
		"sub/nested.yaml":   {Data: []byte("name: nested\n")},
		"numeric-name.yaml": {Data: []byte("name: 2026\n")},
	}
	lib := NewLibrary(fsys)
	names, err := lib.List()
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"2026", "broken", "eval", "from-json", "retrain-daily"}
	if !reflect.DeepEqual(names, want) {
		t.Errorf("List = %v, want %v", names, want)
	}
	for _, tc := range []struct{ name, file string }{
		{"retrain-daily", "train.yaml"},
		{"train", "train.yaml"}, // file name, when no spec has that name
		{"eval", "eval.yml"},
		{"broken", "broken.yaml"},
		{"from-json", "json.yaml"},
		{"2026", "numeric-name.yaml"},
	} {
		file, data, err := lib.Find(tc.name)
		if err != nil || file != tc.file || string(data) != string(fsys[tc.file].Data) {
			t.Errorf("Find(%q) = %q, %q, %v; want %q", tc.name, file, data, err, tc.file)
		}
	}
	_, _, err = lib.Find("nope")
	if !errors.Is(err, ErrNotFound) {
		t.Errorf("Find(nope): %v is not ErrNotFound", err)
	}
	if want := `pipeline "nope" not found; known pipelines: 2026, broken, eval, from-json, retrain-daily`; err == nil || err.Error() != want {
		t.Errorf("Find(nope) error:\n got %v\nwant %s", err, want)
	}
	for _, hidden := range []string{"hidden", "nested", "not-a-pipeline"} {
		if _, _, err := lib.Find(hidden); !errors.Is(err, ErrNotFound) {
			t.Errorf("Find(%q): %v, want not found", hidden, err)
		}
	}
}

func TestLibraryDuplicates(t *testing.T) {
	fsys := fstest.MapFS{
		"a.yaml": {Data: []byte("name: same\n")},
		"b.yml":  {Data: []byte("name: same\n")},
		"c.yaml": {Data: []byte("name: other\n")},
	}
	lib := NewLibrary(fsys)
	_, _, err := lib.Find("same")
	if err == nil || !strings.Contains(err.Error(), `pipeline "same" is defined by more than one file: a.yaml, b.yml`) {
		t.Errorf("Find(same): %v", err)
	}
	if file, _, err := lib.Find("other"); err != nil || file != "c.yaml" {
		t.Errorf("Find(other) = %q, %v", file, err)
	}
	names, err := lib.List()
	if !reflect.DeepEqual(names, []string{"other", "same"}) || err == nil || !strings.Contains(err.Error(), "a.yaml, b.yml") {
		t.Errorf("List = %v, %v", names, err)
	}
}

// The library reads the folder on each call, so edits show at once.
func TestLibraryNoCache(t *testing.T) {
	fsys := fstest.MapFS{"a.yaml": {Data: []byte("name: first\n")}}
	lib := NewLibrary(fsys)
	if _, _, err := lib.Find("first"); err != nil {
		t.Fatal(err)
	}
	fsys["a.yaml"] = &fstest.MapFile{Data: []byte("name: second\n")}
	fsys["b.yaml"] = &fstest.MapFile{Data: []byte("name: third\n")}
	if _, _, err := lib.Find("second"); err != nil {
		t.Error(err)
	}
	if names, _ := lib.List(); !reflect.DeepEqual(names, []string{"second", "third"}) {
		t.Errorf("List = %v", names)
	}
	if names, err := NewLibrary(fstest.MapFS{}).List(); err != nil || len(names) != 0 {
		t.Errorf("empty library: %v, %v", names, err)
	}
	_, _, err := NewLibrary(fstest.MapFS{}).Find("x")
	if err == nil || !strings.Contains(err.Error(), "known pipelines: none") {
		t.Errorf("empty library Find: %v", err)
	}
}

// The example pipelines shipped in dags/examples parse and have a sound
// graph. (Their node types belong to the activities package, so types are
// checked there, not here.)
func TestExamplesParse(t *testing.T) {
	lib := NewLibrary(os.DirFS("examples"))
	names, err := lib.List()
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		file, data, err := lib.Find(name)
		if err != nil {
			t.Fatal(err)
		}
		s, err := Parse(file, data)
		if err != nil {
			t.Errorf("%s: %v", file, err)
			continue
		}
		if err := s.Validate(nil); err != nil {
			t.Errorf("%s: %v", file, err)
		}
	}
}
