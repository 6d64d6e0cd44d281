// Command leasecron is the leasecron worker and operator CLI. Run
// `leasecron --help` for the commands.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/leasecron/leasecron/internal/cli"
)

// version is stamped at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Main(ctx, version, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
