// Command leasecron is the leasecron worker and operator CLI. Run
// `leasecron --help` for the commands.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/leasecron/leasecron/cmd/leasecron/internal/cli"
	"github.com/leasecron/leasecron/internal/instance"
)

// version is stamped at build time with -ldflags "-X main.version=..." (as
// `make build` and the Dockerfile do); a binary built without it (go
// install, plain go build) reports the version its build information
// records: the module version, or the VCS revision of a checkout.
var version string

func main() {
	if version == "" {
		version = instance.Version()
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Main(ctx, version, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
