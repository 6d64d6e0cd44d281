package schedule

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leasecron/leasecron/internal/clock"
	"github.com/leasecron/leasecron/internal/storage"
	"github.com/leasecron/leasecron/internal/table"
	"github.com/leasecron/leasecron/queue"
)

// A row whose client is sending its message itself is left alone until its
// SendingUntil; marked sent, it is moved without being sent again; never
// marked (the client died), it is moved as any other row once the time
// has passed.
func TestMoverLeavesRowsBeingSent(t *testing.T) {
	e := newMoverEnv(t, 1, MoverOptions{MoverSettings: MoverSettings{PollEvery: 5 * time.Second}})
	ctxt := ctx(t)
	grace := t0.Add(15 * time.Second)
	marked, err := e.c.Add(ctxt, Item{ID: "marked", Due: t0}, AddOptions{Sending: grace})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.Add(ctxt, Item{ID: "orphan", Due: t0}, AddOptions{Sending: grace}); err != nil {
		t.Fatal(err)
	}
	if marked.SendingUntil != grace || marked.ETag == "" {
		t.Fatalf("Add returned %+v: want SendingUntil and the row's ETag", marked)
	}
	if err := e.onePass(t); err != nil {
		t.Fatal(err)
	}
	if n := len(e.q.ids()); n != 0 {
		t.Fatalf("the mover sent %d messages for rows their client is sending", n)
	}
	env, err := e.c.Envelope(marked, "tok1", t0)
	if err != nil || env.Token != "tok1" || env.Row != "00/"+marked.RowKey || env.RowETag != marked.ETag || env.ID != "marked" {
		t.Fatalf("envelope %+v, %v", env, err)
	}
	if ok, err := e.c.Current(ctxt, env); !ok || err != nil {
		t.Fatalf("before the mark the message is current? %v, %v", ok, err)
	}
	if err := e.c.MarkSent(ctxt, Sent{Item: marked, Token: "tok1"}); err != nil {
		t.Fatal(err)
	}
	if ok, err := e.c.Current(ctxt, env); !ok || err != nil {
		t.Fatalf("after the mark the message is current? %v, %v", ok, err)
	}
	if err := e.c.MarkSent(ctxt, Sent{Item: marked, Token: "tok2"}); !errors.Is(err, storage.ErrPreconditionFailed) {
		t.Fatalf("a second mark with a stale ETag: %v, want ErrPreconditionFailed", err)
	}
	if err := e.onePass(t); err != nil {
		t.Fatal(err)
	}
	if n := len(e.q.ids()); n != 0 {
		t.Fatalf("the mover sent %d messages; the marked row's is in the queue and the orphan's grace has not passed", n)
	}
	if _, err := e.c.Get(ctxt, "marked"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("the marked row was not moved: %v", err)
	}
	e.fc.Advance(16 * time.Second)
	if err := e.onePass(t); err != nil {
		t.Fatal(err)
	}
	if s, ok := e.q.byID("orphan"); !ok || s.env.Token != "" {
		t.Fatalf("after the grace the orphan's row is moved as any other: %+v, %v", s, ok)
	}
	// A series ignores Sending on reschedule; a one-off keeps it.
	if _, err := e.c.Add(ctxt, Item{ID: "series", Due: t0.Add(time.Hour), Recurrence: "@every 1h"}, AddOptions{}); err != nil {
		t.Fatal(err)
	}
	s, err := e.c.RescheduleWith(ctxt, "series", e.fc.Now(), RescheduleOptions{Sending: e.fc.Now().Add(time.Minute)})
	if err != nil || !s.SendingUntil.IsZero() {
		t.Fatalf("a series rescheduled with Sending: %+v, %v", s, err)
	}
}

