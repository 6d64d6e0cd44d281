package azuritetest

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// Main is a package's TestMain for tests that use Azurite: it runs the
// tests, stops the Azurite started by Shared, then fails the run if
// goroutines leaked. Idle keep-alive connections of the SDK's shared HTTP
// transport are not leaks and are ignored (their read and write loops, by
// the function that owns them, not by the poller every blocked socket
// waits in, so a goroutine stuck on a socket of its own is still
// reported), as is anything matched by extra.
func Main(m *testing.M, extra ...goleak.Option) {
	code := m.Run()
	StopShared()
	if code == 0 {
		opts := append([]goleak.Option{
			goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
			goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"),
		}, extra...)
		if err := goleak.Find(opts...); err != nil {
			fmt.Fprintln(os.Stderr, "goroutine leak:", err)
			code = 1
		}
	}
	os.Exit(code)
}
