package runs

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leasecron/leasecron/internal/clock"
	"github.com/leasecron/leasecron/leasecrontype"
)

// The claim of an early-sent message succeeds only on a record that carries
// its token; anything else is left for the row to decide.
func TestDecideClaimEarlySent(t *testing.T) {
	now := t0
	meta := Meta{Type: "email", Due: now.Add(-time.Second), Token: "tok1"}
	for _, c := range []struct {
		name string
		cur  *Run
		want error
	}{
		{"no record", nil, ErrUnconfirmed},
		{"queued without the token", &Run{Run: leasecrontype.Run{ID: "a", State: Queued, Due: meta.Due}}, ErrUnconfirmed},
		{"queued with another token", &Run{Run: leasecrontype.Run{ID: "a", State: Queued, Due: meta.Due}, Token: "tok0"}, ErrUnconfirmed},
		{"only an earlier, finished run", &Run{Run: leasecrontype.Run{ID: "a", State: Succeeded, Due: meta.Due.Add(-time.Hour)}, Token: "tok1"}, ErrUnconfirmed},
		{"confirmed", &Run{Run: leasecrontype.Run{ID: "a", State: Queued, Due: meta.Due}, Token: "tok1"}, nil},
		// A put-back before any attempt (the rate limit's note) is no
		// confirmation (issue 38, seed 1011: a disabled series' occurrence
		// ran).
		{"waiting before its first attempt", &Run{Run: leasecrontype.Run{ID: "a", State: Snoozed}}, ErrUnconfirmed},
		{"confirmed, then waiting", &Run{Run: leasecrontype.Run{ID: "a", State: Snoozed, Due: meta.Due}, Token: "tok1"}, nil},
		{"snoozed by an attempt", &Run{Run: leasecrontype.Run{ID: "a", State: Snoozed, Due: meta.Due, Attempts: 1}}, nil},
		{"cancelled stays cancelled", &Run{Run: leasecrontype.Run{ID: "a", State: Cancelled, Due: meta.Due}}, ErrCancelled},
		{"a retry after a failure", &Run{Run: leasecrontype.Run{ID: "a", State: Failed, Due: meta.Due, Attempts: 1}}, nil},
		{"succeeded is a duplicate", &Run{Run: leasecrontype.Run{ID: "a", State: Succeeded, Due: meta.Due}}, ErrAlreadySucceeded},
		// Another scheduling's run handed back at shutdown (queued after
		// an attempt) confirms nothing of this due time (seed 88325).
		{"another scheduling's run, handed back", &Run{Run: leasecrontype.Run{ID: "a", State: Queued, Due: meta.Due.Add(-time.Minute), Attempts: 1}}, ErrUnconfirmed},
		{"another scheduling's run under way", &Run{Run: leasecrontype.Run{ID: "a", State: Running, Due: meta.Due.Add(-time.Minute), Attempts: 1, ClaimUntil: now.Add(time.Minute)}}, ErrUnconfirmed},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := decideClaim(c.cur, "a", "w1", 1, now.Add(time.Minute), meta, now)
			if !errors.Is(err, c.want) || (c.want == nil && err != nil) {
				t.Fatalf("err = %v, want %v", err, c.want)
			}
		})
	}
}

func earlySent(t *testing.T, e env) {
	ctx := context.Background()
	s := e.s
	due := e.now().Add(time.Second).Truncate(time.Second)
	m := Meta{Type: "email", Due: due, Token: "tok1"}
	// Unconfirmed: the claim is refused and writes nothing.
	if _, err := s.Claim(ctx, "early1", "w1", 1, due.Add(time.Minute), m); !errors.Is(err, ErrUnconfirmed) {
		t.Fatalf("claim before confirmation = %v, want ErrUnconfirmed", err)
	}
	if _, err := s.Get(ctx, "early1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a refused claim wrote a record: %v", err)
	}
	// The mover confirms as it moves the row; then the claim takes it.
	if ok := s.Confirm(ctx, []Mark{{ID: "early1", Meta: m}}); !ok[0] {
		t.Fatal("Confirm failed")
	}
	if r := e.mustState(t, "early1", Queued); r.Token != "tok1" {
		t.Fatalf("confirmed record %+v", r)
	}
	if _, err := s.Claim(ctx, "early1", "w1", 1, due.Add(time.Minute), m); err != nil {
		t.Fatalf("claim after confirmation: %v", err)
	}
	// A run noted as waiting (put back for its rate limit) before the
	// mover confirmed it is still unconfirmed, and the confirmation takes
	// the record over.
	if err := s.Snooze(ctx, "early3", due.Add(time.Minute), "waiting for the rate limit"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Claim(ctx, "early3", "w1", 1, due.Add(time.Minute), m); !errors.Is(err, ErrUnconfirmed) {
		t.Fatalf("claim of a noted, unconfirmed run = %v, want ErrUnconfirmed", err)
	}
	if ok := s.Confirm(ctx, []Mark{{ID: "early3", Meta: m}}); !ok[0] {
		t.Fatal("Confirm of a noted run failed")
	}
	if r := e.mustState(t, "early3", Queued); r.Token != "tok1" || !r.Due.Equal(due) {
		t.Fatalf("confirmed noted record %+v", r)
	}
	if _, err := s.Claim(ctx, "early3", "w1", 1, due.Add(time.Minute), m); err != nil {
		t.Fatalf("claim of a noted run after confirmation: %v", err)
	}
	// A stale message (another token) of the same run is refused while the
	// run is queued, and follows the usual rules once it runs.
	if ok := s.Confirm(ctx, []Mark{{ID: "early2", Meta: m}}); !ok[0] {
		t.Fatal("Confirm failed")
	}
	stale := m
	stale.Token = "tok0"
	if _, err := s.Claim(ctx, "early2", "w1", 1, due.Add(time.Minute), stale); !errors.Is(err, ErrUnconfirmed) {
		t.Fatalf("stale token = %v, want ErrUnconfirmed", err)
	}
	// Unconfirm clears only its own token.
	if err := s.Unconfirm(ctx, "early2", "tok0"); err != nil {
		t.Fatal(err)
	}
	if r := e.mustState(t, "early2", Queued); r.Token != "tok1" {
		t.Fatalf("Unconfirm of another token changed %+v", r)
	}
	if err := s.Unconfirm(ctx, "early2", "tok1"); err != nil {
		t.Fatal(err)
	}
	if r := e.mustState(t, "early2", Queued); r.Token != "" {
		t.Fatalf("Unconfirm left %+v", r)
	}
	if _, err := s.Claim(ctx, "early2", "w1", 1, due.Add(time.Minute), m); !errors.Is(err, ErrUnconfirmed) {
		t.Fatalf("claim after Unconfirm = %v, want ErrUnconfirmed", err)
	}
	// The row decided it stands: the claim without the token goes through.
	m.Token = ""
	if _, err := s.Claim(ctx, "early2", "w1", 1, due.Add(time.Minute), m); err != nil {
		t.Fatalf("claim without the token: %v", err)
	}
	// A run a worker already took (through the row) may have its row moved.
	if ok := s.Confirm(ctx, []Mark{{ID: "early2", Meta: Meta{Type: "email", Due: due, Token: "tok1"}}}); !ok[0] {
		t.Fatal("Confirm of a running run must let the row be moved")
	}
	// Not so another scheduling of the id, due at another time, while this
	// run is under way: its row stays until the run has ended (issue 38,
	// found by the simulator: the row went, and the new task's message was
	// taken for stale and never ran).
	later := Meta{Type: "email", Due: due.Add(time.Minute), Token: "tok2"}
	if ok := s.Confirm(ctx, []Mark{{ID: "early2", Meta: later}}); ok[0] {
		t.Fatal("Confirm of another scheduling while a run of the id is under way let its row be moved")
	}
	if err := s.Finish(ctx, "early2", Succeeded, nil, ""); err != nil {
		t.Fatal(err)
	}
	if ok := s.Confirm(ctx, []Mark{{ID: "early2", Meta: later}}); !ok[0] {
		t.Fatal("Confirm of another scheduling once the earlier run ended")
	}
	if r := e.mustState(t, "early2", Queued); r.Token != "tok2" || !r.Due.Equal(later.Due) {
		t.Fatalf("the record after the new scheduling's confirmation: %+v", r)
	}
	e.verify(t)
}

func TestMemEarlySent(t *testing.T) { earlySent(t, memEnv(t)) }

func TestMemWithdrawnSend(t *testing.T) { withdrawnSend(t, memEnv(t)) }

// withdrawnSend: a task sent for now by its client and rescheduled before
// the client marked its row (issue 38, seed 1142). UnconfirmDue withdraws
// the old due time: a confirmation before it is taken back, one after it
// is refused — even once the rescheduled task has run and its record is
// finished — and a claim of the old message is left to the row check.
func withdrawnSend(t *testing.T, e env) {
	ctx := context.Background()
	s := e.s
	old := e.now().Add(time.Second).Truncate(time.Second)
	later := old.Add(time.Hour)
	sent := Meta{Type: "email", Due: old, Token: "tok1"}
	lease := old.Add(time.Minute)

	// Confirmed before the change: taken back.
	if ok := s.Confirm(ctx, []Mark{{ID: "before", Meta: sent}}); !ok[0] {
		t.Fatal("Confirm failed")
	}
	if _, err := s.UnconfirmDue(ctx, "before", Meta{Type: "email", Due: old.Add(time.Second)}); err != nil {
		t.Fatal(err)
	}
	if r := e.mustState(t, "before", Queued); r.Token != "tok1" {
		t.Fatalf("withdrawing another due time changed %+v", r)
	}
	if _, err := s.UnconfirmDue(ctx, "before", Meta{Type: "email", Due: old}); err != nil {
		t.Fatal(err)
	}
	if r := e.mustState(t, "before", Queued); r.Token != "" || !r.Withdrawn.has(old) {
		t.Fatalf("after the withdrawal: %+v", r)
	}
	if _, err := s.Claim(ctx, "before", "w1", 1, lease, sent); !errors.Is(err, ErrUnconfirmed) {
		t.Fatalf("claim of the old message = %v, want ErrUnconfirmed", err)
	}
	if ok := s.Confirm(ctx, []Mark{{ID: "before", Meta: sent}}); ok[0] {
		t.Fatal("a confirmation retried after the withdrawal was accepted")
	}

	// Confirmed after the change, before any record: refused.
	if _, err := s.UnconfirmDue(ctx, "after", Meta{Type: "email", Due: old}); err != nil {
		t.Fatal(err)
	}
	if r := e.mustState(t, "after", Queued); r.Token != "" || !r.Due.Equal(old) || r.Type != "email" {
		t.Fatalf("the withdrawal's record: %+v", r)
	}
	if ok := s.Confirm(ctx, []Mark{{ID: "after", Meta: sent}}); ok[0] {
		t.Fatal("a confirmation after the withdrawal was accepted")
	}

	// Confirmed after the rescheduled task has run: still refused. The
	// rescheduled task (another due time, its own token) is confirmed and
	// runs as usual once the old queued record is out of its way.
	if _, err := s.UnconfirmDue(ctx, "ran", Meta{Type: "email", Due: old}); err != nil {
		t.Fatal(err)
	}
	moved := Meta{Type: "email", Due: later, Token: "tok2"}
	if _, err := s.Claim(ctx, "ran", "w1", 1, lease, Meta{Type: "email", Due: later}); err != nil {
		t.Fatalf("claim of the rescheduled task (checked against its row): %v", err)
	}
	if err := s.Finish(ctx, "ran", Succeeded, nil, ""); err != nil {
		t.Fatal(err)
	}
	if ok := s.Confirm(ctx, []Mark{{ID: "ran", Meta: moved}}); !ok[0] {
		t.Fatal("the rescheduled task's run is not confirmed")
	}
	if ok := s.Confirm(ctx, []Mark{{ID: "ran", Meta: sent}}); ok[0] {
		t.Fatal("a late confirmation of the withdrawn due time was accepted after the rescheduled task ran")
	}
	if r := e.mustState(t, "ran", Succeeded); !r.Due.Equal(later) || !r.Withdrawn.has(old) {
		t.Fatalf("the rescheduled task's record: %+v", r)
	}
	if _, err := s.Claim(ctx, "ran", "w2", 1, lease, sent); !errors.Is(err, ErrUnconfirmed) {
		t.Fatalf("claim of the old message after the task ran = %v, want ErrUnconfirmed", err)
	}

	// Still refused after two more schedulings have run and ended, each
	// record withdrawing the finished one's due time beside the first
	// (a review of seed 4558's fix: one withdrawn due time, overwritten by
	// the next, let the late confirmation take the last record over).
	if _, err := s.UnconfirmDue(ctx, "twice", Meta{Type: "email", Due: old}); err != nil {
		t.Fatal(err)
	}
	for i, due := range []time.Time{later, later.Add(time.Hour)} {
		if ok := s.MarkQueued(ctx, []Mark{{ID: "twice", Meta: Meta{Type: "email", Due: due}}}); !ok[0] && i > 0 {
			t.Fatalf("the mark of scheduling %d failed", i+2)
		}
		if _, err := s.Claim(ctx, "twice", "w1", 1, lease, Meta{Type: "email", Due: due}); err != nil {
			t.Fatal(err)
		}
		if err := s.Finish(ctx, "twice", Succeeded, nil, ""); err != nil {
			t.Fatal(err)
		}
	}
	if ok := s.Confirm(ctx, []Mark{{ID: "twice", Meta: sent}}); ok[0] {
		t.Fatal("a late confirmation of the withdrawn due time was accepted two schedulings later")
	}
	if r := e.mustState(t, "twice", Succeeded); !r.Due.Equal(later.Add(time.Hour)) || !r.Withdrawn.has(old) || !r.Withdrawn.has(later) {
		t.Fatalf("the last scheduling's record: %+v; want it succeeded, both earlier due times withdrawn", r)
	}

	// Replaced with the same due time: the replacement's run is not
	// confirmed while queued (its message is checked against its row),
	// and once it has started its row may be moved.
	if _, err := s.UnconfirmDue(ctx, "same", Meta{Type: "email", Due: old}); err != nil {
		t.Fatal(err)
	}
	again := Meta{Type: "email", Due: old, Token: "tok3"}
	if ok := s.Confirm(ctx, []Mark{{ID: "same", Meta: again}}); ok[0] {
		t.Fatal("a confirmation of the withdrawn due time was accepted")
	}
	if _, err := s.Claim(ctx, "same", "w1", 1, lease, Meta{Type: "email", Due: old}); err != nil {
		t.Fatalf("claim of the replacement (checked against its row): %v", err)
	}
	if ok := s.Confirm(ctx, []Mark{{ID: "same", Meta: again}}); !ok[0] {
		t.Fatal("the replacement has started: its row must be movable")
	}
}

func TestStoreEarlySent(t *testing.T) {
	t.Parallel()
	earlySent(t, azureEnv(t, Options{}))
}

func TestStoreWithdrawnSend(t *testing.T) {
	t.Parallel()
	withdrawnSend(t, azureEnv(t, Options{}))
}

func TestMemConfirmAgainAfterAChangeThatDidNotHappen(t *testing.T) {
	confirmAgain(t, memEnv(t))
}

func TestStoreConfirmAgainAfterAChangeThatDidNotHappen(t *testing.T) {
	t.Parallel()
	confirmAgain(t, azureEnv(t, Options{}))
}

// confirmAgain: a change of a row being sent withdrew its due time, taking
// a confirmation back, and then found the row gone (issue 38, seed
// 30004). ConfirmAgain puts the token back on the record exactly as the
// withdrawal left it, so the message's claim succeeds — and on nothing
// else: a record claimed, confirmed anew or of another due time since.
func confirmAgain(t *testing.T, e env) {
	ctx := context.Background()
	s := e.s
	old := e.now().Add(time.Second).Truncate(time.Second)
	sent := Meta{Type: "email", Due: old, Token: "tok1"}
	lease := old.Add(time.Minute)
	withdraw := func(id string) {
		t.Helper()
		if ok := s.ConfirmSent(ctx, []Mark{{ID: id, Meta: sent}}); !ok[0] {
			t.Fatalf("%s: ConfirmSent failed", id)
		}
		took, err := s.UnconfirmDue(ctx, id, Meta{Type: "email", Due: old})
		if err != nil || took != "tok1" {
			t.Fatalf("%s: UnconfirmDue took %q, %v; want tok1", id, took, err)
		}
	}

	withdraw("back")
	if err := s.ConfirmAgain(ctx, "back", sent); err != nil {
		t.Fatal(err)
	}
	if r := e.mustState(t, "back", Queued); r.Token != "tok1" || r.Withdrawn.has(old) {
		t.Fatalf("confirmed again: %+v, want tok1 and the due time no longer withdrawn", r)
	}
	if _, err := s.Claim(ctx, "back", "w1", 1, lease, sent); err != nil {
		t.Fatalf("the message's claim after ConfirmAgain: %v", err)
	}
	if took, err := s.UnconfirmDue(ctx, "none", Meta{Type: "email", Due: old}); err != nil || took != "" {
		t.Fatalf("a withdrawal with no confirmation took %q, %v", took, err)
	}

	// The record changed since the withdrawal: left as it is.
	withdraw("claimed")
	if _, err := s.Claim(ctx, "claimed", "w1", 1, lease, Meta{Type: "email", Due: old}); err != nil {
		t.Fatal(err) // the message checked against its row, and ran
	}
	withdraw("other")
	later := Meta{Type: "email", Due: old.Add(time.Hour), Token: "tok2"}
	if ok := s.Confirm(ctx, []Mark{{ID: "other", Meta: later}}); !ok[0] {
		t.Fatal("the rescheduled task's confirmation was refused")
	}
	for _, id := range []string{"claimed", "other"} {
		before, err := s.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.ConfirmAgain(ctx, id, sent); err != nil {
			t.Fatal(err)
		}
		after, err := s.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if after.State != before.State || after.Token != before.Token || !after.Due.Equal(before.Due) {
			t.Errorf("%s: ConfirmAgain changed %+v into %+v", id, before, after)
		}
	}
	// Records no withdrawal of that due time left: a confirmation that
	// stands, a plain queued record, one cancelled since the withdrawal.
	if ok := s.ConfirmSent(ctx, []Mark{{ID: "standing", Meta: Meta{Type: "email", Due: old, Token: "tok0"}}}); !ok[0] {
		t.Fatal("ConfirmSent failed")
	}
	if ok := s.MarkQueued(ctx, []Mark{{ID: "plain", Meta: Meta{Type: "email", Due: old}}}); !ok[0] {
		t.Fatal("MarkQueued failed")
	}
	withdraw("cancelled")
	if _, err := s.Cancel(ctx, "cancelled"); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"standing", "plain", "cancelled"} {
		before, err := s.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.ConfirmAgain(ctx, id, sent); err != nil {
			t.Fatal(err)
		}
		if after, err := s.Get(ctx, id); err != nil || after.State != before.State || after.Token != before.Token {
			t.Errorf("%s: ConfirmAgain changed %+v into %+v (%v)", id, before, after, err)
		}
	}
	if err := s.ConfirmAgain(ctx, "back", Meta{Due: old}); !errors.Is(err, ErrInvalid) {
		t.Errorf("ConfirmAgain without a token: %v, want ErrInvalid", err)
	}
}