// A row its sender confirmed (the run recorded queued with the token) is
// moved without confirming the run again; one it did not confirm is
// confirmed by the mover as any row sent early. Rescheduling or replacing
// a row marked sent through the Client to another due time withdraws the
// run of its due time (Options.UnconfirmDue), which takes any
// confirmation back and refuses one still to come; a replace of the same
// due time takes back the old token (Options.Unconfirm); cancelling it
// does not need to.
func TestConfirmedRowsAndTheirChanges(t *testing.T) {
	var unconfirmed []string
	var dueTakenBack []string
	c, mt, fc := newMemClient(t, Options{ChangesAfterSend: true, Unconfirm: func(_ context.Context, id, token string) error {
		unconfirmed = append(unconfirmed, id+"/"+token)
		return nil
	}, UnconfirmDue: func(_ context.Context, old Item) (string, error) {
		dueTakenBack = append(dueTakenBack, old.ID+"@"+old.Due.Sub(t0).String())
		return "", nil
	}})
	q := &fakeQueue{}
	m, confirmed := confirmingMover(t, mt, fc, q)
	ctxt := ctx(t)
	now := fc.Now()
	sendNow := func(id, token string, confirm bool) Item {
		it, err := c.Add(ctxt, Item{ID: id, Due: now}, AddOptions{Sending: now.Add(15 * time.Second), Replace: true})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.MarkSent(ctxt, Sent{Item: it, Token: token, Confirmed: confirm}); err != nil {
			t.Fatal(err)
		}
		return it
	}
	sendNow("confirmed", "c1", true)
	sendNow("unconfirmed", "u1", false)
	sendNow("rescheduled", "r1", true)
	sendNow("replaced", "p1", true)
	if _, err := c.Reschedule(ctxt, "rescheduled", now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	sendNow("replaced", "p2", true)
	// A row marked sent without the confirmation: its run may carry the
	// token all the same (a confirm whose answer was lost; the row was
	// changed before the mark), so a replace takes it back too (issue 38,
	// found by the simulator: the old message ran and the replacement did
	// not).
	sendNow("sentonly", "s1", false)
	sendNow("sentonly", "s2", true)
	// A replace of the same due time takes back only the old token: the
	// replacement's own confirmation, of that due time, may be on the
	// record already (a review of issue 38's row 107). One that moves the
	// task withdraws the old due time.
	it, err := c.Add(ctxt, Item{ID: "replacedlater", Due: now}, AddOptions{Sending: now.Add(15 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.MarkSent(ctxt, Sent{Item: it, Token: "l1", Confirmed: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Add(ctxt, Item{ID: "replacedlater", Due: now.Add(time.Minute)}, AddOptions{Replace: true}); err != nil {
		t.Fatal(err)
	}
	if want := []string{"replaced/p1", "sentonly/s1"}; !slices.Equal(unconfirmed, want) {
		t.Errorf("confirmations taken back by token: %v, want %v", unconfirmed, want)
	}
	if want := []string{"rescheduled@0s", "replacedlater@0s"}; !slices.Equal(dueTakenBack, want) {
		t.Errorf("runs of rows marked sent withdrawn: %v, want %v", dueTakenBack, want)
	}
	if _, err := c.Cancel(ctxt, "replacedlater"); err != nil {
		t.Fatal(err)
	}
	dueTakenBack = nil
	// A row still being sent (written with Sending, not yet marked) names
	// no token, but its sender may have confirmed the run already:
	// rescheduling or replacing it takes back any confirmation of its due
	// time (issue 38, seed 1142: the old message ran beside the
	// rescheduled task). A series' occurrences are never confirmed so.
	for _, id := range []string{"sending", "sendingreplaced"} {
		if _, err := c.Add(ctxt, Item{ID: id, Due: now}, AddOptions{Sending: now.Add(15 * time.Second)}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Reschedule(ctxt, "sending", now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Add(ctxt, Item{ID: "sendingreplaced", Due: now.Add(time.Minute)}, AddOptions{Replace: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Add(ctxt, Item{ID: "sendingseries", Due: now, Recurrence: "@every 1h"}, AddOptions{Sending: now.Add(15 * time.Second)}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Reschedule(ctxt, "sendingseries", now.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	// A reschedule whose answer is lost (its write committed; the retry
	// finds the row moved) has withdrawn the old due time all the same.
	if _, err := c.Add(ctxt, Item{ID: "sendinglost", Due: now}, AddOptions{Sending: now.Add(15 * time.Second)}); err != nil {
		t.Fatal(err)
	}
	c.t = &lostAnswer{Table: mt, lose: func(ops []table.Op) bool {
		return ops[0].Kind == table.Insert && strings.HasSuffix(ops[0].RowKey, "_sendinglost")
	}}
	if _, err := c.Reschedule(ctxt, "sendinglost", now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	c.t = mt
	// So has one of a row marked sent: without it, the mover's
	// confirmation of the row it read before the change, late, took over
	// the record of the run that replaced it (issue 38, seed 30276).
	sendNow("sentlost", "l1", true)
	c.t = &lostAnswer{Table: mt, lose: func(ops []table.Op) bool {
		return ops[0].Kind == table.Insert && strings.HasSuffix(ops[0].RowKey, "_sentlost")
	}}
	if _, err := c.Reschedule(ctxt, "sentlost", now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	c.t = mt
	// And a replace's, to another due time.
	sendNow("replacedlost", "rl1", true)
	c.t = &lostAnswer{Table: mt, lose: func(ops []table.Op) bool {
		return ops[0].Kind == table.Delete && strings.HasSuffix(ops[0].RowKey, "_replacedlost")
	}}
	if _, err := c.Add(ctxt, Item{ID: "replacedlost", Due: now.Add(time.Hour)}, AddOptions{Replace: true}); err != nil {
		t.Fatal(err)
	}
	if l := c.t.(*lostAnswer); !l.lost {
		t.Fatal("the replace's answer was not lost")
	}
	c.t = mt
	if want := []string{"sending@0s", "sendingreplaced@0s", "sendinglost@0s", "sentlost@0s", "replacedlost@0s"}; !slices.Equal(dueTakenBack, want) {
		t.Errorf("confirmations of a due time taken back: %v, want %v", dueTakenBack, want)
	}
	for _, id := range []string{"sending", "sendingreplaced", "sendingseries", "sendinglost", "sentlost", "replacedlost"} {
		if _, err := c.Cancel(ctxt, id); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.takeFence(ctxt, "00", 1); err != nil {
		t.Fatal(err)
	}
	if _, err := m.pass(ctxt, 1); err != nil {
		t.Fatal(err)
	}
	if want := []string{"unconfirmed/u1"}; !slices.Equal(*confirmed, want) {
		t.Errorf("the mover confirmed %v, want %v", confirmed, want)
	}
	for _, id := range []string{"confirmed", "unconfirmed", "replaced", "sentonly"} {
		if _, err := c.Get(ctxt, id); !errors.Is(err, ErrNotFound) {
			t.Errorf("%s: not moved (%v)", id, err)
		}
	}
	if n := len(q.ids()); n != 0 {
		t.Errorf("the mover sent %d messages for rows whose senders had sent them", n)
	}
}

// Without Options.UnconfirmDue, rescheduling or replacing a row marked
// sent takes its confirmation back by its token (Options.Unconfirm).
func TestChangeOfASentRowUnconfirmsByToken(t *testing.T) {
	var unconfirmed []string
	c, _, fc := newMemClient(t, Options{ChangesAfterSend: true, Unconfirm: func(_ context.Context, id, token string) error {
		unconfirmed = append(unconfirmed, id+"/"+token)
		return nil
	}})
	ctxt := ctx(t)
	now := fc.Now()
	for _, id := range []string{"rescheduled", "replaced"} {
		it, err := c.Add(ctxt, Item{ID: id, Due: now}, AddOptions{Sending: now.Add(15 * time.Second)})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.MarkSent(ctxt, Sent{Item: it, Token: "tok-" + id, Confirmed: true}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Reschedule(ctxt, "rescheduled", now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Add(ctxt, Item{ID: "replaced", Due: now.Add(time.Minute)}, AddOptions{Replace: true}); err != nil {
		t.Fatal(err)
	}
	if want := []string{"rescheduled/tok-rescheduled", "replaced/tok-replaced"}; !slices.Equal(unconfirmed, want) {
		t.Errorf("confirmations taken back: %v, want %v", unconfirmed, want)
	}
}

// confirmingMover is a mover of generation 1 over mt whose Confirm accepts
// every run, noting each as id/token in the list it returns.
func confirmingMover(t *testing.T, mt table.Table, fc *clock.Fake, q *fakeQueue) (*Mover, *[]string) {
	t.Helper()
	var confirmed []string
	m, err := newMover(mt, MoverOptions{Generation: func() int64 { return 1 }, Enqueuer: q, SetAside: q, Clock: fc, Logger: quiet,
		Confirm: func(_ context.Context, envs []queue.Envelope) []bool {
			out := make([]bool, len(envs))
			for i, env := range envs {
				confirmed, out[i] = append(confirmed, env.ID+"/"+env.Token), true
			}
			return out
		}})
	if err != nil {
		t.Fatal(err)
	}
	return m, &confirmed
}

// raceFirst runs race once, just before the first transaction that match
// selects: another process's writes landing between a change's read and
// its write.
type raceFirst struct {
	table.Table
	match func(ops []table.Op) bool
	race  func()
	done  bool
}

func (r *raceFirst) Submit(ctx context.Context, ops []table.Op) ([]string, error) {
	if !r.done && len(ops) > 0 && r.match(ops) {
		r.done = true
		r.race()
	}
	return r.Table.Submit(ctx, ops)
}

// A change of a row being sent withdraws its due time and so takes back
// the sender's confirmation; when the change then fails because, between
// its read and its write, the sender marked the row sent and confirmed
// and the mover retired it without sending, the confirmation is put back
// (Options.ConfirmAgain): the sender's message is the task's only one,
// and without it would be acknowledged as stale (issue 38, seed 30004: a
// run-now of a task a ScheduleMany was sending; it never ran). A change
// that happens does not put it back.
func TestFailedChangeOfARowBeingSentPutsItsConfirmationBack(t *testing.T) {
	var again []string
	c, mt, fc := newMemClient(t, Options{ChangesAfterSend: true,
		Unconfirm: func(context.Context, string, string) error { return nil },
		UnconfirmDue: func(_ context.Context, old Item) (string, error) {
			return "tok-" + old.ID, nil // the sender had confirmed
		},
		ConfirmAgain: func(_ context.Context, old Item, token string) error {
			again = append(again, old.ID+"/"+token+"@"+old.Due.Sub(t0).String())
			return nil
		}})
	q := &fakeQueue{}
	m, err := newMover(mt, MoverOptions{Generation: func() int64 { return 1 }, Enqueuer: q, SetAside: q, Clock: fc, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	ctxt := ctx(t)
	if err := m.takeFence(ctxt, "00", 1); err != nil {
		t.Fatal(err)
	}
	now := fc.Now()
	sending := AddOptions{Sending: now.Add(15 * time.Second)}
	raced, err := c.Add(ctxt, Item{ID: "raced", Due: now}, sending)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Add(ctxt, Item{ID: "changed", Due: now}, sending); err != nil {
		t.Fatal(err)
	}
	c.t = &raceFirst{Table: mt,
		match: func(ops []table.Op) bool { return strings.HasSuffix(ops[0].RowKey, "_raced") },
		race: func() {
			if err := c.MarkSent(ctxt, Sent{Item: raced, Token: "tok-raced", Confirmed: true}); err != nil {
				t.Fatal(err)
			}
			if _, err := m.pass(ctxt, 1); err != nil {
				t.Fatal(err)
			}
		}}
	if _, err := c.RescheduleWith(ctxt, "raced", now.Add(time.Second), RescheduleOptions{Sending: now.Add(16 * time.Second)}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("run-now of a row retired meanwhile: %v, want ErrNotFound", err)
	}
	if n := len(q.ids()); n != 0 {
		t.Fatalf("the mover sent %d messages for a row its sender confirmed", n)
	}
	if _, err := c.Reschedule(ctxt, "changed", now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if want := []string{"raced/tok-raced@0s"}; !slices.Equal(again, want) {
		t.Errorf("confirmations put back: %v, want %v", again, want)
	}
}

// A change of a row marked sent that fails because, between its read
// and its write, the mover confirmed the run and retired the row does
// not withdraw the run: the message sent early is the task's only one,
// confirmed, and must run. A withdrawal before the write, undone only
// after the failed change's retries, left it stale for as long as a slow
// store made them (issue 38, sweep seed 30689: the message came in that
// time, was acknowledged as stale, and the task never ran).
func TestFailedChangeOfASentRowWithdrawsNothing(t *testing.T) {
	var withdrawn []string
	c, mt, fc := newMemClient(t, Options{ChangesAfterSend: true,
		UnconfirmDue: func(_ context.Context, old Item) (string, error) {
			withdrawn = append(withdrawn, old.ID)
			return "", nil
		}})
	q := &fakeQueue{}
	m, confirmed := confirmingMover(t, mt, fc, q)
	ctxt := ctx(t)
	if err := m.takeFence(ctxt, "00", 1); err != nil {
		t.Fatal(err)
	}
	now := fc.Now()
	it, err := c.Add(ctxt, Item{ID: "early", Due: now}, AddOptions{Sending: now.Add(15 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.MarkSent(ctxt, Sent{Item: it, Token: "tok-early"}); err != nil {
		t.Fatal(err)
	}
	fc.Advance(20 * time.Second) // past its send window: the mover retires it
	c.t = &raceFirst{Table: mt,
		match: func(ops []table.Op) bool { return strings.HasSuffix(ops[0].RowKey, "_early") },
		race: func() {
			if _, err := m.pass(ctxt, 1); err != nil {
				t.Fatal(err)
			}
		}}
	if _, err := c.Reschedule(ctxt, "early", now.Add(time.Hour)); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a reschedule of a row retired meanwhile: %v, want ErrNotFound", err)
	}
	c.t = mt
	if want := []string{"early/tok-early"}; !slices.Equal(*confirmed, want) {
		t.Fatalf("the mover confirmed %v, want %v (the race did not happen)", *confirmed, want)
	}
	if len(withdrawn) != 0 {
		t.Errorf("a failed change withdrew the runs of %v: their confirmed messages would be taken for stale", withdrawn)
	}
}

// undoWithdrawals puts a confirmation back only where the old message is
// all the task has: no row of the id, or the old row itself marked sent
// with that token, or still exactly as the withdrawal read it (its sender
// may mark it yet: the change never happened). A row written since — the
// change's own, whose answer was lost, or another's — or the old row
// marked with another token stands for the task, and the old message
// stays stale.
func TestUndoWithdrawalsOnlyWhereTheOldMessageIsAllThereIs(t *testing.T) {
	var again []string
	c, _, fc := newMemClient(t, Options{ChangesAfterSend: true, ConfirmAgain: func(_ context.Context, old Item, token string) error {
		again = append(again, old.ID+"/"+token)
		return nil
	}})
	ctxt := ctx(t)
	now := fc.Now()
	add := func(id string) Item {
		t.Helper()
		it, err := c.Add(ctxt, Item{ID: id, Due: now}, AddOptions{Sending: now.Add(15 * time.Second)})
		if err != nil {
			t.Fatal(err)
		}
		return it
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	gone, marked, other, rewritten, unmarked := add("gone"), add("marked"), add("other"), add("rewritten"), add("unmarked")
	_, err := c.Cancel(ctxt, "gone")
	must(err)
	must(c.MarkSent(ctxt, Sent{Item: marked, Token: "tm", Confirmed: true}))
	must(c.MarkSent(ctxt, Sent{Item: other, Token: "tx", Confirmed: true}))
	_, err = c.Reschedule(ctxt, "rewritten", now.Add(time.Hour))
	must(err)
	two := withdrawals{}.add(withdrawal{old: gone, token: "tg1"}).add(withdrawal{old: gone}).add(withdrawal{old: gone, token: "tg2"})
	c.undoWithdrawals(ctxt, "gone", two)
	c.undoWithdrawals(ctxt, "marked", withdrawals{}.add(withdrawal{old: marked, token: "tm"}))
	c.undoWithdrawals(ctxt, "other", withdrawals{}.add(withdrawal{old: other, token: "tm"}))
	c.undoWithdrawals(ctxt, "rewritten", withdrawals{}.add(withdrawal{old: rewritten, token: "tr"}))
	c.undoWithdrawals(ctxt, "unmarked", withdrawals{}.add(withdrawal{old: unmarked, token: "tu"}))
	if want := []string{"gone/tg2", "gone/tg1", "marked/tm", "unmarked/tu"}; !slices.Equal(again, want) {
		t.Errorf("confirmations put back: %v, want %v", again, want)
	}
}

// A row still being sent (written with Sending, not yet marked) whose
// message has already started its run is no longer pending: reschedule
// and cancel refuse it as they refuse a sent row whose run started, or the
// task would run again at its new time (issue 38, found reviewing seed
// 1142's fix). One whose run has not started changes as usual.
func TestChangeOfARowBeingSentWhoseRunStarted(t *testing.T) {
	var asked []string
	started := map[string]bool{"ran": true}
	c, _, fc := newMemClient(t, Options{ChangesAfterSend: true, SentStarted: func(_ context.Context, id, token string, due time.Time) (bool, error) {
		asked = append(asked, id+"/"+token+"@"+due.Sub(t0).String())
		return started[id], nil
	}})
	ctxt := ctx(t)
	now := fc.Now()
	for _, id := range []string{"ran", "waits"} {
		if _, err := c.Add(ctxt, Item{ID: id, Due: now}, AddOptions{Sending: now.Add(15 * time.Second)}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Reschedule(ctxt, "ran", now.Add(time.Hour)); !errors.Is(err, ErrNotFound) {
		t.Errorf("reschedule of a row being sent whose run started: %v, want ErrNotFound", err)
	}
	if _, err := c.Cancel(ctxt, "ran"); !errors.Is(err, ErrNotFound) {
		t.Errorf("cancel of a row being sent whose run started: %v, want ErrNotFound", err)
	}
	if _, err := c.Reschedule(ctxt, "waits", now.Add(time.Hour)); err != nil {
		t.Errorf("reschedule of a row being sent whose run has not started: %v", err)
	}
	if want := []string{"ran/@0s", "ran/@0s", "waits/@0s"}; !slices.Equal(asked, want) {
		t.Errorf("runs asked about: %v, want %v", asked, want)
	}
}

// A one-off row that says nothing of a send may stand behind a message
// that ran: a traffic-cop pass sends a due row's message before it
// retires the row, and an early one's before it marks the row sent. A
// reschedule or run-now asks the run about it and refuses a task whose
// run of that due time started (issue 38, seed 50023: the mover froze
// between its early send and its mark; the task died, and a reschedule
// ran it all over again). A cancel does not ask: it marks a started run
// as one already moved.
func TestChangeOfAnUnmarkedRowWhoseRunStarted(t *testing.T) {
	var asked []string
	started := map[string]bool{"ran": true, "ran2": true}
	c, _, fc := newMemClient(t, Options{ChangesAfterSend: true, SentStarted: func(_ context.Context, id, token string, due time.Time) (bool, error) {
		asked = append(asked, id+"/"+token+"@"+due.Sub(t0).String())
		return started[id], nil
	}})
	ctxt := ctx(t)
	now := fc.Now()
	for _, id := range []string{"ran", "ran2", "waits"} {
		if _, err := c.Add(ctxt, Item{ID: id, Due: now.Add(-time.Second)}, AddOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Reschedule(ctxt, "ran", now.Add(time.Hour)); !errors.Is(err, ErrNotFound) {
		t.Errorf("reschedule of an unmarked row whose run started: %v, want ErrNotFound", err)
	}
	if _, err := c.Reschedule(ctxt, "ran2", now); !errors.Is(err, ErrNotFound) {
		t.Errorf("reschedule to now (run-now) of an unmarked row whose run started: %v, want ErrNotFound", err)
	}
	if _, err := c.Reschedule(ctxt, "waits", now.Add(time.Hour)); err != nil {
		t.Errorf("reschedule of an unmarked row whose run has not started: %v", err)
	}
	if _, err := c.Cancel(ctxt, "ran"); err != nil {
		t.Errorf("cancel of an unmarked row whose run started: %v", err)
	}
	// A row due later than ClockSlack from now cannot be behind a run
	// that started (a message is not delivered before its due time): not
	// asked about.
	if _, err := c.Add(ctxt, Item{ID: "later", Due: now.Add(ClockSlack + time.Second)}, AddOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Reschedule(ctxt, "later", now.Add(time.Hour)); err != nil {
		t.Errorf("reschedule of a row due later: %v", err)
	}
	if want := []string{"ran/@-1s", "ran2/@-1s", "waits/@-1s"}; !slices.Equal(asked, want) {
		t.Errorf("runs asked about: %v, want %v", asked, want)
	}
}

// A cancel that tells others before it removes the row (CancelWith's
// first: a batch member's, a task others wait for) first takes the row's
// send mark back, so that a message sent for the row — by the mover
// early, or by its client that is still sending it — checked against the
// row while the cancel is under way is stale, not run after its batch
// heard it was cancelled (issue 38, simulator row 98, seed 14083: the
// row's removal was slowed, and the replacement's message, checked
// against the row that still stood, ran).
func TestCancelTakesTheSendMarkBackBeforeTelling(t *testing.T) {
	c, _, fc := newMemClient(t, Options{ChangesAfterSend: true})
	ctxt := ctx(t)
	now := fc.Now()
	marked, err := c.Add(ctxt, Item{ID: "marked", Due: now.Add(4 * time.Second), Batch: "b1"}, AddOptions{Sending: now.Add(15 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.MarkSent(ctxt, Sent{Item: marked, Token: "m1"}); err != nil {
		t.Fatal(err)
	}
	sending, err := c.Add(ctxt, Item{ID: "sending", Due: now.Add(4 * time.Second), Waiters: true}, AddOptions{Sending: now.Add(15 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		it    Item
		token string
	}{{marked, "m1"}, {sending, "s1"}} {
		env, err := c.Envelope(tc.it, tc.token, now)
		if err != nil {
			t.Fatal(err)
		}
		if ok, err := c.Current(ctxt, env); !ok || err != nil {
			t.Fatalf("%s: before the cancel its message is current? %v, %v", tc.it.ID, ok, err)
		}
		told := false
		got, err := c.CancelWith(ctxt, tc.it.ID, func(ctx context.Context, row Item) error {
			told = true
			if ok, err := c.Current(ctx, env); ok || err != nil {
				t.Errorf("%s: while the cancel tells others, its message is current? %v, %v; want stale", tc.it.ID, ok, err)
			}
			return nil
		})
		if err != nil || !told || got.ID != tc.it.ID {
			t.Fatalf("%s: cancel: %+v, %v (told %v)", tc.it.ID, got, err, told)
		}
		if _, err := c.Get(ctxt, tc.it.ID); !errors.Is(err, ErrNotFound) {
			t.Fatalf("%s: after the cancel: %v; want ErrNotFound", tc.it.ID, err)
		}
	}
	// A take-back whose answer was lost (the SDK's retry refused: the row
	// changed) is tried again on the row as it is now.
	mt := c.t
	lt := &lostAnswer{Table: mt, lose: func(ops []table.Op) bool { return ops[0].Kind == table.Replace }}
	c.t = lt
	sentRow := func(id, batch string) (Item, queue.Envelope) {
		it, err := c.Add(ctxt, Item{ID: id, Due: now.Add(time.Hour), Batch: batch}, AddOptions{Sending: now.Add(15 * time.Second)})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.MarkSent(ctxt, Sent{Item: it, Token: id + "1", Confirmed: true}); err != nil {
			t.Fatal(err)
		}
		if it, err = c.Get(ctxt, id); err != nil {
			t.Fatal(err)
		}
		env, err := c.Envelope(it, id+"1", now)
		if err != nil {
			t.Fatal(err)
		}
		if ok, err := c.Current(ctxt, env); !ok || err != nil {
			t.Fatalf("%s: before the cancel its message is current? %v, %v", id, ok, err)
		}
		return it, env
	}
	_, env := sentRow("lost", "b2")
	if _, err := c.CancelWith(ctxt, "lost", func(ctx context.Context, row Item) error {
		if ok, err := c.Current(ctx, env); ok || err != nil {
			t.Errorf("lost: while the cancel tells others, its message is current? %v, %v; want stale", ok, err)
		}
		return nil
	}); err != nil || !lt.lost {
		t.Fatalf("cancel after the take-back's answer was lost: %v (lost %v)", err, lt.lost)
	}
	// A take-back of a row being sent that failed without reaching the
	// table (a busy answer) is tried again: the client's message is stale
	// once First tells anyone.
	c.t = &failFirstReplace{Table: mt}
	beingSent, err := c.Add(ctxt, Item{ID: "busy", Due: now.Add(time.Hour), Batch: "b2"}, AddOptions{Sending: now.Add(15 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	busyEnv, err := c.Envelope(beingSent, "busy1", now)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.CancelWith(ctxt, "busy", func(ctx context.Context, row Item) error {
		if ok, err := c.Current(ctx, busyEnv); ok || err != nil {
			t.Errorf("busy: while the cancel tells others, its message is current? %v, %v; want stale", ok, err)
		}
		return nil
	}); err != nil {
		t.Fatalf("cancel after a busy take-back: %v", err)
	}
	// A cancel whose First fails having told nobody puts the mark back:
	// the row stays pending, marked as sent with its token and
	// confirmation, and its message is current again.
	rc := &replaceCounter{Table: mt}
	c.t = rc
	_, env = sentRow("stopped", "b2")
	failed := fmt.Errorf("marking its run failed: %w", ErrNoneTold)
	if _, err := c.CancelWith(ctxt, "stopped", func(context.Context, Item) error { return failed }); !errors.Is(err, failed) {
		t.Fatalf("cancel whose First fails: %v; want its error", err)
	}
	if it, err := c.Get(ctxt, "stopped"); err != nil || !it.Sent {
		t.Fatalf("after the stopped cancel the row is %+v, %v; want it pending and marked sent", it, err)
	}
	if row, err := mt.Get(ctxt, "00", env.Row[len("00/"):]); err != nil || oneOffSent(row) != "stopped1" || row.Props.Str(PropConfirmed) != "stopped1" {
		t.Fatalf("after the stopped cancel the row carries %v, %v; want its token and confirmation back", row.Props, err)
	}
	if ok, err := c.Current(ctxt, env); !ok || err != nil {
		t.Fatalf("after the stopped cancel its message is current? %v, %v; want current", ok, err)
	}
	if rc.n != 2 {
		t.Fatalf("the stopped cancel wrote the row %d times; want 2 (the take-back, the put-back)", rc.n)
	}
	// A cancel whose Check refuses, one without First, and one of a task
	// whose end nobody hears of write nothing before their delete.
	rc.n = 0
	sentRow("refused", "b2")
	notOurs := errors.New("not the task listed")
	if _, _, err := c.CancelReport(ctxt, "refused", CancelSteps{Check: func(Item) error { return notOurs },
		First: func(context.Context, Item) error { t.Error("First called after Check refused"); return nil }}); !errors.Is(err, notOurs) {
		t.Fatalf("cancel whose Check refuses: %v; want its error", err)
	}
	if it, err := c.Get(ctxt, "refused"); err != nil || !it.Sent {
		t.Fatalf("after the refused cancel the row is %+v, %v; want it as it was", it, err)
	}
	sentRow("plain", "b2")
	sentRow("alone", "")
	if _, err := c.Cancel(ctxt, "plain"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CancelWith(ctxt, "alone", func(context.Context, Item) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if rc.n != 0 {
		t.Fatalf("cancels that tell nobody, or were refused, rewrote rows %d times", rc.n)
	}
}

// failFirstReplace is a table whose first Replace is refused as busy,
// without reaching the table.
type failFirstReplace struct {
	table.Table
	failed bool
}

func (f *failFirstReplace) Submit(ctx context.Context, ops []table.Op) ([]string, error) {
	if !f.failed && len(ops) > 0 && ops[0].Kind == table.Replace {
		f.failed = true
		return nil, fmt.Errorf("replace: %w", storage.ErrServerBusy)
	}
	return f.Table.Submit(ctx, ops)
}

// replaceCounter is a table that counts the Replace operations submitted.
type replaceCounter struct {
	table.Table
	n int
}

func (r *replaceCounter) Submit(ctx context.Context, ops []table.Op) ([]string, error) {
	for _, op := range ops {
		if op.Kind == table.Replace {
			r.n++
		}
	}
	return r.Table.Submit(ctx, ops)
}

// A cancel that tells others before it removes the row (a task others
// wait for, a batch member) holds the row from the mover while it tells
// them: moved meanwhile, the task would run though its batch and children
// heard it was cancelled, and the cancel, finding the row gone, answer
// that it did nothing (issue 38, seed 16778: a replacement scheduled
// beside its id's running run was moved while the cancel's delete was
// slowed; it ran, and the cancel answered "run already finished"). A
// cancel that stops before telling lets the mover have the row at once;
// one that dies after telling holds it for CancelHold at most.
func TestTheMoverLeavesARowWhileItsCancelTells(t *testing.T) {
	e := newMoverEnv(t, 1, MoverOptions{MoverSettings: MoverSettings{PollEvery: 5 * time.Second}})
	ctxt := ctx(t)
	e.add(t, Item{ID: "told", Due: t0, Batch: "b1"})
	told := false
	if _, err := e.c.CancelWith(ctxt, "told", func(context.Context, Item) error {
		told = true
		if err := e.onePass(t); err != nil {
			t.Fatal(err)
		}
		if ids := e.q.ids(); len(ids) != 0 {
			t.Errorf("while its cancel told others the mover sent %v", ids)
		}
		return nil
	}); err != nil || !told {
		t.Fatalf("cancel: %v (told %v)", err, told)
	}
	if _, err := e.c.Get(ctxt, "told"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("after the cancel: %v; want ErrNotFound", err)
	}

	// First failed having told nobody: the row is the mover's again.
	e.add(t, Item{ID: "stopped", Due: t0, Waiters: true})
	failed := fmt.Errorf("marking its run failed: %w", ErrNoneTold)
	if _, err := e.c.CancelWith(ctxt, "stopped", func(context.Context, Item) error { return failed }); !errors.Is(err, failed) {
		t.Fatalf("cancel whose First fails: %v; want its error", err)
	}
	if it, err := e.c.Get(ctxt, "stopped"); err != nil || !it.CancellingUntil.IsZero() {
		t.Fatalf("after the stopped cancel: %+v, %v; want the row pending, unheld", it, err)
	}
	if err := e.onePass(t); err != nil {
		t.Fatal(err)
	}
	if _, ok := e.q.byID("stopped"); !ok {
		t.Fatalf("the row of a cancel that stopped was not moved: sent %v", e.q.ids())
	}

	// First failed after telling some (a batch told, a child not): the
	// row stays held, and the answer says who may have heard.
	e.add(t, Item{ID: "partly", Due: t0, Waiters: true})
	partly := errors.New("telling a child failed")
	if _, err := e.c.CancelWith(ctxt, "partly", func(context.Context, Item) error { return partly }); !errors.Is(err, partly) || !strings.Contains(err.Error(), "may have been told") {
		t.Fatalf("cancel whose First fails after telling some: %v; want its error, saying who may have heard", err)
	}
	if it, err := e.c.Get(ctxt, "partly"); err != nil || it.CancellingUntil.IsZero() {
		t.Fatalf("after the cancel that told some: %+v, %v; want the row pending, held", it, err)
	}
	// A cancel tried again that tells nobody (its run not marked) leaves
	// the hold it found: the first cancel's hearers stand.
	if _, err := e.c.CancelWith(ctxt, "partly", func(context.Context, Item) error {
		return fmt.Errorf("marking its run failed: %w", ErrNoneTold)
	}); !errors.Is(err, ErrNoneTold) {
		t.Fatalf("second cancel whose First told nobody: %v; want its error", err)
	}
	if it, err := e.c.Get(ctxt, "partly"); err != nil || it.CancellingUntil.IsZero() {
		t.Fatalf("after a second cancel that told nobody: %+v, %v; want the row still held", it, err)
	}
	// Held, it is neither rescheduled nor released to be sent by its
	// releaser: either would run it after its dependents heard it was
	// cancelled.
	if _, err := e.c.RescheduleWith(ctxt, "partly", t0, RescheduleOptions{Sending: t0.Add(15 * time.Second)}); !errors.Is(err, ErrBeingCancelled) || !strings.Contains(err.Error(), "a cancel of the task is under way") {
		t.Fatalf("reschedule of a held row: %v; want ErrBeingCancelled naming the cancel", err)
	}
	e.add(t, Item{ID: "child", Due: t0, After: []string{"parent"}, Waiting: true, Batch: "b2"})
	released := false
	if _, err := e.c.CancelWith(ctxt, "child", func(ctx context.Context, it Item) error {
		if released {
			return nil
		}
		released = true
		got, v, err := e.c.Release(ctx, "child", "parent", true, t0.Add(15*time.Second), t0.Add(time.Minute))
		if err != nil || v != Released || !got.SendingUntil.IsZero() || got.CancellingUntil.IsZero() {
			t.Errorf("release of a held row: %+v, %v, %v; want it released, held, not to be sent by its releaser", got, v, err)
		}
		return nil
	}); err != nil || !released {
		t.Fatalf("cancel of a child released meanwhile: %v", err)
	}
	// A replace takes the held row's place: held too, and not sent now by
	// its client.
	got, err := e.c.Add(ctxt, Item{ID: "partly", Due: t0}, AddOptions{Replace: true, Sending: t0.Add(15 * time.Second)})
	if err != nil || !got.SendingUntil.IsZero() || got.CancellingUntil.IsZero() || !got.Waiters {
		t.Fatalf("replace of a held row: %+v, %v; want it held, not to be sent by its client", got, err)
	}
	// A replace whose held row is removed under it (the cancel's delete
	// landed first) writes the task as given: nothing of the removed row.
	e.add(t, Item{ID: "gone", Due: t0, Waiters: true})
	if _, err := e.c.CancelWith(ctxt, "gone", func(context.Context, Item) error { return errors.New("telling failed") }); err == nil {
		t.Fatal("cancel whose First fails: no error")
	}
	e.c.t = &removedUnder{Table: e.mt, mt: e.mt, id: "gone"}
	got, err = e.c.Add(ctxt, Item{ID: "gone", Due: t0}, AddOptions{Replace: true, Sending: t0.Add(15 * time.Second)})
	e.c.t = e.mt
	if err != nil || got.SendingUntil.IsZero() || !got.CancellingUntil.IsZero() || got.Waiters {
		t.Fatalf("replace after the held row was removed: %+v, %v; want the task as given, sent by its client", got, err)
	}
	if it, err := e.c.Get(ctxt, "gone"); err != nil || !it.CancellingUntil.IsZero() || it.Waiters {
		t.Fatalf("replace after the held row was removed wrote %+v, %v; want the task as given", it, err)
	}

	// The cancel gave up after telling (or died then): the row waits
	// CancelHold, for a cancel tried again, then is moved as any other
	// (its run record, marked cancelled, refuses it).
	e.add(t, Item{ID: "orphan", Due: t0, Waiters: true})
	dead := errors.New("the process died")
	var held Item
	if _, err := e.c.CancelWith(ctxt, "orphan", func(ctx context.Context, it Item) error {
		held = it
		e.c.t = &failDeletes{Table: e.mt, err: dead}
		return nil
	}); !errors.Is(err, dead) || !strings.Contains(err.Error(), "may have been told") {
		t.Fatalf("cancel whose delete fails after telling: %v; want its error, saying who heard", err)
	}
	e.c.t = e.mt
	if want := e.fc.Now().Add(CancelHold); !held.CancellingUntil.Equal(want) {
		t.Fatalf("First saw the row held until %v; want %v", held.CancellingUntil, want)
	}
	// A hold half spent by the time First returns is renewed for the
	// delete (telling many dependents takes long).
	e.add(t, Item{ID: "slow", Due: t0, Batch: "b3"})
	first := true
	if _, err := e.c.CancelWith(ctxt, "slow", func(ctx context.Context, it Item) error {
		if first {
			first = false
			e.fc.Advance(CancelHold * 3 / 4)
		}
		e.c.t = &failDeletes{Table: e.mt, err: dead}
		return nil
	}); !errors.Is(err, dead) {
		t.Fatalf("cancel whose delete fails after a slow telling: %v; want its error", err)
	}
	e.c.t = e.mt
	if it, err := e.c.Get(ctxt, "slow"); err != nil || !it.CancellingUntil.Equal(e.fc.Now().Add(CancelHold)) {
		t.Fatalf("after a slow telling the row is %+v, %v; want it held until %v", it, err, e.fc.Now().Add(CancelHold))
	}
	if it, err := e.c.Get(ctxt, "orphan"); err != nil || !it.CancellingUntil.Equal(held.CancellingUntil) {
		t.Fatalf("after the cancel died: %+v, %v; want the row pending, held", it, err)
	}
	if err := e.onePass(t); err != nil {
		t.Fatal(err)
	}
	if _, ok := e.q.byID("orphan"); ok {
		t.Fatal("the mover moved a row its cancel holds")
	}
	e.fc.Advance(CancelHold)
	if err := e.onePass(t); err != nil {
		t.Fatal(err)
	}
	if _, ok := e.q.byID("orphan"); !ok {
		t.Fatalf("a row whose cancel died was never moved: sent %v", e.q.ids())
	}
	if _, ok := e.q.byID("partly"); !ok {
		t.Fatalf("a row whose cancel told some and stopped was never moved: sent %v", e.q.ids())
	}
}

// removedUnder is a table that, on the first write that is not an insert
// (a replace of the row it read), removes the rows of id from partition 00
// first and refuses the write as the table would then.
type removedUnder struct {
	table.Table
	mt   *table.Memory
	id   string
	done bool
}

func (r *removedUnder) Submit(ctx context.Context, ops []table.Op) ([]string, error) {
	if !r.done && len(ops) > 0 && ops[0].Kind != table.Insert {
		r.done = true
		for _, e := range r.mt.Rows("00") {
			if !strings.HasSuffix(e.RowKey, r.id) {
				continue
			}
			if _, err := r.Table.Submit(ctx, []table.Op{{Kind: table.Delete, PartitionKey: "00", RowKey: e.RowKey}}); err != nil {
				return nil, err
			}
		}
		return nil, fmt.Errorf("replace: %w", storage.ErrPreconditionFailed)
	}
	return r.Table.Submit(ctx, ops)
}

// failDeletes is a table that refuses every Delete with err.
type failDeletes struct {
	table.Table
	err error
}

func (f *failDeletes) Submit(ctx context.Context, ops []table.Op) ([]string, error) {
	if len(ops) > 0 && ops[0].Kind == table.Delete {
		return nil, f.err
	}
	return f.Table.Submit(ctx, ops)
}
