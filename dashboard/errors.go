package dashboard

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/leasecron/leasecron"
	"github.com/leasecron/leasecron/blackboard"
	"github.com/leasecron/leasecron/internal/storage"
	"github.com/leasecron/leasecron/leasecrontype"
	"github.com/leasecron/leasecron/schedule"
)

// badRequest is an invalid query value; it becomes a 400 naming the value.
type badRequest struct{ error }

func badf(format string, a ...any) error { return badRequest{fmt.Errorf(format, a...)} }

// ErrInvalid is wrapped by a Source's errors about input it refuses (a bad
// continuation token, a malformed filter); the dashboard answers 400.
var ErrInvalid = errors.New("invalid input")

// ErrConflict is wrapped by a Source's errors about a state that forbids the
// action (a run already finished); the dashboard answers 409.
var ErrConflict = errors.New("conflict")

// invalid are the errors, of this package and of those a Source calls, that
// mean the viewer asked for something that cannot be answered as asked.
var invalid = []error{ErrInvalid, schedule.ErrInvalid, schedule.ErrBadRecurrence, leasecron.ErrInvalidRunQuery, blackboard.ErrInvalid, leasecron.ErrInvalidOptions}

// statusOf is the HTTP status of a page's or an action's error: 4xx for
// what the viewer asked (the message names the value), 503 while storage
// throttles, 502 for other failures of storage.
func statusOf(err error) int {
	var br badRequest
	if errors.As(err, &br) {
		return http.StatusBadRequest
	}
	for _, e := range invalid {
		if errors.Is(err, e) {
			return http.StatusBadRequest
		}
	}
	switch {
	case errors.Is(err, leasecrontype.ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, ErrConflict), leasecron.IsConflict(err):
		// (The states that forbid a request, as the HTTP API answers them:
		// reviews found some of them answered 502.)
		return http.StatusConflict
	case errors.Is(err, leasecron.ErrServerBusy), errors.Is(err, leasecron.ErrShardCountChanged), errors.Is(err, blackboard.ErrConflict):
		// (A change of the shard count: nothing written, and a retry in a
		// moment places the key by the count in force. A blackboard key
		// that others kept changing through every try: nothing written,
		// and a retry in a moment succeeds — not storage failing.)
		return http.StatusServiceUnavailable
	}
	return http.StatusBadGateway
}

// MaxIDLen is the longest task, run, dead-letter or blackboard id the
// dashboard looks up: a table key's limit, which the HTTP API's paths
// keep too.
const MaxIDLen = storage.MaxKeyLen

// pathID returns the id in the path segment name, refusing (400, naming
// it) one that no task, run, dead letter or key can have: longer than
// MaxIDLen bytes, or not a table key (storage.ValidateKeyPart: empty, not
// UTF-8, a control character or one of / \ # ?).
func pathID(r *http.Request, name string) (string, error) {
	id := r.PathValue(name)
	if len(id) > MaxIDLen {
		return "", badf("%s %.40q… is %d bytes; none is longer than %d", name, id, len(id), MaxIDLen)
	}
	if err := storage.ValidateKeyPart(name, id); err != nil {
		return "", badRequest{err}
	}
	return id, nil
}
