package aggregator

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/leasecron/leasecron/azurite/azuritetest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	azuritetest.StopShared()
	if code == 0 {
		// Idle keep-alive connections of the SDK's HTTP client are not leaks.
		if err := goleak.Find(
			goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
			goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
			goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
		); err != nil {
			fmt.Fprintln(os.Stderr, "goroutine leak:", err)
			code = 1
		}
	}
	os.Exit(code)
}
