package pipetest

import (
	"context"
	"encoding/xml"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/retrain-ml/retrain/dags"
)

// Find returns the test files under paths: a file is itself, a folder
// every NAME.test.yaml (or .yml) in it and below, hidden folders aside.
func Find(paths []string) ([]string, error) {
	var files []string
	for _, p := range paths {
		st, err := os.Stat(p)
		if err != nil {
			return nil, err
		}
		if !st.IsDir() {
			files = append(files, p)
			continue
		}
		err = filepath.WalkDir(p, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() && path != p && strings.HasPrefix(d.Name(), ".") {
				return filepath.SkipDir
			}
			if !d.IsDir() && dags.IsTestFile(d.Name()) {
				files = append(files, path)
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	slices.Sort(files)
	return slices.Compact(files), nil
}

// Report is what a `retrain test` run found: each file's cases, or why
// the file could not be run.
type Report struct {
	Files []FileReport
	Wall  time.Duration
}

// FileReport is one test file's outcome.
type FileReport struct {
	Path  string
	Error error // the file or its pipeline did not load: no case ran
	Cases []CaseResult
}

// Failed counts the failed cases, a file that did not load counting one.
func (r *Report) Failed() int {
	n := 0
	for _, f := range r.Files {
		if f.Error != nil {
			n++
		}
		for _, c := range f.Cases {
			if !c.Passed {
				n++
			}
		}
	}
	return n
}

// Cases counts the cases run.
func (r *Report) Cases() int {
	n := 0
	for _, f := range r.Files {
		n += len(f.Cases)
	}
	return n
}

// RunFiles loads and runs each test file, printing a line per case to out
// as it ends (and, for a failed one, what did not match).
func (r *Runner) RunFiles(ctx context.Context, files []string, out io.Writer) *Report {
	started := time.Now()
	rep := &Report{}
	for _, path := range files {
		if ctx.Err() != nil {
			break
		}
		fr := FileReport{Path: path}
		s, err := r.Load(path)
		if err != nil {
			fr.Error = err
			fmt.Fprintf(out, "FAIL %s: not run:\n%s\n", path, indent(err.Error(), "    "))
			rep.Files = append(rep.Files, fr)
			continue
		}
		for _, c := range s.File.Cases {
			if ctx.Err() != nil {
				break
			}
			res := r.runCase(s, c)
			fr.Cases = append(fr.Cases, res)
			PrintCase(out, res)
		}
		rep.Files = append(rep.Files, fr)
	}
	rep.Wall = time.Since(started)
	return rep
}

// PrintCase prints a case's line, and on failure what did not match and
// the node table, expected against actual.
func PrintCase(out io.Writer, c CaseResult) {
	verdict := "PASS"
	if !c.Passed {
		verdict = "FAIL"
	}
	fmt.Fprintf(out, "%s %s:%d: %s / %s (%s; run time %s)\n", verdict, c.File, c.Pos.Line, c.Pipeline, c.Case,
		c.Wall.Round(time.Millisecond), fmtRunTime(c.RunTime))
	if c.Passed {
		return
	}
	for _, f := range c.Failures {
		fmt.Fprintf(out, "    %s\n", f)
	}
	if len(c.Table) == 0 {
		return
	}
	fmt.Fprintln(out, "    nodes:")
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "      node\texpected\tactual")
	for _, row := range c.Table {
		mark := " "
		if row.Mismatch {
			mark = "✗"
		}
		exp := row.Expected
		if exp == "" {
			exp = "-"
		}
		d := row.Detail
		if len(d) > 140 {
			d = d[:140] + "..."
		}
		if d != "" {
			d = ": " + d
		}
		fmt.Fprintf(tw, "    %s %s\t%s\t%s%s\n", mark, row.Node, exp, row.Actual, d)
	}
	tw.Flush()
}

func fmtRunTime(d time.Duration) string {
	if d < time.Second {
		return "0s"
	}
	return d.Round(time.Second).String()
}

// PrintSummary prints the closing line.
func PrintSummary(out io.Writer, r *Report) {
	failed := r.Failed()
	if failed == 0 {
		fmt.Fprintf(out, "ok: %d cases in %d files passed in %s\n", r.Cases(), len(r.Files), r.Wall.Round(time.Millisecond))
		return
	}
	fmt.Fprintf(out, "FAIL: %d of %d cases failed (%d files) in %s\n", failed, max(r.Cases(), failed), len(r.Files), r.Wall.Round(time.Millisecond))
}

func indent(s, prefix string) string {
	return prefix + strings.ReplaceAll(s, "\n", "\n"+prefix)
}

// JUnit XML, as CI systems read it.
type junitSuites struct {
	XMLName xml.Name     `xml:"testsuites"`
	Tests   int          `xml:"tests,attr"`
	Fails   int          `xml:"failures,attr"`
	Time    string       `xml:"time,attr"`
	Suites  []junitSuite `xml:"testsuite"`
}

type junitSuite struct {
	Name   string      `xml:"name,attr"`
	Tests  int         `xml:"tests,attr"`
	Fails  int         `xml:"failures,attr"`
	Errors int         `xml:"errors,attr"`
	Time   string      `xml:"time,attr"`
	Cases  []junitCase `xml:"testcase"`
}

type junitCase struct {
	Name      string        `xml:"name,attr"`
	ClassName string        `xml:"classname,attr"`
	Time      string        `xml:"time,attr"`
	Failure   *junitFailure `xml:"failure,omitempty"`
	Error     *junitFailure `xml:"error,omitempty"`
}

type junitFailure struct {
	Message string `xml:"message,attr"`
	Text    string `xml:",chardata"`
}

func seconds(d time.Duration) string { return fmt.Sprintf("%.3f", d.Seconds()) }

// WriteJUnit writes the report as JUnit XML: a test suite per file, a
// test case per case; a file that did not load is one erroring case.
func WriteJUnit(w io.Writer, r *Report) error {
	all := junitSuites{Time: seconds(r.Wall)}
	for _, f := range r.Files {
		s := junitSuite{Name: f.Path}
		var total time.Duration
		if f.Error != nil {
			s.Tests, s.Errors = 1, 1
			s.Cases = append(s.Cases, junitCase{Name: "(load)", ClassName: f.Path, Time: "0.000",
				Error: &junitFailure{Message: firstLine(f.Error.Error()), Text: f.Error.Error()}})
		}
		for _, c := range f.Cases {
			jc := junitCase{Name: c.Case, ClassName: c.Pipeline, Time: seconds(c.Wall)}
			total += c.Wall
			s.Tests++
			if !c.Passed {
				s.Fails++
				var b strings.Builder
				PrintCase(&b, c)
				jc.Failure = &junitFailure{Message: firstLine(strings.Join(c.Failures, "\n")), Text: b.String()}
			}
			s.Cases = append(s.Cases, jc)
		}
		s.Time = seconds(total)
		all.Tests += s.Tests
		all.Fails += s.Fails + s.Errors
		all.Suites = append(all.Suites, s)
	}
	if _, err := io.WriteString(w, xml.Header); err != nil {
		return err
	}
	enc := xml.NewEncoder(w)
	enc.Indent("", "  ")
	if err := enc.Encode(all); err != nil {
		return err
	}
	_, err := io.WriteString(w, "\n")
	return err
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}
