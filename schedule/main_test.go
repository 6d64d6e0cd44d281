package schedule

import (
	"context"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/leasecron/leasecron/azurite/azuritetest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	azuritetest.StopShared()
	if code == 0 {
		if err := goleak.Find(
			goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
			goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
			goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
		); err != nil {
			println("goroutine leak:", err.Error())
			code = 1
		}
	}
	os.Exit(code)
}

// ctx returns a context bounded for one test.
func ctx(t testing.TB) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return c
}
