package cli

import (
	"testing"

	"go.uber.org/goleak"
)

// Commands run workers and dashboards in-process; none may leave a
// goroutine behind.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"))
}
