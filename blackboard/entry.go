package blackboard

import (
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/leasecron/leasecron/internal/notfound"
	"github.com/leasecron/leasecron/internal/storage"
	"github.com/leasecron/leasecron/internal/tasktype"
)

// Defaults and limits.
const (
	// DefaultTable is the blackboard table's default name.
	DefaultTable = "Blackboard"
	// Partition is the PartitionKey of every blackboard row.
	Partition = "bb"
	// MinInterval is the shortest Interval a key may have.
	MinInterval = time.Second
	// MaxPayload is the largest Payload, in bytes, a key may carry (a table
	// string property holds at most 32 Ki UTF-16 code units).
	MaxPayload = 32 * 1024
	// MaxTypeLen is the longest handler type name accepted (the one task
	// type rule: see schedule.ValidateType).
	MaxTypeLen = tasktype.MaxLen
	// maxErrorLen bounds LastError as stored.
	maxErrorLen = 4096
)

// Sentinel errors callers branch on with errors.Is.
var (
	// ErrNotFound: the blackboard has no such key.
	ErrNotFound = notfound.New("blackboard key not found")
	// ErrExists: Add found the key already on the blackboard (pass
	// AddOptions.Replace to overwrite its definition); a Store's Insert of
	// an existing row.
	ErrExists = errors.New("blackboard key already exists")
	// ErrConflict: a Store's conditional write (Replace, Delete) found the
	// row changed since it was read: its ETag is no longer the one given.
	ErrConflict = errors.New("blackboard row changed concurrently")
	// ErrInvalid is wrapped by every validation error of an Entry or of
	// Options.
	ErrInvalid = errors.New("invalid blackboard entry")
	// ErrInvalidOptions: NewWorker or NewBoard refused its options. It
	// wraps ErrInvalid.
	ErrInvalidOptions = fmt.Errorf("%w options", ErrInvalid)
)

// Entry is one blackboard row: a key's definition and the state of its
// last run. Add reads only Key, Interval, Type and Payload; the other fields
// are maintained by workers and reported by Get and List.
type Entry struct {
	// Key names the work (RowKey); see storage.ValidateKeyPart for the
	// characters allowed.
	Key string
	// Interval is the least time between two starts of the key; at least
	// MinInterval.
	Interval time.Duration
	// Type selects the handler, from the same registry as queue handlers.
	Type string
	// Payload is passed to the handler as Task.Payload; at most MaxPayload
	// bytes.
	Payload string

	// Start is when the last (or current) run was claimed; zero if the key
	// never ran.
	Start time.Time
	// Stop is when the last finished run ended; zero if none has.
	Stop time.Time
	// Running reports whether a worker holds a claim on the key.
	Running bool
	// Worker is the instance id of the worker that claimed the key last.
	Worker string
	// ClaimID identifies the last claim; a worker writes to a row only
	// while it still carries its own ClaimID.
	ClaimID string
	// ClaimedAt is when the last claim was made (equal to Start).
	ClaimedAt time.Time
	// LockedUntil is when the current claim expires unless its worker
	// extends it; after that the claim is abandoned and may be taken over.
	LockedUntil time.Time
	// LastError is the error of the last finished run, empty on success.
	LastError string
	// LastDuration is how long the last finished run took.
	LastDuration time.Duration
	// RunNow, when set, makes the key due at the next cycle regardless of
	// Interval; a claim clears it.
	RunNow bool
	// Runs counts claims (runs started), Failures runs that ended in error.
	Runs, Failures int64

	// Stoppable reports that the worker holding the claim stops its run
	// when StopClaim names it (workers from the release that brought
	// StopClaim on). A remove deletes the row of a claim without it
	// outright, as earlier releases did.
	Stoppable bool
	// StopClaim is the ClaimID of a run that must stop: the key was
	// removed, or removed and added again, while that run held it. The
	// claim stays on the row, so no other worker claims the key, until
	// its worker stops the run at its next heartbeat and ends the claim:
	// it deletes a removed row, and leaves one added again due at once.
	StopClaim string
	// Removed is when a remove found a run holding the key (StopClaim):
	// the row stays until that run stops, and a Board reads the key as
	// absent. Zero otherwise.
	Removed time.Time

	// ETag is the row's version as read; it is what conditional writes
	// match against. Empty on entries not read from storage.
	ETag string
}

