package schedule

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasecron/leasecron/internal/clock"
	"github.com/leasecron/leasecron/internal/storage"
	"github.com/leasecron/leasecron/internal/table"
	"github.com/leasecron/leasecron/queue"
)

// sentAt returns the messages sent for id (a run id or a series id), in
// order, with their delays.
func (q *fakeQueue) sentFor(prefix string) []sent {
	q.mu.Lock()
	defer q.mu.Unlock()
	var out []sent
	for _, s := range q.sent {
		if s.env.ID == prefix || strings.HasPrefix(s.env.ID, prefix+"@") {
			out = append(out, s)
		}
	}
	return out
}

func (q *fakeQueue) reset() {
	q.mu.Lock()
	q.sent = nil
	q.mu.Unlock()
}

// Every occurrence of a series due within the window becomes its own
// message with its own run id and delay; the row moves to the first
// occurrence after the window in the same transaction.
func TestCadenceEveryOccurrenceInTheWindow(t *testing.T) {
	e := newMoverEnv(t, 1, MoverOptions{MoverSettings: MoverSettings{PollEvery: 5 * time.Second}})
	e.add(t, Item{ID: "beat", Due: t0, Recurrence: "@every 2s"})
	for pass := range 4 {
		if err := e.onePass(t); err != nil {
			t.Fatal(err)
		}
		e.fc.Advance(5 * time.Second)
		_ = pass
	}
	got := e.q.sentFor("beat")
	// Passes at t0, +5, +10, +15 with a 5 s window reach t0+20 s: 11
	// occurrences, each once, 2 s apart, each delayed to its own time.
	if len(got) != 11 {
		t.Fatalf("sent %d occurrences, want 11: %v", len(got), e.q.ids())
	}
	for i, s := range got {
		due := t0.Add(time.Duration(i) * 2 * time.Second)
		// Numbered 1, 2, ... across passes (the row keeps the count).
		if s.env.ID != "beat@"+due.Format(time.RFC3339Nano) || !s.env.Due.Equal(due) || s.env.Series != "beat" || s.env.Seq != int64(i+1) {
			t.Fatalf("occurrence %d: %+v", i, s.env)
		}
		// The first pass (every 5 s) whose 5 s window reaches it sends it.
		pass := time.Duration(max(0, (i*2-5+4)/5)) * 5 * time.Second
		if s.delay != due.Sub(t0.Add(pass)) {
			t.Fatalf("occurrence %d (due +%s) sent with delay %s", i, due.Sub(t0), s.delay)
		}
	}
	next, err := e.c.Get(ctx(t), "beat")
	if err != nil || !next.Due.Equal(t0.Add(22*time.Second)) {
		t.Fatalf("next occurrence %+v, %v", next, err)
	}
	if n := len(itemKeys(e.mt)); n != 1 {
		t.Fatalf("series forked: %v", itemKeys(e.mt))
	}
}

// Occurrences missed while nobody led run once: the first overdue one,
// then the series resumes at its phase after now.
func TestCadenceMissedOccurrencesRunOnce(t *testing.T) {
	e := newMoverEnv(t, 1, MoverOptions{MoverSettings: MoverSettings{PollEvery: 5 * time.Second}})
	e.add(t, Item{ID: "beat", Due: t0.Add(-time.Minute), Recurrence: "@every 2s"})
	if err := e.onePass(t); err != nil {
		t.Fatal(err)
	}
	var dues []string
	for _, s := range e.q.sentFor("beat") {
		dues = append(dues, s.env.Due.Sub(t0).String())
	}
	if strings.Join(dues, " ") != "-1m0s 2s 4s" {
		t.Fatalf("sent occurrences at %v, want the overdue one once and then +2s, +4s", dues)
	}
}

// A series added between two passes gets every occurrence that fell due
// since the previous pass (sent at once), not only the first.
func TestCadenceSeriesAddedBetweenPasses(t *testing.T) {
	e := newMoverEnv(t, 1, MoverOptions{MoverSettings: MoverSettings{PollEvery: 5 * time.Second}})
	if err := e.onePass(t); err != nil {
		t.Fatal(err)
	}
	e.fc.Advance(time.Second)
	e.add(t, Item{ID: "beat", Due: e.fc.Now().Add(500 * time.Millisecond), Recurrence: "@every 2s"})
	e.fc.Advance(4 * time.Second) // the next pass, at t0+5s
	if err := e.onePass(t); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range e.q.sentFor("beat") {
		got = append(got, fmt.Sprintf("%s/%s", s.env.Due.Sub(t0), s.delay))
	}
	if strings.Join(got, " ") != "1.5s/0s 3.5s/0s 5.5s/500ms 7.5s/2.5s 9.5s/4.5s" {
		t.Fatalf("sent %v: want the two occurrences due since the last pass at once, then the window's", got)
	}
}

