package leasecron

import (
	"testing"
	"time"

	"github.com/leasecron/leasecron/schedule"
	"github.com/leasecron/leasecron/trafficcop"
)

func TestEarlyWindowCoversAFailover(t *testing.T) {
	short := trafficcop.Timing{LeaseTiming: trafficcop.LeaseTiming{LeaseDuration: 15 * time.Second}, PollEvery: time.Second}
	for _, c := range []struct {
		m    schedule.MoverSettings
		l    trafficcop.Timing
		want time.Duration
	}{
		{schedule.MoverSettings{}, trafficcop.Timing{}, 75 * time.Second},
		{schedule.MoverSettings{}, short, 16 * time.Second},
		{schedule.MoverSettings{PollEvery: 30 * time.Second}, short, 30 * time.Second},
		{schedule.MoverSettings{Early: 3 * time.Second}, trafficcop.Timing{}, 3 * time.Second},
		{schedule.MoverSettings{Early: -1}, trafficcop.Timing{}, -1},
	} {
		if got := earlyWindow(c.m, c.l); got != c.want {
			t.Errorf("earlyWindow(%+v, %+v) = %s, want %s", c.m, c.l, got, c.want)
		}
	}
}

func TestWakeNoteRoundTrip(t *testing.T) {
	base := time.Date(2026, 11, 23, 10, 0, 0, 123e6, time.UTC)
	var dues []time.Time
	for i := range maxWakeNote {
		dues = append(dues, base.Add(time.Duration(i)*250*time.Millisecond))
	}
	note := encodeWakeNote(dues)
	if len(note) > 2048 {
		t.Fatalf("a full note is %d bytes, more than trafficcop.MaxNote", len(note))
	}
	got := decodeWakeNote(note)
	if len(got) != len(dues) {
		t.Fatalf("decoded %d of %d times", len(got), len(dues))
	}
	for i := range dues {
		if !got[i].Equal(dues[i]) {
			t.Fatalf("time %d: %s, want %s", i, got[i], dues[i])
		}
	}
	for _, bad := range []string{"", "wake1:", "wake1:zz", "other:1:2", "wake1:1:2,-3", "wake1:1:x!"} {
		if got := decodeWakeNote(bad); got != nil {
			t.Errorf("decodeWakeNote(%q) = %v, want nothing", bad, got)
		}
	}
}