// A confirmation of an early-sent run that a worker claimed (after
// checking its row) before the run records' partition count grew does not
// make a second record of the run under the new count: it reads first
// where the id has several homes (issue 38, found by the simulator in a
// rolling switch to sharding: the record under the new count said
// "queued" for good, over the run that had succeeded under the old one).
func TestConfirmAcrossALayoutChange(t *testing.T) {
	e := memEnv(t)
	s := e.s
	ctx := context.Background()
	layout := DefaultLayout
	s.o.Layout = func(context.Context) Layout { return layout }
	due := t0.Add(time.Minute)
	if _, err := s.Claim(ctx, "x", "w1", 1, due.Add(time.Minute), Meta{Type: "t", Due: due}); err != nil {
		t.Fatal(err)
	}
	if err := s.Finish(ctx, "x", Succeeded, nil, ""); err != nil {
		t.Fatal(err)
	}
	layout = Layout{Write: 8, Read: []int{4, 8}}
	if bucketIn(bucketKey("x"), 4) == bucketIn(bucketKey("x"), 8) {
		t.Fatal("pick an id whose homes differ between 4 and 8 partitions")
	}
	if ok := s.Confirm(ctx, []Mark{{ID: "x", Meta: Meta{Type: "t", Due: due, Token: "tok"}}}); !ok[0] {
		t.Fatal("the confirmation of a run that succeeded must let its row go")
	}
	if r := e.mustState(t, "x", Succeeded); r.Attempts != 1 {
		t.Fatalf("record after the confirmation: %+v", r)
	}
	if problems, _, err := s.Verify(ctx); err != nil || len(problems) != 0 {
		t.Fatalf("Verify: %v, %v", problems, err)
	}
	n := 0
	for _, pk := range layout.all() {
		if _, err := e.s.t.Get(ctx, pk, runKey("x")); err == nil {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("%d records of the run, want 1", n)
	}
}

// The end of an attempt of a run that was cancelled, then its id scheduled
// again (the new task's queued mark replaced the cancelled record), is not
// written over the new task's record (issue 38, seed 1123: the cancelled
// attempt's snooze made the new task's record snoozed).
func TestEndAfterTheIdWasScheduledAgain(t *testing.T) {
	for _, end := range []string{"finish", "snooze"} {
		t.Run(end, func(t *testing.T) {
			e := memEnv(t)
			ctx := context.Background()
			s := e.s
			first := e.now().Truncate(time.Second)
			if _, err := s.Claim(ctx, "x", "w1", 1, first.Add(time.Minute), Meta{Type: "t", Due: first}); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Cancel(ctx, "x"); err != nil {
				t.Fatal(err)
			}
			again := first.Add(time.Minute)
			if ok := s.MarkQueued(ctx, []Mark{{ID: "x", Meta: Meta{Type: "t", Due: again}}}); !ok[0] {
				t.Fatal("the new task's mark failed")
			}
			var err error
			if end == "finish" {
				err = s.Finish(ctx, "x", Succeeded, nil, "")
			} else {
				err = s.Snooze(ctx, "x", e.now().Add(time.Second), "")
			}
			if err != nil {
				t.Fatal(err)
			}
			if r := e.mustState(t, "x", Queued); !r.Due.Equal(again) {
				t.Fatalf("the new task's record after the old attempt's end: %+v", r)
			}
		})
	}
}

// A note that a delivery waits for its rate limit touches only that
// delivery's own run (issue 38, seed 1031: a stale early message of a
// rescheduled task, put back for its rate, turned the task's succeeded
// record into a snoozed one for good).
func TestNoteWaitingTouchesOnlyItsOwnRun(t *testing.T) {
	e := memEnv(t)
	ctx := context.Background()
	s := e.s
	due := e.now().Truncate(time.Second)
	if _, err := s.Claim(ctx, "done", "w1", 1, due.Add(time.Minute), Meta{Type: "t", Due: due}); err != nil {
		t.Fatal(err)
	}
	if err := s.Finish(ctx, "done", Succeeded, nil, ""); err != nil {
		t.Fatal(err)
	}
	if ok := s.MarkQueued(ctx, []Mark{{ID: "other", Meta: Meta{Type: "t", Due: due}}}); !ok[0] {
		t.Fatal("mark failed")
	}
	if ok := s.MarkQueued(ctx, []Mark{{ID: "own", Meta: Meta{Type: "t", Due: due}}}); !ok[0] {
		t.Fatal("mark failed")
	}
	if _, err := s.Claim(ctx, "busy", "w1", 1, due.Add(time.Minute), Meta{Type: "t", Due: due}); err != nil {
		t.Fatal(err)
	}
	until := e.now().Add(time.Second)
	for _, c := range []struct {
		id    string
		m     Meta
		noted bool
	}{
		{"done", Meta{Type: "t", Due: due.Add(13 * time.Second), Token: "stale"}, false}, // ended
		{"other", Meta{Type: "t", Due: due.Add(time.Minute)}, false},                     // another scheduling
		{"own", Meta{Type: "t", Due: due, Token: "unconfirmed"}, false},                  // early, not confirmed
		{"early", Meta{Type: "t", Due: due, Token: "tok"}, false},                        // early, no record
		{"own", Meta{Type: "t", Due: due}, true},                                         // its own run
		{"fresh", Meta{Type: "t", Due: due}, true},                                       // no record yet
		{"busy", Meta{Type: "t", Due: due}, false},                                       // a duplicate while it runs
	} {
		if noted, err := s.NoteWaiting(ctx, c.id, c.m, until, "waiting for the rate limit of t"); err != nil || noted != c.noted {
			t.Fatalf("note on %s (%+v): %v, %v; want noted %v", c.id, c.m, noted, err, c.noted)
		}
	}
	e.mustState(t, "done", Succeeded)
	e.mustState(t, "other", Queued)
	e.mustState(t, "busy", Running)
	if _, err := s.Get(ctx, "early"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a note of an unconfirmed early message made a record: %v", err)
	}
	for _, id := range []string{"own", "fresh"} {
		if r := e.mustState(t, id, Snoozed); !r.Due.Equal(due) || !r.SnoozedUntil.Equal(until) {
			t.Fatalf("noted run %s: %+v", id, r)
		}
	}
}

// The end of a delivery without a claim (a message set aside with its
// attempts used up) is recorded only on its own run as its message saw
// it (issue 38, seed 8247: a dead task's message, back because its end
// could not be told to a task waiting for it, recorded its death over the
// queued run of the id's replacement, whose message was then acknowledged
// as a dead run's).
func TestFinishOwnTouchesOnlyItsOwnRun(t *testing.T) {
	e := memEnv(t)
	ctx := context.Background()
	s := e.s
	due := e.now().Truncate(time.Second)
	died := Meta{Type: "t", Due: due}
	claim := func(id, worker string, attempt int, m Meta) {
		t.Helper()
		if _, err := s.Claim(ctx, id, worker, attempt, e.now().Add(time.Minute), m); err != nil {
			t.Fatal(err)
		}
	}
	end := func(id string, st State) {
		t.Helper()
		if err := s.Finish(ctx, id, st, errors.New("gave up"), ""); err != nil {
			t.Fatal(err)
		}
	}
	// "replaced": died, then replaced by a scheduling due a minute later
	// whose run the mover has recorded queued.
	claim("replaced", "w1", 3, died)
	end("replaced", Dead)
	if ok := s.MarkQueued(ctx, []Mark{{ID: "replaced", Meta: Meta{Type: "t", Due: due.Add(time.Minute), Token: "tok"}}}); !ok[0] {
		t.Fatal("mark failed")
	}
	// "requeued" died, and its dead letter was requeued; "requeued-ran"
	// too, and the requeue's run has succeeded since.
	rq := Meta{Type: "t", Due: due, Token: RequeueToken("m-3")}
	for _, id := range []string{"requeued", "requeued-ran"} {
		claim(id, "w1", 3, died)
		end(id, Dead)
		if _, _, err := s.MarkRequeued(ctx, id, rq, "m-3", ""); err != nil {
			t.Fatal(err)
		}
	}
	claim("requeued-ran", "w1", 1, rq)
	end("requeued-ran", Succeeded)
	// "busy": another copy of the run runs under w2's live claim.
	claim("busy", "w2", 2, died)
	// "succeeded": another copy of the run ran to success.
	claim("succeeded", "w1", 2, died)
	end("succeeded", Succeeded)
	// "confirmed": the id's row was changed for the same due time and its
	// new early-sent message confirmed before it started.
	if ok := s.MarkQueued(ctx, []Mark{{ID: "confirmed", Meta: Meta{Type: "t", Due: due, Token: "new"}}}); !ok[0] {
		t.Fatal("mark failed")
	}
	// "own": its own run, failed and waiting for its next attempt;
	// "lapsed": its own, claimed by a worker that is gone; "cancelled":
	// cancelled after its move.
	claim("own", "w1", 2, died)
	end("own", Failed)
	if _, err := s.Claim(ctx, "lapsed", "w3", 3, e.now().Add(-time.Second), died); err != nil {
		t.Fatal(err)
	}
	if ok := s.MarkQueued(ctx, []Mark{{ID: "cancelled", Meta: died}}); !ok[0] {
		t.Fatal("mark failed")
	}
	if _, err := s.Cancel(ctx, "cancelled"); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		id       string
		m        Meta
		recorded bool
		found    State
	}{
		{"replaced", died, false, Queued},
		{"requeued", died, false, Queued},
		{"requeued-ran", died, false, Succeeded},
		{"busy", died, false, Running},
		{"succeeded", died, false, Succeeded},
		{"confirmed", Meta{Type: "t", Due: due, Token: "old"}, false, Queued},
		{"own", died, true, Failed},
		{"lapsed", died, true, Running},
		{"cancelled", died, true, Cancelled}, // recorded, and stays cancelled
		{"gone", died, true, ""},             // no record left (expired)
	} {
		found, recorded, err := s.FinishOwn(ctx, c.id, c.m, Dead, errors.New("used 3 of 3 attempts"), "")
		if err != nil || recorded != c.recorded || found.State != c.found {
			t.Fatalf("FinishOwn on %s: found %s, recorded %v, %v; want found %s, recorded %v", c.id, found.State, recorded, err, c.found, c.recorded)
		}
		want := map[bool]State{true: Dead, false: c.found}[c.recorded]
		if c.found == Cancelled {
			want = Cancelled
		}
		if r := e.mustState(t, c.id, want); c.recorded && !r.Due.Equal(due) {
			t.Fatalf("the death of %s: %+v", c.id, r)
		}
	}
	if r, _ := s.Get(ctx, "replaced"); !r.Due.Equal(due.Add(time.Minute)) || r.OfDue(due) {
		t.Fatalf("the replacement's record after the old death: %+v", r)
	}
	// A hand-back (a delivery run without a claim, stopped by shutdown)
	// is not written over a run that has ended.
	if _, recorded, err := s.FinishOwn(ctx, "own", died, Queued, nil, ""); err != nil || recorded {
		t.Fatalf("a hand-back over a dead run: recorded %v, %v", recorded, err)
	}
	e.mustState(t, "own", Dead)
	if _, _, err := s.FinishOwn(ctx, "own", died, State("bogus"), nil, ""); !errors.Is(err, ErrInvalid) {
		t.Fatalf("FinishOwn with a bogus state: %v; want ErrInvalid", err)
	}
	// w2's claim is still its own: its end is one write, and lands.
	if err := s.Finish(ctx, "busy", Succeeded, nil, ""); err != nil {
		t.Fatal(err)
	}
	e.mustState(t, "busy", Succeeded)
}

// A cancel is idempotent: a second one (a retry whose first answer was
// lost) succeeds on the cancelled run without writing (issue 38, seed
// 1111); a run that succeeded is still refused.
func TestCancelIsIdempotent(t *testing.T) {
	e := memEnv(t)
	ctx := context.Background()
	s := e.s
	due := e.now().Truncate(time.Second)
	if ok := s.MarkQueued(ctx, []Mark{{ID: "c", Meta: Meta{Type: "t", Due: due}}}); !ok[0] {
		t.Fatal("mark failed")
	}
	if _, err := s.Cancel(ctx, "c"); err != nil {
		t.Fatal(err)
	}
	before := e.requests()
	if r, err := s.Cancel(ctx, "c"); err != nil || r.State != Cancelled {
		t.Fatalf("cancel again: %+v, %v; want the cancelled run", r, err)
	}
	if n := e.requests() - before; n != 1 {
		t.Fatalf("cancel again made %d requests, want 1 (the read)", n)
	}
}

// A run noted as waiting for its rate limit before its first attempt has
// not started: its sent message's row may still be moved (run-now,
// reschedule).
func TestSentStartedOfARunWaitingForItsRate(t *testing.T) {
	e := memEnv(t)
	ctx := context.Background()
	s := e.s
	due := e.now().Truncate(time.Second)
	m := Meta{Type: "t", Due: due, Token: "tok"}
	if ok := s.Confirm(ctx, []Mark{{ID: "w", Meta: m}}); !ok[0] {
		t.Fatal("confirm failed")
	}
	if noted, err := s.NoteWaiting(ctx, "w", m, e.now().Add(time.Second), "waiting for the rate limit of t"); err != nil || !noted {
		t.Fatal(noted, err)
	}
	e.mustState(t, "w", Snoozed)
	if started, err := s.SentStarted(ctx, "w", "tok", due); err != nil || started {
		t.Fatalf("SentStarted of a run waiting for its rate = %v, %v; want false", started, err)
	}
	if _, err := s.Claim(ctx, "w", "w1", 1, due.Add(time.Minute), m); err != nil {
		t.Fatal(err)
	}
	if started, err := s.SentStarted(ctx, "w", "tok", due); err != nil || !started {
		t.Fatalf("SentStarted once claimed = %v, %v; want true", started, err)
	}
}

