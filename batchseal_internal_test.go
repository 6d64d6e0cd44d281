package leasecron

import (
	"context"
	"errors"
	"testing"
	"time"
)

// A batch whose tasks are written but whose seal meets a fault tries the
// seal again, and one that cannot seal it says the call was done in part
// (ErrIncomplete: the HTTP API answers 500 "incomplete"), not a fault to
// retry: a ScheduleMany answered 503 for it was retried by its client and
// refused, the batch existing, while its tasks ran and its callback never
// would (make test, a loaded machine: the clients' test against a fleet).
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
