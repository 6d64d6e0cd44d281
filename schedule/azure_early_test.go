package schedule

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasecron/leasecron/queue"
)

// On Azurite too, a burst due together ahead of the early window goes
// early only as far as queue.max_depth allows (see
// TestEarlySendsStayWithinMaxDepth).
func TestAzureEarlySendsStayWithinMaxDepth(t *testing.T) {
	t.Parallel()
	a := newAzEnv(t, Options{})
	q := &fakeQueue{}
	m := a.mover(t, 1, q, MoverOptions{MoverSettings: burstSettings, Depth: fakeDepth(&q)})
	if err := m.takeFence(ctx(t), "00", 1); err != nil {
		t.Fatal(err)
	}
	earlyBurstWithinMaxDepth(t, a.c, a.fc, q, func() error { _, err := m.pass(ctx(t), 1); return err })
}

// An @every 1s series with a 5 s pass on Azurite: every occurrence becomes
// its own message, once, delayed to its own time; no pass sends more than
// the bound for the series, also after a leaderless gap (missed occurrences
// run once), and a bound below the pass's share keeps the burst at the
// bound.
func TestAzureCadenceBoundedBurst(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		bound int
	}{{"default bound", 0}, {"bound 3", 3}} {
		t.Run(c.name, func(t *testing.T) {
			a := newAzEnv(t, Options{})
			q := &fakeQueue{}
			m := a.mover(t, 1, q, MoverOptions{MoverSettings: MoverSettings{PollEvery: 5 * time.Second, Early: 20 * time.Second, MaxOccurrences: c.bound}})
			if err := m.takeFence(ctx(t), "00", 1); err != nil {
				t.Fatal(err)
			}
			if _, err := a.c.Add(ctx(t), Item{ID: "fast", Due: t0, Recurrence: "@every 1s"}, AddOptions{}); err != nil {
				t.Fatal(err)
			}
			bound := c.bound
			if bound == 0 {
				bound = DefaultMaxOccurrences
			}
			seen := map[string]bool{}
			pass := func() int {
				t.Helper()
				before := len(q.sent)
				if _, err := m.pass(ctx(t), 1); err != nil {
					t.Fatal(err)
				}
				n := len(q.sent) - before
				for _, s := range q.sent[before:] {
					if seen[s.env.ID] {
						t.Fatalf("%s sent twice", s.env.ID)
					}
					seen[s.env.ID] = true
					if s.delay != max(0, s.env.Due.Sub(a.fc.Now())) {
						t.Fatalf("%s due %s sent at %s with delay %s", s.env.ID, s.env.Due.Sub(t0), a.fc.Now().Sub(t0), s.delay)
					}
				}
				if n > bound {
					t.Fatalf("one pass sent %d messages for one series; the bound is %d", n, bound)
				}
				return n
			}
			var perPass []int
			for range 6 {
				perPass = append(perPass, pass())
				a.fc.Advance(5 * time.Second)
			}
			// A leaderless minute: the next pass sends the missed occurrence
			// once, not one per missed second.
			a.fc.Advance(time.Minute)
			gap := pass()
			perPass = append(perPass, gap)
			t.Logf("messages per 5 s pass: %v", perPass)
			if c.bound == 0 {
				// Every occurrence from t0 to the window's end of the sixth
				// pass (25 s + 20 s) was sent: 46 of them.
				for i := range 46 {
					id := "fast@" + t0.Add(time.Duration(i)*time.Second).Format(time.RFC3339Nano)
					if !seen[id] {
						t.Fatalf("occurrence %s never sent (sent %d)", id, len(seen))
					}
				}
			}
			if gap > bound {
				t.Fatalf("after a leaderless minute one pass sent %d", gap)
			}
			if n := len(itemKeysAz(t, a)); n != 1 {
				t.Fatalf("the series has %d rows", n)
			}
		})
	}
}

