// Command gateway is the S3 server that internal/devkit/s3test starts for
// each test: the dev stack's versitygw gateway (devstack/s3server), built
// from this module, so that a test's server is the same code, at the same
// versitygw version, as the one `retrain dev` runs. s3test builds it into
// the Go cache's neighbourhood and passes its configuration in the
// environment (gatewayproc.ChildEnv); it is not meant to be run by hand.
package main

import (
	"fmt"
	"os"

	"github.com/retrain-ml/retrain/internal/devkit/devstack/s3server"
	"github.com/retrain-ml/retrain/internal/devkit/gatewayproc"
)

func main() {
	s3server.Main() // serves and exits when the configuration is set
	fmt.Fprintf(os.Stderr, "gateway: %s is not set: this program is the S3 server internal/devkit/s3test starts for tests\n", gatewayproc.ChildEnv)
	os.Exit(2)
}
