package schedule

import (
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/leasecron/leasecron/internal/notfound"
	"github.com/leasecron/leasecron/internal/tasktype"
	"github.com/leasecron/leasecron/leasecrontype"
)

// Item is one scheduled task (or the next occurrence of a recurring series).
type Item struct {
	// ID identifies the task (and a recurring series across occurrences).
	// Empty on Add means "generate one" (time-sortable and random). See
	// ValidateID for the accepted form.
	ID string
	// Type selects the handler; empty means "default".
	Type string
	// Payload is the task's data: UTF-8 text, typically JSON (encode binary
	// data as base64). Payloads larger than Options.InlineLimit are stored
	// in a blob (claim check); on read Payload is then empty and PayloadBlob
	// names the blob (see Client.LoadPayload).
	Payload string
	// Due is when the task should run (the first occurrence of a recurring
	// series). A time in the past runs at the next move. It is stored in
	// UTC with 100 ns precision.
	Due time.Time
	// Recurrence is empty for a one-off task, else "@every <duration>", a
	// 5-field cron expression or a descriptor such as @hourly.
	Recurrence string
	// TZ is the IANA time zone cron recurrences are evaluated in (default
	// UTC).
	TZ string
	// MaxAttempts overrides the worker's retry.max_attempts when > 0.
	MaxAttempts int
	// Queue is the named queue its messages go to (queue.Route): only
	// workers that consume it take the task. Empty: its type's queue
	// (types.<type>.queue), else the default queue.
	Queue string
	// Priority is 1 (critical) to 4 (low): a worker starts a task of a
	// higher level it can run before any of a lower one. 0: its type's
	// priority (types.<type>.priority), else 3 (default).
	Priority int
	// FairKey is the key (a tenant, a customer) whose share of the fleet
	// the task counts towards: while several keys have tasks waiting,
	// workers take from each in turn (fairness.lanes), so one key's flood
	// does not hold the others back. Up to 128 bytes; empty for none.
	FairKey string
	// TraceParent is the W3C traceparent of the trace the task belongs to
	// (00-{trace id}-{span id}-{flags}); the worker's spans for the task
	// are its children (for a recurring series, each occurrence links to
	// it). Empty on Add means the span in Add's context, if there is one.
	TraceParent string
	// After lists the tasks this one waits for: it becomes due only once
	// every one of them has succeeded (Due is then a lower bound). Its
	// row waits at MaxTime meanwhile (Waiting). See after.go.
	After []string
	// AfterAny makes a task with After wait for its parents to end however
	// they end (succeeded, dead or cancelled) instead of only succeeding.
	AfterAny bool
	// Batch is the batch the task is a member of, or whose completion
	// callback it is (Callback).
	Batch string
	// Callback marks the completion callback of Batch: it waits until
	// every member has ended (Client.Complete).
	Callback bool
	// Waiters marks a task others wait for: its message says so
	// (queue.Envelope.Waiters), so its end releases or cancels them.
	Waiters bool

	// The fields below are set when an item is read; Add ignores them.

	// Waiting reports that the task waits for its parents (After) or its
	// batch (Callback); its row is at MaxTime and Due is the time asked.
	Waiting bool
	// Met lists the parents that have already released the task (on
	// Add: the parents known to have succeeded already).
	Met []string
	// Completed is a released callback's batch counts.
	Completed *leasecrontype.BatchCounts

	// UniqueKey is the unique key the task holds (see AddUnique).
	UniqueKey string
	// UniqueFor and UniqueStates are its key's window and states (the
	// Unique it was added with; zero: the defaults), which a requeue of
	// the task once it died takes the key with again (Retake). Like
	// UniqueKey they are read from the row: to add a unique task, pass a
	// Unique (AddUnique, ScheduleOptions.Unique); these fields of an Item
	// given to Add are ignored.
	UniqueFor    time.Duration
	UniqueStates []leasecrontype.RunState

	// PayloadBlob is the claim-check reference of a large payload.
	PayloadBlob string
	// Attempts is the row's Attempts bookkeeping property.
	Attempts int
	// Shard is the PartitionKey of the row.
	Shard string
	// RowKey is the row's key ({ticks:D19}_{id}).
	RowKey string
	// Indexed reports that the row has an id index row (it was written by
	// leasecron rather than inserted directly).
	Indexed bool
	// Sent reports that the mover has already sent this task's message
	// early (invisible until due) while the row waits in the table to be
	// moved; for a series, its occurrences up to SentUntil.
	Sent bool
	// SentUntil is the last occurrence of a series sent early.
	SentUntil time.Time
	// SendingUntil, when set, says that the client that wrote the row is
	// sending the task's message itself (a task due now: see
	// AddOptions.Sending); the mover leaves the row alone until then.
	SendingUntil time.Time
	// CancellingUntil, when set, says that a cancel is telling the
	// task's batch or the tasks waiting for it that it ended, and removes
	// the row after; the mover leaves the row alone until then
	// (CancelHold).
	CancellingUntil time.Time
	// Disabled is when the series was disabled (Client.Disable); zero for
	// a task that runs. A disabled series' Due is the occurrence it had
	// next then.
	Disabled time.Time
	// ETag is the row's version as Add, Reschedule or a lookup last saw
	// it (for MarkSent and Envelope).
	ETag string
	// Problem is set, when listing, for a malformed row that the mover will
	// set aside; the other fields are then best effort.
	Problem string
}

