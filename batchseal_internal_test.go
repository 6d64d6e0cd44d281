package leasecron

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"

	"github.com/leasecron/leasecron/internal/runs"
)

// A batch whose tasks are written but whose seal meets a fault tries the
// seal again, and one that cannot seal it says the call was done in part
// (ErrIncomplete: the HTTP API answers 500 "incomplete"), not a fault to
// retry, which its client's retry would meet as a batch that exists. (The
// clients' test against a fleet once saw such a retry refused while the
// tasks ran; a review found the likelier cause a client's timeout, not the
// seal: TestABatchIsSettledAfterItsCallerHasGone.)
func TestABatchWhoseSealFailsIsTriedAgainOrSaysSo(t *testing.T) {
	for _, tc := range []struct {
		name     string
		failures int32
		wantErr  error
	}{
		{"a fault that passes", 4, nil}, // past the SDK's own tries
		{"a fault that does not", 1000, ErrIncomplete},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, tr := memClientFailing(t, "PartitionKey='~cb1',RowKey='h'")
			ctx := context.Background()
			due := time.Now().Add(time.Hour)
			items := []Item{{ID: "m1", Type: "t", Due: due}, {ID: "m2", Type: "t", Due: due}}
			tr.limit = tc.failures
			tr.armed.Store(true)
			res, err := c.ScheduleMany(ctx, items, ScheduleManyOptions{Batch: "b1", OnComplete: &Item{Type: "done"}})
			if tr.failed.Load() == 0 {
				t.Fatal("no request to seal the batch failed: the test does not reach the seal")
			}
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
				t.Fatalf("ScheduleMany: %v; want %v", err, tc.wantErr)
			}
			for _, r := range res {
				if r.Err != nil {
					t.Fatalf("%s: %v; want it written", r.Item.ID, r.Err)
				}
			}
			b, gerr := c.runs.GetBatch(ctx, "b1")
			if gerr != nil {
				t.Fatal(gerr)
			}
			if sealed := tc.wantErr == nil; b.Sealed != sealed {
				t.Fatalf("batch sealed %v; want %v", b.Sealed, sealed)
			}
		})
	}
}

// A ScheduleMany of a batch whose caller goes (a client that timed out,
// a request cancelled) once the batch's header is written still settles
// the batch: gone after the tasks were written, the batch is sealed (its
// callback runs once its members end); gone before any was, the header
// and the callback are taken back, so a retry of the call is not refused
// as a batch that already exists. Cut short by the cancellation, the seal
// left the batch unsealed for good and the roll-back left the id taken.
func TestABatchIsSettledAfterItsCallerHasGone(t *testing.T) {
	for _, tc := range []struct {
		name, match    string
		served, sealed bool
	}{
		{"gone at the seal", "PartitionKey='~cb1',RowKey='h'", false, true},
		{"gone at the members' write", "id~m1", false, false},
		{"gone as the header's write committed", `"Sealed":false`, true, false},
		{"gone as the callback's write committed", `"Callback":true`, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var tr *cancelOn
			c := memClientThrough(t, func(next policy.Transporter) policy.Transporter {
				tr = &cancelOn{next: next, match: tc.match, served: tc.served}
				return tr
			})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			tr.cancel = cancel
			due := time.Now().Add(time.Hour)
			items := []Item{{ID: "m1", Type: "t", Due: due}, {ID: "m2", Type: "t", Due: due}}
			opts := ScheduleManyOptions{Batch: "b1", OnComplete: &Item{Type: "done"}}
			res, err := c.ScheduleMany(ctx, items, opts)
			if !tr.fired.Load() {
				t.Fatal("the caller never went: the test does not reach the step")
			}
			bg := context.Background()
			b, gerr := c.runs.GetBatch(bg, "b1")
			if !tc.sealed {
				if err == nil || errors.Is(err, ErrIncomplete) {
					t.Fatalf("ScheduleMany: %v; want the members' failure, the batch taken back", err)
				}
				if !errors.Is(gerr, runs.ErrNoBatch) {
					t.Fatalf("the batch's header after the roll-back: %+v, %v; want none", b, gerr)
				}
				if _, err := c.Get(bg, "b1-done"); !errors.Is(err, ErrNotFound) {
					t.Fatalf("the callback after the roll-back: %v; want it gone", err)
				}
				if _, err := c.ScheduleMany(bg, items, opts); err != nil {
					t.Fatalf("the call again: %v; want it accepted", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("ScheduleMany: %v; want the batch sealed although its caller went", err)
			}
			for _, r := range res {
				if r.Err != nil {
					t.Fatalf("%s: %v; want it written", r.Item.ID, r.Err)
				}
			}
			if gerr != nil || !b.Sealed || b.Total != 2 {
				t.Fatalf("batch %+v, %v; want it sealed with 2 members", b, gerr)
			}
		})
	}
}

// cancelOn is a transport that, at the first request whose URL or body
// contains match, cancels the caller's context and fails the request
// (served first, its answer lost, when served): a caller that went as the
// call reached that step.
type cancelOn struct {
	next   policy.Transporter
	match  string
	served bool
	cancel context.CancelFunc
	fired  atomic.Bool
}

func (f *cancelOn) Do(req *http.Request) (*http.Response, error) {
	hit, err := requestHas(req, f.match)
	if err != nil {
		return nil, err
	}
	if hit && f.fired.CompareAndSwap(false, true) {
		if f.served {
			if resp, err := f.next.Do(req); err == nil {
				_ = resp.Body.Close()
			}
		}
		f.cancel()
		return nil, fmt.Errorf("connection reset by peer")
	}
	return f.next.Do(req)
}

// A ScheduleMany refused before any item was tried (the shard map could
// not be read) answers no results, only the error: an empty list beside
// it made the HTTP API answer 200 with nothing in it, the fault lost, and
// made schedule --file index past its end.
func TestScheduleManyRefusedWholeAnswersNoResults(t *testing.T) {
	for _, batch := range []string{"", "b1"} {
		c, tr := memClientFailing(t, "~shards")
		tr.armed.Store(true)
		due := time.Now().Add(time.Hour)
		res, err := c.ScheduleMany(context.Background(), []Item{{ID: "m1", Type: "t", Due: due}}, ScheduleManyOptions{Batch: batch})
		if tr.failed.Load() == 0 {
			t.Fatal("no read of the shard map failed: the test does not reach it")
		}
		if err == nil || res != nil {
			t.Fatalf("batch %q: ScheduleMany: %v, %#v; want the error and no results", batch, err, res)
		}
	}
}
