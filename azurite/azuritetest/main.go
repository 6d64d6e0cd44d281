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
// transport are not leaks and are ignored, as is anything matched by
// extra.
func Main(m *testing.M, extra ...goleak.Option) {
	code := m.Run()
	StopShared()
	if code == 0 {
		opts := append([]goleak.Option{
			goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
			goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"),
			goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
		}, extra...)
		if err := goleak.Find(opts...); err != nil {
			fmt.Fprintln(os.Stderr, "goroutine leak:", err)
			code = 1
		}
	}
	os.Exit(code)
}
