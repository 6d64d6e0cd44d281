package schedule

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

// A disabled series keeps its row and runs no occurrence, whatever time
// passes; the messages sent early before it was disabled are stale; enable
// runs it again from its next occurrence after now, skipping what fell due
// meanwhile. A one-off task and an unknown id are refused, and a second
// disable or enable changes nothing.
func TestDisableEnableSeries(t *testing.T) {
	e := newMoverEnv(t, 2, MoverOptions{MoverSettings: MoverSettings{Early: 5 * time.Minute}})
	e.c.opts.ChangesAfterSend = true // the workers keep run records
	e.add(t, Item{ID: "tick", Due: t0.Add(time.Minute), Recurrence: "@every 10m", Payload: "x"})
	e.add(t, Item{ID: "once", Due: t0.Add(time.Hour)})
	if err := e.onePass(t); err != nil {
		t.Fatal(err)
	}
	early, ok := e.q.byID("tick@" + t0.Add(time.Minute).Format(time.RFC3339Nano))
	if !ok || early.env.Token == "" {
		t.Fatalf("the occurrence due in a minute was not sent early: %v", e.q.ids())
	}

	it, err := e.c.Disable(ctx(t), "tick")
	if err != nil {
		t.Fatal(err)
	}
	if !it.Disabled.Equal(t0) || !it.Due.Equal(t0.Add(time.Minute)) || it.Recurrence != "@every 10m" || it.Payload != "x" {
		t.Fatalf("disabled item %+v", it)
	}
	if cur, err := e.c.Current(ctx(t), early.env); err != nil || cur {
		t.Fatalf("the occurrence sent before disabling still current: %v, %v", cur, err)
	}
	again, err := e.c.Disable(ctx(t), "tick")
	if err != nil || !again.Disabled.Equal(it.Disabled) || again.RowKey != it.RowKey {
		t.Fatalf("a second disable: %+v, %v; want nothing changed", again, err)
	}
	if _, err := e.c.Disable(ctx(t), "once"); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "one-off") {
		t.Fatalf("disable a one-off task: %v", err)
	}
	if _, err := e.c.Disable(ctx(t), "nope"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("disable an unknown id: %v", err)
	}
	sentBefore := len(e.q.ids())
	for range 12 {
		e.fc.Advance(10 * time.Minute)
		if err := e.onePass(t); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range e.q.ids()[sentBefore:] {
		if strings.HasPrefix(id, "tick@") {
			t.Fatalf("a disabled series ran %s: %v", id, e.q.ids())
		}
	}
	if got, err := e.c.Get(ctx(t), "tick"); err != nil || got.Disabled.IsZero() {
		t.Fatalf("the disabled series after two hours: %+v, %v", got, err)
	}

	now := e.fc.Now()
	on, err := e.c.Enable(ctx(t), "tick")
	if err != nil {
		t.Fatal(err)
	}
	want := t0.Add(time.Minute).Add(12 * 10 * time.Minute) // the first occurrence after now
	if !on.Disabled.IsZero() || !on.Due.Equal(want) || !on.Due.After(now) {
		t.Fatalf("enabled at %s: %+v, want next due %s", now, on, want)
	}
	if same, err := e.c.Enable(ctx(t), "tick"); err != nil || same.RowKey != on.RowKey {
		t.Fatalf("a second enable: %+v, %v", same, err)
	}
	e.fc.Advance(want.Sub(now))
	if err := e.onePass(t); err != nil {
		t.Fatal(err)
	}
	if _, ok := e.q.byID("tick@" + want.Format(time.RFC3339Nano)); !ok {
		t.Fatalf("the enabled series did not run its next occurrence: %v", e.q.ids())
	}

	// Rescheduling a disabled series enables it at that time.
	if _, err := e.c.Disable(ctx(t), "tick"); err != nil {
		t.Fatal(err)
	}
	at := e.fc.Now().Add(time.Hour)
	re, err := e.c.Reschedule(ctx(t), "tick", at)
	if err != nil || !re.Disabled.IsZero() || !re.Due.Equal(at) {
		t.Fatalf("reschedule of a disabled series: %+v, %v", re, err)
	}
}

