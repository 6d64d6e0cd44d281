package schedule

import (
	"errors"
	"testing"
	"time"

	"github.com/leasecron/leasecron/internal/storage"
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
	if err := e.c.MarkSent(ctxt, marked, "tok1"); err != nil {
		t.Fatal(err)
	}
	if ok, err := e.c.Current(ctxt, env); !ok || err != nil {
		t.Fatalf("after the mark the message is current? %v, %v", ok, err)
	}
	if err := e.c.MarkSent(ctxt, marked, "tok2"); !errors.Is(err, storage.ErrPreconditionFailed) {
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
