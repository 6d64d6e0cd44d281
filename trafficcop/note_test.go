package trafficcop

import (
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasecron/leasecron/internal/clock"
)

// The holder's note travels with its acquisition and every renewal; a cop
// waiting for the lease hears the latest one each time it looks.
func TestCopNoteReachesStandbys(t *testing.T) {
	clk := clock.NewFake(t0)
	lock := NewMemoryLock("scheduler", clk)
	var n atomic.Int64
	a := unitOptions("cop-a")
	a.Note = func() string { return "due:" + strings.Repeat("x", int(n.Add(1))) }
	ha := startCop(t, clk, lock, a, nil)
	ha.ev.wait("acquired")
	ha.lead()

	var mu sync.Mutex
	var heard []string
	b := unitOptions("cop-b")
	b.OnNote = func(s string) { mu.Lock(); heard = append(heard, s); mu.Unlock() }
	hb := startCop(t, clk, lock, b, nil)
	hb.ev.wait("acquire-failed")
	mu.Lock()
	if len(heard) != 1 || heard[0] != "due:x" {
		t.Fatalf("standby heard %q after the acquisition, want the acquisition's note", heard)
	}
	mu.Unlock()
	// A renewal (every 5 s) writes a fresh note; the standby (polling every
	// 3 s, jittered) hears it at its next look.
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		last := heard[len(heard)-1]
		mu.Unlock()
		if last == "due:xx" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("standby never heard the renewal's note: %q", heard)
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
	clk := clock.NewFake(t0)
	lock := NewMemoryLock("scheduler", clk)
	a := unitOptions("cop-a")
	a.Note = func() string { return strings.Repeat("y", MaxNote+1) }
	ha := startCop(t, clk, lock, a, nil)
	ha.ev.wait("acquired")
	if st, _ := lock.Get(t.Context()); st.Metadata[MetaNote] != "" || st.Metadata[MetaHolder] != "cop-a" {
		t.Fatalf("metadata %v", st.Metadata)
	}
}
