package wakenote

import (
	"testing"
	"time"
)

// FuzzDecode: a lease note of any text (another release's, a damaged
// blob's metadata) yields at most Max times, never a panic, and what
// Decode returns encodes and decodes to the same times.
func FuzzDecode(f *testing.F) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, s := range []string{Encode([]time.Time{t0, t0.Add(time.Second)}), "", prefix, prefix + "zz:", prefix + "1:2,3,-4", prefix + "zzzzzzzzzzzzzz:1", "garbage"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got := Decode(s)
		if len(got) > Max {
			t.Fatalf("Decode(%q) returned %d times, more than %d", s, len(got), Max)
		}
		again := Decode(Encode(got))
		if len(again) != len(got) {
			t.Fatalf("Decode(%q) = %v; re-encoded it decodes to %v", s, got, again)
		}
		for i := range got {
			if !again[i].Equal(got[i].Truncate(time.Millisecond)) {
				t.Fatalf("Decode(%q) = %v; re-encoded it decodes to %v", s, got, again)
			}
		}
	})
}
