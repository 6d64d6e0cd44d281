package trafficcop

import (
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasecron/leasecron/internal/clock"
)

// holderWithNote starts cop-a on a fresh lock with note as its Note and
// waits until it holds the lease.
func holderWithNote(t *testing.T, note func() string) (*clock.Fake, *MemoryLock, *copHarness) {
	t.Helper()
	clk := clock.NewFake(t0)
	lock := NewMemoryLock("scheduler", clk)
	a := unitOptions("cop-a")
	a.Note = note
	ha := startCop(t, clk, lock, a, nil)
	ha.ev.wait("acquired")
	return clk, lock, ha
}

// growingNote is a note one character longer each time it is read: "due:x",
// "due:xx", ...
func growingNote() func() string {
	var n atomic.Int64
	return func() string { return "due:" + strings.Repeat("x", int(n.Add(1))) }
}

// listener starts cop-b on lock, recording every note it hears in heard
// (guarded by mu).
func listener(t *testing.T, clk *clock.Fake, lock *MemoryLock) (hb *copHarness, mu *sync.Mutex, heard *[]string) {
	t.Helper()
	mu, heard = &sync.Mutex{}, &[]string{}
	b := unitOptions("cop-b")
	b.OnNote = func(s string) { mu.Lock(); *heard = append(*heard, s); mu.Unlock() }
	return startCop(t, clk, lock, b, nil), mu, heard
}

// The holder's note travels with its acquisition and every renewal; a cop
// waiting for the lease hears the latest one each time it looks.
func TestCopNoteReachesStandbys(t *testing.T) {
	clk, lock, ha := holderWithNote(t, growingNote())
	ha.lead()

	hb, mu, heard := listener(t, clk, lock)
	hb.ev.wait("acquire-failed")
	mu.Lock()
	if len(*heard) != 1 || (*heard)[0] != "due:x" {
		t.Fatalf("standby heard %q after the acquisition, want the acquisition's note", *heard)
	}
	mu.Unlock()
	// A renewal (every 5 s) writes a fresh note; the standby (polling every
	// 3 s, jittered) hears it at its next look.
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		last := (*heard)[len(*heard)-1]
		mu.Unlock()
		if last == "due:xx" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("standby never heard the renewal's note: %q", *heard)
		}
		waitTimers(t, clk, 3) // the holder's renewal and deadline, the standby's poll
		clk.Advance(250 * time.Millisecond)
		time.Sleep(5 * time.Millisecond)
	}
	if st, _ := lock.Get(t.Context()); st.Metadata[MetaNote] != "due:xx" {
		t.Fatalf("lease metadata note %q", st.Metadata[MetaNote])
	}
}

// A note that does not fit the metadata is left out, not written broken.
func TestCopNoteTooLongIsLeftOut(t *testing.T) {
	_, lock, _ := holderWithNote(t, func() string { return strings.Repeat("y", MaxNote+1) })
	if st, _ := lock.Get(t.Context()); st.Metadata[MetaNote] != "" || st.Metadata[MetaHolder] != "cop-a" {
		t.Fatalf("metadata %v", st.Metadata)
	}
}

// A graceful release writes the holder's last note, and the cop that takes
// the lease over hears it: what the old holder announced since its last
// renewal is not lost at a handover.
func TestCopNoteSurvivesAHandover(t *testing.T) {
	clk, lock, ha := holderWithNote(t, growingNote())
	ha.lead()
	ha.cop.Stop() // graceful: marks the lease released, with a fresh note
	ha.ev.wait("term-ended")
	st, _ := lock.Get(t.Context())
	if st.Metadata[MetaNote] != "due:xx" || st.Metadata[MetaReleased] == "" {
		t.Fatalf("after the release the metadata holds note %q, released %q; want the last note", st.Metadata[MetaNote], st.Metadata[MetaReleased])
	}

	hb, mu, heard := listener(t, clk, lock)
	hb.ev.wait("acquired")
	mu.Lock()
	defer mu.Unlock()
	if len(*heard) == 0 || (*heard)[len(*heard)-1] != "due:xx" {
		t.Fatalf("the new holder heard %q, want the previous holder's last note", *heard)
	}
}

// Announce writes the holder's note at once (at most once a second), not
// only at the next renewal, and keeps the last renewal's time.
func TestCopAnnounceWritesTheNoteNow(t *testing.T) {
	var note atomic.Value
	note.Store("due:1")
	clk, lock, ha := holderWithNote(t, func() string { return note.Load().(string) })
	ha.lead()
	renewed := func() string { st, _ := lock.Get(t.Context()); return st.Metadata[MetaRenewed] }
	before := renewed()
	note.Store("due:2")
	clk.Advance(announceEvery) // past the debounce of the acquisition's write
	ha.cop.Announce()
	deadline := time.Now().Add(5 * time.Second)
	for {
		st, _ := lock.Get(t.Context())
		if st.Metadata[MetaNote] == "due:2" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the announced note never reached the metadata: %v", st.Metadata)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if got := renewed(); got != before {
		t.Fatalf("an announce changed the renewal time from %s to %s", before, got)
	}
}