// A run whose sent message started, cancelled while it ran, has started:
// a run-now or reschedule of the row the mover has yet to remove must
// not run the task again (issue 38, the simulator's seed 14673: a task
// due now was cancelled while it ran, and a run-now half a minute later
// moved its row and ran it again). A run cancelled before any attempt
// has not: its row may still be removed by a cancel tried again.
func TestSentStartedOfARunCancelledWhileItRan(t *testing.T) {
	e := memEnv(t)
	ctx := context.Background()
	s := e.s
	due := e.now().Truncate(time.Second)
	for _, id := range []string{"ran", "never"} {
		m := Meta{Type: "t", Due: due, Token: "tok-" + id}
		if ok := s.Confirm(ctx, []Mark{{ID: id, Meta: m}}); !ok[0] {
			t.Fatal("confirm failed")
		}
		if id == "ran" {
			if _, err := s.Claim(ctx, id, "w1", 1, due.Add(time.Minute), m); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := s.Cancel(ctx, id); err != nil {
			t.Fatal(err)
		}
		e.mustState(t, id, Cancelled)
		started, err := s.SentStarted(ctx, id, m.Token, due)
		if err != nil || started != (id == "ran") {
			t.Errorf("SentStarted of %s, cancelled = %v, %v; want %v", id, started, err, id == "ran")
		}
	}
}

// CancelPending tried again after its answer was lost finds its own
// cancelled record and succeeds; a run of that due time that succeeded
// stands, refused with ErrAlreadyFinished.
func TestMemCancelPendingIsIdempotent(t *testing.T) {
	ctx := context.Background()
	e := memEnv(t)
	due := e.now().Truncate(time.Second)
	m := Meta{Type: "email", Due: due}
	for range 2 {
		if _, err := e.s.CancelPending(ctx, "c", m); err != nil {
			t.Fatalf("CancelPending: %v", err)
		}
	}
	e.mustState(t, "c", Cancelled)
	if _, err := e.s.Claim(ctx, "ok", "w1", 1, due.Add(time.Minute), m); err != nil {
		t.Fatal(err)
	}
	if err := e.s.Finish(ctx, "ok", Succeeded, nil, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := e.s.CancelPending(ctx, "ok", m); !errors.Is(err, ErrAlreadyFinished) {
		t.Fatalf("CancelPending of a run that succeeded: %v, want ErrAlreadyFinished", err)
	}
}

// A claim counts the attempt on the record: a second message of a run
// that carries an older count makes the run's next attempt (after a
// failure) or its cut-short one again (after a crash or a snooze), and one
// of a dead run is refused (issue 38, seeds 1009, 1091, 1195).
func TestMemClaimCountsAttemptsOnTheRecord(t *testing.T) {
	ctx := context.Background()
	e := memEnv(t)
	s := e.s
	due := e.now().Truncate(time.Second)
	m := Meta{Type: "email", Due: due}
	lease := e.now().Add(time.Minute)
	if _, err := s.Claim(ctx, "r", "w1", 1, lease, m); err != nil {
		t.Fatal(err)
	}
	if err := s.Finish(ctx, "r", Failed, errors.New("boom"), ""); err != nil {
		t.Fatal(err)
	}
	r, err := s.Claim(ctx, "r", "w2", 1, lease, m) // a second message, still at attempt 1
	if err != nil || r.Attempts != 2 {
		t.Fatalf("a stale copy's claim after a failure: %+v, %v; want attempt 2", r, err)
	}
	if r, err := s.Claim(ctx, "r", "w2", 1, lease, m); err != nil || r.Attempts != 2 {
		t.Fatalf("a claim taken over on the same worker: %+v, %v; want attempt 2 again", r, err)
	}
	if err := s.Finish(ctx, "r", Dead, errors.New("boom"), ""); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Claim(ctx, "r", "w3", 2, lease, m); !errors.Is(err, ErrDead) {
		t.Fatalf("a claim of a dead run: %v; want ErrDead", err)
	}
	// Another scheduling of the id starts afresh.
	if r, err := s.Claim(ctx, "r", "w3", 1, lease, Meta{Type: "email", Due: due.Add(time.Hour)}); err != nil || r.Attempts != 1 {
		t.Fatalf("the id scheduled again: %+v, %v; want attempt 1", r, err)
	}
	// A dead record that knows no due time (an earlier release's) does not
	// refuse a message that knows its own: it may be another scheduling.
	if _, err := s.Claim(ctx, "old", "w1", 1, lease, Meta{Type: "email"}); err != nil {
		t.Fatal(err)
	}
	if err := s.Finish(ctx, "old", Dead, errors.New("boom"), ""); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Claim(ctx, "old", "w2", 1, lease, Meta{Type: "email", Due: due}); err != nil {
		t.Fatalf("a new scheduling over a dead record without a due time: %v", err)
	}
}

// A run of an id scheduled again while an earlier scheduling's run is
// queued and confirmed (its message stands) waits for that run to end,
// instead of taking its record over and leaving its message to be
// acknowledged as stale (issue 38, seed 1195: a batch member's callback
// waited for good). A queued record whose confirmation was taken back (its
// row changed) is taken over as before.
func TestMemClaimWaitsForAConfirmedEarlierScheduling(t *testing.T) {
	ctx := context.Background()
	e := memEnv(t)
	s := e.s
	first := e.now().Truncate(time.Second)
	again := first.Add(-time.Minute)
	lease := e.now().Add(time.Minute)
	old := Meta{Type: "a", Due: first, Token: "tok1", Batch: "b"}
	if ok := s.Confirm(ctx, []Mark{{ID: "id", Meta: old}}); !ok[0] {
		t.Fatal("Confirm failed")
	}
	if _, err := s.Claim(ctx, "id", "w1", 1, lease, Meta{Type: "b", Due: again}); !errors.Is(err, ErrClaimedElsewhere) {
		t.Fatalf("the new scheduling's claim over a confirmed queued run: %v; want ErrClaimedElsewhere", err)
	}
	if _, err := s.Claim(ctx, "id", "w2", 1, lease, old); err != nil {
		t.Fatalf("the earlier run's own claim: %v", err)
	}
	if err := s.Finish(ctx, "id", Succeeded, nil, ""); err != nil {
		t.Fatal(err)
	}
	if r, err := s.Claim(ctx, "id", "w1", 1, lease, Meta{Type: "b", Due: again}); err != nil || !r.Due.Equal(again) {
		t.Fatalf("the new scheduling once the earlier ended: %+v, %v", r, err)
	}
	// Bounded: a confirmed record nothing claims (its take-back failed,
	// and no message carries its token) is taken over after QueuedWait.
	if ok := s.Confirm(ctx, []Mark{{ID: "stuck", Meta: old}}); !ok[0] {
		t.Fatal("Confirm failed")
	}
	r, err := s.Claim(ctx, "stuck", "w1", 1, lease, Meta{Type: "b", Due: again})
	if !errors.Is(err, ErrClaimedElsewhere) || r.ClaimUntil.Before(e.now().Add(QueuedWait-time.Second)) {
		t.Fatalf("the first claim over a confirmed queued run: %+v, %v; want ErrClaimedElsewhere until the wait ends", r, err)
	}
	e.advance(QueuedWait + time.Second)
	if r, err := s.Claim(ctx, "stuck", "w1", 1, e.now().Add(time.Minute), Meta{Type: "b", Due: again}); err != nil || !r.Due.Equal(again) {
		t.Fatalf("the claim once the wait has ended: %+v, %v", r, err)
	}
	// Taken back (rescheduled before its move): the record is taken over.
	if ok := s.Confirm(ctx, []Mark{{ID: "moved", Meta: old}}); !ok[0] {
		t.Fatal("Confirm failed")
	}
	if err := s.Unconfirm(ctx, "moved", "tok1"); err != nil {
		t.Fatal(err)
	}
	if r, err := s.Claim(ctx, "moved", "w1", 1, lease, Meta{Type: "a", Due: again}); err != nil || !r.Due.Equal(again) {
		t.Fatalf("the rescheduled task's claim over the taken-back record: %+v, %v", r, err)
	}
	// The same for a run noted as waiting for its rate limit before any
	// attempt: it is still queued as far as its message goes. Confirmed, it
	// is waited for; taken back, it is taken over (issue 38, seed 4099: the
	// rescheduled task's message was put back as "claimed by " for good).
	if ok := s.Confirm(ctx, []Mark{{ID: "rated", Meta: old}}); !ok[0] {
		t.Fatal("Confirm failed")
	}
	if noted, err := s.NoteWaiting(ctx, "rated", old, e.now().Add(time.Second), "waiting for the rate limit of a"); err != nil || !noted {
		t.Fatal(noted, err)
	}
	if _, err := s.Claim(ctx, "rated", "w1", 1, lease, Meta{Type: "a", Due: again}); !errors.Is(err, ErrClaimedElsewhere) {
		t.Fatalf("a claim over a confirmed run waiting for its rate: %v; want ErrClaimedElsewhere", err)
	}
	// However long its budget takes, while the note is written again
	// (queue.WaitingRefresh; a review: a run waiting for a 100/1h budget
	// was taken over after QueuedWait and its message then acknowledged
	// as stale).
	for range 4 {
		e.advance(2 * time.Minute)
		if noted, err := s.NoteWaiting(ctx, "rated", old, e.now().Add(time.Second), "waiting for the rate limit of a"); err != nil || !noted {
			t.Fatal(noted, err)
		}
	}
	if _, err := s.Claim(ctx, "rated", "w1", 1, e.now().Add(time.Minute), Meta{Type: "a", Due: again}); !errors.Is(err, ErrClaimedElsewhere) {
		t.Fatalf("a claim over a confirmed run waiting for its rate, its note refreshed: %v; want ErrClaimedElsewhere", err)
	}
	if err := s.Unconfirm(ctx, "rated", "tok1"); err != nil {
		t.Fatal(err)
	}
	if r, err := s.Claim(ctx, "rated", "w1", 1, e.now().Add(time.Minute), Meta{Type: "a", Due: again}); err != nil || !r.Due.Equal(again) || r.Attempts != 1 {
		t.Fatalf("the rescheduled task's claim over a taken-back run waiting for its rate: %+v, %v", r, err)
	}
}

// A run whose first attempt claimed it after checking its row (before the
// mover confirmed it), and was handed back at shutdown, is claimed again
// by its message's token-bearing delivery without going to the row, which
// the mover has removed by then (issue 38, seed 1032: the task was
// acknowledged as stale and never ran).
func TestMemHandedBackRunIsClaimedAgain(t *testing.T) {
	ctx := context.Background()
	e := memEnv(t)
	s := e.s
	due := e.now().Truncate(time.Second)
	lease := e.now().Add(time.Minute)
	sent := Meta{Type: "slow", Due: due, Token: "tok1"}
	checked := sent
	checked.Token = "" // the row stood: claimed without the token
	if _, err := s.Claim(ctx, "back", "w1", 1, lease, checked); err != nil {
		t.Fatal(err)
	}
	if ok := s.Confirm(ctx, []Mark{{ID: "back", Meta: sent}}); !ok[0] {
		t.Fatal("the mover's confirmation of a run under way must let its row go")
	}
	if err := s.Finish(ctx, "back", Queued, errors.New("worker shut down before the task finished"), ""); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Claim(ctx, "back", "w2", 1, lease, sent); err != nil {
		t.Fatalf("the handed-back run's next claim: %v; want it claimed", err)
	}
}

// A record left by withdrawing a due time (queued for it, unclaimed,
// unconfirmed) is taken over by the changed task's own confirmation, so
// its row is moved at once instead of waiting for its message's row check.
func TestMemWithdrawnPlaceholderIsTakenOver(t *testing.T) {
	ctx := context.Background()
	e := memEnv(t)
	s := e.s
	old := e.now().Truncate(time.Second)
	later := old.Add(time.Hour)
	if _, err := s.UnconfirmDue(ctx, "w", Meta{Type: "t", Due: old}); err != nil {
		t.Fatal(err)
	}
	if ok := s.Confirm(ctx, []Mark{{ID: "w", Meta: Meta{Type: "t", Due: later, Token: "tok2"}}}); !ok[0] {
		t.Fatal("the rescheduled task's confirmation was refused")
	}
	if r := e.mustState(t, "w", Queued); r.Token != "tok2" || !r.Due.Equal(later) || !r.Withdrawn.has(old) {
		t.Fatalf("after the confirmation: %+v", r)
	}
	if ok := s.Confirm(ctx, []Mark{{ID: "w", Meta: Meta{Type: "t", Due: old, Token: "tok1"}}}); ok[0] {
		t.Fatal("a late confirmation of the withdrawn due time was accepted")
	}
}

// A cancel of an id cancels every scheduling of it that was moved before
// A run cancelled after its move, whose message is still in the queue
// when the id is scheduled again, is refused as cancelled once the record
// is the new scheduling's — before and after that one runs (issue 38,
// seed 4021: the cancelled message, put back behind the new run, ran once
// that run had succeeded). The new scheduling, sent for now with a token,
// runs.
func TestMemCancelledRunStaysCancelledUnderTheIdsNextRecord(t *testing.T) {
	ctx := context.Background()
	e := memEnv(t)
	s := e.s
	first := e.now().Truncate(time.Second)
	lease := e.now().Add(time.Minute)
	m1 := Meta{Type: "a", Due: first}
	m2 := Meta{Type: "a", Due: first.Add(40 * time.Second), Token: "tok"}
	if ok := s.MarkQueued(ctx, []Mark{{ID: "id", Meta: m1}}); !ok[0] {
		t.Fatal("MarkQueued of the first scheduling failed")
	}
	if _, err := s.Cancel(ctx, "id"); err != nil {
		t.Fatal(err)
	}
	if ok := s.MarkQueued(ctx, []Mark{{ID: "id", Meta: m2}}); !ok[0] {
		t.Fatal("MarkQueued of the scheduling after the cancel failed")
	}
	if _, err := s.Claim(ctx, "id", "w1", 1, lease, m1); !errors.Is(err, ErrCancelled) {
		t.Fatalf("the cancelled run's claim over the next record: %v; want ErrCancelled", err)
	}
	if _, err := s.Claim(ctx, "id", "w2", 1, lease, m2); err != nil {
		t.Fatalf("the next scheduling's claim: %v", err)
	}
	if err := s.Finish(ctx, "id", Succeeded, nil, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Claim(ctx, "id", "w1", 1, lease, m1); !errors.Is(err, ErrCancelled) {
		t.Fatalf("the cancelled run's claim after the next one succeeded: %v; want ErrCancelled", err)
	}
}

// the cancel, not only the one its record describes: a scheduling moved
// while an earlier run of the id was under way is noted behind that run,
// and is refused as cancelled once the id is cancelled, whichever
// scheduling the record describes afterwards (issue 38, seed 2100: the
// second scheduling waited behind the first run, the cancel marked the
// first run's record, and the second ran after the cancel had answered).
// A scheduling made after the cancel, even for the very due time
// cancelled, runs.
func TestMemCancelReachesASchedulingQueuedBehindARun(t *testing.T) {
	ctx := context.Background()
	e := memEnv(t)
	s := e.s
	first := e.now().Truncate(time.Second)
	second := first.Add(30 * time.Second)
	lease := e.now().Add(time.Minute)
	m1, m2 := Meta{Type: "a", Due: first}, Meta{Type: "a", Due: second}
	if ok := s.MarkQueued(ctx, []Mark{{ID: "id", Meta: m1}}); !ok[0] {
		t.Fatal("MarkQueued of the first scheduling failed")
	}
	if _, err := s.Claim(ctx, "id", "w1", 1, lease, m1); err != nil {
		t.Fatal(err)
	}
	// The id is scheduled again and moved while the first run is running.
	if ok := s.MarkQueued(ctx, []Mark{{ID: "id", Meta: m2}}); ok[0] {
		t.Fatal("the second scheduling was marked queued over the first run's record")
	}
	if _, err := s.Claim(ctx, "id", "w2", 1, lease, m2); !errors.Is(err, ErrClaimedElsewhere) {
		t.Fatalf("the second scheduling's claim while the first runs: %v; want ErrClaimedElsewhere", err)
	}
	if _, err := s.Cancel(ctx, "id"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Claim(ctx, "id", "w2", 1, lease, m2); !errors.Is(err, ErrCancelled) {
		t.Fatalf("the second scheduling's claim after the cancel: %v; want ErrCancelled", err)
	}
	// The first run's handler ends; the refusal stands.
	if err := s.Finish(ctx, "id", Succeeded, nil, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Claim(ctx, "id", "w2", 1, lease, m2); !errors.Is(err, ErrCancelled) {
		t.Fatalf("the second scheduling's claim after the first run ended: %v; want ErrCancelled", err)
	}
	// A third scheduling, made after the cancel, runs; the second is still
	// refused while the record is the third's.
	m3 := Meta{Type: "a", Due: second.Add(time.Minute)}
	if ok := s.MarkQueued(ctx, []Mark{{ID: "id", Meta: m3}}); !ok[0] {
		t.Fatal("MarkQueued of a scheduling after the cancel failed")
	}
	if _, err := s.Claim(ctx, "id", "w3", 1, lease, m2); !errors.Is(err, ErrCancelled) {
		t.Fatalf("the second scheduling's claim over the third's record: %v; want ErrCancelled", err)
	}
	if r, err := s.Claim(ctx, "id", "w3", 1, lease, m3); err != nil || !r.Due.Equal(m3.Due) {
		t.Fatalf("the scheduling after the cancel: %+v, %v; want it to run", r, err)
	}
	if err := s.Finish(ctx, "id", Succeeded, nil, ""); err != nil {
		t.Fatal(err)
	}
	// Scheduled again for the very due time cancelled: a new task, which runs.
	if ok := s.MarkQueued(ctx, []Mark{{ID: "id", Meta: m2}}); !ok[0] {
		t.Fatal("MarkQueued of the cancelled due time scheduled anew failed")
	}
	if _, err := s.Claim(ctx, "id", "w1", 1, lease, m2); err != nil {
		t.Fatalf("the id scheduled anew for the cancelled due time: %v; want it to run", err)
	}
}

// The cancel of schedulings queued behind a run, in the cases around it:
// each reaches every scheduling moved before the cancel, and none a
// scheduling made after it.
func TestMemCancelBehindARunCases(t *testing.T) {
	ctx := context.Background()
	type env struct {
		s     *Store
		due   func(int) Meta
		lease time.Time
	}
	setup := func(t *testing.T) env {
		e := memEnv(t)
		base := e.now().Truncate(time.Second)
		return env{s: e.s, due: func(i int) Meta { return Meta{Type: "a", Due: base.Add(time.Duration(i) * time.Minute)} },
			lease: e.now().Add(time.Minute)}
	}
	claim := func(t *testing.T, e env, m Meta, want error) {
		t.Helper()
		_, err := e.s.Claim(ctx, "id", "w", 1, e.lease, m)
		if want == nil && err != nil || want != nil && !errors.Is(err, want) {
			t.Fatalf("claim of the scheduling due %s: %v, want %v", m.Due.Format(time.TimeOnly), err, want)
		}
	}
	moveBehind := func(t *testing.T, e env, m Meta) {
		t.Helper()
		if ok := e.s.MarkQueued(ctx, []Mark{{ID: "id", Meta: m}}); ok[0] {
			t.Fatal("a scheduling was marked queued over an unfinished run's record")
		}
	}
	running := func(t *testing.T, e env, m Meta) {
		t.Helper()
		if ok := e.s.MarkQueued(ctx, []Mark{{ID: "id", Meta: m}}); !ok[0] {
			t.Fatal("MarkQueued failed")
		}
		claim(t, e, m, nil)
	}
	succeed := func(t *testing.T, e env) {
		t.Helper()
		if err := e.s.Finish(ctx, "id", Succeeded, nil, ""); err != nil {
			t.Fatal(err)
		}
	}
	cancel := func(t *testing.T, e env) {
		t.Helper()
		if _, err := e.s.Cancel(ctx, "id"); err != nil {
			t.Fatalf("cancel: %v", err)
		}
	}
	t.Run("two schedulings behind one run", func(t *testing.T) {
		e := setup(t)
		running(t, e, e.due(1))
		moveBehind(t, e, e.due(2))
		moveBehind(t, e, e.due(3))
		cancel(t, e)
		claim(t, e, e.due(2), ErrCancelled)
		claim(t, e, e.due(3), ErrCancelled)
	})
	t.Run("the cancel comes after the run ended", func(t *testing.T) {
		e := setup(t)
		running(t, e, e.due(1))
		moveBehind(t, e, e.due(2))
		succeed(t, e)
		cancel(t, e) // reaches the scheduling behind: no "already finished"
		claim(t, e, e.due(2), ErrCancelled)
		if r, _ := e.s.Get(ctx, "id"); r.State != Succeeded {
			t.Fatalf("the ended run's record: %s, want it left succeeded", r.State)
		}
		if _, err := e.s.Cancel(ctx, "id"); !errors.Is(err, ErrAlreadyFinished) {
			t.Fatalf("a second cancel: %v, want ErrAlreadyFinished (nothing behind any more)", err)
		}
	})
	t.Run("the cancelled due time moved again behind a later run", func(t *testing.T) {
		e := setup(t)
		running(t, e, e.due(1))
		moveBehind(t, e, e.due(2))
		cancel(t, e)
		running(t, e, e.due(3)) // scheduled after the cancel
		moveBehind(t, e, e.due(2))
		succeed(t, e)
		claim(t, e, e.due(2), nil)
	})
	t.Run("an early-sent scheduling checked against its row", func(t *testing.T) {
		e := setup(t)
		running(t, e, e.due(1))
		moveBehind(t, e, e.due(2))
		cancel(t, e)
		succeed(t, e)
		// Scheduled again for the same due time and sent by its client,
		// claimed before its confirmation: the row decides.
		early := e.due(2)
		early.Token = "tok"
		claim(t, e, early, ErrUnconfirmed)
		early.Token, early.RowChecked = "", true
		claim(t, e, early, nil)
	})
	// Nothing is noted behind for a scheduling whose row stays pending or
	// that stands for no message: a later cancel of the ended run is
	// refused as finished, as it was before.
	finishedCancel := func(t *testing.T, e env) {
		t.Helper()
		succeed(t, e)
		if _, err := e.s.Cancel(ctx, "id"); !errors.Is(err, ErrAlreadyFinished) {
			t.Fatalf("cancel of the ended run: %v, want ErrAlreadyFinished (nothing behind it)", err)
		}
	}
	t.Run("an early-sent confirmation refused beside a queued run", func(t *testing.T) {
		e := setup(t)
		if ok := e.s.MarkQueued(ctx, []Mark{{ID: "id", Meta: e.due(1)}}); !ok[0] {
			t.Fatal("MarkQueued failed")
		}
		early := e.due(2)
		early.Token = "tok"
		if ok := e.s.Confirm(ctx, []Mark{{ID: "id", Meta: early}}); ok[0] {
			t.Fatal("a confirmation beside another scheduling's queued run was accepted")
		}
		claim(t, e, e.due(1), nil)
		finishedCancel(t, e)
	})
	t.Run("a withdrawn due time's placeholder taken over", func(t *testing.T) {
		e := setup(t)
		if _, err := e.s.UnconfirmDue(ctx, "id", e.due(1)); err != nil {
			t.Fatal(err)
		}
		checked := e.due(2)
		checked.RowChecked = true
		claim(t, e, checked, nil)
		finishedCancel(t, e)
	})
	t.Run("a pending scheduling cancelled while one waits behind an ended run", func(t *testing.T) {
		e := setup(t)
		running(t, e, e.due(1))
		moveBehind(t, e, e.due(2))
		succeed(t, e)
		// The id's pending row (due 3) is removed by the cancel.
		if _, err := e.s.CancelPending(ctx, "id", e.due(3)); err != nil {
			t.Fatal(err)
		}
		claim(t, e, e.due(2), ErrCancelled)
		claim(t, e, e.due(3), ErrCancelled)
	})
}

// A dead letter of a run beside which a later scheduling of its id was
// moved (the id scheduled again while it ran) is not requeued: the two
// would run side by side (issue 38, the simulator's seed 3514: a bulk
// requeue brought an always-failing task back beside its id's new task).
func TestMemRequeueRefusedWhenTheIdWasMovedAgainBesideTheRun(t *testing.T) {
	ctx := context.Background()
	e := memEnv(t)
	s := e.s
	first := e.now().Truncate(time.Second)
	m1, m2 := Meta{Type: "a", Due: first}, Meta{Type: "a", Due: first.Add(30 * time.Second)}
	if _, err := s.Claim(ctx, "id", "w1", 3, e.now().Add(time.Minute), m1); err != nil {
		t.Fatal(err)
	}
	if ok := s.MarkQueued(ctx, []Mark{{ID: "id", Meta: m2}}); ok[0] {
		t.Fatal("the second scheduling was marked queued over the first run's record")
	}
	if err := s.Finish(ctx, "id", Dead, errors.New("gave up"), ""); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.MarkRequeued(ctx, "id", m1, "m1-3", ""); !errors.Is(err, leasecrontype.ErrScheduledAgain) {
		t.Fatalf("MarkRequeued of the dead run with a scheduling moved beside it: %v; want ErrScheduledAgain", err)
	}
	// The second scheduling still runs.
	if _, err := s.Claim(ctx, "id", "w2", 1, e.now().Add(time.Minute), m2); err != nil {
		t.Fatalf("the second scheduling's claim after the refused requeue: %v", err)
	}
}

// A scheduling noted beside another run whose message was acknowledged as
// superseded comes off the list, so that the run's end is its id's end
// again (issue 38, seed 4499: a child waited an hour after its parent
// succeeded); a due time not on the list writes nothing.
func TestMemDropBehindTakesASupersededSchedulingOff(t *testing.T) {
	ctx := context.Background()
	e := memEnv(t)
	s := e.s
	first := e.now().Truncate(time.Second)
	lease := e.now().Add(time.Minute)
	m1, m2 := Meta{Type: "a", Due: first}, Meta{Type: "a", Due: first.Add(30 * time.Second)}
	if ok := s.MarkQueued(ctx, []Mark{{ID: "id", Meta: m1}}); !ok[0] {
		t.Fatal("MarkQueued of the first scheduling failed")
	}
	if _, err := s.Claim(ctx, "id", "w1", 1, lease, m1); err != nil {
		t.Fatal(err)
	}
	s.MarkQueued(ctx, []Mark{{ID: "id", Meta: m2}}) // noted beside the run
	if err := s.Finish(ctx, "id", Succeeded, nil, ""); err != nil {
		t.Fatal(err)
	}
	r, err := s.Get(ctx, "id")
	if err != nil || r.EndOfID(e.now()) {
		t.Fatalf("with the second scheduling beside it: %+v, %v; want the run not the id's end", r.Behind, err)
	}
	if err := s.DropBehind(ctx, "id", first.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if again, _ := s.Get(ctx, "id"); again.ETag != r.ETag {
		t.Fatal("a due time not on the list was written")
	}
	if err := s.DropBehind(ctx, "id", m2.Due); err != nil {
		t.Fatal(err)
	}
	if r, err := s.Get(ctx, "id"); err != nil || !r.EndOfID(e.now()) || r.State != Succeeded {
		t.Fatalf("after the superseded scheduling came off: %+v, %v; want the succeeded run the id's end", r.Run, err)
	}
}

// The mover's confirmation of an early-sent run that comes after the run
// started (claimed after its row was checked), ended, and the id was
// scheduled again and ran, does not take the new run's finished record
// over as a queued run that will never start (issue 38, seed 4558:
// status showed the replaced task queued for good). It is counted, with
// nothing written: the record keeps that the run succeeded
// (Run.SucceededDue), and refused, a row that had not changed would stay
// pending for good (seed 30276).
func TestMemLateConfirmationOfAnEndedRunLeavesTheNextRecordAlone(t *testing.T) {
	ctx := context.Background()
	e := memEnv(t)
	s := e.s
	first := e.now().Truncate(time.Second)
	lease := e.now().Add(time.Minute)
	m1 := Meta{Type: "a", Due: first, Token: "tok1"}
	claimAndSucceed(ctx, t, s, "id", "w1", lease, Meta{Type: "a", Due: first, RowChecked: true})
	m2 := Meta{Type: "a", Due: first.Add(5 * time.Second), Token: "tok2"}
	if ok := s.MarkQueued(ctx, []Mark{{ID: "id", Meta: m2}}); !ok[0] {
		t.Fatal("the replacement's mark failed")
	}
	claimAndSucceed(ctx, t, s, "id", "w2", lease, m2)
	if ok := s.Confirm(ctx, []Mark{{ID: "id", Meta: m1}}); !ok[0] {
		t.Error("the late confirmation of the first run, which succeeded, was refused")
	}
	if r, err := s.Get(ctx, "id"); err != nil || r.State != Succeeded || !r.Due.Equal(m2.Due) {
		t.Fatalf("the record after the late confirmation: %s due %v, %v; want the replacement's, succeeded", r.State, r.Due, err)
	}
}

// A scheduling that ran and succeeded, moved again after another
// scheduling of its id took the record over (its row left by a mover
// that stopped before removing it), is not noted behind the new run: the
// record keeps that it succeeded, and its message is acknowledged as a
// duplicate (issue 38, row 206, sim seed 131548: noted behind, the end
// was forgotten and the task ran again after the replacement).
func TestMemRepeatedMoveOfASucceededSchedulingIsNotNotedBehind(t *testing.T) {
	ctx := context.Background()
	e := memEnv(t)
	s := e.s
	first := e.now().Truncate(time.Second)
	lease := e.now().Add(time.Minute)
	m1 := Meta{Type: "a", Due: first}
	if ok := s.MarkQueued(ctx, []Mark{{ID: "id", Meta: m1}}); !ok[0] {
		t.Fatal("the first mark failed")
	}
	claimAndSucceed(ctx, t, s, "id", "w1", lease, m1)
	m2 := Meta{Type: "b", Due: first.Add(18 * time.Second), Token: "tok2"}
	if ok := s.MarkQueued(ctx, []Mark{{ID: "id", Meta: m2}}); !ok[0] {
		t.Fatal("the replacement's mark failed")
	}
	if ok := s.MarkQueued(ctx, []Mark{{ID: "id", Meta: m1}}); !ok[0] {
		t.Fatal("the repeated move of the succeeded scheduling was refused: its row would stay for good")
	}
	r, err := s.Get(ctx, "id")
	if err != nil || !r.Due.Equal(m2.Due) || !r.SucceededDue.has(first) || r.Behind.has(first) {
		t.Fatalf("the record after the repeated move: due %v, succeeded %v, behind %v, %v; want the replacement's, keeping the first's success", r.Due, r.SucceededDue, r.Behind, err)
	}
	if _, err := s.Claim(ctx, "id", "w2", 1, lease, m1); !errors.Is(err, ErrAlreadySucceeded) {
		t.Fatalf("the repeated move's claim: %v; want ErrAlreadySucceeded", err)
	}
}

// A replacement of the same due time, confirmed after the early message
// it replaced was noted as waiting for its rate and then acknowledged as
// superseded, is refused, not counted confirmed: counted, its row would be
// retired and its own message, unconfirmed, found no row and was
// acknowledged as superseded too (a review of row 60).
func TestMemConfirmationOverAWithdrawnWaitingRunIsRefused(t *testing.T) {
	ctx := context.Background()
	e := memEnv(t)
	s := e.s
	due := e.now().Truncate(time.Second).Add(time.Minute)
	m1 := Meta{Type: "a", Due: due, Token: "tok1"}
	if ok := s.Confirm(ctx, []Mark{{ID: "id", Meta: m1}}); !ok[0] {
		t.Fatal("Confirm failed")
	}
	if noted, err := s.NoteWaiting(ctx, "id", m1, e.now().Add(time.Second), "waiting for the rate limit of a"); err != nil || !noted {
		t.Fatal(noted, err)
	}
	if err := s.Unconfirm(ctx, "id", "tok1"); err != nil {
		t.Fatal(err)
	}
	if err := s.DropBehind(ctx, "id", due); err != nil {
		t.Fatal(err)
	}
	if ok := s.Confirm(ctx, []Mark{{ID: "id", Meta: Meta{Type: "a", Due: due, Token: "tok2"}}}); ok[0] {
		t.Fatal("the replacement's confirmation over the withdrawn waiting run was counted")
	}
	if _, err := s.Claim(ctx, "id", "w1", 1, e.now().Add(time.Minute), Meta{Type: "a", Due: due, Token: "tok2"}); !errors.Is(err, ErrUnconfirmed) {
		t.Fatalf("the replacement's claim: %v; want ErrUnconfirmed (its row decides)", err)
	}
}

// A scheduling's message acknowledged as superseded before another
// scheduling's claim takes the record over is not noted beside that
// claim: its message is gone, and what waits for the id would wait for it
// for an hour (issue 38, the part of seed 4499 row 57 left open). The
// same holds for a record noted as waiting for its rate limit.
func TestMemSupersededBeforeTheTakeOverIsNotNotedBehind(t *testing.T) {
	ctx := context.Background()
	for _, waiting := range []bool{false, true} {
		e := memEnv(t)
		s := e.s
		first := e.now().Truncate(time.Second).Add(time.Minute)
		lease := e.now().Add(time.Minute)
		m1 := Meta{Type: "a", Due: first, Token: "tok"}
		m2 := Meta{Type: "a", Due: first.Add(-30 * time.Second)}
		if ok := s.Confirm(ctx, []Mark{{ID: "id", Meta: m1}}); !ok[0] {
			t.Fatal("Confirm failed")
		}
		if waiting {
			if noted, err := s.NoteWaiting(ctx, "id", m1, e.now().Add(time.Second), "waiting for the rate limit of a"); err != nil || !noted {
				t.Fatal(noted, err)
			}
		}
		// Replaced before its move: the confirmation is taken back, and the
		// early message, delivered, is acknowledged as superseded.
		if err := s.Unconfirm(ctx, "id", "tok"); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Claim(ctx, "id", "w1", 1, lease, m1); !errors.Is(err, ErrUnconfirmed) {
			t.Fatalf("the early message's claim: %v; want ErrUnconfirmed", err)
		}
		if err := s.DropBehind(ctx, "id", m1.Due); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Claim(ctx, "id", "w2", 1, lease, m2); err != nil {
			t.Fatalf("the replacement's claim (waiting %v): %v", waiting, err)
		}
		if err := s.Finish(ctx, "id", Succeeded, nil, ""); err != nil {
			t.Fatal(err)
		}
		if r, err := s.Get(ctx, "id"); err != nil || len(r.Behind) != 0 || !r.EndOfID(e.now()) {
			t.Fatalf("the replacement's run once it succeeded (waiting %v): Behind %v, %v; want nothing beside it, the id's end", waiting, r.Behind, err)
		}
	}
}

// A confirmed run whose message a pause holds past QueuedWait is taken
// over by a new scheduling of its id, which notes it beside itself; its
// message, back once the pause ends, still runs (its confirmation stood
// when the record was taken over) instead of being acknowledged as stale
// for want of its row, which the mover had removed (issue 38, seed 4954:
// a batch member never ran, and its callback never did). A cancel of the
// id reaches it as before.
func TestMemConfirmedRunTakenOverPastQueuedWaitStillRuns(t *testing.T) {
	ctx := context.Background()
	for _, cancelled := range []bool{false, true} {
		e := memEnv(t)
		s := e.s
		first := e.now().Truncate(time.Second)
		m1 := Meta{Type: "a", Due: first, Token: "tok1", Batch: "b"}
		if ok := s.Confirm(ctx, []Mark{{ID: "id", Meta: m1}}); !ok[0] {
			t.Fatal("Confirm failed")
		}
		e.advance(QueuedWait + time.Second)
		again := Meta{Type: "a", Due: first.Add(time.Minute)}
		if _, err := s.Claim(ctx, "id", "w1", 1, e.now().Add(time.Minute), again); err != nil {
			t.Fatalf("the new scheduling's claim past QueuedWait: %v", err)
		}
		if cancelled {
			if _, err := s.Cancel(ctx, "id"); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Finish(ctx, "id", Succeeded, nil, ""); err != nil {
			t.Fatal(err)
		}
		r, err := s.Claim(ctx, "id", "w2", 1, e.now().Add(time.Minute), m1)
		switch {
		case cancelled && err == nil:
			t.Fatalf("the held member's claim after a cancel of the id ran: %+v", r)
		case !cancelled && (err != nil || !r.Due.Equal(first)):
			t.Fatalf("the held member's claim once the pause ended: %+v, %v; want its own run", r, err)
		}
	}
}

// A run a requeue brought back keeps its requeue's token only while the
// record is that run's (issue 38, review of seed 5527's fix):
//   - a message of the dead run put back for its rate limit does not note
//     the requeued run as waiting (the requeue's retry would then take it
//     for moved on, and never send it);
//   - a withdrawal of a send of its due time does not take the token back;
//   - a new scheduling of the id that takes the record over past
//     QueuedWait drops it, so that scheduling's own retries run.
func TestMemRequeueTokenStaysWithItsRun(t *testing.T) {
	ctx := context.Background()
	e := memEnv(t)
	s := e.s
	due := e.now().Truncate(time.Second)
	deadRun(t, s, "q", Meta{Type: "a", Due: due}, e.now())
	rq := Meta{Type: "a", Due: due, Token: RequeueToken("m1-1")}
	if _, _, err := s.MarkRequeued(ctx, "q", rq, "m1-1", ""); err != nil {
		t.Fatal(err)
	}
	if noted, err := s.NoteWaiting(ctx, "q", Meta{Type: "a", Due: due}, e.now().Add(time.Minute), "rate"); err != nil || noted {
		t.Fatalf("a message of the dead run noted the requeued run waiting: %v, %v", noted, err)
	}
	if _, err := s.UnconfirmDue(ctx, "q", Meta{Type: "a", Due: due}); err != nil {
		t.Fatal(err)
	}
	if earlier, queued, err := s.MarkRequeued(ctx, "q", rq, "m1-1", ""); err != nil || !earlier || !queued {
		t.Fatalf("the requeue tried again: earlier %v, queued %v, %v; want true, true", earlier, queued, err)
	}
	e.advance(QueuedWait + time.Second)
	again := Meta{Type: "a", Due: due.Add(time.Hour)}
	if _, err := s.Claim(ctx, "q", "w2", 1, e.now().Add(time.Minute), again); err != nil {
		t.Fatalf("the new scheduling's claim past QueuedWait: %v", err)
	}
	if err := s.Finish(ctx, "q", Failed, errors.New("once"), ""); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Claim(ctx, "q", "w2", 2, e.now().Add(time.Minute), again); err != nil {
		t.Fatalf("the new scheduling's retry: %v", err)
	}
}

// A run an earlier release requeued keeps the task's own token (none
// here) and a marked message: an unmarked message of its due time before
// the first claim is not the requeue's (issue 38, seed 5527).
func TestMemRunRequeuedByAnEarlierRelease(t *testing.T) {
	ctx := context.Background()
	e := memEnv(t)
	s := e.s
	due := e.now().Truncate(time.Second)
	deadRun(t, s, "q", Meta{Type: "a", Due: due}, e.now())
	if _, _, err := s.MarkRequeued(ctx, "q", Meta{Type: "a", Due: due}, "m1-1", ""); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Claim(ctx, "q", "w1", 1, e.now().Add(time.Minute), Meta{Type: "a", Due: due}); !errors.Is(err, ErrDead) {
		t.Fatalf("an unmarked message of the dead run: %v; want ErrDead", err)
	}
	if _, err := s.Claim(ctx, "q", "w1", 1, e.now().Add(time.Minute), Meta{Type: "a", Due: due, Queued: true}); err != nil {
		t.Fatalf("the requeue's marked message: %v", err)
	}
}

// A message set aside as dead by a worker that died before it recorded
// the death leaves its run recorded running under the message's token.
// A requeue of that dead letter is of that run, not left over as one of
// a run live again (issue 38, the simulator's seed 6742: the dead letter
// was removed and the run said running for good); while the dead
// worker's claim has not lapsed it fails, and the dead letter stays. A
// dead letter of another message of the run (a duplicate's) is still
// left over.
func TestMemRequeueOfADeathNeverRecorded(t *testing.T) {
	ctx := context.Background()
	e := memEnv(t)
	s := e.s
	due := e.now().Truncate(time.Second)
	first := Meta{Type: "a", Due: due}
	for i, m := range []Meta{first, {Type: "a", Due: due, Token: RequeueToken("m1-1"), Queued: true}} {
		// The first death, and the death of the requeue's own message.
		if _, err := s.Claim(ctx, "q", "w1", 1, e.now().Add(time.Minute), m); err != nil {
			t.Fatal(err)
		}
		death := []string{"m1-1", "m2-1"}[i]
		rq := Meta{Type: "a", Due: due, Token: RequeueToken(death)}
		_, _, err := s.MarkRequeued(ctx, "q", rq, death, m.Token)
		if !errors.Is(err, ErrClaimedElsewhere) || !strings.Contains(err.Error(), "w1") {
			t.Fatalf("requeue of %s while the dead worker's claim holds: %v; want ErrClaimedElsewhere naming w1", death, err)
		}
		e.mustState(t, "q", Running)
		e.advance(time.Minute + time.Second)
		if earlier, _, err := s.MarkRequeued(ctx, "q", rq, death, m.Token); err != nil || earlier {
			t.Fatalf("requeue of %s once the claim lapsed: earlier %v, %v; want it requeued", death, earlier, err)
		}
		if r := e.mustState(t, "q", Queued); r.Token != rq.Token || r.Requeued[0] != death {
			t.Fatalf("requeued record = %+v", r)
		}
	}
	// A duplicate delivery of the first message died too: its dead letter
	// carries the first token, and the run live again is not its own.
	if _, err := s.Claim(ctx, "q", "w2", 1, e.now().Add(time.Minute), Meta{Type: "a", Due: due, Token: RequeueToken("m2-1"), Queued: true}); err != nil {
		t.Fatal(err)
	}
	e.advance(time.Minute + time.Second)
	if earlier, _, err := s.MarkRequeued(ctx, "q", Meta{Type: "a", Due: due, Token: RequeueToken("m3-1")}, "m3-1", first.Token); err != nil || !earlier {
		t.Fatalf("a duplicate's dead letter: earlier %v, %v; want left over", earlier, err)
	}
	e.mustState(t, "q", Running)

	// Not the run's own death (a review of the fix):
	//   - a run an earlier release requeued keeps the task's own token,
	//     which a duplicate's dead letter carries too;
	//   - a failed run: its message, whose set-aside answer was lost,
	//     comes back with its attempts used up and records the death.
	for _, c := range []struct {
		name  string
		setup func(id string)
	}{
		{"requeued by an earlier release", func(id string) {
			deadRun(t, s, id, first, e.now())
			if _, _, err := s.MarkRequeued(ctx, id, first, "m1-1", ""); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Claim(ctx, id, "w1", 1, e.now().Add(time.Minute), Meta{Type: "a", Due: due, Queued: true}); err != nil {
				t.Fatal(err)
			}
			e.advance(time.Minute + time.Second)
		}},
		{"failed", func(id string) {
			if _, err := s.Claim(ctx, id, "w1", 1, e.now().Add(time.Minute), first); err != nil {
				t.Fatal(err)
			}
			if err := s.Finish(ctx, id, Failed, errors.New("last attempt"), ""); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		id := "q-" + strings.ReplaceAll(c.name, " ", "-")
		c.setup(id)
		before, err := s.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if earlier, _, err := s.MarkRequeued(ctx, id, Meta{Type: "a", Due: due, Token: RequeueToken("m9-1")}, "m9-1", ""); err != nil || !earlier {
			t.Fatalf("%s: earlier %v, %v; want left over", c.name, earlier, err)
		}
		e.mustState(t, id, before.State)
	}
}

// A worker whose claim lapsed (its message's visibility lost, its claim
// extensions failing) hands its run back at shutdown only while the run
// is still its own: a run another delivery has ended since is not set
// back to queued (a review of issue 38's seed 6704 fix: a death so
// overwritten hid it from its dead letter's requeue).
func TestMemHandBackLeavesARunThatMovedOn(t *testing.T) {
	ctx := context.Background()
	e := memEnv(t)
	m := Meta{Type: "a", Due: e.now().Truncate(time.Second)}
	if _, err := e.s.Claim(ctx, "h", "w1", 1, e.now().Add(time.Minute), m); err != nil {
		t.Fatal(err)
	}
	e.advance(time.Minute + time.Second)
	if _, err := e.other.Claim(ctx, "h", "w2", 1, e.now().Add(time.Minute), m); err != nil {
		t.Fatal(err)
	}
	if err := e.other.Finish(ctx, "h", Dead, errors.New("gave up"), ""); err != nil {
		t.Fatal(err)
	}
	if err := e.s.Finish(ctx, "h", Queued, errors.New("worker shut down before the task finished"), ""); err != nil {
		t.Fatal(err)
	}
	e.mustState(t, "h", Dead)
	// Its own run, still running under its claim, is handed back.
	if _, err := e.s.Claim(ctx, "h2", "w1", 1, e.now().Add(time.Minute), m); err != nil {
		t.Fatal(err)
	}
	if err := e.s.Finish(ctx, "h2", Queued, errors.New("worker shut down before the task finished"), ""); err != nil {
		t.Fatal(err)
	}
	e.mustState(t, "h2", Queued)
}

// deadRun records id's run of m as claimed at now and dead.
func deadRun(t *testing.T, s *Store, id string, m Meta, now time.Time) {
	t.Helper()
	ctx := context.Background()
	if _, err := s.Claim(ctx, id, "w1", 1, now.Add(time.Minute), m); err != nil {
		t.Fatal(err)
	}
	if err := s.Finish(ctx, id, Dead, errors.New("boom"), ""); err != nil {
		t.Fatal(err)
	}
}

// TestMemConfirmSentKeepsTheFirst: a sender's confirmation does not
// replace another token's of the same due time on a run that has not
// started (issue 38, seed 6183), while the mover's Confirm still does, a
// run whose confirmation was taken back takes a sender's, and a requeue's
// token is not a sender's.
func TestMemConfirmSentKeepsTheFirst(t *testing.T) {
	ctx := context.Background()
	e := memEnv(t)
	s := e.s
	due := e.now().Add(-time.Second).Truncate(time.Second)
	m := func(tok string) []Mark { return []Mark{{ID: "r", Meta: Meta{Type: "email", Due: due, Token: tok}}} }
	token := func() string {
		t.Helper()
		r, err := s.Get(ctx, "r")
		if err != nil {
			t.Fatal(err)
		}
		return r.Token
	}
	if ok := s.ConfirmSent(ctx, m("a")); !ok[0] || token() != "a" {
		t.Fatalf("the first sender's confirmation: %v, token %q", ok[0], token())
	}
	if ok := s.ConfirmSent(ctx, m("b")); ok[0] || token() != "a" {
		t.Fatalf("a second sender's confirmation: %v, token %q; want refused, a kept", ok[0], token())
	}
	if ok := s.ConfirmSent(ctx, m("a")); !ok[0] {
		t.Fatal("the first sender's confirmation again was refused")
	}
	if err := s.Unconfirm(ctx, "r", "a"); err != nil {
		t.Fatal(err)
	}
	if ok := s.ConfirmSent(ctx, m("b")); !ok[0] || token() != "b" {
		t.Fatalf("a sender's confirmation after a take-back: %v, token %q; want b", ok[0], token())
	}
	if ok := s.Confirm(ctx, m("c")); !ok[0] || token() != "c" {
		t.Fatalf("the mover's confirmation: %v, token %q; want c", ok[0], token())
	}
}

// A claim forgotten (its attempt ended with nothing recorded: a snooze
// whose message could not be hidden for it) is not taken for a later end
// of another scheduling of the id that this process records unclaimed
// (a review of issue 38's seed 7134 fix).
func TestMemForgottenClaimLeavesALaterEndAlone(t *testing.T) {
	ctx := context.Background()
	e := memEnv(t)
	due1 := e.now().Truncate(time.Second)
	if _, err := e.s.Claim(ctx, "f", "w1", 1, e.now().Add(time.Minute), Meta{Type: "a", Due: due1}); err != nil {
		t.Fatal(err)
	}
	e.s.Forget("f")
	e.advance(time.Minute + time.Second)
	if _, err := e.other.Claim(ctx, "f", "w2", 1, e.now().Add(time.Minute), Meta{Type: "a", Due: due1}); err != nil {
		t.Fatal(err)
	}
	if err := e.other.Finish(ctx, "f", Succeeded, nil, ""); err != nil {
		t.Fatal(err)
	}
	due2 := due1.Add(time.Hour)
	if _, err := e.other.Claim(ctx, "f", "w2", 1, e.now().Add(time.Minute), Meta{Type: "a", Due: due2}); err != nil {
		t.Fatal(err)
	}
	// This process runs it too, its claim having failed: its end is the
	// second scheduling's, and is recorded.
	if err := e.s.Finish(ctx, "f", Dead, errors.New("gave up"), ""); err != nil {
		t.Fatal(err)
	}
	if r := e.mustState(t, "f", Dead); !r.Due.Equal(due2) {
		t.Fatalf("record = %+v, want the second scheduling's", r)
	}
}

// A run a requeue brought back that waits for its rate limit is its
// requeue's message's: the mover's late confirmation of the early-sent
// message that ran before the death (retiring its row) leaves it alone
// and counts as confirmed, so the row goes. Taken as a run waiting
// unclaimed, it was made queued under the old token, and the requeue's
// message, back after its wait, was acknowledged as stale: the task never
// ran again and its run said queued for good (issue 38, the simulator's
// seed 7969).
func TestMemConfirmLeavesARequeuedRunWaitingForItsRate(t *testing.T) {
	ctx := context.Background()
	e := memEnv(t)
	s := e.s
	due := e.now().Truncate(time.Second)
	early := Meta{Type: "a", Due: due, Token: "tok"}
	rq := Meta{Type: "a", Due: due, Token: RequeueToken("m1-3")}
	requeuedRun(t, e, "q", early, rq, "m1-3")
	if noted, err := s.NoteWaiting(ctx, "q", rq, e.now().Add(time.Minute), "rate"); err != nil || !noted {
		t.Fatalf("the requeue's message waiting for its rate: noted %v, %v", noted, err)
	}
	if ok := s.Confirm(ctx, []Mark{{ID: "q", Meta: early}}); !ok[0] {
		t.Fatal("the retiring row's confirmation refused: the row would stay")
	}
	r, err := s.Get(ctx, "q")
	if err != nil {
		t.Fatal(err)
	}
	if r.State != Snoozed || r.Token != rq.Token {
		t.Fatalf("run %s under token %q after the late confirmation; want snoozed under the requeue's %q", r.State, r.Token, rq.Token)
	}
	if _, err := s.Claim(ctx, "q", "w1", 1, e.now().Add(time.Minute), Meta{Type: "a", Due: due, Token: rq.Token, Queued: true}); err != nil {
		t.Fatalf("the requeue's message back after its wait: %v", err)
	}
}

// An end that could not be recorded keeps the process's claim, so that
// its retry keeps the claim's guards: retried without it, a death was
// written over the run of the id's next scheduling (a review of issue
// 38's row 78).
func TestMemFailedEndKeepsItsClaim(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewFake(t0)
	m := NewMemory(clk)
	other := &Store{t: m.mt, o: m.o}
	due1 := clk.Now().Truncate(time.Second)
	if _, err := m.Claim(ctx, "f", "w1", 3, clk.Now().Add(time.Minute), Meta{Type: "a", Due: due1}); err != nil {
		t.Fatal(err)
	}
	m.FailWith(errors.New("connection reset by peer"))
	if err := m.Finish(ctx, "f", Dead, errors.New("gave up"), ""); err == nil {
		t.Fatal("an end through an outage answered no error")
	}
	m.FailWith(nil)
	// w1's claim lapses; w2 runs the attempt again to success, and then
	// the id's next scheduling.
	clk.Advance(time.Minute + time.Second)
	if _, err := other.Claim(ctx, "f", "w2", 3, clk.Now().Add(time.Minute), Meta{Type: "a", Due: due1}); err != nil {
		t.Fatal(err)
	}
	if err := other.Finish(ctx, "f", Succeeded, nil, ""); err != nil {
		t.Fatal(err)
	}
	due2 := due1.Add(time.Hour)
	if _, err := other.Claim(ctx, "f", "w2", 1, clk.Now().Add(time.Minute), Meta{Type: "a", Due: due2}); err != nil {
		t.Fatal(err)
	}
	if err := m.Finish(ctx, "f", Dead, errors.New("gave up"), ""); err != nil {
		t.Fatal(err)
	}
	r, err := m.Get(ctx, "f")
	if err != nil || r.State != Running || r.Worker != "w2" || !r.Due.Equal(due2) {
		t.Fatalf("the next scheduling's run after the retried end: %+v, %v; want it running on w2", r, err)
	}
}

// Unclaim gives back a claim for a delivery put back without running:
// the record is put back as it was before the claim — a first attempt
// queued and not started, a retry failed with its count, a crashed
// attempt's run as its worker left it — so that the next claim makes the
// same attempt, and a record that has moved on is left alone (issue 38,
// seed 8456's fix: the rate budget taken again after a late claim, and
// refused).
func TestMemUnclaimGivesTheAttemptBack(t *testing.T) {
	ctx := context.Background()
	e := memEnv(t)
	due := e.now().Truncate(time.Second)
	m := Meta{Type: "a", Due: due}
	claim := func(s *Store, id, worker string, attempt int) Run {
		t.Helper()
		r, err := s.Claim(ctx, id, worker, attempt, e.now().Add(time.Minute), m)
		if err != nil {
			t.Fatal(err)
		}
		return Run{Run: r}
	}
	// A first attempt of a run marked queued.
	if ok := e.s.MarkQueued(ctx, []Mark{{ID: "first", Meta: m}}); !ok[0] {
		t.Fatal("mark failed")
	}
	claim(e.s, "first", "w1", 1)
	if err := e.s.Unclaim(ctx, "first"); err != nil {
		t.Fatal(err)
	}
	if r := e.mustState(t, "first", Queued); r.Attempts != 0 || !notStarted(&r) {
		t.Fatalf("a first attempt given back: %+v; want queued, not started", r)
	}
	// A retry: failed after attempt 1 again, and a stale copy of the
	// message (its count older) then makes attempt 2, not 1 again.
	claim(e.s, "retry", "w1", 1)
	if err := e.s.Finish(ctx, "retry", Failed, errors.New("boom"), ""); err != nil {
		t.Fatal(err)
	}
	claim(e.s, "retry", "w1", 2)
	if err := e.s.Unclaim(ctx, "retry"); err != nil {
		t.Fatal(err)
	}
	if r := e.mustState(t, "retry", Failed); r.Attempts != 1 || r.LastError != "boom" {
		t.Fatalf("a second attempt given back: %+v; want failed after attempt 1", r)
	}
	if r := claim(e.other, "retry", "w2", 1); r.Attempts != 2 {
		t.Fatalf("a stale copy's claim after the give-back: attempt %d; want 2", r.Attempts)
	}
	// Given back twice (the claim is gone): nothing written over w2's.
	if err := e.s.Unclaim(ctx, "retry"); err != nil {
		t.Fatal(err)
	}
	if r := e.mustState(t, "retry", Running); r.Worker != "w2" {
		t.Fatalf("the run after a second give-back: %+v; want w2's claim", r)
	}
	// A crashed attempt taken over and given back: as its worker left it.
	if _, err := e.other.Claim(ctx, "crashed", "w0", 1, e.now().Add(time.Second), m); err != nil {
		t.Fatal(err)
	}
	e.advance(2 * time.Second)
	claim(e.s, "crashed", "w1", 1)
	if err := e.s.Unclaim(ctx, "crashed"); err != nil {
		t.Fatal(err)
	}
	if r := e.mustState(t, "crashed", Running); r.Worker != "w0" || r.Attempts != 1 || r.ClaimUntil.After(e.now()) {
		t.Fatalf("a taken-over attempt given back: %+v; want w0's lapsed claim", r)
	}
	// Only what the claim wrote is undone: a note another process wrote
	// meanwhile (here a later scheduling moved beside the running run)
	// stays.
	if ok := e.s.MarkQueued(ctx, []Mark{{ID: "noted", Meta: m}}); !ok[0] {
		t.Fatal("mark failed")
	}
	claim(e.s, "noted", "w1", 1)
	later := Meta{Type: "a", Due: due.Add(time.Hour)}
	e.other.MarkQueued(ctx, []Mark{{ID: "noted", Meta: later}})
	noted := e.mustState(t, "noted", Running)
	if err := e.s.Unclaim(ctx, "noted"); err != nil {
		t.Fatal(err)
	}
	if r := e.mustState(t, "noted", Queued); r.Attempts != 0 || !slices.Equal(r.Behind, noted.Behind) {
		t.Fatalf("given back over a note written during the claim: %+v; want queued with the note (%v)", r, noted.Behind)
	}
	// A new scheduling claimed over an earlier one's end: given back, it
	// is queued and not started, not what the earlier one came to (a
	// give-back that wrote the earlier success onto it left it never to
	// run).
	claim(e.s, "again", "w1", 1)
	if err := e.s.Finish(ctx, "again", Succeeded, nil, ""); err != nil {
		t.Fatal(err)
	}
	next := Meta{Type: "a", Due: due.Add(time.Hour), RowChecked: true}
	if _, err := e.s.Claim(ctx, "again", "w1", 1, e.now().Add(time.Minute), next); err != nil {
		t.Fatal(err)
	}
	if err := e.s.Unclaim(ctx, "again"); err != nil {
		t.Fatal(err)
	}
	if r := e.mustState(t, "again", Queued); r.Attempts != 0 || !r.Due.Equal(next.Due) {
		t.Fatalf("a new scheduling given back over an earlier success: %+v; want it queued for its own due time", r)
	}
	if r, err := e.other.Claim(ctx, "again", "w2", 1, e.now().Add(time.Minute), next); err != nil || r.Attempts != 1 {
		t.Fatalf("its claim after the give-back: %+v, %v; want attempt 1", r, err)
	}
	// So over an earlier release's dead record, which knows no due time
	// (any due time matches it): not written back dead under this
	// scheduling's due time, which would refuse its message.
	if _, err := e.s.Claim(ctx, "olddead", "w1", 1, e.now().Add(time.Minute), Meta{Type: "a"}); err != nil {
		t.Fatal(err)
	}
	if err := e.s.Finish(ctx, "olddead", Dead, errors.New("boom"), ""); err != nil {
		t.Fatal(err)
	}
	if _, err := e.s.Claim(ctx, "olddead", "w1", 1, e.now().Add(time.Minute), next); err != nil {
		t.Fatal(err)
	}
	if err := e.s.Unclaim(ctx, "olddead"); err != nil {
		t.Fatal(err)
	}
	if r, err := e.other.Claim(ctx, "olddead", "w2", 1, e.now().Add(time.Minute), next); err != nil || r.Attempts != 1 {
		t.Fatalf("a claim after a give-back over an earlier release's dead record: %+v, %v; want attempt 1", r, err)
	}
}

// A cancel that removes a row whose client is still sending it, while an
// earlier scheduling of the id is under way, cancels that run and notes
// the removed row's due time: the sender's confirmation, coming after,
// does not take the cancelled record over, and the message it sent is
// checked against its row, which is gone (issue 38, sweep seed 8669: a
// replace due now, cancelled as it was sent, ran after the cancel
// answered).
func TestMemCancelWhileSentKeepsTheSenderUnconfirmed(t *testing.T) {
	ctx := context.Background()
	e := memEnv(t)
	old := Meta{Type: "a", Due: e.now().Truncate(time.Second)}
	if _, err := e.s.Claim(ctx, "t5", "w1", 1, e.now().Add(time.Minute), old); err != nil {
		t.Fatal(err)
	}
	replaced := Meta{Type: "b", Due: old.Due.Add(30 * time.Second)}
	if r, err := e.other.CancelPending(ctx, "t5", replaced); err != nil || r.State != Cancelled {
		t.Fatalf("the cancel of the replacement's row: %+v, %v; want the earlier run cancelled", r, err)
	}
	sent := replaced
	sent.Token = "tok-replace"
	if ok := e.s.ConfirmSent(ctx, []Mark{{ID: "t5", Meta: sent}}); ok[0] {
		t.Fatal("the sender's confirmation after the cancel was taken; want it refused")
	}
	if _, err := e.s.Claim(ctx, "t5", "w2", 1, e.now().Add(time.Minute), sent); !errors.Is(err, ErrUnconfirmed) {
		t.Fatalf("the sent message's claim: %v; want it checked against its row (ErrUnconfirmed)", err)
	}
	// A new scheduling of that due time, its row marked by the mover,
	// runs.
	if ok := e.other.MarkQueued(ctx, []Mark{{ID: "t5", Meta: replaced}}); !ok[0] {
		t.Fatal("the mover's mark of a new row of that due time was refused")
	}
	if _, err := e.s.Claim(ctx, "t5", "w2", 1, e.now().Add(time.Minute), replaced); err != nil {
		t.Fatal(err)
	}
}

// A retry its type's rate limit holds back shows snoozed (it counts as
// queued for its key), but its last attempt failed: its next claim makes
// the next attempt, even for a message that did not learn of the failure
// (its update lost), as the failed record would have counted it (issue 38,
// the simulator's seed 17449: an always-failing task made its first
// attempt twice, the second after a rate wait noted over the failure). A
// wait noted over an attempt cut short (handed back at shutdown) makes
// that attempt again, and one over a handler's snooze does not count the
// failure of an attempt before it.
func TestARetryWaitingForItsRateCountsItsFailedAttempt(t *testing.T) {
	e := memEnv(t)
	ctx := context.Background()
	s := e.s
	due := e.now().Truncate(time.Second)
	claim := func(id string, attempt int, want int) {
		t.Helper()
		r, err := s.Claim(ctx, id, "w1", attempt, e.now().Add(time.Minute), Meta{Type: "t", Due: due})
		if err != nil || r.Attempts != want {
			t.Fatalf("%s: claim with attempt %d = attempt %d, %v; want attempt %d", id, attempt, r.Attempts, err, want)
		}
	}
	wait := func(id string) {
		t.Helper()
		e.advance(time.Second) // (a real clock moves between transitions)
		if noted, err := s.NoteWaiting(ctx, id, Meta{Type: "t", Due: due}, e.now().Add(time.Second), "waiting for the rate limit of t"); err != nil || !noted {
			t.Fatalf("%s: note the wait: %v, %v", id, noted, err)
		}
		e.mustState(t, id, Snoozed)
	}
	for _, id := range []string{"failed", "handed", "snoozed"} {
		if ok := s.MarkQueued(ctx, []Mark{{ID: id, Meta: Meta{Type: "t", Due: due}}}); !ok[0] {
			t.Fatalf("%s: mark failed", id)
		}
		claim(id, 1, 1)
	}
	if err := s.Finish(ctx, "failed", Failed, errors.New("boom"), ""); err != nil {
		t.Fatal(err)
	}
	wait("failed")
	wait("failed") // waits again: still after the failure
	claim("failed", 1, 2)

	if err := s.Finish(ctx, "handed", Queued, errors.New("worker shut down before the task finished"), ""); err != nil {
		t.Fatal(err)
	}
	wait("handed")
	claim("handed", 1, 1)

	// Failed, then its retry snoozed by the handler: the snooze cut the
	// second attempt short; a wait noted over it makes that one again.
	if err := s.Finish(ctx, "snoozed", Failed, errors.New("boom"), ""); err != nil {
		t.Fatal(err)
	}
	wait("snoozed")
	claim("snoozed", 1, 2)
	e.advance(time.Second)
	if err := s.Snooze(ctx, "snoozed", e.now().Add(time.Second), ""); err != nil {
		t.Fatal(err)
	}
	wait("snoozed")
	claim("snoozed", 1, 2) // (a message that never heard of the failure)

	// A wait noted over an attempt whose claim lapsed (its worker died)
	// makes that attempt again.
	e.advance(2 * time.Minute)
	wait("snoozed")
	claim("snoozed", 1, 2)
}

// A run a requeue brought back has started: the message the row's token
// names ran and died before the requeue, so a reschedule or run-now of
// the row, still waiting for the mover's retire, must not run the task
// once more (issue 38, the simulator's seed 17547: the requeue's token on
// the record hid that the row's message had started, a reschedule moved
// the row, and the task made one more first attempt than its requeues
// allow).
func TestSentStartedOfARunARequeueBroughtBack(t *testing.T) {
	ctx := context.Background()
	e := memEnv(t)
	s := e.s
	due := e.now().Truncate(time.Second)
	early := Meta{Type: "a", Due: due, Token: "tok"}
	rq := Meta{Type: "a", Due: due, Token: RequeueToken("m1-3")}
	requeuedRun(t, e, "q", early, rq, "m1-3")
	for _, state := range []string{"requeued", "run again"} {
		if state == "run again" {
			if _, err := s.Claim(ctx, "q", "w1", 1, e.now().Add(time.Minute), Meta{Type: "a", Due: due, Token: rq.Token, Queued: true}); err != nil {
				t.Fatal(err)
			}
		}
		if started, err := s.SentStarted(ctx, "q", "tok", due); err != nil || !started {
			t.Fatalf("%s: SentStarted of the row's token = %v, %v; want true", state, started, err)
		}
	}
	// Another due time's row (the id scheduled again) has not started.
	if started, err := s.SentStarted(ctx, "q", "tok2", due.Add(time.Hour)); err != nil || started {
		t.Fatalf("SentStarted of another due time = %v, %v; want false", started, err)
	}
	// Requeued as an earlier release did, keeping the task's own token.
	old := Meta{Type: "a", Due: due, Token: "tok-old"}
	requeuedRun(t, e, "old", old, old, "m2-3")
	if started, err := s.SentStarted(ctx, "old", "tok-old", due); err != nil || !started {
		t.Fatalf("SentStarted of a run requeued under the task's token = %v, %v; want true", started, err)
	}
}

// requeuedRun records id's early-sent run (early), its death, and its
// requeue as rq by the dead letter op.
func requeuedRun(t *testing.T, e env, id string, early, rq Meta, op string) {
	t.Helper()
	ctx := context.Background()
	if ok := e.s.Confirm(ctx, []Mark{{ID: id, Meta: early}}); !ok[0] {
		t.Fatal("the early-sent run not confirmed")
	}
	deadRun(t, e.s, id, early, e.now())
	if _, _, err := e.s.MarkRequeued(ctx, id, rq, op, early.Token); err != nil {
		t.Fatal(err)
	}
}

// A second message of a run that ended, delivered after another
// scheduling of the id took its record over, is a duplicate of the ended
// run, not a new one: the mover sent the row of a task due now whose
// client was slow to mark its own send, so the run had two messages; the
// client's ran and succeeded, a replace's scheduling took the record
// over, and the mover's tokenless message, put back behind a claim,
// came back after the replacement ended and ran the replaced task again
// (issue 38, seed 17525). A run that died is not run again either, and a
// new scheduling of the ended run's very due time still runs.
func TestMemSecondMessageOfARunTakenOverIsNotRunAgain(t *testing.T) {
	for _, end := range []State{Succeeded, Dead} {
		t.Run(string(end), func(t *testing.T) {
			ctx := context.Background()
			e := memEnv(t)
			s := e.s
			d0 := e.now().Truncate(time.Second)
			lease := func() time.Time { return e.now().Add(time.Minute) }
			second := Meta{Type: "a", Due: d0} // the mover's send: no token
			if ok := s.MarkQueued(ctx, []Mark{{ID: "id", Meta: second}}); !ok[0] {
				t.Fatal("the mover's mark failed")
			}
			first := Meta{Type: "a", Due: d0, Token: "tok0"} // the client's send
			if ok := s.Confirm(ctx, []Mark{{ID: "id", Meta: first}}); !ok[0] {
				t.Fatal("the client's confirmation failed")
			}
			if _, err := s.Claim(ctx, "id", "w1", 1, lease(), first); err != nil {
				t.Fatal(err)
			}
			if err := s.Finish(ctx, "id", end, nil, ""); err != nil {
				t.Fatal(err)
			}
			d1 := d0.Add(30 * time.Second)
			m1 := Meta{Type: "a", Due: d1}
			if ok := s.MarkQueued(ctx, []Mark{{ID: "id", Meta: m1}}); !ok[0] {
				t.Fatal("the replacement's mark failed")
			}
			e.advance(30 * time.Second)
			if _, err := s.Claim(ctx, "id", "w2", 1, lease(), m1); err != nil {
				t.Fatal(err)
			}
			// While the replacement runs, and after it succeeded.
			want := map[State]error{Succeeded: ErrAlreadySucceeded, Dead: ErrDead}[end]
			if _, err := s.Claim(ctx, "id", "w1", 1, lease(), second); !errors.Is(err, want) {
				t.Errorf("the second message of the %s run while another runs: %v, want %v", end, err, want)
			}
			if err := s.Finish(ctx, "id", Succeeded, nil, ""); err != nil {
				t.Fatal(err)
			}
			e.advance(31 * time.Second)
			if _, err := s.Claim(ctx, "id", "w1", 1, lease(), second); !errors.Is(err, want) {
				t.Errorf("the second message of the %s run after another ended: %v, want %v", end, err, want)
			}
			if r, err := s.Get(ctx, "id"); err != nil || r.State != Succeeded || !r.Due.Equal(d1) || r.Duplicates != 0 {
				t.Fatalf("the record: %s due %v, %d duplicates, %v; want the replacement's, succeeded, unchanged", r.State, r.Due, r.Duplicates, err)
			}
			// A new scheduling of d0 itself, marked queued, runs.
			if ok := s.MarkQueued(ctx, []Mark{{ID: "id", Meta: second}}); !ok[0] {
				t.Fatal("a new scheduling's mark of the ended due time failed")
			}
			if r, err := s.Claim(ctx, "id", "w1", 1, lease(), second); err != nil || r.State != Running {
				t.Errorf("a new scheduling of the ended run's due time: %s, %v; want running", r.State, err)
			}
		})
	}
}

// A run that succeeded or died and whose record another scheduling then
// took over is confirmed when the mover retires its row: refused, the
// row stayed pending for good, the mover asking again every pass (issue
// 38, seed 30276: a run-now's run succeeded, then the message of the
// row it replaced, moved as the run-now changed it, ran and took the
// record over).
func TestMemConfirmOfARunThatEndedBeforeATakeover(t *testing.T) {
	for _, end := range []State{Succeeded, Dead} {
		t.Run(string(end), func(t *testing.T) {
			ctx := context.Background()
			e := memEnv(t)
			s := e.s
			d1 := e.now().Truncate(time.Second)
			d2 := d1.Add(56 * time.Second) // the run-now's due time
			lease := func() time.Time { return e.now().Add(time.Minute) }
			e.advance(56 * time.Second)
			sent := Meta{Type: "a", Due: d2, RowChecked: true} // the run-now's message, checked against its row
			if _, err := s.Claim(ctx, "id", "w1", 1, lease(), sent); err != nil {
				t.Fatal(err)
			}
			if err := s.Finish(ctx, "id", end, nil, ""); err != nil {
				t.Fatal(err)
			}
			moved := Meta{Type: "a", Due: d1} // the replaced row's, moved as it changed
			if _, err := s.Claim(ctx, "id", "w1", 1, lease(), moved); err != nil {
				t.Fatal(err)
			}
			if err := s.Finish(ctx, "id", Succeeded, nil, ""); err != nil {
				t.Fatal(err)
			}
			before, err := s.Get(ctx, "id")
			if err != nil {
				t.Fatal(err)
			}
			confirm := Meta{Type: "a", Due: d2, Token: "tok2"}
			if ok := s.Confirm(ctx, []Mark{{ID: "id", Meta: confirm}}); !ok[0] {
				t.Errorf("the mover's confirmation of the %s run-now was refused: its row would stay for good", end)
			}
			if ok := s.ConfirmSent(ctx, []Mark{{ID: "id", Meta: confirm}}); !ok[0] {
				t.Errorf("the sender's confirmation of the %s run-now was refused", end)
			}
			after, err := s.Get(ctx, "id")
			if err != nil || after.State != Succeeded || !after.Due.Equal(d1) || after.Generation != before.Generation {
				t.Errorf("the record after the confirmations: %s due %v generation %d, %v; want it unchanged (succeeded, due %v, generation %d)",
					after.State, after.Due, after.Generation, err, d1, before.Generation)
			}
		})
	}
}

// A task the mover sent early and a run-now then changed: its row's run
// is withdrawn (UnconfirmDue, before any record of it), the run-now's run
// succeeds, and the mover's confirmation of the old row, read before the
// change and answered twenty seconds late, is refused and leaves the
// succeeded record alone. Taken over as queued, the record showed a run
// that never ran (issue 38, seed 30276).
func TestMemLateConfirmationOfARowChangedBeforeItIsRefused(t *testing.T) {
	ctx := context.Background()
	e := memEnv(t)
	s := e.s
	d1 := e.now().Truncate(time.Second).Add(20 * time.Second)
	old := Meta{Type: "a", Due: d1}
	if _, err := s.UnconfirmDue(ctx, "id", old); err != nil {
		t.Fatal(err)
	}
	d2 := e.now()
	now := Meta{Type: "a", Due: d2, Token: "tok2"} // the run-now's own send
	if ok := s.Confirm(ctx, []Mark{{ID: "id", Meta: now}}); !ok[0] {
		t.Fatal("the run-now's confirmation was refused")
	}
	if _, err := s.Claim(ctx, "id", "w1", 1, e.now().Add(time.Minute), now); err != nil {
		t.Fatal(err)
	}
	if err := s.Finish(ctx, "id", Succeeded, nil, ""); err != nil {
		t.Fatal(err)
	}
	e.advance(20 * time.Second)
	late := Meta{Type: "a", Due: d1, Token: "tok1"}
	if ok := s.Confirm(ctx, []Mark{{ID: "id", Meta: late}}); ok[0] {
		t.Error("the mover's late confirmation of the changed row was counted")
	}
	if r, err := s.Get(ctx, "id"); err != nil || r.State != Succeeded || !r.Due.Equal(stored(d2)) {
		t.Errorf("the record after the late confirmation: %s due %v, %v; want the run-now's, succeeded", r.State, r.Due, err)
	}
}

// A cancel of a task rescheduled before its first run marks the record,
// still of the old due time, cancelled and notes the row's due time among
// the cancelled ones (CancelledDue). A traffic-cop pass that read the row
// before the cancel removed it may send it late: its queued mark must not
// take the record over and forget the cancel, or the claim runs the task
// (issue 38, sim seed 51055: it started 13 s after the cancel returned).
// The same holds beside a run of another due time still under way.
func TestALateMarkOfADueTimeCancelledBesideIsRefused(t *testing.T) {
	e := memEnv(t)
	s := e.s
	ctx := context.Background()
	old, moved := t0.Add(time.Minute), t0.Add(2*time.Minute)
	for _, tc := range []struct {
		id      string
		running bool // the record's own run is under way
	}{{"resched", false}, {"beside", true}} {
		if got := s.MarkQueued(ctx, []Mark{{tc.id, Meta{Type: "t", Due: old}}}); !got[0] {
			t.Fatalf("%s: the first mark was refused", tc.id)
		}
		if tc.running {
			if _, err := s.Claim(ctx, tc.id, "w1", 1, e.now().Add(time.Minute), Meta{Type: "t", Due: old}); err != nil {
				t.Fatal(err)
			}
		}
		// The pending row, due later, is cancelled: its due time is
		// noted beside the record.
		if _, err := s.CancelPending(ctx, tc.id, Meta{Type: "t", Due: moved}); err != nil {
			t.Fatalf("%s: cancel: %v", tc.id, err)
		}
		late := Meta{Type: "t", Due: moved, Read: e.now().Add(-time.Second)} // a pass begun before the cancel
		if got := s.MarkQueued(ctx, []Mark{{tc.id, late}}); got[0] {
			t.Errorf("%s: a late mark of the cancelled due time was taken", tc.id)
		}
		// Nor a late confirmation of it sent early (a review's find: the
		// traffic cop's confirmations carried no Read).
		confirm := late
		confirm.Token = "tok-" + tc.id
		if got := s.Confirm(ctx, []Mark{{tc.id, confirm}}); got[0] {
			t.Errorf("%s: a late confirmation of the cancelled due time was taken", tc.id)
		}
		if _, err := s.Claim(ctx, tc.id, "w2", 1, e.now().Add(time.Minute), Meta{Type: "t", Due: moved}); !errors.Is(err, ErrCancelled) {
			t.Errorf("%s: the claim of the cancelled due time: %v, want ErrCancelled", tc.id, err)
		}
	}
	// A pass begun after the cancel marks a new scheduling of that due
	// time: it runs.
	e.advance(time.Second)
	anew := Meta{Type: "t", Due: moved, Read: e.now()}
	if got := s.MarkQueued(ctx, []Mark{{"resched", anew}}); !got[0] {
		t.Error("the mark of a new scheduling of the cancelled due time, by a pass begun after the cancel, was refused")
	}
	if _, err := s.Claim(ctx, "resched", "w2", 1, e.now().Add(time.Minute), Meta{Type: "t", Due: moved}); err != nil {
		t.Errorf("the claim of the new scheduling: %v", err)
	}
}

// An early-sent message of a run that ended, delivered after another
// scheduling of the id took the record over, is sent to its row; once
// the row is found gone (Meta.RowGone), the end the record keeps for its
// due time is its own, and its claim is refused with that end: taken for
// a stale message, it was acknowledged, and the batch its worker died
// before telling never heard of the end (issue 38, seed 90112). Before
// the row is read the claim is still refused as unconfirmed, and a due
// time a cancel noted is still left to the row.
func TestMemEarlySentMessageOfARunThatEndedBeforeATakeover(t *testing.T) {
	for _, end := range []State{Succeeded, Dead} {
		t.Run(string(end), func(t *testing.T) {
			ctx := context.Background()
			e := memEnv(t)
			s := e.s
			d0 := e.now().Truncate(time.Second)
			lease := func() time.Time { return e.now().Add(time.Minute) }
			early := Meta{Type: "a", Due: d0, Token: "tok0", Batch: "b"}
			if ok := s.Confirm(ctx, []Mark{{ID: "id", Meta: early}}); !ok[0] {
				t.Fatal("the confirmation failed")
			}
			if _, err := s.Claim(ctx, "id", "w1", 1, lease(), early); err != nil {
				t.Fatal(err)
			}
			if err := s.Finish(ctx, "id", end, nil, ""); err != nil {
				t.Fatal(err)
			}
			d1 := d0.Add(2 * time.Minute)
			if ok := s.MarkQueued(ctx, []Mark{{ID: "id", Meta: Meta{Type: "a", Due: d1}}}); !ok[0] {
				t.Fatal("the replacement's mark failed")
			}
			if _, err := s.Claim(ctx, "id", "w2", 1, lease(), early); !errors.Is(err, ErrUnconfirmed) {
				t.Errorf("before its row is read: %v, want %v", err, ErrUnconfirmed)
			}
			gone := early
			gone.RowGone = true
			want := map[State]error{Succeeded: ErrAlreadySucceeded, Dead: ErrDead}[end]
			r, err := s.Claim(ctx, "id", "w2", 1, lease(), gone)
			if !errors.Is(err, want) {
				t.Fatalf("once its row is found gone: %v, want %v", err, want)
			}
			if r.OfDue(d0) {
				t.Errorf("the refusal's record is of the ended run's due time; want the replacement's")
			}
			if r, err := s.Get(ctx, "id"); err != nil || r.State != Queued || !r.Due.Equal(d1) || r.Duplicates != 0 {
				t.Fatalf("the record: %s due %v, %d duplicates, %v; want the replacement's, queued, unchanged", r.State, r.Due, r.Duplicates, err)
			}
		})
	}
}

// A task sent early, then rescheduled to now before its mover moved it:
// the change withdraws the old due time, and the mover moves the new
// version without a token. That run is claimed and handed back at its
// worker's shutdown (queued again, an attempt made); the old early-sent
// message, which its record never confirmed, comes due meanwhile. Its
// claim must be checked against its row (gone: stale), not take the
// handed-back run's record over and run the old version beside the new
// (simulator seed 88325: t65 ran at its old due time 57 s after the
// reschedule answered, and again at its new one).
func TestMemOldMessageOfARescheduledTaskDoesNotTakeOverAHandedBackRun(t *testing.T) {
	ctx := context.Background()
	e := memEnv(t)
	s := e.s
	oldDue := e.now().Truncate(time.Second).Add(time.Minute)
	newDue := e.now().Truncate(time.Second)
	lease := e.now().Add(time.Minute)
	if _, err := s.UnconfirmDue(ctx, "t65", Meta{Type: "slow", Due: oldDue}); err != nil {
		t.Fatal(err)
	}
	moved := Meta{Type: "slow", Due: newDue}
	if ok := s.MarkQueued(ctx, []Mark{{ID: "t65", Meta: moved}}); !ok[0] {
		t.Fatal("the mover's mark of the rescheduled task was refused")
	}
	if _, err := s.Claim(ctx, "t65", "w2-1", 1, lease, moved); err != nil {
		t.Fatal(err)
	}
	if err := s.Finish(ctx, "t65", Queued, errors.New("worker shut down before the task finished"), ""); err != nil {
		t.Fatal(err)
	}
	e.advance(time.Minute)
	old := Meta{Type: "slow", Due: oldDue, Token: "d15562585fc3"}
	if r, err := s.Claim(ctx, "t65", "w3-1", 1, e.now().Add(time.Minute), old); !errors.Is(err, ErrUnconfirmed) {
		t.Fatalf("the old early-sent message's claim = %v (record %s due %v), want ErrUnconfirmed", err, r.State, r.Due)
	}
	if r := e.mustState(t, "t65", Queued); !r.Due.Equal(stored(newDue)) || r.Attempts != 1 {
		t.Fatalf("the refused claim changed the record: %+v", r)
	}
	// The handed-back run's own message runs it again.
	if _, err := s.Claim(ctx, "t65", "w3-1", 1, e.now().Add(time.Minute), moved); err != nil {
		t.Fatalf("the handed-back run's next claim: %v", err)
	}
}

// A handed-back run taken over by another scheduling's message (past
// QueuedWait, after that message's row was checked) leaves the record
// without the first scheduling's token: kept, it said the new run was not
// the one its own message started (SentStarted false while it ran), so a
// reschedule or run-now of its row would go ahead (a review of issue
// 38's row 164).
func TestATakeoverOfAHandedBackRunKeepsNoForeignToken(t *testing.T) {
	ctx := context.Background()
	e := memEnv(t)
	s := e.s
	d1 := e.now().Truncate(time.Second)
	d2 := d1.Add(2 * time.Minute)
	m1 := Meta{Type: "slow", Due: d1, Token: "tok1"}
	if ok := s.Confirm(ctx, []Mark{{ID: "x", Meta: m1}}); !ok[0] {
		t.Fatal("the confirmation of d1 failed")
	}
	if _, err := s.Claim(ctx, "x", "w1", 1, e.now().Add(time.Minute), m1); err != nil {
		t.Fatal(err)
	}
	if err := s.Finish(ctx, "x", Queued, errors.New("worker shut down"), ""); err != nil {
		t.Fatal(err)
	}
	m2 := Meta{Type: "slow", Due: d2, Token: "tok2"}
	if ok := s.Confirm(ctx, []Mark{{ID: "x", Meta: m2}}); ok[0] {
		t.Fatal("the confirmation of d2 beside a handed-back run of d1 was accepted")
	}
	e.advance(QueuedWait + time.Minute)
	if _, err := s.Claim(ctx, "x", "w2", 1, e.now().Add(time.Minute), m2); !errors.Is(err, ErrUnconfirmed) {
		t.Fatalf("d2's claim with its token: %v, want %v (its row is checked)", err, ErrUnconfirmed)
	}
	checked := m2
	checked.Token, checked.RowChecked = "", true
	if _, err := s.Claim(ctx, "x", "w2", 1, e.now().Add(time.Minute), checked); err != nil {
		t.Fatalf("d2's claim after its row was checked: %v", err)
	}
	if r := e.mustState(t, "x", Running); r.Token != "" || !r.Due.Equal(d2) || !r.Behind.has(d1) || !r.ConfirmedBehind.has(d1) {
		t.Fatalf("the record taken over: token %q due %v behind %v confirmed %v; want no token, d2, d1 behind and confirmed", r.Token, r.Due, r.Behind, r.ConfirmedBehind)
	}
	if started, err := s.SentStarted(ctx, "x", m2.Token, d2); err != nil || !started {
		t.Errorf("SentStarted(d2's token) = %v, %v while d2's run runs; want true", started, err)
	}
}

// A scheduling moved beside a run under way (Behind) whose early copy,
// sent under a token whose mark never landed, arrives once its row is
// gone waits for the run like the mover's copy: sent to its row, it was
// acknowledged as superseded and taken off Behind, so that a cancel of
// the id then missed it and the mover's copy ran after the cancel (a
// review of issue 38's row 164).
func TestAnEarlyCopyOfASchedulingMovedBesideARunWaitsForIt(t *testing.T) {
	ctx := context.Background()
	e := memEnv(t)
	s := e.s
	d1 := e.now().Truncate(time.Second)
	d2 := d1.Add(time.Minute)
	m1 := Meta{Type: "slow", Due: d1}
	if ok := s.MarkQueued(ctx, []Mark{{ID: "x", Meta: m1}}); !ok[0] {
		t.Fatal("the mark of d1 failed")
	}
	if _, err := s.Claim(ctx, "x", "w1", 1, e.now().Add(10*time.Minute), m1); err != nil {
		t.Fatal(err)
	}
	moved := Meta{Type: "slow", Due: d2} // the mover's copy, noted behind d1
	s.MarkQueued(ctx, []Mark{{ID: "x", Meta: moved}})
	if r := e.mustState(t, "x", Running); !r.Behind.has(d2) {
		t.Fatalf("the move of d2 beside d1's run: behind %v, want d2", r.Behind)
	}
	e.advance(time.Minute)
	early := Meta{Type: "slow", Due: d2, Token: "tok2"}
	if _, err := s.Claim(ctx, "x", "w2", 1, e.now().Add(time.Minute), early); !errors.Is(err, ErrClaimedElsewhere) {
		t.Fatalf("d2's early copy while d1 runs: %v, want %v", err, ErrClaimedElsewhere)
	}
	if _, err := s.Cancel(ctx, "x"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Claim(ctx, "x", "w3", 1, e.now().Add(time.Minute), moved); !errors.Is(err, ErrCancelled) {
		t.Errorf("d2's moved message after the cancel of the id: %v, want %v", err, ErrCancelled)
	}
	// The early copy is sent to its row, gone: not run either.
	gone := early
	gone.RowGone = true
	for _, m := range []Meta{early, gone} {
		if _, err := s.Claim(ctx, "x", "w3", 1, e.now().Add(time.Minute), m); !errors.Is(err, ErrUnconfirmed) {
			t.Errorf("d2's early copy (row gone %v) after the cancel of the id: %v, want %v", m.RowGone, err, ErrUnconfirmed)
		}
	}
}

// A run handed back at shutdown, whose early-sent message was claimed
// after its row was checked and whose row the mover then retired, and
// which another scheduling's message then took over, still runs from its
// message once that run ended: sent to its row, which is gone, it was
// acknowledged as stale and never ran to its end (a review of issue 38's
// row 164).
func TestAHandedBackRunTakenOverRunsFromItsMessageAfterward(t *testing.T) {
	ctx := context.Background()
	e := memEnv(t)
	s := e.s
	d2 := e.now().Truncate(time.Second)
	d3 := d2.Add(time.Minute)
	m2 := Meta{Type: "slow", Due: d2, Token: "tok2"}
	if _, err := s.Claim(ctx, "x", "w1", 1, e.now().Add(time.Minute), m2); !errors.Is(err, ErrUnconfirmed) {
		t.Fatalf("d2's first claim: %v, want %v", err, ErrUnconfirmed)
	}
	checked := m2
	checked.Token, checked.RowChecked = "", true
	if _, err := s.Claim(ctx, "x", "w1", 1, e.now().Add(time.Minute), checked); err != nil {
		t.Fatal(err)
	}
	if ok := s.Confirm(ctx, []Mark{{ID: "x", Meta: m2}}); !ok[0] {
		t.Fatal("the mover's confirmation of the running d2 was refused")
	}
	if err := s.Finish(ctx, "x", Queued, errors.New("worker shut down"), ""); err != nil {
		t.Fatal(err)
	}
	m3 := Meta{Type: "slow", Due: d3}
	s.MarkQueued(ctx, []Mark{{ID: "x", Meta: m3}})
	e.advance(QueuedWait + time.Minute)
	if _, err := s.Claim(ctx, "x", "w2", 1, e.now().Add(time.Minute), m3); err != nil {
		t.Fatalf("d3's claim: %v", err)
	}
	if _, err := s.Claim(ctx, "x", "w3", 1, e.now().Add(time.Minute), m2); !errors.Is(err, ErrClaimedElsewhere) {
		t.Errorf("d2's message while d3 runs: %v, want %v", err, ErrClaimedElsewhere)
	}
	if err := s.Finish(ctx, "x", Succeeded, nil, ""); err != nil {
		t.Fatal(err)
	}
	if r, err := s.Claim(ctx, "x", "w3", 2, e.now().Add(time.Minute), m2); err != nil || !r.Due.Equal(d2) {
		t.Errorf("d2's message after d3 succeeded: due %v, %v; want d2's run claimed", r.Due, err)
	}
}

// A bulk cancel of the type a task was replaced with (CancelPendingOf)
// also cancels the placeholder that withdrawing the task's early-sent due
// time left on its record (UnconfirmDue without a record: queued for the
// old due time, of the old type, unclaimed and unconfirmed). The
// placeholder stands for no message that may still run, and the next
// scheduling's mark that would take it over never comes once that
// scheduling's row is cancelled: left queued, status said "queued" for
// good (issue 38, row 169, seed 91811: t51, limited, sent early,
// rescheduled, replaced as slow, then `bulk cancel --type slow`). A record
// of another type with a run still under way is left as before.
func TestMemBulkCancelOfTheReplacementCancelsAWithdrawnPlaceholder(t *testing.T) {
	ctx := context.Background()
	e := memEnv(t)
	s := e.s
	old := e.now().Truncate(time.Second).Add(time.Minute)
	replaced := Meta{Type: "slow", Due: old.Add(90 * time.Second)}

	// The early-sent limited task is rescheduled (then replaced): its due
	// time is withdrawn, and with no record yet a placeholder is written.
	if _, err := s.UnconfirmDue(ctx, "t51", Meta{Type: "limited", Due: old}); err != nil {
		t.Fatal(err)
	}
	if r := e.mustState(t, "t51", Queued); !r.Withdrawn.has(r.Due) || r.Token != "" || r.Type != "limited" {
		t.Fatalf("the placeholder: %+v", r)
	}
	// bulk cancel --type slow removes the replacement's row and marks the
	// record.
	if _, err := s.CancelPendingOf(ctx, "t51", replaced); err != nil {
		t.Fatal(err)
	}
	r := e.mustState(t, "t51", Cancelled) // was: Queued, with no message left to move it on
	if !r.CancelledDue.has(stored(replaced.Due)) {
		t.Fatalf("the replacement's due time is not noted cancelled: %+v", r)
	}
	// The old early-sent message, if it comes, is refused.
	if _, err := s.Claim(ctx, "t51", "w1", 1, e.now().Add(time.Minute), Meta{Type: "limited", Due: old, Token: "tok1"}); err == nil {
		t.Fatal("the withdrawn early-sent message was claimed after the cancel")
	}

	// Control: another type's run really under way (moved, not withdrawn)
	// is still left alone by a bulk cancel of the other type.
	if ok := s.MarkQueued(ctx, []Mark{{ID: "u", Meta: Meta{Type: "limited", Due: old}}}); !ok[0] {
		t.Fatal("MarkQueued failed")
	}
	if _, err := s.CancelPendingOf(ctx, "u", Meta{Type: "slow", Due: old.Add(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	if r := e.mustState(t, "u", Queued); !r.CancelledDue.has(stored(old.Add(time.Minute))) {
		t.Fatalf("the other type's queued run: %+v", r)
	}
}

// An early-sent message whose due time a cancel noted beside the record
// (the cancelled run taken over by a replacement) is still left to its
// row, found gone or not: the cancel told its batch (row 166).
func TestMemEarlySentMessageOfACancelledRunWithItsRowGoneIsLeftToTheRow(t *testing.T) {
	ctx := context.Background()
	e := memEnv(t)
	s := e.s
	d0 := e.now().Truncate(time.Second)
	early := Meta{Type: "a", Due: d0, Token: "tok0", Batch: "b"}
	if ok := s.Confirm(ctx, []Mark{{ID: "id", Meta: early}}); !ok[0] {
		t.Fatal("the confirmation failed")
	}
	if _, err := s.Cancel(ctx, "id"); err != nil {
		t.Fatal(err)
	}
	if ok := s.MarkQueued(ctx, []Mark{{ID: "id", Meta: Meta{Type: "a", Due: d0.Add(2 * time.Minute)}}}); !ok[0] {
		t.Fatal("the replacement's mark failed")
	}
	if r, _ := s.Get(ctx, "id"); !r.CancelledDue.has(d0) {
		t.Fatalf("setup: CancelledDue %v lacks %v", r.CancelledDue, d0)
	}
	gone := early
	gone.RowGone = true
	if _, err := s.Claim(ctx, "id", "w2", 1, e.now().Add(time.Minute), gone); !errors.Is(err, ErrUnconfirmed) {
		t.Errorf("a cancelled due time's early-sent message with its row gone: %v, want %v", err, ErrUnconfirmed)
	}
}

// A started (handed-back) run of d2 taken over by another scheduling's
// message is kept in ConfirmedBehind, so its message still runs once that
// run has ended: SentStarted says so for d2's row, still lingering, so a
// reschedule of it is refused as no longer pending. Said unstarted (the
// record is d1's), the reschedule withdrew d2, which ConfirmedBehind does
// not ask, and the old version ran after d1, beside the rescheduled one
// (a review of issue 38's row 164 fix).
func TestARunTakenOverAfterItStartedIsStartedForItsRow(t *testing.T) {
	ctx := context.Background()
	e := memEnv(t)
	s := e.s
	d1 := e.now().Truncate(time.Second)
	d2 := d1.Add(30 * time.Second)
	lease := func() time.Time { return e.now().Add(time.Minute) }
	m1 := Meta{Type: "slow", Due: d1} // moved by the mover without a token
	if ok := s.MarkQueued(ctx, []Mark{{ID: "x", Meta: m1}}); !ok[0] {
		t.Fatal("mark d1")
	}
	// d2 (a replace of the id, sent early with tok2): its row is checked
	// and it takes over d1's unconfirmed queued record.
	m2 := Meta{Type: "slow", Due: d2, Token: "tok2"}
	e.advance(30 * time.Second)
	if _, err := s.Claim(ctx, "x", "w1", 1, lease(), m2); !errors.Is(err, ErrUnconfirmed) {
		t.Fatalf("d2 with its token: %v", err)
	}
	checked := m2
	checked.Token, checked.RowChecked = "", true
	if _, err := s.Claim(ctx, "x", "w1", 1, lease(), checked); err != nil {
		t.Fatalf("d2 after its row check: %v", err)
	}
	if ok := s.Confirm(ctx, []Mark{{ID: "x", Meta: m2}}); !ok[0] {
		t.Fatal("the mover's confirmation of the running d2")
	}
	if err := s.Finish(ctx, "x", Queued, errors.New("worker shut down"), ""); err != nil {
		t.Fatal(err)
	}
	// d1's tokenless message takes the handed-back run over at once.
	if _, err := s.Claim(ctx, "x", "w2", 1, lease(), m1); err != nil {
		t.Fatalf("d1's claim: %v", err)
	}
	e.mustState(t, "x", Running)
	// A reschedule of d2's row (still lingering: the mover's retire not
	// committed yet) asks SentStarted first.
	if started, err := s.SentStarted(ctx, "x", "tok2", d2); err != nil || !started {
		t.Errorf("SentStarted(d2) = %v, %v while the record keeps d2's run confirmed behind d1's; want true", started, err)
	}
}

// The death of a run claimed after its early-sent message's row was
// checked (so its record carries no token), whose worker set the message
// aside and died before recording the death, is requeued: the record
// running under no token is the dead message's own run. Taken for a run
// live again, the requeue answered "requeued before", the dead letter was
// removed and the task never ran again (the shape of seed 6742; a review
// of issue 38's row 164 fix, which sends such a message to its row when
// it meets another scheduling's handed-back run).
func TestTheDeathOfARunClaimedAfterItsRowCheckIsRequeued(t *testing.T) {
	ctx := context.Background()
	e := memEnv(t)
	s := e.s
	d1 := e.now().Truncate(time.Second)
	d2 := d1.Add(30 * time.Second)
	m1 := Meta{Type: "slow", Due: d1}
	s.MarkQueued(ctx, []Mark{{ID: "x", Meta: m1}})
	if _, err := s.Claim(ctx, "x", "w1", 1, e.now().Add(time.Minute), m1); err != nil {
		t.Fatal(err)
	}
	if err := s.Finish(ctx, "x", Queued, errors.New("worker shut down"), ""); err != nil {
		t.Fatal(err)
	}
	e.advance(30 * time.Second)
	m2 := Meta{Type: "slow", Due: d2, Token: "tok2"}
	if _, err := s.Claim(ctx, "x", "w2", 1, e.now().Add(time.Minute), m2); err != nil {
		if !errors.Is(err, ErrUnconfirmed) {
			t.Fatal(err)
		}
		checked := m2
		checked.Token, checked.RowChecked = "", true
		if _, err := s.Claim(ctx, "x", "w2", 1, e.now().Add(time.Minute), checked); err != nil {
			t.Fatal(err)
		}
	}
	// The attempts run out; w2 sets the message aside and dies before
	// recording the death. The claim lapses; an operator requeues (past
	// BehindWait, so d1's entry beside it no longer refuses the requeue).
	e.advance(2 * time.Hour)
	rq := m2
	rq.Token = RequeueToken("m2-5")
	earlier, queued, err := s.MarkRequeued(ctx, "x", rq, "m2-5", "tok2")
	if r, _ := s.Get(ctx, "x"); err != nil || earlier || r.State != Queued || r.Token != rq.Token {
		t.Errorf("requeue of d2's death: earlier %v queued %v err %v; record %s token %q (want queued under the requeue's token)", earlier, queued, err, r.State, r.Token)
	}
}

// claimAndSucceed claims the run id as worker for meta m and records its
// success, failing t on any error.
func claimAndSucceed(ctx context.Context, t *testing.T, s *Store, id, worker string, lease time.Time, m Meta) {
	t.Helper()
	if _, err := s.Claim(ctx, id, worker, 1, lease, m); err != nil {
		t.Fatal(err)
	}
	if err := s.Finish(ctx, id, Succeeded, nil, ""); err != nil {
		t.Fatal(err)
	}
}

// A cancel marks its scheduling's record again once its row's delete has
// answered (the row may have been moved meanwhile): when the id was
// scheduled again after the row went and that run has ended, the second
// mark leaves its record as it is, m's cancel being noted in it already
// (issue 38, sim seed 162586: a replace that ran and succeeded while the
// cancel's delete answered late read as cancelled).
func TestMemCancelPendingAgainLeavesALaterSchedulingsEnd(t *testing.T) {
	ctx := context.Background()
	e := memEnv(t)
	y := Meta{Type: "rated", Due: e.now().Add(2 * time.Minute).Truncate(time.Second)}
	if _, err := e.s.CancelPending(ctx, "t6", y); err != nil { // the cancel's first mark
		t.Fatal(err)
	}
	z := Meta{Type: "limited", Due: e.now().Truncate(time.Second)}
	if _, err := e.s.Claim(ctx, "t6", "w4", 1, e.now().Add(time.Minute), z); err != nil {
		t.Fatalf("the replacement's claim: %v", err)
	}
	if err := e.s.Finish(ctx, "t6", Succeeded, nil, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := e.s.CancelPending(ctx, "t6", y); err != nil { // its mark after the delete
		t.Fatalf("the second mark: %v", err)
	}
	if r := e.mustState(t, "t6", Succeeded); !r.Due.Equal(z.Due) {
		t.Fatalf("record due %v; want the replacement's %v", r.Due, z.Due)
	}
	if _, err := e.s.Claim(ctx, "t6", "w1", 1, e.now().Add(time.Minute), y); !errors.Is(err, ErrCancelled) {
		t.Fatalf("a late message of the cancelled scheduling: %v; want ErrCancelled", err)
	}
}

// A delivery of a scheduling sent by its client while an earlier
// scheduling of the id was in the queue (its confirmation refused) checks
// its row, which stands, and claims again without its token; a cancel
// that deleted that row just after the check and marked the record
// before the claim refuses it: the record changed since the refused
// claim read it, and notes the cancel of this due time (issue 38, row
// 257, sweep seed 164747: the task ran after its cancel returned). With
// the record unchanged since, the row check decides, as for a new
// scheduling of a cancelled due time.
func TestMemARowCheckedClaimAfterTheCancelsMarkIsRefused(t *testing.T) {
	for _, tc := range []struct {
		name   string
		cancel bool
		want   error
	}{
		{"the cancel between the row check and the claim", true, ErrCancelled},
		{"no cancel", false, ErrClaimedElsewhere},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			e := memEnv(t)
			s := e.s
			d1 := e.now().Truncate(time.Second)
			lease := func() time.Time { return e.now().Add(time.Minute) }
			first := Meta{Type: "a", Due: d1, Token: "t1"}
			if ok := s.ConfirmSent(ctx, []Mark{{ID: "id", Meta: first}}); !ok[0] {
				t.Fatal("the first scheduling's send was not recorded")
			}
			e.advance(25 * time.Second)
			d2 := e.now().Truncate(time.Second)
			second := Meta{Type: "b", Due: d2, Token: "t2"}
			if ok := s.ConfirmSent(ctx, []Mark{{ID: "id", Meta: second}}); ok[0] {
				t.Fatal("the second scheduling's confirmation was recorded beside the first run in the queue")
			}
			r, err := s.Claim(ctx, "id", "w1", 1, lease(), second)
			if !errors.Is(err, ErrUnconfirmed) || r.Version == "" {
				t.Fatalf("the second's claim with its token: %+v, %v; want ErrUnconfirmed with the record's version", r, err)
			}
			// The row checked: it stands. Then the cancel.
			if tc.cancel {
				if _, err := s.CancelPending(ctx, "id", Meta{Type: "b", Due: d2}); err != nil {
					t.Fatal(err)
				}
			}
			checked := second
			checked.Token, checked.RowChecked, checked.RowCheckedOver = "", true, r.Version
			if _, err := s.Claim(ctx, "id", "w1", 1, lease(), checked); !errors.Is(err, tc.want) {
				t.Fatalf("the row-checked claim: %v; want %v", err, tc.want)
			}
		})
	}
}

// The two edges of row 257's refusal (a helper's review): a first claim
// that met no record counts any record found at the row-checked claim as
// written since, so a cancel it notes refuses the claim; and a due time
// the record noted cancelled already at the first claim is a new
// scheduling of a cancelled due time, which its row decides, however the
// record changed between the two claims.
func TestMemARowCheckedClaimsRefusalEdges(t *testing.T) {
	ctx := context.Background()
	t.Run("no record at the first claim", func(t *testing.T) {
		e := memEnv(t)
		s := e.s
		lease := func() time.Time { return e.now().Add(time.Minute) }
		d1 := e.now().Truncate(time.Second)
		e.advance(25 * time.Second)
		d2 := e.now().Truncate(time.Second)
		second := Meta{Type: "b", Due: d2, Token: "t2"}
		r, err := s.Claim(ctx, "id", "w2", 1, lease(), second)
		if !errors.Is(err, ErrUnconfirmed) || r.Version != noRecord {
			t.Fatalf("the token claim without a record: %+v, %v; want ErrUnconfirmed, version %q", r, err, noRecord)
		}
		// The earlier scheduling's run begins, and the cancel reaches it
		// and notes d2.
		if _, err := s.Claim(ctx, "id", "w1", 1, lease(), Meta{Type: "a", Due: d1}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.CancelPending(ctx, "id", Meta{Type: "b", Due: d2}); err != nil {
			t.Fatal(err)
		}
		checked := second
		checked.Token, checked.RowChecked, checked.RowCheckedOver = "", true, r.Version
		if _, err := s.Claim(ctx, "id", "w2", 1, lease(), checked); !errors.Is(err, ErrCancelled) {
			t.Fatalf("the row-checked claim: %v; want ErrCancelled", err)
		}
	})
	t.Run("a due time cancelled before the first claim", func(t *testing.T) {
		e := memEnv(t)
		s := e.s
		lease := func() time.Time { return e.now().Add(time.Minute) }
		d1 := e.now().Truncate(time.Second)
		if _, err := s.Claim(ctx, "id", "w1", 1, lease(), Meta{Type: "a", Due: d1}); err != nil {
			t.Fatal(err)
		}
		e.advance(25 * time.Second)
		d2 := e.now().Truncate(time.Second)
		if _, err := s.CancelPending(ctx, "id", Meta{Type: "b", Due: d2}); err != nil {
			t.Fatal(err)
		}
		// Scheduled again for that very due time, sent by its client.
		second := Meta{Type: "b", Due: d2, Token: "t2"}
		r, err := s.Claim(ctx, "id", "w2", 1, lease(), second)
		if !errors.Is(err, ErrUnconfirmed) || r.Version != "" {
			t.Fatalf("the token claim: %+v, %v; want ErrUnconfirmed without a version", r, err)
		}
		// No version to compare: however the record changes before the
		// row-checked claim, its row decides.
		checked := second
		checked.Token, checked.RowChecked, checked.RowCheckedOver = "", true, r.Version
		if _, err := s.Claim(ctx, "id", "w2", 1, lease(), checked); errors.Is(err, ErrCancelled) {
			t.Fatalf("the row-checked claim of a new scheduling of a cancelled due time: %v; want its row to decide", err)
		}
	})
}
