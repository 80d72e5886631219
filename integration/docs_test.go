//go:build linux

package integration

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestDocs runs the commands the docs show, so that they cannot rot.
//
// A fenced block of README.md or docs/*.md is tested when the line before
// its opening fence is one of these HTML comments (Markdown does not render
// them):
//
//	<!-- test: run -->                  a sh block, run with bash -euo pipefail
//	<!-- test: same-as PATH -->         a block that must equal the file PATH
//	                                    (relative to the repository root),
//	                                    less the file's leading # comment lines
//
// The run blocks share one `retrain dev --headless --pipelines
// examples/scripts`, started on a fresh data dir in the repository root,
// and run there, README.md first and then docs/*.md by name, each file's
// blocks in order: a block may use what an earlier one made (a run, a
// model version, demo data). Each block gets `retrain` (built from this
// tree) first on PATH, RETRAIN_TEMPORAL_ADDRESS, RETRAIN_HTTP_API (its HTTP
// API's base URL) and RETRAIN_DATA_DIR set to
// the stack, and docsBlockLimit to finish. Keep marked blocks to commands
// that take seconds and do the same every time. docs/development.md says
// the same for writers of the docs.
func TestDocs(t *testing.T) {
	parallelFor(t, 70*time.Second)
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	blocks := docBlocks(t, root)
	var run []docBlock
	for _, b := range blocks {
		switch b.kind {
		case "same-as":
			checkSameAs(t, root, b)
		case "run":
			run = append(run, b)
		}
	}
	if t.Failed() {
		return
	}
	if len(run) == 0 {
		t.Fatal("no block of the docs is marked <!-- test: run -->")
	}
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("the docs' example scripts (examples/scripts) need python3 on PATH")
	}

	bin := buildRetrain(t)
	data := t.TempDir()
	tmp := filepath.Join(data, "tmp")
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		t.Fatal(err)
	}
	ports := freePorts(t, 2)
	port, httpPort := strconv.Itoa(ports[0]), strconv.Itoa(ports[1])
	start := time.Now()
	startDevIn(t, root, filepath.Join(data, "dev.log"), []string{"TMPDIR=" + tmp}, bin,
		"dev", "--headless", "--data-dir", data, "--port", port, "--http-port", httpPort, "--s3-port", "0", "--report-port", "0",
		"--pipelines", "examples/scripts")
	t.Logf("retrain dev up in %.1fs", time.Since(start).Seconds())

	env := append(os.Environ(),
		"PATH="+filepath.Dir(bin)+string(os.PathListSeparator)+os.Getenv("PATH"),
		"RETRAIN_TEMPORAL_ADDRESS=127.0.0.1:"+port,
		"RETRAIN_HTTP_API=http://127.0.0.1:"+httpPort,
		"RETRAIN_DATA_DIR="+data,
		"TMPDIR="+tmp,
	)
	for _, b := range run {
		name := strings.ReplaceAll(b.file, "/", "_") + ":" + strconv.Itoa(b.line)
		t.Run(name, func(t *testing.T) {
			took, out, err := runDocBlock(root, env, b.body, docsBlockLimit)
			if err != nil {
				t.Fatalf("%s:%d: %v after %.1fs\n--- block\n%s--- output\n%s", b.file, b.line, err, took.Seconds(), b.body, out)
			}
			t.Logf("%s:%d: ok in %.1fs\n%s", b.file, b.line, took.Seconds(), out) // shown with -v
		})
	}
}

// docsBlockLimit is how long one marked block may run.
const docsBlockLimit = 90 * time.Second

// docBlock is a fenced block of the docs that carries a test marker.
type docBlock struct {
	file string // relative to the repository root
	line int    // of the opening fence
	lang string
	kind string // run, same-as
	arg  string // same-as: the path
	body string
}

// docFiles returns README.md and docs/*.md, in the order their blocks run.
func docFiles(t *testing.T, root string) []string {
	t.Helper()
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(docs)
	files := []string{"README.md"}
	for _, d := range docs {
		files = append(files, filepath.ToSlash(strings.TrimPrefix(d, root+string(filepath.Separator))))
	}
	return files
}

