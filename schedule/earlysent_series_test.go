package schedule

import (
	"context"
	"testing"
	"time"

	"github.com/leasecron/leasecron/internal/table"
)

// A series' row already marked by an earlier pass (its token, SentUntil
// short of the new occurrence) is still exactly as the mover read it when
// the next pass sends a later occurrence early: until that pass's mark
// lands, the row stands for the message (simulator seed 87044: a slow pass
// committed 83 s after its send, the occurrence came due meanwhile, and the
// worker acknowledged it as changed; it never ran). A series disabled in
// that moment does not.
func TestEarlySentOccurrenceCurrentBeforeTheMarkOfAMarkedRow(t *testing.T) {
	for _, disable := range []bool{false, true} {
		e := newMoverEnv(t, 1, MoverOptions{MoverSettings: MoverSettings{PollEvery: 5 * time.Second, Early: time.Minute}})
		e.c.opts.ChangesAfterSend = true
		e.add(t, Item{ID: "s", Due: t0.Add(30 * time.Second), Recurrence: "@every 20s"})
		if err := e.onePass(t); err != nil { // sends t0+30s and t0+50s early, marks the row
			t.Fatal(err)
		}
		e.fc.Advance(15 * time.Second)
		var got *bool
		want := runID("s", t0.Add(70*time.Second), true)
		e.mt.BeforeSubmit(func(ops []table.Op) error {
			e.mt.BeforeSubmit(nil)
			if disable {
				if _, err := e.c.Disable(context.Background(), "s"); err != nil {
					return err
				}
			}
			s, ok := e.q.byID(want)
			if !ok {
				t.Errorf("%s not sent; sent %v", want, e.q.ids())
				return nil
			}
			ok, err := e.c.Current(context.Background(), s.env)
			if err != nil {
				return err
			}
			got = &ok
			return nil
		})
		if err := e.onePass(t); err != nil && !disable {
			t.Fatal(err)
		}
		if got == nil || *got == disable {
			t.Fatalf("disable=%v: Current of %s before the pass's mark landed: %v; want %v", disable, want, got != nil && *got, !disable)
		}
	}
}

// A new term's first pass skips a series' occurrences that fell due
// before it as missed while nobody moved, and an overdue series runs
// once: the first occurrence not yet sent is that once, even when the
// row's own occurrence was sent early already (simulator seed 106191: a
// rebalance gave the mover a new term on its own shard a few
// milliseconds after an occurrence fell due; the row's occurrence, sent
// by an earlier pass, was confirmed, and the one just due was skipped:
// it never ran).
func TestANewTermRunsTheFirstUnsentOccurrenceOfAnOverdueSeries(t *testing.T) {
	e := newMoverEnv(t, 1, MoverOptions{MoverSettings: MoverSettings{PollEvery: 5 * time.Second, Early: 15 * time.Second}})
	e.add(t, Item{ID: "s", Due: t0.Add(10 * time.Second), Recurrence: "@every 20s"})
	if err := e.onePass(t); err != nil { // sends t0+10s early, marks the row
		t.Fatal(err)
	}
	if _, ok := e.q.byID(runID("s", t0.Add(10*time.Second), true)); !ok {
		t.Fatalf("the first occurrence was not sent early: %v", e.q.ids())
	}
	e.fc.Advance(30*time.Second + 10*time.Millisecond) // t0+30s fell due 10 ms ago
	m2 := newMoverEnvSharing(t, e, 2)
	if err := m2.takeFence(ctx(t), "00", 2); err != nil {
		t.Fatal(err)
	}
	if _, err := m2.pass(ctx(t), 2); err != nil {
		t.Fatal(err)
	}
	if _, ok := e.q.byID(runID("s", t0.Add(30*time.Second), true)); !ok {
		t.Fatalf("the occurrence due t0+30s, the series' first not sent, was skipped by the new term's pass: sent %v", e.q.ids())
	}
}
