package runs

import (
	"context"
	"testing"
	"time"

	"github.com/leasecron/leasecron/leasecrontype"
)

// progress writes a running attempt's report in one request, into the run
// row and both list rows, only while the claim is the writer's; the
// attempt's end keeps the last report, and the rows still agree.
func progress(t *testing.T, e env) {
	ctx := context.Background()
	s := e.s
	meta := Meta{Type: "import", Due: e.now().Add(-time.Second).Truncate(time.Second)}
	if _, err := s.Claim(ctx, "p1", "w1", 1, e.now().Add(time.Minute), meta); err != nil {
		t.Fatal(err)
	}
	half := leasecrontype.RunProgress{Percent: 50, Message: "half way", At: e.now().UTC().Truncate(time.Millisecond)}
	e.wantCost(t, "a progress write", 1, func() {
		if err := s.Progress(ctx, "p1", "w1", half); err != nil {
			t.Fatal(err)
		}
	})
	if r := e.mustState(t, "p1", Running); r.Progress != half {
		t.Fatalf("running record's progress %+v, want %+v", r.Progress, half)
	}
	for _, st := range []State{Running, ""} {
		p, err := s.Query(ctx, Query{State: st})
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Runs) != 1 || p.Runs[0].Progress != half {
			t.Fatalf("listing state %q: %+v, want p1 with its progress", st, p.Runs)
		}
	}
	// Another worker's claim, or a Store that never claimed the run:
	// nothing is written.
	e.wantCost(t, "progress of another worker", 0, func() {
		if err := s.Progress(ctx, "p1", "w2", leasecrontype.RunProgress{Percent: 99, At: e.now()}); err != nil {
			t.Fatal(err)
		}
		if err := e.other.Progress(ctx, "p1", "w1", leasecrontype.RunProgress{Percent: 98, At: e.now()}); err != nil {
			t.Fatal(err)
		}
	})
	if err := s.Extend(ctx, "p1", "w1", e.now().Add(2*time.Minute)); err != nil {
		t.Fatal(err)
	}
	done := leasecrontype.RunProgress{Percent: 100, Message: "done", At: e.now().UTC().Truncate(time.Millisecond)}
	if err := s.Progress(ctx, "p1", "w1", done); err != nil {
		t.Fatal(err)
	}
	e.wantCost(t, "the finish after progress", 1, func() {
		if err := s.Finish(ctx, "p1", Succeeded, nil, "imported"); err != nil {
			t.Fatal(err)
		}
	})
	if r := e.mustState(t, "p1", Succeeded); r.Progress != done {
		t.Fatalf("finished record's progress %+v, want the last report %+v", r.Progress, done)
	}
	p, err := s.Query(ctx, Query{State: Succeeded})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Runs) != 1 || p.Runs[0].Progress != done {
		t.Fatalf("succeeded listing: %+v, want p1 with its last progress", p.Runs)
	}
	// After its end, a late report writes nothing.
	e.wantCost(t, "progress after the end", 0, func() {
		if err := s.Progress(ctx, "p1", "w1", half); err != nil {
			t.Fatal(err)
		}
	})
	e.verify(t)
}

func TestMemProgress(t *testing.T) { progress(t, memEnv(t)) }

func TestStoreProgress(t *testing.T) {
	t.Parallel()
	progress(t, azureEnv(t, Options{}))
}