// DefaultType is the handler type of rows that name none.
const DefaultType = "default"

// MaxIDLen is the longest task id accepted.
const MaxIDLen = 200

// MaxMaxAttempts is the largest MaxAttempts accepted.
const MaxMaxAttempts = 1000

// Validation and lookup errors. Every validation error wraps ErrInvalid and
// names the bad value and what is accepted.
var (
	// ErrInvalid: the item (or an argument) was refused before anything was written.
	ErrInvalid = errors.New("invalid")
	// ErrInvalidOptions: NewAzure, NewMemory or NewMover refused its
	// options. It wraps ErrInvalid.
	ErrInvalidOptions = fmt.Errorf("%w options", ErrInvalid)
	// ErrPayloadTooLarge: the payload exceeds Options.MaxPayload (or needs
	// a blob and no payload store is configured). Also wraps ErrInvalid.
	ErrPayloadTooLarge = errors.New("payload too large")
	// ErrAlreadyScheduled: Add found the id already scheduled and
	// AddOptions.Replace was not set.
	ErrAlreadyScheduled = errors.New("already scheduled")
	// ErrAlreadySent: the task's message was already sent early and the
	// change asked for cannot be honoured (Options.ChangesAfterSend is
	// false: the workers keep no run records).
	ErrAlreadySent = errors.New("already sent to the queue")
	// ErrNotFound: no pending task has that id.
	ErrNotFound = notfound.New("not scheduled")
	// ErrBeingCancelled: Reschedule (and RunNow) refused a task whose
	// cancel holds its row (Item.CancellingUntil): the cancel is telling
	// the task's batch or dependents that it was cancelled, or failed
	// after telling them.
	ErrBeingCancelled = errors.New("being cancelled")
)

var (
	idRE = regexp.MustCompile(`^[A-Za-z0-9._:-]+$`)
)

// ValidateID checks a task id given to Add: 1–200 characters from
// A-Z a-z 0-9 . _ : -. Characters outside that set are refused because ids
// travel in table keys, blob names, queue messages and environment
// variables; in particular '@' separates a series id from an occurrence's
// due time in run ids, and '~' is reserved for the table's own rows.
// (Lookups by id accept any id a directly inserted row may carry.)
func ValidateID(id string) error {
	switch {
	case id == "":
		return fmt.Errorf("%w: empty task id", ErrInvalid)
	case len(id) > MaxIDLen:
		return fmt.Errorf("%w: task id %.40q… is %d characters; the limit is %d", ErrInvalid, id, len(id), MaxIDLen)
	case !idRE.MatchString(id):
		return fmt.Errorf("%w: task id %q: use only letters, digits and . _ : - ('@', '~', '/', spaces and quotes are not allowed)", ErrInvalid, id)
	case id == "." || id == "..":
		// A URL path cannot name it: HTTP clients and servers clean the
		// segment away (a review found such a task unreachable through
		// the API and its clients).
		return fmt.Errorf("%w: task id %q: an id of one or two dots alone cannot be named in a URL; add a letter or digit", ErrInvalid, id)
	}
	return nil
}

// ValidateType checks a task type: 1–64 lower-case letters, digits, '_'
// and '-', starting with a letter or digit. It is the one rule of every
// place a type is named — scheduling, the mover's check of stored rows,
// Worker.Handle, pauses, blackboard keys and the configuration's
// handlers.<type> and limits.<type> (and their LEASECRON_HANDLERS_<TYPE>_…
// variables, which cannot tell case or hold a '.') — so a type that can be
// scheduled can always be given a handler. The error wraps ErrInvalid.
func ValidateType(typ string) error {
	if err := tasktype.Validate(typ); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return nil
}

