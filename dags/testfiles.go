package dags

import (
	"path"
	"strings"
)

// Test file suffixes: PIPELINE.test.yaml, beside PIPELINE.yaml, holds the
// test cases `retrain test` runs against that pipeline. A pipeline folder
// may hold them; they are not pipelines.
const (
	TestFileSuffix    = ".test.yaml"
	testFileSuffixYML = ".test.yml"
)

// IsTestFile reports whether a file name (or path) is a pipeline test file,
// NAME.test.yaml or NAME.test.yml, which a pipeline folder's readers skip.
func IsTestFile(name string) bool {
	base := path.Base(strings.ReplaceAll(name, "\\", "/"))
	for _, suf := range []string{TestFileSuffix, testFileSuffixYML} {
		if len(base) > len(suf) && strings.HasSuffix(base, suf) {
			return true
		}
	}
	return false
}
