package notfound

import (
	"errors"
	"fmt"
	"testing"

	"github.com/leasecron/leasecron/leasecrontype"
)

func TestSentinelMatchesErrNotFound(t *testing.T) {
	errX := New("no such x")
	wrapped := fmt.Errorf("cancel job-1: %w", errX)
	if !errors.Is(wrapped, leasecrontype.ErrNotFound) || !errors.Is(wrapped, errX) {
		t.Fatalf("errors.Is(%v, ErrNotFound) = false", wrapped)
	}
	if errors.Is(wrapped, New("no such x")) {
		t.Fatal("two sentinels with the same message must stay distinct")
	}
	if got := wrapped.Error(); got != "cancel job-1: no such x" {
		t.Fatalf("message %q", got)
	}
}
