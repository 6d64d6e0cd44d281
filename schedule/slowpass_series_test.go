package schedule

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/leasecron/leasecron/queue"
)

// A slow pass widens a row's retire window (so that runs are recorded
// before they come due), but not a series row's past two polls: a pass
// that read a series' row just before a disable must confirm or send
// without a token only occurrences the disable stops, and a disable
// stops those due within two polls and the clocks' skew
// (DisableMoving; leasecron's Client.moving). Wider, an occurrence 19.6 s
// after the disable answered was confirmed after the disable's search of
// the moved ones, and ran (issue 38, sweep seed 93370).
func TestASlowPassConfirmsNoSeriesOccurrenceADisableDoesNotStop(t *testing.T) {
	var mu sync.Mutex
	var confirmed []queue.Envelope
	e := newMoverEnv(t, 1, MoverOptions{
		MoverSettings: MoverSettings{Early: 75 * time.Second},
		Confirm: func(_ context.Context, envs []queue.Envelope) []bool {
			mu.Lock()
			defer mu.Unlock()
			confirmed = append(confirmed, envs...)
			ok := make([]bool, len(envs))
			for i := range ok {
				ok[i] = true
			}
			return ok
		},
	})
	e.add(t, Item{ID: "s", Due: t0.Add(time.Second), Recurrence: "@every 4s"})
	// The first pass, quick: the series' occurrences within Early go out
	// with a token, the first without.
	if err := e.onePass(t); err != nil {
		t.Fatal(err)
	}
	early := 0
	for _, s := range e.q.sent {
		if s.env.Token != "" {
			early++
		}
	}
	if early < 5 {
		t.Fatalf("sent %d occurrences early; the test wants the series sent well ahead", early)
	}
	// The next pass after a slow one: the retire window of a one-off row
	// would be PollEvery + 2 × 30 s = 65 s.
	e.m.mu.Lock()
	e.m.lastTook = 30 * time.Second
	e.m.mu.Unlock()
	sentBefore := len(e.q.sent)
	if err := e.onePass(t); err != nil {
		t.Fatal(err)
	}
	now := e.fc.Now()
	bound := now.Add(2 * e.m.o.PollEvery)
	if len(confirmed) == 0 {
		t.Fatal("the slow pass confirmed nothing; the test wants it to retire the series' next occurrences")
	}
	for _, env := range confirmed {
		if env.Due.After(bound) {
			t.Errorf("confirmed %s due %s ahead, past the two polls (%s) a disable stops", env.ID, env.Due.Sub(now), 2*e.m.o.PollEvery)
		}
	}
	for _, s := range e.q.sent[sentBefore:] {
		if s.env.Token == "" && s.env.Due.After(bound) {
			t.Errorf("sent %s without a token due %s ahead, past the two polls a disable stops", s.env.ID, s.env.Due.Sub(now))
		}
	}
}
