package dags

import (
	"testing"
	"testing/fstest"
)

func TestIsTestFile(t *testing.T) {
	for name, want := range map[string]bool{
		"ctr.test.yaml": true, "dir/ctr.test.yml": true, "ctr.yaml": false, "test.yaml": false, ".test.yaml": false, "ctr.tests.yaml": false,
	} {
		if got := IsTestFile(name); got != want {
			t.Errorf("IsTestFile(%q) = %v, want %v", name, got, want)
		}
	}
}

// A pipeline folder's test files are not pipelines: the library neither
// lists them nor finds a pipeline by their name.
func TestLibrarySkipsTestFiles(t *testing.T) {
	lib := NewLibrary(fstest.MapFS{
		"ctr.yaml":      {Data: []byte("name: ctr\nnodes: []\n")},
		"ctr.test.yaml": {Data: []byte("cases: []\n")},
	})
	names, err := lib.List()
	if err != nil || len(names) != 1 || names[0] != "ctr" {
		t.Fatalf("List = %v, %v; want [ctr]", names, err)
	}
	if _, _, err := lib.Find("ctr.test"); err == nil {
		t.Fatal("found a pipeline named after a test file")
	}
}
