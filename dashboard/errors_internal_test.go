package dashboard

import (
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/leasecron/leasecron"
	"github.com/leasecron/leasecron/blackboard"
	"github.com/leasecron/leasecron/queue"
)

// A request that a state forbids is answered 409, as the HTTP API answers
// it, not 502 "reading storage failed": a task already sent to the queue
// (cancel, reschedule or run now of a task sent early, with run records
// off) and a page or action that needs run records when they are off (a
// review found both answered 502). A blackboard key others kept changing
// through every try is 503, to retry. A failure of storage stays 502.
func TestStatesThatForbidARequestAreConflicts(t *testing.T) {
	for _, c := range []struct {
		err  error
		want int
	}{
		{fmt.Errorf("cancel e9: %w", leasecron.ErrAlreadySent), http.StatusConflict},
		{fmt.Errorf("bulk: %w", leasecron.ErrNoRunRecords), http.StatusConflict},
		{fmt.Errorf("cancel e9: %w", leasecron.ErrAlreadyFinished), http.StatusConflict},
		{fmt.Errorf("requeue e9: %w", queue.ErrNotRequeueable), http.StatusConflict},
		{fmt.Errorf("requeue e9: %w", leasecron.ErrDuplicate), http.StatusConflict},
		{fmt.Errorf("schedule: %w", leasecron.ErrShardCountChanged), http.StatusServiceUnavailable},
		{fmt.Errorf("add blackboard key %q: %w after %d attempts", "k", blackboard.ErrConflict, 5), http.StatusServiceUnavailable},
		{errors.New("connection refused"), http.StatusBadGateway},
	} {
		if got := statusOf(c.err); got != c.want {
			t.Errorf("statusOf(%v) = %d; want %d", c.err, got, c.want)
		}
	}
}
