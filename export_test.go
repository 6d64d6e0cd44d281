package leasecron

import (
	"context"
	"testing"
	"time"

	"github.com/leasecron/leasecron/internal/runs"
	"github.com/leasecron/leasecron/queue"
)

// The run records do what the consumer asks of them beyond RunRecorder.
var (
	_ queue.RunRecorder        = (*runs.Store)(nil)
	_ queue.OwnRunFinisher     = (*runs.Store)(nil)
	_ queue.ClaimedRunFinisher = (*runs.Store)(nil)
	_ queue.Unclaimer          = (*runs.Store)(nil)
	_ queue.WaitNoter          = (*runs.Store)(nil)
	_ queue.BehindDropper      = (*runs.Store)(nil)
	_ queue.ParentWatcher      = (*runs.Store)(nil)
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
	_, err = c.runs.SaveBulk(ctx, r)
	return err
}

// TaskEnded is what a worker does when the run of a task others wait for,
// or a batch member, has ended (queue.ConsumerOptions.OnEnd).
func TaskEnded(c *Client, ctx context.Context, id string, waiters bool, batch string) error {
	return c.taskEnded(ctx, queue.Envelope{ID: id, Waiters: waiters, Batch: batch}, "")
}

// FinishRun records the run of id as the worker would: queued, claimed,
// then ended in st.
func FinishRun(c *Client, ctx context.Context, id string, st RunState) error {
	if _, err := c.runs.Claim(ctx, id, "w", 1, time.Now().Add(time.Minute), runs.Meta{Type: "t", Due: time.Now()}); err != nil {
		return err
	}
	return c.runs.Finish(ctx, id, st, nil, "")
}
