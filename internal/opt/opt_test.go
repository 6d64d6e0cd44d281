package opt

import (
	"errors"
	"strings"
	"testing"
	"time"
)

var errKind = errors.New("invalid test options")

func TestDefault(t *testing.T) {
	d := time.Duration(0)
	if err := Default(errKind, "Options.Wait", &d, 5*time.Second); err != nil || d != 5*time.Second {
		t.Fatalf("zero: %v, %v", d, err)
	}
	d = time.Second
	if err := Default(errKind, "Options.Wait", &d, 5*time.Second); err != nil || d != time.Second {
		t.Fatalf("set: %v, %v", d, err)
	}
	d = -time.Second
	err := Default(errKind, "Options.Wait", &d, 5*time.Second)
	if !errors.Is(err, errKind) || err.Error() != "invalid test options: Options.Wait = -1s: want a positive value, or 0 for the default 5s" {
		t.Fatalf("negative: %v", err)
	}
}

func TestDefaultIn(t *testing.T) {
	n := 0
	if err := DefaultIn(errKind, "Options.N", &n, 8, 1, 1024); err != nil || n != 8 {
		t.Fatalf("zero: %v, %v", n, err)
	}
	for _, bad := range []int{-1, 1025} {
		n = bad
		err := DefaultIn(errKind, "Options.N", &n, 8, 1, 1024)
		if !errors.Is(err, errKind) || !strings.Contains(err.Error(), "Options.N = ") || !strings.Contains(err.Error(), "want 1 to 1024, or 0 for the default 8") {
			t.Errorf("%d: %v", bad, err)
		}
	}
}

func TestDefaultAtLeast(t *testing.T) {
	d := time.Duration(0)
	if err := DefaultAtLeast(errKind, "Options.Cycle", &d, time.Hour, 10*time.Millisecond); err != nil || d != time.Hour {
		t.Fatalf("zero: %v, %v", d, err)
	}
	d = time.Millisecond
	err := DefaultAtLeast(errKind, "Options.Cycle", &d, time.Hour, 10*time.Millisecond)
	if !errors.Is(err, errKind) || err.Error() != "invalid test options: Options.Cycle = 1ms: want at least 10ms, or 0 for the default 1h0m0s" {
		t.Fatalf("below: %v", err)
	}
}