// MaxOccurrences bounds what one pass sends for a series; the rest follow
// in later passes, each at its own time.
func TestCadenceBoundPerPass(t *testing.T) {
	e := newMoverEnv(t, 1, MoverOptions{MoverSettings: MoverSettings{PollEvery: 5 * time.Second, Early: time.Minute, MaxOccurrences: 10}})
	e.add(t, Item{ID: "fast", Due: t0, Recurrence: "@every 1s"})
	var perPass []int
	for range 20 {
		e.q.reset()
		if err := e.onePass(t); err != nil {
			t.Fatal(err)
		}
		perPass = append(perPass, len(e.q.sentFor("fast")))
		e.fc.Advance(5 * time.Second)
	}
	for i, n := range perPass {
		if n > 10 {
			t.Fatalf("pass %d sent %d messages for one series, bound 10: %v", i, n, perPass)
		}
	}
	if perPass[0] != 10 || perPass[len(perPass)-1] != 5 {
		t.Fatalf("messages per pass %v: want 10 while catching up, then 5 (one pass of a 1 s series)", perPass)
	}
}

// A one-off task due after the move window but within Early is sent early,
// marked on its row, not sent again, and confirmed when it is moved.
func TestEarlySendMarksThenConfirmsAndMoves(t *testing.T) {
	var mu sync.Mutex
	var confirmed []queue.Envelope
	var moved []string
	e := newMoverEnv(t, 1, MoverOptions{
		MoverSettings: MoverSettings{PollEvery: 5 * time.Second, Early: time.Minute},
		Confirm: func(_ context.Context, envs []queue.Envelope) []bool {
			mu.Lock()
			confirmed = append(confirmed, envs...)
			mu.Unlock()
			return allTrue(len(envs))
		},
		OnMoved: func(_ context.Context, envs []queue.Envelope) {
			for _, env := range envs {
				moved = append(moved, env.ID)
			}
		}})
	e.add(t, Item{ID: "job", Due: t0.Add(30 * time.Second), Payload: "p"})
	if err := e.onePass(t); err != nil {
		t.Fatal(err)
	}
	got := e.q.sentFor("job")
	if len(got) != 1 || got[0].delay != 30*time.Second || got[0].env.Token == "" || got[0].env.Row != "00/"+mustKey(t0.Add(30*time.Second), "job") {
		t.Fatalf("early send %+v", got)
	}
	it, err := e.c.Get(ctx(t), "job")
	if err != nil || !it.Sent {
		t.Fatalf("row after the early send: %+v, %v", it, err)
	}
	if ok, err := e.c.Current(ctx(t), got[0].env); !ok || err != nil {
		t.Fatalf("Current = %v, %v; want the message current while its row is unchanged", ok, err)
	}
	if e.m.waitingAt(t0) != 1 {
		t.Fatalf("waiting %d, want 1", e.m.waitingAt(t0))
	}
	for range 4 { // +5 .. +20: nothing new
		e.fc.Advance(5 * time.Second)
		if err := e.onePass(t); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(e.q.sentFor("job")); n != 1 || len(moved) != 0 {
		t.Fatalf("sent %d times, moved %v before its move window", n, moved)
	}
	e.fc.Advance(5 * time.Second) // +25: due within the 5 s move window
	if err := e.onePass(t); err != nil {
		t.Fatal(err)
	}
	if n := len(e.q.sentFor("job")); n != 1 {
		t.Fatalf("sent again when moved: %d", n)
	}
	if len(confirmed) != 1 || confirmed[0].Token != got[0].env.Token || confirmed[0].ID != "job" {
		t.Fatalf("confirmed %+v", confirmed)
	}
	if strings.Join(moved, ",") != "job" || len(itemKeys(e.mt)) != 0 {
		t.Fatalf("moved %v, rows left %v", moved, itemKeys(e.mt))
	}
	if st := e.m.Stats(); st.SentEarly != 1 || st.Moved != 1 || st.Enqueued != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// After an early send, cancel, reschedule, replace and a direct delete all
// make the sent message stale (Current is false); the rescheduled and the
// replaced task are sent again for their new row.
func TestEarlySentThenChanged(t *testing.T) {
	e := newMoverEnv(t, 1, MoverOptions{MoverSettings: MoverSettings{PollEvery: 5 * time.Second, Early: time.Minute}})
	e.c.opts.ChangesAfterSend = true
	for _, id := range []string{"cancel", "resched", "replace", "deleted"} {
		e.add(t, Item{ID: id, Due: t0.Add(30 * time.Second), Payload: "old"})
	}
	if err := e.onePass(t); err != nil {
		t.Fatal(err)
	}
	first := map[string]queue.Envelope{}
	for _, id := range []string{"cancel", "resched", "replace", "deleted"} {
		first[id] = e.q.sentFor(id)[0].env
	}
	if _, err := e.c.Cancel(ctx(t), "cancel"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.Reschedule(ctx(t), "resched", t0.Add(40*time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.Add(ctx(t), Item{ID: "replace", Due: t0.Add(30 * time.Second), Payload: "new"}, AddOptions{Replace: true}); err != nil {
		t.Fatal(err)
	}
	rk := mustKey(t0.Add(30*time.Second), "deleted") // as another language's client would
	if _, err := e.mt.Submit(ctx(t), []table.Op{{Kind: table.Delete, PartitionKey: "00", RowKey: rk}}); err != nil {
		t.Fatal(err)
	}
	for id, env := range first {
		if ok, err := e.c.Current(ctx(t), env); ok || err != nil {
			t.Errorf("%s: Current = %v, %v after the change; want false", id, ok, err)
		}
	}
	e.fc.Advance(time.Second)
	if err := e.onePass(t); err != nil {
		t.Fatal(err)
	}
	re := e.q.sentFor("resched")
	if len(re) != 2 || !re[1].env.Due.Equal(t0.Add(40*time.Second)) || re[1].env.Token == re[0].env.Token {
		t.Fatalf("rescheduled task sent %+v", re)
	}
	rp := e.q.sentFor("replace")
	if len(rp) != 2 || rp[1].env.Payload != "new" || rp[1].env.Token == rp[0].env.Token {
		t.Fatalf("replaced task sent %+v", rp)
	}
	if ok, _ := e.c.Current(ctx(t), rp[1].env); !ok {
		t.Fatal("the replacement's message is not current")
	}
	if n := len(e.q.sentFor("cancel")) + len(e.q.sentFor("deleted")); n != 2 {
		t.Fatalf("cancelled or deleted task sent again: %v", e.q.ids())
	}
}

// Without workers that check early-sent messages, a change to a task whose
// message is already in the queue is refused, not pretended.
func TestEarlySentChangeRefusedWithoutChecks(t *testing.T) {
	e := newMoverEnv(t, 1, MoverOptions{MoverSettings: MoverSettings{PollEvery: 5 * time.Second, Early: time.Minute}})
	e.add(t, Item{ID: "job", Due: t0.Add(30 * time.Second)})
	if err := e.onePass(t); err != nil {
		t.Fatal(err)
	}
	for name, op := range map[string]func() error{
		"cancel":     func() error { _, err := e.c.Cancel(ctx(t), "job"); return err },
		"reschedule": func() error { _, err := e.c.Reschedule(ctx(t), "job", t0.Add(time.Hour)); return err },
		"replace": func() error {
			_, err := e.c.Add(ctx(t), Item{ID: "job", Due: t0.Add(time.Hour)}, AddOptions{Replace: true})
			return err
		},
	} {
		t.Run(fmt.Sprint(name), func(t *testing.T) {
			err := op()
			if !errors.Is(err, ErrAlreadySent) || !strings.Contains(err.Error(), "task job") || !strings.Contains(err.Error(), "run records") {
				t.Errorf("%s after the early send = %v, want ErrAlreadySent naming the task and the cause", name, err)
			}
		})
	}
	if it, err := e.c.Get(ctx(t), "job"); err != nil || !it.Due.Equal(t0.Add(30*time.Second)) {
		t.Fatalf("the refused changes changed the task: %+v %v", it, err)
	}
}

// A series sends occurrences ahead within Early, records them on its row,
// and the row moves along as they come within the move window; cancelling
// the series makes its early-sent occurrences stale.
func TestEarlySendSeries(t *testing.T) {
	var confirmed []string
	var mu sync.Mutex
	e := newMoverEnv(t, 1, MoverOptions{
		MoverSettings: MoverSettings{PollEvery: 5 * time.Second, Early: 20 * time.Second},
		Confirm: func(_ context.Context, envs []queue.Envelope) []bool {
			mu.Lock()
			for _, env := range envs {
				confirmed = append(confirmed, env.Due.Sub(t0).String())
			}
			mu.Unlock()
			return allTrue(len(envs))
		}})
	e.c.opts.ChangesAfterSend = true
	e.add(t, Item{ID: "tick", Due: t0, Recurrence: "@every 4s"})
	if err := e.onePass(t); err != nil {
		t.Fatal(err)
	}
	var dues []string
	for _, s := range e.q.sentFor("tick") {
		dues = append(dues, fmt.Sprintf("%s/%v/%d", s.env.Due.Sub(t0), s.env.Token != "", s.env.Seq))
	}
	// 0 and 4 s are moved now (no token); 8..20 s are sent early; all are
	// numbered in order.
	if strings.Join(dues, " ") != "0s/false/1 4s/false/2 8s/true/3 12s/true/4 16s/true/5 20s/true/6" {
		t.Fatalf("first pass sent %v", dues)
	}
	it, _ := e.c.Get(ctx(t), "tick")
	if !it.Due.Equal(t0.Add(8*time.Second)) || !it.Sent || !it.SentUntil.Equal(t0.Add(20*time.Second)) {
		t.Fatalf("series row after the first pass: %+v", it)
	}
	e.fc.Advance(5 * time.Second)
	e.q.reset()
	if err := e.onePass(t); err != nil {
		t.Fatal(err)
	}
	dues = nil
	for _, s := range e.q.sentFor("tick") {
		dues = append(dues, fmt.Sprintf("%s/%d", s.env.Due.Sub(t0), s.env.Seq))
	}
	if strings.Join(dues, " ") != "24s/7" || strings.Join(confirmed, " ") != "8s" {
		t.Fatalf("second pass sent %v and confirmed %v; want 24s sent and 8s confirmed", dues, confirmed)
	}
	it, _ = e.c.Get(ctx(t), "tick")
	if !it.Due.Equal(t0.Add(12*time.Second)) || !it.SentUntil.Equal(t0.Add(24*time.Second)) {
		t.Fatalf("series row after the second pass: %+v", it)
	}
	stale := e.q.sent[len(e.q.sent)-1].env
	if ok, _ := e.c.Current(ctx(t), stale); !ok {
		t.Fatal("an early-sent occurrence of a live series is not current")
	}
	// A requeued occurrence's message carries a token of its requeue and
	// no row (it was not sent early): checked against the series' row,
	// not refused as malformed (issue 38, a review of seed 5527's fix).
	requeued := stale
	requeued.Token, requeued.Row, requeued.RowETag = "rq0123456789", "", ""
	if ok, _, err := e.c.CurrentOrGone(ctx(t), requeued); ok || err != nil {
		t.Fatalf("a requeued occurrence with another token: current %v, %v; want not current, no error", ok, err)
	}
	if _, err := e.c.Cancel(ctx(t), "tick"); err != nil {
		t.Fatal(err)
	}
	if ok, _ := e.c.Current(ctx(t), stale); ok {
		t.Fatal("an early-sent occurrence of a cancelled series is still current")
	}
}

// A confirmation that fails keeps the row (and sends nothing again); one
// whose row changed before the move is taken back.
func TestEarlySendConfirmFailureAndChange(t *testing.T) {
	var fail bool
	var unconfirmed []string
	e := newMoverEnv(t, 1, MoverOptions{
		MoverSettings: MoverSettings{PollEvery: 5 * time.Second, Early: time.Minute},
		Confirm: func(_ context.Context, envs []queue.Envelope) []bool {
			if fail {
				return make([]bool, len(envs)) // the runs table is down
			}
			return allTrue(len(envs))
		},
		Unconfirm: func(_ context.Context, env queue.Envelope) error {
			unconfirmed = append(unconfirmed, env.ID)
			return nil
		}})
	e.c.opts.ChangesAfterSend = true
	e.add(t, Item{ID: "a", Due: t0.Add(10 * time.Second)})
	e.add(t, Item{ID: "b", Due: t0.Add(10 * time.Second)})
	if err := e.onePass(t); err != nil {
		t.Fatal(err)
	}
	e.fc.Advance(6 * time.Second)
	fail = true
	if err := e.onePass(t); err != nil {
		t.Fatal(err)
	}
	if len(itemKeys(e.mt)) != 2 || len(e.q.ids()) != 2 {
		t.Fatalf("rows %v sent %v after failed confirmations", itemKeys(e.mt), e.q.ids())
	}
	fail = false
	// b is cancelled between its confirmation and its move.
	e.mt.BeforeSubmit(func(ops []table.Op) error {
		for _, op := range ops {
			if op.Kind == table.Delete && strings.HasSuffix(op.RowKey, "_b") {
				e.mt.BeforeSubmit(nil)
				if _, err := e.c.Cancel(context.Background(), "b"); err != nil {
					return err
				}
				break
			}
		}
		return nil
	})
	if err := e.onePass(t); err != nil {
		t.Fatal(err)
	}
	if len(itemKeys(e.mt)) != 0 || strings.Join(unconfirmed, ",") != "b" {
		t.Fatalf("rows %v, unconfirmed %v; want both gone and b taken back", itemKeys(e.mt), unconfirmed)
	}
}

// A row removed (a disable, a cancel) while a pass moves it, whose
// settling then fails with a fault that passes and does not land, has the
// confirmations of its early-sent runs taken back all the same: written
// before the commit, they would otherwise stand, and the runs they
// confirm run (issue 38, sweep seed 73944: a disabled series' two
// occurrences ran). A row still there keeps them, for the next pass.
func TestConfirmationsOfARowRemovedWhileItsSettlingFailedAreTakenBack(t *testing.T) {
	for _, removed := range []bool{true, false} {
		t.Run(fmt.Sprintf("removed %v", removed), func(t *testing.T) {
			var unconfirmed []string
			e := newMoverEnv(t, 1, MoverOptions{
				MoverSettings: MoverSettings{PollEvery: 5 * time.Second, Early: time.Minute},
				Confirm:       func(_ context.Context, envs []queue.Envelope) []bool { return allTrue(len(envs)) },
				Unconfirm: func(_ context.Context, env queue.Envelope) error {
					unconfirmed = append(unconfirmed, env.ID)
					return nil
				}})
			e.c.opts.ChangesAfterSend = true
			e.add(t, Item{ID: "b", Due: t0.Add(10 * time.Second)})
			if err := e.onePass(t); err != nil {
				t.Fatal(err)
			}
			e.fc.Advance(6 * time.Second)
			submits, cancelling := 0, false
			e.mt.BeforeSubmit(func(ops []table.Op) error {
				if cancelling {
					return nil
				}
				for _, op := range ops {
					if op.Kind != table.Delete || !strings.HasSuffix(op.RowKey, "_b") {
						continue
					}
					submits++
					switch {
					case submits == 1 && removed:
						// Removed between the confirmation and the commit:
						// the commit meets the row gone.
						cancelling = true
						_, err := e.c.Cancel(context.Background(), "b")
						cancelling = false
						return err
					case submits == 1:
						// Refused unapplied, not to be tried again.
						e.mt.BeforeSubmit(nil)
						return fmt.Errorf("refused: %w", storage.ErrAuth)
					default:
						// The row's own settling fails, unapplied.
						e.mt.BeforeSubmit(nil)
						return errors.New("connection reset by peer")
					}
				}
				return nil
			})
			_ = e.onePass(t) // the pass fails: the row's settling did
			if removed && strings.Join(unconfirmed, ",") != "b" {
				t.Fatalf("unconfirmed %v; want b's confirmation taken back", unconfirmed)
			}
			if !removed && len(unconfirmed) != 0 {
				t.Fatalf("unconfirmed %v; want the confirmation of a row still there kept", unconfirmed)
			}
		})
	}
}

// A row found changed is taken for another's change only while the fence,
// read after it, still holds the term's generation under the ETag the
// term last saw: a fence that moved means the term's own transaction may
// have landed late (it deletes the row and moves the fence at once), or
// another term moved the row; either way the confirmations stand.
func TestARowChangedIsAnothersOnlyUnderAnUnmovedFence(t *testing.T) {
	for _, tc := range []struct {
		name        string
		fenceWriter int64 // 0: the fence left as it is
		want        bool
	}{
		{"fence unmoved", 0, true},
		{"this term's transaction landed late", 1, false},
		{"another term took the shard", 2, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newMoverEnv(t, 1, MoverOptions{})
			it := e.add(t, Item{ID: "b", Due: t0.Add(time.Hour)})
			if err := e.m.takeFence(ctx(t), "00", 1); err != nil {
				t.Fatal(err)
			}
			row, err := e.mt.Get(ctx(t), "00", mustKey(it.Due, "b"))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := e.c.Cancel(ctx(t), "b"); err != nil {
				t.Fatal(err)
			}
			if tc.fenceWriter > 0 {
				if _, err := e.mt.Submit(ctx(t), []table.Op{{Kind: table.Merge, PartitionKey: "00", RowKey: FenceRowKey,
					Props: map[string]any{PropGeneration: tc.fenceWriter}}}); err != nil {
					t.Fatal(err)
				}
			}
			got, err := e.m.rowChangedNotByUs(ctx(t), "00", 1, &plan{e: row})
			if got != tc.want || (err == nil) != tc.want {
				t.Fatalf("changed by another: %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}

// Backpressure counts only what is due: messages waiting invisibly for
// their due time are not backlog, and do not hold back a task that is
// due. They are tomorrow's backlog, though: a pass sends rows early only
// while those waiting and the backlog together leave room under
// MaxDepth.
func TestBackpressureIgnoresWaitingMessages(t *testing.T) {
	var q *fakeQueue
	depth := func(context.Context) (int, error) { return len(q.ids()), nil }
	e := newMoverEnv(t, 1, MoverOptions{MoverSettings: MoverSettings{PollEvery: 5 * time.Second, Early: time.Minute, MaxDepth: 10}, Depth: depth})
	q = e.q
	for i := range 20 {
		e.add(t, Item{ID: fmt.Sprintf("later%02d", i), Due: t0.Add(30 * time.Second)})
	}
	for range 3 {
		if err := e.onePass(t); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(e.q.ids()); n != 10 || e.m.Stats().HoldingBack {
		t.Fatalf("sent %d of 20 waiting messages (want 10, MaxDepth); holding back %v", n, e.m.Stats().HoldingBack)
	}
	e.add(t, Item{ID: "now", Due: t0})
	if err := e.onePass(t); err != nil {
		t.Fatal(err)
	}
	if _, ok := e.q.byID("now"); !ok {
		t.Fatal("a due task was held back by messages that are only waiting")
	}
}

// Messages sent early come due as backlog: a burst due together ahead of
// the early window is sent early only as far as MaxDepth allows, so the
// queue holds no more than "about twice queue.max_depth" (README) when
// the burst comes due (issue 38: every pass sent MaxDepth more of them,
// the ones it sent before not counting, and 15 passes of the default
// 75 s window left the queue 15 times MaxDepth deep at once).
//
// With the depth unknown (its probe failing) a pass sends one batch, but
// early only as far as MaxDepth allows: passes that cannot read the
// depth do not pile up early messages either.
func TestEarlySendsStayWithinMaxDepth(t *testing.T) {
	for _, unknown := range []bool{false, true} {
		t.Run(fmt.Sprintf("depth unknown %v", unknown), func(t *testing.T) {
			var q *fakeQueue
			depth := fakeDepth(&q)
			if unknown {
				depth = func(context.Context) (int, error) { return 0, errors.New("503 ServerBusy") }
			}
			e := newMoverEnv(t, 1, MoverOptions{MoverSettings: burstSettings, Depth: depth})
			q = e.q
			earlyBurstWithinMaxDepth(t, e.c, e.fc, q, func() error { return e.onePass(t) })
		})
	}
}

// burstSettings are the mover's settings of earlyBurstWithinMaxDepth.
var burstSettings = MoverSettings{PollEvery: 5 * time.Second, Early: 75 * time.Second, MaxDepth: 10}

// fakeDepth is a Depth that counts the messages *q holds: those sent
// and not taken.
func fakeDepth(q **fakeQueue) func(context.Context) (int, error) {
	return func(context.Context) (int, error) { return (*q).held(), nil }
}

// held is how many of the messages sent are still on the queue.
func (q *fakeQueue) held() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.sent) - q.taken
}

// take has a consumer take up to n messages off the queue.
func (q *fakeQueue) take(n int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.taken = min(len(q.sent), q.taken+n)
}

// earlyBurstWithinMaxDepth schedules 100 tasks due together 70 s ahead
// through c, passes every 5 s (pass) until they are moved, and fails if q
// ever holds more than twice burstSettings.MaxDepth of them before then.
func earlyBurstWithinMaxDepth(t *testing.T, c *Client, fc *clock.Fake, q *fakeQueue, pass func() error) {
	t.Helper()
	due := fc.Now().Add(70 * time.Second)
	items := make([]Item, 100)
	for i := range items {
		items[i] = Item{ID: fmt.Sprintf("burst%03d", i), Due: due}
	}
	if _, err := c.AddMany(ctx(t), items, AddManyOptions{}); err != nil {
		t.Fatal(err)
	}
	limit := 2 * burstSettings.MaxDepth
	// Up to maxRetire before their due time rows are moved, not sent
	// early: the room for due rows bounds them (one batch while the
	// depth is unknown).
	for due.Sub(fc.Now()) > maxRetire {
		if err := pass(); err != nil {
			t.Fatal(err)
		}
		if n := q.held(); n > limit {
			t.Fatalf("%v before the burst is due, the queue holds %d of its messages (MaxDepth %d)", due.Sub(fc.Now()), n, burstSettings.MaxDepth)
		}
		fc.Advance(burstSettings.PollEvery)
	}
	if q.held() == 0 {
		t.Fatal("nothing of the burst was sent")
	}
	// Consumers take 10 messages every 5 s: the rest of the burst is
	// moved as the queue drains.
	for n := 0; len(q.ids()) < len(items); n++ {
		if n > 100 {
			t.Fatalf("%d of %d sent after 100 passes past the due time", len(q.ids()), len(items))
		}
		fc.Advance(burstSettings.PollEvery)
		q.take(10)
		if err := pass(); err != nil {
			t.Fatal(err)
		}
	}
}

// With the early room spent, rows moved now still go: a task due before
// the next pass is sent on time, and a series whose due occurrence went
// early is moved on (its row retired), its next occurrences sent early
// with it (a review of the early room: both waited, the series' row for
// the whole early window, overdue).
func TestASpentEarlyRoomHoldsBackOnlyEarlySends(t *testing.T) {
	t.Run("a task due before the next pass", func(t *testing.T) {
		var q *fakeQueue
		e := newMoverEnv(t, 1, MoverOptions{MoverSettings: burstSettings, Depth: fakeDepth(&q)})
		q = e.q
		for i := range 10 {
			e.add(t, Item{ID: fmt.Sprintf("later%d", i), Due: t0.Add(50 * time.Second)})
		}
		if err := e.onePass(t); err != nil {
			t.Fatal(err)
		}
		if n := q.held(); n != 10 {
			t.Fatalf("the first pass sent %d early; want 10 (MaxDepth)", n)
		}
		e.add(t, Item{ID: "soon", Due: e.fc.Now().Add(2 * time.Second)})
		if err := e.onePass(t); err != nil {
			t.Fatal(err)
		}
		if _, ok := q.byID("soon"); !ok {
			t.Fatal("a task due before the next pass waited for the early room")
		}
	})
	t.Run("a series whose due occurrence went early", func(t *testing.T) {
		var q *fakeQueue
		e := newMoverEnv(t, 1, MoverOptions{MoverSettings: burstSettings, Depth: fakeDepth(&q)})
		q = e.q
		// Its first pass sends its occurrences of the early window,
		// more than MaxDepth: those waiting fill the room from then on.
		e.add(t, Item{ID: "every", Due: t0.Add(20 * time.Second), Recurrence: "@every 1s"})
		for range 8 {
			if err := e.onePass(t); err != nil {
				t.Fatal(err)
			}
			for _, k := range itemKeys(e.mt) {
				due, id, err := ParseRowKey(k)
				if err == nil && id == "every" && !due.After(e.fc.Now()) {
					t.Fatalf("at %v the series' row is still due at %v", e.fc.Now().Sub(t0), due.Sub(t0))
				}
			}
			e.fc.Advance(burstSettings.PollEvery)
			q.take(q.held())
		}
	})
}

func allTrue(n int) []bool {
	out := make([]bool, n)
	for i := range out {
		out[i] = true
	}
	return out
}

// A move whose transaction commits but whose response is lost (a timeout)
// is a move: its confirmations stand. Taking them back would make the
// early-sent message look stale to the worker that receives it, and the task
// would never run.
func TestEarlySendLostResponseKeepsConfirmation(t *testing.T) {
	e := newMoverEnv(t, 1, MoverOptions{})
	e.c.opts.ChangesAfterSend = true
	var unconfirmed, moved []string
	lose := false
	wrapped := &lossyTable{Memory: e.mt, lose: &lose}
	m, err := newMover(wrapped, MoverOptions{
		MoverSettings: MoverSettings{PollEvery: 5 * time.Second, Early: time.Minute}, Generation: func() int64 { return 1 }, Enqueuer: e.q, SetAside: e.q, Clock: e.fc, Logger: quiet,
		Confirm: func(_ context.Context, envs []queue.Envelope) []bool { return allTrue(len(envs)) },
		Unconfirm: func(_ context.Context, env queue.Envelope) error {
			unconfirmed = append(unconfirmed, env.ID)
			return nil
		},
		OnMoved: func(_ context.Context, envs []queue.Envelope) {
			for _, env := range envs {
				moved = append(moved, env.ID)
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.takeFence(ctx(t), "00", 1); err != nil {
		t.Fatal(err)
	}
	e.add(t, Item{ID: "a", Due: t0.Add(20 * time.Second)})
	e.add(t, Item{ID: "b", Due: t0.Add(20 * time.Second)})
	if _, err := m.pass(ctx(t), 1); err != nil {
		t.Fatal(err)
	}
	e.fc.Advance(16 * time.Second)
	lose = true // the move commits, its response is lost
	if _, err := m.pass(ctx(t), 1); err != nil {
		t.Fatal(err)
	}
	if len(unconfirmed) != 0 || strings.Join(moved, ",") != "a,b" || len(itemKeys(e.mt)) != 0 {
		t.Fatalf("unconfirmed %v, moved %v, rows %v: a committed move must count as one", unconfirmed, moved, itemKeys(e.mt))
	}
	// The next pass is not fenced: the fence's new ETag was adopted.
	e.add(t, Item{ID: "c", Due: e.fc.Now()})
	if _, err := m.pass(ctx(t), 1); err != nil {
		t.Fatalf("pass after a lost response: %v", err)
	}
}

// A message sent early can reach a worker before the mark that follows the
// send has landed on its row (a slow table): the row, still exactly as the
// mover read it, stands for the message. A row replaced in that moment does
// not.
func TestEarlySentCurrentBeforeTheMark(t *testing.T) {
	e := newMoverEnv(t, 1, MoverOptions{MoverSettings: MoverSettings{PollEvery: 5 * time.Second, Early: time.Minute}})
	e.c.opts.ChangesAfterSend = true
	e.add(t, Item{ID: "slow", Due: t0.Add(30 * time.Second), Payload: "v1"})
	e.add(t, Item{ID: "swapped", Due: t0.Add(30 * time.Second), Payload: "v1"})
	if err := e.m.takeFence(ctx(t), "00", 1); err != nil {
		t.Fatal(err)
	}
	results := map[string]bool{}
	e.mt.BeforeSubmit(func(ops []table.Op) error {
		e.mt.BeforeSubmit(nil)
		if _, err := e.c.Add(context.Background(), Item{ID: "swapped", Due: t0.Add(30 * time.Second), Payload: "v2"}, AddOptions{Replace: true}); err != nil {
			return err
		}
		for _, s := range e.q.sent {
			ok, err := e.c.Current(context.Background(), s.env)
			if err != nil {
				return err
			}
			results[s.env.ID] = ok
		}
		return nil
	})
	if err := e.onePass(t); err != nil {
		t.Fatal(err)
	}
	if !results["slow"] || results["swapped"] {
		t.Fatalf("Current before the mark: %v; want slow current (row unchanged) and swapped stale (replaced)", results)
	}
}

// lostEnqueue is a fakeQueue whose first send of id lands and answers
// err, as a send whose answer was lost does; when lands is not set,
// every send of id answers err and none lands (a refusal).
type lostEnqueue struct {
	*fakeQueue
	id    string
	err   error
	lands bool
	lost  bool
}

func (l *lostEnqueue) Enqueue(ctx context.Context, env queue.Envelope, delay time.Duration) error {
	if env.ID != l.id || l.lost && l.lands {
		return l.fakeQueue.Enqueue(ctx, env, delay)
	}
	l.lost = true
	if l.lands {
		if err := l.fakeQueue.Enqueue(ctx, env, delay); err != nil {
			return err
		}
	}
	return l.err
}

// A message sent early whose send answered an error may be in the queue
// all the same (its answer lost): it counts among those waiting, so that
// the early room never lets more than MaxDepth wait (issue 38, sim seed
// 145045, row 238: the mover counted 16 while 17 waited).
func TestAnEarlySendWhoseAnswerWasLostCountsAsWaiting(t *testing.T) {
	for _, tc := range []struct {
		name  string
		err   error
		lands bool
	}{
		{"its answer lost", errors.New("connection reset by peer"), true},
		// A refusal of the message as such put nothing on the queue.
		{"refused as too large", queue.ErrTooLarge, false},
	} {
		t.Run(tc.name, func(t *testing.T) { earlySendAnsweringAnError(t, tc.err, tc.lands) })
	}
}

// earlySendAnsweringAnError runs three passes over a burst due ahead,
// the first send of one of whose messages answers err (landing first
// when lands), and checks that the mover counts as waiting exactly the
// messages on the queue.
func earlySendAnsweringAnError(t *testing.T, err error, lands bool) {
	l := &lostEnqueue{fakeQueue: &fakeQueue{}, id: "burst004", err: err, lands: lands}
	e := newMoverEnv(t, 1, MoverOptions{MoverSettings: burstSettings, Depth: fakeDepth(&l.fakeQueue), Enqueuer: l, SetAside: l})
	due := e.fc.Now().Add(70 * time.Second)
	items := make([]Item, 30)
	for i := range items {
		items[i] = Item{ID: fmt.Sprintf("burst%03d", i), Due: due}
	}
	if _, err := e.c.AddMany(ctx(t), items, AddManyOptions{}); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := e.onePass(t); err != nil {
			t.Fatal(err)
		}
		e.fc.Advance(burstSettings.PollEvery)
	}
	if !l.lost {
		t.Fatal("burst004 was not sent: the test's match is stale")
	}
	ids := map[string]bool{}
	for _, s := range l.fakeQueue.sent {
		ids[s.env.ID] = true
	}
	if len(ids) > burstSettings.MaxDepth {
		t.Fatalf("%d distinct messages wait for their due time; want at most MaxDepth %d", len(ids), burstSettings.MaxDepth)
	}
	if got := e.m.waitingAt(e.fc.Now()); got != len(ids) {
		t.Fatalf("the mover counts %d messages waiting; %d do", got, len(ids))
	}
}
