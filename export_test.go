package leasecron

import (
	"context"
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

// SetBulkAttempts sets how many workers a bulk operation has been run by,
// as if that many had taken it up before (a crashed walk's records are
// then waited for), and what they counted.
func SetBulkAttempts(c *Client, id string, attempts, done int) error {
	ctx := context.Background()
	r, err := c.runs.GetBulk(ctx, id)
	if err != nil {
		return err
	}
	r.Attempts, r.Done = attempts, done
	return c.runs.SaveBulk(ctx, r)
}
