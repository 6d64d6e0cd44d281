// Package failpoint kills the process at named points, for crash tests:
// a worker started with LEASECRON_FAILPOINT=name[,name...] kills itself
// (SIGKILL on Unix: no deferred function, no cleanup) the first time it
// reaches one of those points, so a test can show that what it was doing
// is finished by another worker. Never set it in production.
package failpoint

import (
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
)

// Env names the environment variable listing the armed points.
const Env = "LEASECRON_FAILPOINT"

var armed = sync.OnceValue(func() []string {
	if v := os.Getenv(Env); v != "" {
		return strings.Split(v, ",")
	}
	return nil
})

// Hit kills the process if the point name is armed.
func Hit(name string) {
	if !slices.Contains(armed(), name) {
		return
	}
	slog.Error("failpoint reached: killing this process", "failpoint", name)
	if p, err := os.FindProcess(os.Getpid()); err == nil {
		_ = p.Kill()
	}
	select {} // the kill takes a moment to land
}
