package leasecron

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"

	"github.com/leasecron/leasecron/internal/runs"
)

// holdOnce is a transport that, while armed, holds the first request
// whose URL contains match until release is closed (held is closed when
// it is caught).
type holdOnce struct {
	next    policy.Transporter
	match   string
	armed   atomic.Bool
	held    chan struct{}
	release chan struct{}
}

func (h *holdOnce) Do(req *http.Request) (*http.Response, error) {
	if strings.Contains(req.URL.String(), h.match) && h.armed.CompareAndSwap(true, false) {
		close(h.held)
		<-h.release
	}
	return h.next.Do(req)
}

// An attempt of a bulk operation that stalled while another attempt took
// the operation up and finished it stops at its next save instead of
// acting on what matches by then: a cancel-pending walk resumed after the
// operation had finished cancelled tasks scheduled since (issue 38, seed
// 17779, read by a review: the worker running the first attempt was
// frozen past its claim).
func TestAStalledBulkAttemptStopsWhenAnotherTookItOver(t *testing.T) {
	ctx := context.Background()
	h := &holdOnce{match: "ScheduledItems()", held: make(chan struct{}), release: make(chan struct{})}
	c := memClientThrough(t, func(next policy.Transporter) policy.Transporter { h.next = next; return h })
	due := time.Now().Add(time.Hour)
	for _, id := range []string{"old-1", "old-2"} {
		if _, err := c.Schedule(ctx, Item{ID: id, Type: "x", Due: due}, nil); err != nil {
			t.Fatal(err)
		}
	}
	op := BulkOp{Kind: BulkCancelPending, Filter: BulkFilter{Type: "x"}}
	b, err := c.StartBulk(ctx, op, 2, "tester")
	if err != nil {
		t.Fatal(err)
	}
	payload, _ := json.Marshal(map[string]string{"bulk": b.ID})
	attempt := func() error { return c.runBulk(ctx, Task{ID: b.ID, Type: BulkType, Payload: payload}) }

	// The first attempt stalls at its listing of the pending tasks.
	h.armed.Store(true)
	stalled := make(chan error, 1)
	go func() { stalled <- attempt() }()
	<-h.held
	// Another takes the operation up and finishes it.
	if err := attempt(); err != nil {
		t.Fatalf("the second attempt: %v", err)
	}
	if got, err := c.Bulk(ctx, b.ID); err != nil || got.State != runs.BulkSucceeded || got.Done != 2 {
		t.Fatalf("after the second attempt: %+v, %v; want succeeded with 2 done", got, err)
	}
	if _, err := c.Schedule(ctx, Item{ID: "new", Type: "x", Due: due}, nil); err != nil {
		t.Fatal(err)
	}
	close(h.release)
	if err := <-stalled; !errors.Is(err, runs.ErrBulkChanged) {
		t.Errorf("the stalled attempt: %v; want an error wrapping runs.ErrBulkChanged", err)
	}
	if it, err := c.Get(ctx, "new"); err != nil || it.ID != "new" {
		t.Errorf("the task scheduled after the operation finished: %+v, %v; want it still pending", it, err)
	}
	if got, err := c.Bulk(ctx, b.ID); err != nil || got.State != runs.BulkSucceeded || got.Done != 2 {
		t.Errorf("after the stalled attempt ended: %+v, %v; want succeeded with 2 done", got, err)
	}
}