// validateLookupID checks an id given to Get, Cancel or Reschedule. Rows
// inserted directly may carry ids outside ValidateID's set, so this only
// requires a usable table key.
func validateLookupID(id string) error {
	if id == "" {
		return fmt.Errorf("%w: empty task id", ErrInvalid)
	}
	if len(id) > 1000 {
		return fmt.Errorf("%w: task id %.40q… is %d bytes; no task id is longer than 1000", ErrInvalid, id, len(id))
	}
	if !utf8.ValidString(id) || strings.ContainsAny(id, "/\\#?") {
		return fmt.Errorf("%w: task id %q cannot be part of a table key (valid UTF-8 without / \\ # ?)", ErrInvalid, id)
	}
	for _, r := range id {
		if r < 0x20 || (r >= 0x7f && r <= 0x9f) {
			return fmt.Errorf("%w: task id %q contains control character U+%04X", ErrInvalid, id, r)
		}
	}
	return nil
}

// crockford is lower-case Crockford base32, in ASCII order.
const crockford = "0123456789abcdefghjkmnpqrstvwxyz"

// newID returns a fresh task id: 26 lower-case base32 characters, the first
// 10 encoding the millisecond time t (so ids sort by creation time) and the
// rest 80 random bits.
// NewID returns a new task id: time-ordered (milliseconds, then 50
// random bits), in Crockford base 32.
func NewID(t time.Time) string { return newID(t) }

func newID(t time.Time) string {
	var b [26]byte
	ms := uint64(t.UnixMilli())
	for i := 9; i >= 0; i-- {
		b[i] = crockford[ms&31]
		ms >>= 5
	}
	var r [10]byte
	_, _ = rand.Read(r[:])
	// 80 bits → 16 characters of 5 bits.
	var acc uint64
	bits := 0
	j := 10
	for _, x := range r {
		acc = acc<<8 | uint64(x)
		bits += 8
		for bits >= 5 {
			bits -= 5
			b[j] = crockford[(acc>>uint(bits))&31]
			j++
		}
	}
	return string(b[:])
}

// jsonLen is the length of s encoded as a JSON string (how much room it
// takes inside a queue envelope).
func jsonLen(s string) int {
	b, _ := json.Marshal(s)
	return len(b)
}

// ParseWhen turns the CLI's --at / --in into a due time. at is an RFC 3339
// time with a zone ("2025-01-02T15:04:05Z", "2025-01-02T16:04:05+01:00",
// fractional seconds allowed); in is a non-negative Go duration from now
// ("90s", "10m", "2h30m"). Give at most one; with neither the task is due
// now.
func ParseWhen(at, in string, now time.Time) (time.Time, error) {
	at, in = strings.TrimSpace(at), strings.TrimSpace(in)
	switch {
	case at != "" && in != "":
		return time.Time{}, fmt.Errorf("%w: give either --at (%q) or --in (%q), not both", ErrInvalid, at, in)
	case at != "":
		t, err := time.Parse(time.RFC3339Nano, at)
		if err != nil {
			if _, err2 := time.Parse("2006-01-02T15:04:05", at); err2 == nil {
				return time.Time{}, fmt.Errorf("%w: time %q has no zone; add Z (UTC) or an offset such as +02:00", ErrInvalid, at)
			}
			return time.Time{}, fmt.Errorf("%w: time %q is not RFC 3339; want e.g. 2025-01-02T15:04:05Z or 2025-01-02T16:04:05+01:00", ErrInvalid, at)
		}
		if err := checkDue(t); err != nil {
			return time.Time{}, fmt.Errorf("%w: %w", ErrInvalid, err)
		}
		if t.IsZero() {
			return time.Time{}, fmt.Errorf("%w: time %q is the zero time, which stands for no due time; give a real time, or leave --at out for now", ErrInvalid, at)
		}
		return t.UTC(), nil
	case in != "":
		d, err := time.ParseDuration(in)
		if err != nil {
			return time.Time{}, fmt.Errorf("%w: delay %q is not a duration; want e.g. 90s, 10m, 2h30m", ErrInvalid, in)
		}
		if d < 0 {
			return time.Time{}, fmt.Errorf("%w: delay %q is negative; want a duration of 0 or more (use --at for a past time)", ErrInvalid, in)
		}
		return now.Add(d).UTC(), nil
	}
	return now.UTC(), nil
}

// EndHeard reports whether others hear of the task's end: tasks wait for
// it (Waiters), or it is a member of a batch (not the batch's callback).
func (it Item) EndHeard() bool {
	return it.Waiters || it.Batch != "" && !it.Callback
}
