package leasecron

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leasecron/leasecron/internal/memstore"
	"github.com/leasecron/leasecron/internal/runs"
	"github.com/leasecron/leasecron/leasecrontype"
)

// memClient is a Client over an in-memory account (internal/memstore).
func memClient(t *testing.T) *Client {
	t.Helper()
	ms := memstore.New(memstore.Options{})
	c, err := NewClient(ClientOptions{Storage: Storage{ConnectionString: ms.ConnectionString(), Transport: ms.Transport()}})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// An occurrence the mover has already moved to the queue — confirmed on
// its run, the series' row advanced past it — does not run once the series
// is disabled or cancelled: its run is cancelled, as a one-off task's is
// when it is cancelled after its move (issue 38, found by the simulator:
// an occurrence started five seconds after disable returned).
func TestSeriesStopsWithItsMovedOccurrence(t *testing.T) {
	for _, stop := range []string{"disable", "cancel"} {
		t.Run(stop, func(t *testing.T) {
			ctx := context.Background()
			c := memClient(t)
			due := time.Now().Add(time.Minute).UTC().Truncate(time.Second)
			if _, err := c.Schedule(ctx, Item{ID: "tick", Type: "t", Due: due, Recurrence: "@every 1m"}, nil); err != nil {
				t.Fatal(err)
			}
			// The mover has confirmed the first occurrence and sent it.
			occ := runs.OccurrenceID("tick", due)
			if ok := c.runs.Confirm(ctx, []runs.Mark{{ID: occ, Meta: runs.Meta{Type: "t", Due: due, Token: "tok", Seq: 1}}}); !ok[0] {
				t.Fatal("the occurrence was not confirmed")
			}
			var err error
			if stop == "disable" {
				_, err = c.Disable(ctx, "tick")
			} else {
				_, err = c.Cancel(ctx, "tick")
			}
			if err != nil {
				t.Fatal(err)
			}
			st, err := c.Status(ctx, occ)
			if err != nil || st.State() != string(RunCancelled) {
				t.Fatalf("after %s the moved occurrence is %q (%v); want cancelled", stop, st.State(), err)
			}
			_, err = c.runs.Claim(ctx, occ, "w1", 1, time.Now().Add(time.Minute), runs.Meta{Type: "t", Due: due, Token: "tok", Seq: 1})
			if err == nil || !isRefusal(err) {
				t.Fatalf("a claim of the moved occurrence after %s: %v; want it refused as cancelled", stop, err)
			}
		})
	}
}

func isRefusal(err error) bool {
	return err != nil && errors.Is(err, leasecrontype.ErrRunCancelled)
}
