package runs

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leasecron/leasecron/internal/clock"
	"github.com/leasecron/leasecron/internal/table"
)

// writeLegacy puts records and a counters row into the table the way the
// previous layout did.
func writeLegacy(t *testing.T, tb table.Table, due time.Time) {
	t.Helper()
	ctx := context.Background()
	if err := tb.Create(ctx); err != nil {
		t.Fatal(err)
	}
	for _, r := range []struct {
		id    string
		state State
	}{{"old-done", Succeeded}, {"old-queued", Queued}, {"old-failed", Failed}, {"old-pending", Scheduled}, {"old-queued-2", Queued}, {OccurrenceID("old-series", due), Succeeded}} {
		p := table.Props{"State": string(r.state), "Type": "legacy", "Attempts": int32(1), "Worker": "w-old", "LastError": "",
			"OutputTail": "old output", "Deliveries": int32(1), "Duplicates": int32(0), "Generation": int64(4), "Due": due}
		if r.state == Succeeded || r.state == Failed {
			p["Finished"] = due.Add(time.Second)
		}
		if err := submit(ctx, tb, []table.Op{{Kind: table.Insert, PartitionKey: legacyPartition(r.id), RowKey: r.id, Props: p}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := submit(ctx, tb, []table.Op{{Kind: table.Insert, PartitionKey: legacyStatsPK, RowKey: "host-1", Props: table.Props{"Handled": int64(7)}}}); err != nil {
		t.Fatal(err)
	}
}

// A table of the previous layout keeps working: lookups fall back to the
// old rows, a claim of a run that succeeded there is a duplicate, a cancel
// converts the run; Migrate converts the rest and removes the old rows.
func legacyBehaviour(t *testing.T, e env, due time.Time) {
	ctx := context.Background()
	s := e.s
	if r, err := s.Get(ctx, "old-done"); err != nil || r.State != Succeeded || r.OutputTail != "old output" || r.Generation != 4 {
		t.Fatalf("Get of an old record = %+v, %v", r, err)
	}
	occ := OccurrenceID("old-series", due)
	if r, err := s.Get(ctx, occ); err != nil || r.State != Succeeded {
		t.Fatalf("Get of an old occurrence = %+v, %v", r, err)
	}
	if _, err := s.Claim(ctx, "old-done", "w1", 1, e.now().Add(time.Minute), Meta{Type: "legacy", Due: due}); !errors.Is(err, ErrAlreadySucceeded) {
		t.Fatalf("a delivery of a run that succeeded in the old layout: %v, want ErrAlreadySucceeded", err)
	}
	if r, err := s.Get(ctx, "old-done"); err != nil || r.Duplicates != 1 {
		t.Fatalf("after the duplicate: %+v, %v", r, err)
	}
	if _, err := s.Cancel(ctx, "old-queued"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Claim(ctx, "old-queued", "w1", 1, e.now().Add(time.Minute), Meta{Type: "legacy", Due: due}); !errors.Is(err, ErrCancelled) {
		t.Fatalf("a delivery of a run cancelled on an old record: %v", err)
	}
	if p, err := s.Query(ctx, Query{}); err != nil || len(p.Runs) != 2 {
		t.Fatalf("before Migrate the listing holds the 2 converted runs: %+v, %v", p.Runs, err)
	}
	st, err := s.Migrate(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Left: old-failed, old-queued-2, the occurrence (converted), old-pending
	// (skipped: its pending row is its record), the counters row.
	if st.Converted != 3 || st.Skipped != 1 || st.Removed != 5 {
		t.Fatalf("Migrate = %+v, want 3 converted, 1 skipped, 5 old rows removed", st)
	}
	if again, err := s.Migrate(ctx); err != nil || again != (MigrateStats{}) {
		t.Fatalf("a second Migrate = %+v, %v", again, err)
	}
	p, err := s.Query(ctx, Query{Limit: 100})
	if err != nil || len(p.Runs) != 5 {
		t.Fatalf("after Migrate the listing holds %d runs (%v), want 5", len(p.Runs), err)
	}
	if p, _ := s.Query(ctx, Query{Series: "old-series"}); len(p.Runs) != 1 || p.Runs[0].ID != occ {
		t.Fatalf("series after Migrate = %+v", p.Runs)
	}
	if r, err := s.Get(ctx, "old-failed"); err != nil || r.State != Failed || r.Type != "legacy" || r.Worker != "w-old" {
		t.Fatalf("migrated record = %+v, %v", r, err)
	}
	if _, err := s.Get(ctx, "old-pending"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("the old scheduled record: %v", err)
	}
	// A queued run converted by Migrate is claimed like any run without a
	// mark.
	if _, err := s.Claim(ctx, "old-queued-2", "w1", 1, e.now().Add(time.Minute), Meta{Type: "legacy", Due: due}); err != nil {
		t.Fatal(err)
	}
	if ok, err := s.hasLegacy(ctx); err != nil || ok {
		t.Fatalf("old rows left after Migrate: %v %v", ok, err)
	}
	e.verify(t)
}

func TestMemLegacy(t *testing.T) {
	clk := clock.NewFake(t0)
	mt := table.NewMemory("", clk)
	due := t0.Add(-time.Hour).Truncate(time.Second)
	writeLegacy(t, mt, due)
	o := Options{Clock: clk}
	_ = o.fill()
	s := &Store{t: mt, o: o}
	legacyBehaviour(t, env{s: s, requests: func() int64 { return 0 }, now: clk.Now, advance: clk.Advance}, due)
}

func TestStoreLegacy(t *testing.T) {
	t.Parallel()
	e := azureEnv(t, Options{})
	// A second Store on the same table, made after the old rows exist
	// (the first one looked when it started and found none).
	due := time.Now().Add(-time.Hour).Truncate(time.Second)
	writeLegacy(t, e.s.t, due)
	fresh := &Store{t: e.s.t, o: e.s.o}
	legacyBehaviour(t, env{s: fresh, requests: e.requests, now: e.now}, due)
}