func itemKeysAz(t *testing.T, a *azEnv) []string {
	var out []string
	for _, k := range a.allKeys(t) {
		if k[0] >= '0' && k[0] <= '9' {
			out = append(out, k)
		}
	}
	return out
}

// On Azurite: an early-sent task stays in the table marked as sent; its
// message is current until the task is cancelled, rescheduled or replaced,
// and the moved row no longer carries the mark.
func TestAzureEarlySendMarkAndChange(t *testing.T) {
	t.Parallel()
	a := newAzEnv(t, Options{ChangesAfterSend: true})
	q := &fakeQueue{}
	var mu sync.Mutex
	var confirmed []queue.Envelope
	m := a.mover(t, 1, q, MoverOptions{MoverSettings: MoverSettings{PollEvery: 5 * time.Second, Early: time.Minute}})
	m.o.Confirm = func(_ context.Context, envs []queue.Envelope) []bool {
		mu.Lock()
		defer mu.Unlock()
		confirmed = append(confirmed, envs...)
		return allTrue(len(envs))
	}
	if err := m.takeFence(ctx(t), "00", 1); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"keep", "resched", "cancel", "replace"} {
		t.Run(id, func(t *testing.T) {
			if _, err := a.c.Add(ctx(t), Item{ID: id, Due: t0.Add(30 * time.Second), Payload: "v1"}, AddOptions{}); err != nil {
				t.Fatal(err)
			}
		})
	}
	if _, err := m.pass(ctx(t), 1); err != nil {
		t.Fatal(err)
	}
	if len(q.sent) != 4 {
		t.Fatalf("sent %v", q.ids())
	}
	env := map[string]queue.Envelope{}
	for _, s := range q.sent {
		env[s.env.ID] = s.env
		if ok, err := a.c.Current(ctx(t), s.env); !ok || err != nil {
			t.Fatalf("%s: Current = %v, %v right after the early send", s.env.ID, ok, err)
		}
	}
	if _, err := a.c.Reschedule(ctx(t), "resched", t0.Add(50*time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := a.c.Cancel(ctx(t), "cancel"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.c.Add(ctx(t), Item{ID: "replace", Due: t0.Add(30 * time.Second), Payload: "v2"}, AddOptions{Replace: true}); err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]bool{"keep": true, "resched": false, "cancel": false, "replace": false} {
		t.Run(fmt.Sprint(id), func(t *testing.T) {
			if ok, err := a.c.Current(ctx(t), env[id]); ok != want || err != nil {
				t.Errorf("%s: Current = %v, %v after the changes; want %v", id, ok, err, want)
			}
		})
	}
	if it, _ := a.c.Get(ctx(t), "resched"); it.Sent {
		t.Fatalf("a rescheduled row keeps the old sent mark: %+v", it)
	}
	// The next passes send the changed tasks again and, 26 s on, move keep
	// and replace (confirming keep's early message).
	a.fc.Advance(time.Second)
	if _, err := m.pass(ctx(t), 1); err != nil {
		t.Fatal(err)
	}
	a.fc.Advance(25 * time.Second)
	if _, err := m.pass(ctx(t), 1); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, s := range q.sent[4:] {
		ids = append(ids, fmt.Sprintf("%s/%s", s.env.ID, s.env.Payload))
	}
	sort.Strings(ids) // sent at once: in any order
	if strings.Join(ids, " ") != "replace/v2 resched/v1" {
		t.Fatalf("sent again: %v", ids)
	}
	var conf []string
	for _, e := range confirmed {
		conf = append(conf, e.ID)
	}
	sort.Strings(conf)
	if strings.Join(conf, " ") != "keep replace" {
		t.Fatalf("confirmed %v, want keep and replace", conf)
	}
	if keys := itemKeysAz(t, a); len(keys) != 1 || !strings.HasSuffix(keys[0], "_resched") {
		t.Fatalf("rows left %v, want only the rescheduled one", keys)
	}
}
