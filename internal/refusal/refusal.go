// Package refusal names the errors of leasecron's packages that are a
// state forbidding a request rather than a failure: the HTTP API and the
// dashboard answer them 409 from this one list, so the two cannot drift.
package refusal

import (
	"errors"

	"github.com/leasecron/leasecron"
	"github.com/leasecron/leasecron/queue"
)

// states are the sentinels: a task or id already scheduled, a run already
// ended, sent to the queue or being cancelled, a page or action that needs
// run records while they are off, a unique key held, and a dead letter
// that cannot be requeued.
var states = []error{
	leasecron.ErrAlreadyScheduled, leasecron.ErrAlreadyFinished, leasecron.ErrAlreadySent,
	leasecron.ErrBeingCancelled, leasecron.ErrNoRunRecords, leasecron.ErrDuplicate,
	queue.ErrNotRequeueable,
}

// Conflict reports whether err is, or wraps, a state that forbids the request.
func Conflict(err error) bool {
	for _, s := range states {
		if errors.Is(err, s) {
			return true
		}
	}
	return false
}