// State is a key's situation at a given moment, for display.
type State string

// The states Entry.State reports.
const (
	// StateWaiting: not running, and its interval has not passed.
	StateWaiting State = "waiting"
	// StateDue: not running, and due (interval passed, never run, or RunNow).
	StateDue State = "due"
	// StateRunning: claimed, and the claim has not expired.
	StateRunning State = "running"
	// StateAbandoned: claimed, but the claim expired: the next worker to walk
	// the board takes it over.
	StateAbandoned State = "abandoned"
)

// NextDue is when the key next becomes due by its interval: Start +
// Interval, or the zero time if it never ran (due at once). RunNow is not
// considered.
func (e Entry) NextDue() time.Time {
	if e.Start.IsZero() {
		return time.Time{}
	}
	return e.Start.Add(e.Interval)
}

// Due reports whether the key should start at now if it were not running:
// it never ran, RunNow is set, or Interval has passed since Start.
func (e Entry) Due(now time.Time) bool {
	return e.RunNow || e.Start.IsZero() || !now.Before(e.Start.Add(e.Interval))
}

// Abandoned reports whether the key is running under a claim that expired
// before now. A claim without LockedUntil (a row written by hand) expires
// one Interval after ClaimedAt, or Start.
func (e Entry) Abandoned(now time.Time) bool {
	if !e.Running {
		return false
	}
	until := e.LockedUntil
	if until.IsZero() {
		at := e.ClaimedAt
		if at.IsZero() {
			at = e.Start
		}
		until = at.Add(e.Interval)
	}
	return now.After(until)
}

// State reports the key's state at now.
func (e Entry) State(now time.Time) State {
	switch {
	case e.Abandoned(now):
		return StateAbandoned
	case e.Running:
		return StateRunning
	case e.Due(now):
		return StateDue
	default:
		return StateWaiting
	}
}

// taskID is the task id a handler sees for the run that started at start:
// "{key}@{start, RFC 3339 UTC}".
func taskID(key string, start time.Time) string {
	return key + "@" + start.UTC().Format(time.RFC3339)
}

// Validate checks the definition fields of e (Key, Interval, Type,
// Payload). Errors wrap ErrInvalid and name the field, the value and what is
// accepted.
func (e Entry) Validate() error {
	if err := storage.ValidateKeyPart("blackboard key", e.Key); err != nil {
		return fmt.Errorf("%w: Key: %w", ErrInvalid, err)
	}
	if e.Interval < MinInterval {
		return fmt.Errorf("%w: Interval %v for key %q: must be at least %v", ErrInvalid, e.Interval, e.Key, MinInterval)
	}
	if e.Type == "" {
		return fmt.Errorf("%w: Type for key %q is empty: name a registered handler type", ErrInvalid, e.Key)
	}
	if err := tasktype.Validate(e.Type); err != nil {
		return fmt.Errorf("%w: Type for key %q: %w", ErrInvalid, e.Key, err)
	}
	if len(e.Payload) > MaxPayload {
		return fmt.Errorf("%w: Payload for key %q is %d bytes: at most %d are accepted", ErrInvalid, e.Key, len(e.Payload), MaxPayload)
	}
	if !utf8.ValidString(e.Payload) {
		return fmt.Errorf("%w: Payload for key %q is not valid UTF-8", ErrInvalid, e.Key)
	}
	return nil
}

// definition returns e with only its definition fields.
func (e Entry) definition() Entry {
	return Entry{Key: e.Key, Interval: e.Interval, Type: e.Type, Payload: e.Payload}
}
