package runs

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/leasecron/leasecron/internal/clock"
)

// A series' summary row follows its numbered occurrences through claim,
// finish, cancel and retention without a request of its own: Recent is
// one point read returning the latest SummarySlots outcomes, newest first;
// Clean drops the row once every slot has expired.
func summaryBehaviour(t *testing.T, e env) {
	ctx := context.Background()
	s := e.s
	if _, ok, err := s.Recent(ctx, "beat"); ok || err != nil {
		t.Fatalf("Recent of a series without a summary = %v, %v; want not ok", ok, err)
	}
	if _, _, err := s.Recent(ctx, "a~b"); err == nil || !strings.Contains(err.Error(), `"a~b"`) {
		t.Fatalf("Recent of a bad series id: %v", err)
	}
	base := e.now().Truncate(time.Second).Add(-time.Hour)
	due := func(i int) time.Time { return base.Add(time.Duration(i) * time.Minute) }
	meta := func(i int) Meta { return Meta{Type: "tick", Due: due(i), Seq: int64(i)} }
	// Occurrences 1..7 are marked queued by the mover, then claimed and
	// finished; 3 and 6 fail, 7 is still running.
	var marks []Mark
	for i := 1; i <= 7; i++ {
		marks = append(marks, Mark{ID: OccurrenceID("beat", due(i)), Meta: meta(i)})
	}
	for i, ok := range s.MarkQueued(ctx, marks) {
		if !ok {
			t.Fatalf("occurrence %d not marked", i+1)
		}
	}
	var claimReqs, finishReqs int64
	for i := 1; i <= 7; i++ {
		id := OccurrenceID("beat", due(i))
		m := meta(i)
		m.Queued = true
		before := e.requests()
		if _, err := s.Claim(ctx, id, "w1", 1, e.now().Add(time.Minute), m); err != nil {
			t.Fatal(err)
		}
		claimReqs += e.requests() - before
		if i == 7 {
			break
		}
		var herr error
		st := Succeeded
		if i%3 == 0 {
			st, herr = Failed, fmt.Errorf("exit code %d", i)
		}
		before = e.requests()
		if err := s.Finish(ctx, id, st, herr, "out"); err != nil {
			t.Fatal(err)
		}
		finishReqs += e.requests() - before
	}
	// The summary rides in the claim's and the finish's transactions.
	if claimReqs != 7 || finishReqs != 6 {
		t.Fatalf("claims cost %d requests for 7, finishes %d for 6: the summary must not add any", claimReqs, finishReqs)
	}
	before := e.requests()
	got, ok, err := s.Recent(ctx, "beat")
	if err != nil || !ok {
		t.Fatalf("Recent = %v, %v", ok, err)
	}
	if n := e.requests() - before; n != 1 {
		t.Fatalf("Recent cost %d requests, want 1", n)
	}
	var line []string
	for _, r := range got {
		if r.ID != OccurrenceID("beat", r.Due) || r.Series != "beat" {
			t.Fatalf("slot run %+v", r)
		}
		line = append(line, fmt.Sprintf("%d:%s:%s", int(r.Due.Sub(base)/time.Minute), r.State, r.LastError))
	}
	if want := "7:running: 6:failed:exit code 6 5:succeeded: 4:succeeded: 3:failed:exit code 3"; strings.Join(line, " ") != want {
		t.Fatalf("Recent =\n%s\nwant\n%s", strings.Join(line, " "), want)
	}
	// It agrees with the records themselves.
	p, err := s.Query(ctx, Query{Series: "beat", Limit: SummarySlots})
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range p.Runs {
		if r.ID != got[i].ID || r.State != got[i].State {
			t.Fatalf("Query says %s %s, Recent %s %s", r.ID, r.State, got[i].ID, got[i].State)
		}
	}
	// A cancel goes through the read-and-write path and updates its slot.
	if _, err := s.Cancel(ctx, OccurrenceID("beat", due(7))); err != nil {
		t.Fatal(err)
	}
	if got, _, _ := s.Recent(ctx, "beat"); len(got) != SummarySlots || got[0].State != Cancelled {
		t.Fatalf("after cancelling 7: %+v", got)
	}
	if problems, _, err := s.Verify(ctx); err != nil || len(problems) > 0 {
		t.Fatalf("Verify: %v %v", problems, err)
	}
	if e.advance == nil {
		return
	}
	// Past the short retention the succeeded and cancelled slots are
	// hidden; past the long one the row goes with the last records.
	e.advance(s.o.Retention + time.Hour)
	got, ok, err = s.Recent(ctx, "beat")
	if err != nil || !ok || len(got) != 2 || got[0].State != Failed || got[1].State != Failed {
		t.Fatalf("after the short retention Recent = %+v, %v, %v; want the two failed", got, ok, err)
	}
	if st, err := s.Clean(ctx); err != nil || st.Summaries != 0 || st.Expired != 5 {
		t.Fatalf("Clean with failed slots still kept = %+v, %v; want 5 runs (succeeded and cancelled) and no summary", st, err)
	}
	if _, ok, _ := s.Recent(ctx, "beat"); !ok {
		t.Fatal("a summary with live slots was removed")
	}
	e.advance(s.o.RetentionFailed)
	st, err := s.Clean(ctx)
	if err != nil || st.Summaries != 1 || st.Expired != 2 {
		t.Fatalf("Clean after every retention = %+v, %v; want the 2 failed runs and 1 summary", st, err)
	}
	if _, ok, err := s.Recent(ctx, "beat"); ok || err != nil {
		t.Fatalf("summary still there after Clean: %v, %v", ok, err)
	}
}

func TestMemSummary(t *testing.T) { summaryBehaviour(t, memEnv(t)) }

func TestStoreSummary(t *testing.T) {
	t.Parallel()
	summaryBehaviour(t, azureEnv(t, Options{Clock: clock.NewFake(time.Now())}))
}

// Occurrences without a number (a mover before Seq) write no summary, and
// a slot takes whichever occurrence of its residue changed last.
func TestSummarySlots(t *testing.T) {
	ctx := context.Background()
	e := memEnv(t)
	s := e.s
	due := t0.Add(-time.Hour)
	if _, err := s.Claim(ctx, OccurrenceID("old", due), "w1", 1, t0.Add(time.Minute), Meta{Due: due}); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := s.Recent(ctx, "old"); ok {
		t.Fatal("an unnumbered occurrence wrote a summary")
	}
	for i := 1; i <= 2*SummarySlots+1; i++ {
		d := due.Add(time.Duration(i) * time.Minute)
		if _, err := s.Claim(ctx, OccurrenceID("many", d), "w1", 1, t0.Add(time.Minute), Meta{Due: d, Seq: int64(i)}); err != nil {
			t.Fatal(err)
		}
	}
	got, ok, err := s.Recent(ctx, "many")
	if err != nil || !ok || len(got) != SummarySlots {
		t.Fatalf("Recent = %d runs, %v, %v", len(got), ok, err)
	}
	for i, r := range got {
		if want := due.Add(time.Duration(2*SummarySlots+1-i) * time.Minute); !r.Due.Equal(want) {
			t.Fatalf("slot %d holds %s, want due %s", i, r.ID, want)
		}
	}
}
