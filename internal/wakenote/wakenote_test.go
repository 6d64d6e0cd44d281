package wakenote

import (
	"testing"
	"time"
)

func TestWakeNoteRoundTrip(t *testing.T) {
	base := time.Date(2026, 11, 23, 10, 0, 0, 123e6, time.UTC)
	var dues []time.Time
	for i := range Max {
		dues = append(dues, base.Add(time.Duration(i)*250*time.Millisecond))
	}
	note := Encode(dues)
	if len(note) > 2048 {
		t.Fatalf("a full note is %d bytes, more than trafficcop.MaxNote", len(note))
	}
	got := Decode(note)
	if len(got) != len(dues) {
		t.Fatalf("decoded %d of %d times", len(got), len(dues))
	}
	for i := range dues {
		if !got[i].Equal(dues[i]) {
			t.Fatalf("time %d: %s, want %s", i, got[i], dues[i])
		}
	}
	for _, bad := range []string{"", "wake1:", "wake1:zz", "other:1:2", "wake1:1:2,-3", "wake1:1:x!"} {
		t.Run(bad, func(t *testing.T) {
			if got := Decode(bad); got != nil {
				t.Errorf("Decode(%q) = %v, want nothing", bad, got)
			}
		})
	}
}