// MovingOccurrences lists a series row's own due time and those a pass
// may reach within the window of now; a one-off task has none, and a
// rule that does not parse is refused naming it.
func TestMovingOccurrences(t *testing.T) {
	now := time.Date(2026, 3, 8, 6, 58, 0, 0, time.UTC)
	got, err := MovingOccurrences(Item{ID: "s", Due: now.Add(-time.Second), Recurrence: "@every 5s"}, now, 12*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	want := []time.Time{now.Add(-time.Second), now.Add(4 * time.Second), now.Add(9 * time.Second)}
	if !slices.EqualFunc(got, want, time.Time.Equal) {
		t.Errorf("moving occurrences: %v, want %v", got, want)
	}
	// An overdue series skips what no pass will move, but not what a pass
	// sent early already: a worker that found one of those current before
	// the series changed may claim it after (row 235, seed 142823).
	late := Item{ID: "s", Due: now.Add(-2 * time.Minute), Recurrence: "@every 20s", SentUntil: now.Add(-time.Minute)}
	got, err = MovingOccurrences(late, now, 12*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// The row's own and now's first, then those sent early and the one a
	// pass sends after them, newest first.
	want = []time.Time{now.Add(-2 * time.Minute), now, now.Add(-40 * time.Second), now.Add(-time.Minute), now.Add(-80 * time.Second), now.Add(-100 * time.Second)}
	if !slices.EqualFunc(got, want, time.Time.Equal) {
		t.Errorf("moving occurrences of an overdue series sent early: %v, want %v", got, want)
	}
	// With no occurrence near now, those sent early all the same.
	hourly := Item{ID: "h", Due: now.Add(-150 * time.Minute), Recurrence: "@every 1h", SentUntil: now.Add(-90 * time.Minute)}
	if got, _ = MovingOccurrences(hourly, now, 12*time.Second); !slices.EqualFunc(got, []time.Time{now.Add(-150 * time.Minute), now.Add(-30 * time.Minute), now.Add(-90 * time.Minute)}, time.Time.Equal) {
		t.Errorf("moving occurrences of an hourly series sent early, none near now: %v", got)
	}
	// Only the row's own sent early: the one after it goes too.
	hourly.SentUntil = hourly.Due
	if got, _ = MovingOccurrences(hourly, now, 12*time.Second); !slices.EqualFunc(got, []time.Time{now.Add(-150 * time.Minute), now.Add(-90 * time.Minute)}, time.Time.Equal) {
		t.Errorf("moving occurrences of an hourly series whose own occurrence alone went early: %v", got)
	}
	// Past the bound, those near now are never left out.
	busy := Item{ID: "s", Due: now.Add(-10 * time.Minute), Recurrence: "@every 1s", SentUntil: now.Add(-time.Minute)}
	got, err = MovingOccurrences(busy, now, 12*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != maxStopped || !got[0].Equal(busy.Due) || !got[1].Equal(now.Add(-11*time.Second)) || !got[24].Equal(now.Add(12*time.Second)) ||
		!got[25].Equal(now.Add(-59*time.Second)) || !got[26].Equal(now.Add(-time.Minute)) {
		t.Errorf("moving occurrences of a busy overdue series sent early: %d, starting %v; want %d: its row's, those within 12 s of now, the one after those sent early, then those newest first", len(got), got[:min(len(got), 27)], maxStopped)
	}
	late.SentUntil = time.Time{}
	if got, _ = MovingOccurrences(late, now, 12*time.Second); len(got) != 2 {
		t.Errorf("moving occurrences of an overdue series none of whose occurrences went early: %v, want its row's and now's", got)
	}
	if got, err := MovingOccurrences(Item{ID: "o", Due: now}, now, time.Minute); err != nil || got != nil {
		t.Errorf("a one-off task: %v, %v; want none", got, err)
	}
	if got, err := MovingOccurrences(Item{ID: "s", Due: now.Add(time.Hour), Recurrence: "@every 5s"}, now, 12*time.Second); err != nil || len(got) != 0 {
		t.Errorf("a series due past the window: %v, %v; want none", got, err)
	}
	if _, err := MovingOccurrences(Item{ID: "bad", Due: now, Recurrence: "@every soon"}, now, time.Minute); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "soon") {
		t.Errorf("a rule that does not parse: %v; want ErrInvalid naming it", err)
	}
}