// docBlocks returns the marked blocks of the docs. A marker that is not
// on the line before a fence, or that names no known kind, fails the test:
// a typo must not quietly turn a test off.
func docBlocks(t *testing.T, root string) []docBlock {
	t.Helper()
	var blocks []docBlock
	for _, file := range docFiles(t, root) {
		text, err := os.ReadFile(filepath.Join(root, file))
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(string(text), "\n")
		inFence := false // an unmarked fenced block: its text is not markers
		for i := 0; i < len(lines); i++ {
			if strings.HasPrefix(lines[i], "```") {
				inFence = !inFence
				continue
			}
			// A marker starts its line: an indented one is an example of
			// a marker (a code block), not a marker.
			if inFence || !strings.HasPrefix(lines[i], "<!-- test:") {
				continue
			}
			marker := strings.TrimSpace(lines[i])
			kind, arg, ok := parseDocMarker(marker)
			if !ok {
				t.Errorf("%s:%d: unknown docs test marker %q (want <!-- test: run --> or <!-- test: same-as PATH -->)", file, i+1, marker)
				continue
			}
			if i+1 >= len(lines) || !strings.HasPrefix(lines[i+1], "```") {
				t.Errorf("%s:%d: docs test marker %q is not on the line before a fenced block", file, i+1, marker)
				continue
			}
			b := docBlock{file: file, line: i + 2, lang: strings.TrimSpace(strings.TrimPrefix(lines[i+1], "```")), kind: kind, arg: arg}
			end := -1
			for j := i + 2; j < len(lines); j++ {
				if strings.TrimSpace(lines[j]) == "```" {
					end = j
					break
				}
			}
			if end < 0 {
				t.Errorf("%s:%d: fenced block not closed", file, b.line)
				continue
			}
			b.body = strings.Join(lines[i+2:end], "\n") + "\n"
			if kind == "run" && b.lang != "sh" {
				t.Errorf("%s:%d: <!-- test: run --> marks a %q block; only sh blocks run", file, b.line, b.lang)
				continue
			}
			blocks = append(blocks, b)
			i = end
		}
	}
	return blocks
}

// parseDocMarker reads "<!-- test: run -->" or "<!-- test: same-as PATH -->".
func parseDocMarker(marker string) (kind, arg string, ok bool) {
	inner, found := strings.CutPrefix(marker, "<!-- test:")
	if !found {
		return "", "", false
	}
	inner, found = strings.CutSuffix(inner, "-->")
	if !found {
		return "", "", false
	}
	fields := strings.Fields(inner)
	switch {
	case len(fields) == 1 && fields[0] == "run":
		return "run", "", true
	case len(fields) == 2 && fields[0] == "same-as":
		return "same-as", fields[1], true
	}
	return "", "", false
}

// checkSameAs fails the test when a same-as block differs from its file.
func checkSameAs(t *testing.T, root string, b docBlock) {
	t.Helper()
	text, err := os.ReadFile(filepath.Join(root, b.arg))
	if err != nil {
		t.Errorf("%s:%d: %v", b.file, b.line, err)
		return
	}
	lines := strings.SplitAfter(string(text), "\n")
	for len(lines) > 0 && strings.HasPrefix(lines[0], "#") {
		lines = lines[1:]
	}
	if want := strings.Join(lines, ""); b.body != want {
		t.Errorf("%s:%d: the block is not %s (less its leading comments): copy the file into the docs\n--- block\n%s--- file\n%s", b.file, b.line, b.arg, b.body, want)
	}
}

// runDocBlock runs script with bash -euo pipefail in dir, in a process
// group of its own that is killed after limit.
func runDocBlock(dir string, env []string, script string, limit time.Duration) (time.Duration, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", script)
	cmd.Dir = dir
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	start := time.Now()
	err := cmd.Run()
	took := time.Since(start)
	if ctx.Err() != nil {
		err = fmt.Errorf("timed out after %s", limit)
	}
	return took, out.String(), err
}

// startDevIn starts bin with args (a `retrain dev` command line) in dir
// with extra environment, its output appended to logPath, and returns once
// it says it is up; everything it started is killed when the test ends.
func startDevIn(t *testing.T, dir, logPath string, env []string, bin string, args ...string) *devProc {
	t.Helper()
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		t.Fatal(err)
	}
	p := &devProc{cmd: cmd, done: make(chan struct{})}
	t.Cleanup(func() {
		if _, err := p.killAll(); err != nil {
			t.Error(err)
		}
		if t.Failed() {
			if log, err := os.ReadFile(logPath); err == nil {
				t.Logf("retrain dev's output:\n%s", tail(string(log), 4000))
			}
		}
	})
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stdout)
		up := false
		for sc.Scan() {
			fmt.Fprintln(logFile, sc.Text())
			if !up && sc.Text() == devReadyLine {
				up = true
				close(ready)
			}
		}
		_ = cmd.Wait()
		logFile.Close()
		close(p.done)
	}()
	select {
	case <-ready:
		return p
	case <-p.done:
		log, _ := os.ReadFile(logPath)
		t.Fatalf("retrain dev exited before it was up: %v\n%s", cmd.ProcessState, tail(string(log), 4000))
	case <-time.After(2 * time.Minute):
		t.Fatalf("retrain dev not up in 2 minutes (output in %s)", logPath)
	}
	return nil
}
