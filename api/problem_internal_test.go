package api

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/leasecron/leasecron"
)

// A change made in part is not answered as a retryable 503 even when the
// step that failed was a storage timeout: a retry would find the change
// made (a cancelled series gone) and answer 404, and the caller would never
// learn that an occurrence may still run once.
func TestProblemOfIncomplete(t *testing.T) {
	timeout := fmt.Errorf("read: %w", leasecron.ErrServerBusy)
	err := fmt.Errorf("cancel s: %w: the series is cancelled, but an occurrence may still run once: %w", leasecron.ErrIncomplete, timeout)
	p := problemOf(err)
	if p.Status != http.StatusInternalServerError || p.Type != ProblemPrefix+"incomplete" || p.retryAfter != 0 {
		t.Fatalf("problemOf(done in part) = %d %s (retry after %d); want 500 incomplete without Retry-After", p.Status, p.Type, p.retryAfter)
	}
	if p := problemOf(timeout); p.Status != http.StatusServiceUnavailable {
		t.Fatalf("problemOf(busy) = %d; want 503", p.Status)
	}
}

// A unique schedule that met a shard-count change twice wrote nothing and
// succeeds when tried again: 503 with Retry-After, not a 500 the caller
// would take for a failure of the server.
func TestProblemOfShardCountChanged(t *testing.T) {
	err := fmt.Errorf("schedule with unique key %q: %w", "k", leasecron.ErrShardCountChanged)
	p := problemOf(err)
	if p.Status != http.StatusServiceUnavailable || p.Type != ProblemPrefix+"unavailable" || p.retryAfter != 1 {
		t.Fatalf("problemOf(shard count changed) = %d %s (retry after %d); want 503 unavailable, Retry-After 1", p.Status, p.Type, p.retryAfter)
	}
}
