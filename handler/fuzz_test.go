package handler

import (
	"strings"
	"testing"
)

// FuzzParseSnooze: whatever an exec program prints last, the snooze it
// asks for is a non-negative duration or a refusal naming the line.
func FuzzParseSnooze(f *testing.F) {
	for _, s := range []string{"10m", "600", "working...\n90s\n", "", "\n\n", "-5", "-1m", "1e9h", "99999999999999", "9223372036854775807", "soon", "10m\r\n  "} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, out string) {
		d, err := parseSnooze(out)
		if err != nil {
			if !strings.Contains(err.Error(), "its last output line") {
				t.Fatalf("parseSnooze(%q) = %v", out, err)
			}
			return
		}
		if d < 0 {
			t.Fatalf("parseSnooze(%q) = %s: negative", out, d)
		}
	})
}
