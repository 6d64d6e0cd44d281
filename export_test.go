package leasecron

import (
	"testing"
	"time"
)

// SetRunPartsSettle shortens how long a new run-record partition count is
// read before it is written under, for t (tests that set it must not run
// in parallel with others of this package).
func SetRunPartsSettle(t testing.TB, d time.Duration) {
	old := runPartsSettle.Swap(int64(d))
	t.Cleanup(func() { runPartsSettle.Store(old) })
}
