package s3test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// gatewayPackage is the program a test's server runs: the dev stack's
// gateway, built from this module.
const gatewayPackage = "github.com/retrain-ml/retrain/internal/devkit/devstack/s3server/gateway"

// gatewayEnv names a gateway binary to use instead of building one, for
// test binaries run without the go tool or the module's source.
const gatewayEnv = "S3TEST_GATEWAY"

// binary returns the path of the gateway program, built at most once per
// process (and, through the go tool's own up-to-date check and a file
// lock, linked again only when its code changed).
var binary = sync.OnceValues(findBinary)

func findBinary() (string, error) {
	if p := os.Getenv(gatewayEnv); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("$%s: %w", gatewayEnv, err)
		}
		return p, nil
	}
	out, err := goCmd("env", "GOMOD", "GOCACHE")
	if err != nil {
		return "", fmt.Errorf("set $%s to a gateway binary or run tests with the go tool: %w", gatewayEnv, err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != 2 || lines[0] == "" || lines[0] == os.DevNull {
		return "", fmt.Errorf("tests run outside the retrain module (go env GOMOD = %q): set $%s to a gateway binary", lines[0], gatewayEnv)
	}
	dir, err := toolsDir(lines[0], lines[1])
	if err != nil {
		return "", err
	}
	return build(dir)
}

// toolsDir returns retrain-tools/s3gateway-<checkout> next to the Go build
// cache: `go clean -cache` leaves it alone, and each checkout on the
// machine has its own, so that two checkouts at different commits never
// relink each other's.
func toolsDir(gomod, gocache string) (string, error) {
	base := gocache
	if base == "" || base == "off" {
		var err error
		if base, err = os.UserCacheDir(); err != nil {
			return "", err
		}
		base = filepath.Join(base, "go-build")
	}
	sum := sha256.Sum256([]byte(gomod))
	dir := filepath.Join(filepath.Dir(base), "retrain-tools", "s3gateway-"+hex.EncodeToString(sum[:6]))
	return dir, os.MkdirAll(dir, 0o755)
}

// build runs go build for the gateway under a file lock, so that the test
// binaries of one `go test ./...` wait for one build instead of each
// making its own. go build leaves an up-to-date binary alone, so after the
// first build this costs the go tool's check of the package's sources; the
// first one mostly links, since the gateway's packages are those the dev
// stack's tests and `retrain` compiled.
func build(dir string) (string, error) {
	unlock, err := lockFile(filepath.Join(dir, "build.lock"))
	if err != nil {
		return "", err
	}
	defer unlock()
	bin := filepath.Join(dir, "gateway")
	start := time.Now()
	if _, err := goCmd("build", "-o", bin, gatewayPackage); err != nil {
		return "", fmt.Errorf("build the test S3 gateway (or set $%s): %w", gatewayEnv, err)
	}
	if d := time.Since(start); d > 10*time.Second {
		fmt.Fprintf(os.Stderr, "s3test: built the S3 gateway into %s in %v\n", dir, d.Round(time.Second))
	}
	return bin, nil
}

func goCmd(args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, stderr.Bytes())
	}
	return out, nil
}
