package leasecron

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/leasecron/leasecron/internal/ctxlock"
	"github.com/leasecron/leasecron/internal/runs"
	"github.com/leasecron/leasecron/internal/storage"
	"github.com/leasecron/leasecron/internal/trunc"
	"github.com/leasecron/leasecron/queue"
	"github.com/leasecron/leasecron/schedule"
)

// The states of a bulk operation (Bulk.State).
const (
	BulkRunning   = runs.BulkRunning
	BulkSucceeded = runs.BulkSucceeded
	BulkFailed    = runs.BulkFailed
)

// BulkType is the task type of bulk operations. Every worker runs it
// itself; a handler registered for it is ignored.
const BulkType = "leasecron-bulk"

// bulkMaxAttempts lets a bulk operation be taken over many times (after
// crashes, or MaxRunTime) before it is given up.
const bulkMaxAttempts = 50

// BulkKind is what a bulk operation does to everything its filter
// matches.
type BulkKind string

// The bulk operations.
const (
	// BulkRequeueDead moves the dead letters matching Type, Reason and
	// the due range Since–Until back to the work queue with their
	// attempts reset (the failed or dead runs of a type within a time
	// range: a dead run is a dead letter).
	BulkRequeueDead BulkKind = "requeue-dead"
	// BulkCancelPending cancels the pending tasks of Type and/or whose
	// id starts with IDPrefix (a recurring series among them stops).
	BulkCancelPending BulkKind = "cancel-pending"
	// BulkDisableSeries disables every recurring series of Type that is
	// not disabled already.
	BulkDisableSeries BulkKind = "disable-series"
)

// BulkFilter selects what a bulk operation acts on; every field set must
// match.
type BulkFilter struct {
	// Type keeps items of this task type.
	Type string `json:"type,omitempty"`
	// Reason (requeue-dead) keeps dead letters whose reason (with the
	// last error) contains it.
	Reason string `json:"reason,omitempty"`
	// IDPrefix (cancel-pending) keeps tasks whose id starts with it.
	IDPrefix string `json:"id_prefix,omitempty"`
	// Queue (cancel-pending, disable-series) keeps tasks of this named
	// queue: the task's own, else its type's route, else "default".
	Queue string `json:"queue,omitempty"`
	// Since and Until (requeue-dead) keep dead letters of tasks due at or
	// after Since and before Until.
	Since time.Time `json:"since,omitzero"`
	Until time.Time `json:"until,omitzero"`
}

// BulkOp is a bulk operation: a kind and its filter.
type BulkOp struct {
	Kind   BulkKind   `json:"kind"`
	Filter BulkFilter `json:"filter"`
}

// ParseBulkOp builds an operation from text, as the command line and the
// dashboard take it: kind is one of the BulkKind values; since and until
// are each empty, a duration before now ("24h") or an RFC 3339 time. The
// result is validated.
func ParseBulkOp(kind, typ, reason, idPrefix, since, until string, now time.Time) (BulkOp, error) {
	return ParseBulkOpInQueue(kind, typ, reason, idPrefix, "", since, until, now)
}

// ParseBulkOpInQueue is ParseBulkOp with a named queue in the filter
// (BulkFilter.Queue; "" for any).
func ParseBulkOpInQueue(kind, typ, reason, idPrefix, queueName, since, until string, now time.Time) (BulkOp, error) {
	op := BulkOp{Kind: BulkKind(strings.TrimSpace(kind)), Filter: BulkFilter{Type: strings.TrimSpace(typ), Reason: reason, IDPrefix: idPrefix, Queue: strings.TrimSpace(queueName)}}
	for _, w := range []struct {
		name, text string
		to         *time.Time
	}{{"since", since, &op.Filter.Since}, {"until", until, &op.Filter.Until}} {
		text := strings.TrimSpace(w.text)
		if text == "" {
			continue
		}
		if d, err := time.ParseDuration(text); err == nil && d >= 0 {
			*w.to = now.Add(-d)
			continue
		}
		t, err := time.Parse(time.RFC3339, text)
		if err != nil {
			return op, specErr(w.name, acceptRange, fmt.Errorf("bulk %s: %q: want a duration before now (24h) or an RFC 3339 time (2026-11-25T09:00:00Z)", op.Kind, text))
		}
		*w.to = t
	}
	return op, op.Validate()
}

// What a bulk operation's fields accept, for SpecError.
const (
	acceptKind     = "requeue-dead, cancel-pending or disable-series"
	acceptRange    = "a duration before now (24h) or an RFC 3339 time"
	acceptDeadBy   = "none: dead letters are selected by type, reason and due range (since, until)"
	acceptPendBy   = "none: pending tasks are selected by type, id prefix and queue"
	acceptSeriesBy = "none: series are selected by type (and queue)"
)

// Validate refuses an operation that names no known kind, a filter field
// the kind does not use, a bad type, or an empty range; cancel-pending and
// disable-series need a filter (a type, or an id prefix). The error is a
// SpecError naming the field at fault by its JSON name (BulkRequest of
// the HTTP API: kind, type, reason, id_prefix, queue, since, until).
func (op BulkOp) Validate() error {
	f := op.Filter
	bad := func(field, accepted, format string, a ...any) error {
		return specErr(field, accepted, fmt.Errorf("bulk %s: %s", op.Kind, fmt.Sprintf(format, a...)))
	}
	if f.Type != "" {
		if err := schedule.ValidateType(f.Type); err != nil {
			return specErr("type", acceptType, fmt.Errorf("bulk %s: %w", op.Kind, err))
		}
	}
	if err := queue.ValidateRouteQueue(f.Queue); err != nil {
		return bad("queue", fmt.Sprintf(acceptQueue, queue.MaxRouteQueueLen), "%v", err)
	}
	// other names the first filter field given that the kind does not use.
	other := func(fields ...string) string {
		given := map[string]bool{"queue": f.Queue != "", "id_prefix": f.IDPrefix != "", "reason": f.Reason != "", "since": !f.Since.IsZero(), "until": !f.Until.IsZero()}
		for _, name := range fields {
			if given[name] {
				return name
			}
		}
		return ""
	}
	switch op.Kind {
	case BulkRequeueDead:
		if name := other("queue", "id_prefix"); name != "" {
			return bad(name, acceptDeadBy, "dead letters are selected by type, reason and due range; a queue or an id prefix selects pending tasks")
		}
		if !f.Since.IsZero() && !f.Until.IsZero() && !f.Since.Before(f.Until) {
			return bad("since", "a time before until", "since %s is not before until %s", f.Since.UTC().Format(time.RFC3339), f.Until.UTC().Format(time.RFC3339))
		}
	case BulkCancelPending:
		if name := other("reason", "since", "until"); name != "" {
			return bad(name, acceptPendBy, "pending tasks are selected by type, id prefix and queue only")
		}
		if f.Type == "" && f.IDPrefix == "" && f.Queue == "" {
			return bad("type", "a type, an id prefix or a queue", "give a type, an id prefix or a queue (cancelling every pending task at once is not offered)")
		}
	case BulkDisableSeries:
		if name := other("reason", "id_prefix", "since", "until"); name != "" {
			return bad(name, acceptSeriesBy, "series are selected by type (and queue) only")
		}
		if f.Type == "" {
			return bad("type", acceptType, "give the type of the series to disable")
		}
	default:
		return specErr("kind", acceptKind, fmt.Errorf("bulk operation %q: want %s, %s or %s", op.Kind, BulkRequeueDead, BulkCancelPending, BulkDisableSeries))
	}
	return nil
}

// String describes the operation: its kind and filter.
func (op BulkOp) String() string {
	parts := []string{string(op.Kind)}
	f := op.Filter
	for _, kv := range [][2]string{{"type", f.Type}, {"reason", f.Reason}, {"id", f.IDPrefix}, {"queue", f.Queue}} {
		if kv[1] != "" {
			v := kv[1]
			if kv[0] == "id" {
				v += "*"
			}
			parts = append(parts, kv[0]+":"+v)
		}
	}
	if !f.Since.IsZero() {
		parts = append(parts, "since:"+f.Since.UTC().Format(time.RFC3339))
	}
	if !f.Until.IsZero() {
		parts = append(parts, "until:"+f.Until.UTC().Format(time.RFC3339))
	}
	if len(parts) == 1 {
		parts = append(parts, "(all)")
	}
	return strings.Join(parts, " ")
}

// unfiltered reports whether a requeue-dead operation takes every dead
// letter.
func (f BulkFilter) unfiltered() bool {
	return f.Type == "" && f.Reason == "" && f.Since.IsZero() && f.Until.IsZero()
}

// deadMatch reports whether a dead letter passes f.
func (f BulkFilter) deadMatch(d queue.DeadLetter) bool {
	if f.Type != "" && d.Type != f.Type {
		return false
	}
	if f.Reason != "" && !strings.Contains(d.Reason, f.Reason) {
		return false
	}
	if !f.Since.IsZero() || !f.Until.IsZero() {
		env, ok := d.Envelope()
		if !ok || (!f.Since.IsZero() && env.Due.Before(f.Since)) || (!f.Until.IsZero() && !env.Due.Before(f.Until)) {
			return false
		}
	}
	return true
}

// Bulk is a bulk operation as stored: what it does, who started it and
// how far it has got.
type Bulk struct {
	// ID is the operation's id, also the id of the task that runs it.
	ID string `json:"id"`
	Op BulkOp `json:"op"`
	// By is who started it.
	By string `json:"by,omitempty"`
	// Expect is how many matched when it was confirmed.
	Expect int `json:"expect"`
	// Done counts the items acted on; Failed those that could not be
	// (LastError says why, for the latest).
	Done   int `json:"done"`
	Failed int `json:"failed"`
	// State is running, succeeded or failed.
	State     string `json:"state"`
	LastError string `json:"last_error,omitempty"`
	// Attempts counts the workers that have run it (more than one when
	// one took over from another that stopped or crashed).
	Attempts int       `json:"attempts"`
	Created  time.Time `json:"created"`
	Updated  time.Time `json:"updated"`
	Finished time.Time `json:"finished,omitzero"`

	etag string // the row's version, as read or last written
}

// Percent is how far it has got against Expect (100 when finished).
func (b Bulk) Percent() int {
	if b.State != runs.BulkRunning {
		return 100
	}
	if b.Expect <= 0 {
		return 0
	}
	return min(99, (b.Done+b.Failed)*100/b.Expect)
}

// Summary says, in a line, how far it has got.
func (b Bulk) Summary() string {
	verb := map[BulkKind]string{BulkRequeueDead: "requeued", BulkCancelPending: "cancelled", BulkDisableSeries: "disabled"}[b.Op.Kind]
	s := fmt.Sprintf("%d %s, %d failed, of %d matching when confirmed", b.Done, verb, b.Failed, b.Expect)
	switch b.State {
	case runs.BulkSucceeded:
		return "done: " + s
	case runs.BulkFailed:
		return "failed: " + s
	}
	return s
}

func bulkOf(r runs.BulkRow) Bulk {
	b := Bulk{ID: r.ID, By: r.By, Expect: r.Expect, Done: r.Done, Failed: r.Failed, State: r.State, LastError: r.Error,
		Attempts: r.Attempts, Created: r.Created, Updated: r.Updated, Finished: r.Finished, etag: r.ETag}
	b.Op.Kind = BulkKind(r.Kind)
	_ = json.Unmarshal([]byte(r.Filter), &b.Op.Filter)
	return b
}

func (b Bulk) row() runs.BulkRow {
	f, _ := json.Marshal(b.Op.Filter)
	return runs.BulkRow{ID: b.ID, Kind: string(b.Op.Kind), Filter: string(f), By: b.By, Expect: b.Expect, Done: b.Done, Failed: b.Failed,
		State: b.State, Error: b.LastError, Attempts: b.Attempts, Created: b.Created, Updated: b.Updated, Finished: b.Finished, ETag: b.etag}
}

// CountBulk says how many items op matches now: what the confirmation of
// the operation names. An unfiltered requeue-dead costs one request (the
// poison queue's approximate count); a filtered one reads the dead runs'
// records (run records needed), 1,000 per query; cancel-pending and
// disable-series list the pending tasks of the type, 1,000 per query.
func (c *Client) CountBulk(ctx context.Context, op BulkOp) (int, error) {
	if err := op.Validate(); err != nil {
		return 0, err
	}
	f := op.Filter
	n := 0
	switch op.Kind {
	case BulkRequeueDead:
		if f.unfiltered() {
			return c.dead.Count(ctx)
		}
		if c.runs == nil {
			return 0, fmt.Errorf("%w: counting the dead letters of a filter reads their run records", ErrNoRunRecords)
		}
		q := RunQuery{State: RunDead, Type: f.Type, Since: f.Since, Limit: 1000}
		for {
			p, err := c.Runs(ctx, q)
			if err != nil {
				return 0, err
			}
			for _, r := range p.Runs {
				if (f.Until.IsZero() || r.Due.Before(f.Until)) && (f.Reason == "" || strings.Contains(r.LastError, f.Reason)) {
					n++
				}
			}
			if p.Continue == "" {
				return n, nil
			}
			q.Continue = p.Continue
		}
	default:
		err := c.eachPending(ctx, op, func(Item) error { n++; return nil })
		return n, err
	}
}

// eachPending calls do for every pending task op matches, a page of up
// to 1,000 at a time.
func (c *Client) eachPending(ctx context.Context, op BulkOp, do func(Item) error) error {
	lo := ListOptions{Type: op.Filter.Type, Limit: 1000, Recurring: op.Kind == BulkDisableSeries}
	for {
		items, next, err := c.sched.List(ctx, lo)
		if err != nil {
			return err
		}
		for _, it := range items {
			if !c.bulkSelects(op, it) {
				continue
			}
			if err := do(it); err != nil {
				return err
			}
		}
		if next == "" {
			return nil
		}
		lo.Continuation = next
	}
}

// bulkSelects reports whether op (cancel-pending or disable-series)
// selects the pending task it: its type, id prefix and queue, and for a
// disable an enabled series.
func (c *Client) bulkSelects(op BulkOp, it Item) bool {
	switch {
	case op.Filter.Type != "" && it.Type != op.Filter.Type,
		!strings.HasPrefix(it.ID, op.Filter.IDPrefix),
		op.Kind == BulkDisableSeries && (it.Recurrence == "" || !it.Disabled.IsZero()):
		return false
	}
	return op.Filter.Queue == "" || c.queue.Route(queue.Envelope{Type: it.Type, Queue: it.Queue}).Queue == op.Filter.Queue
}

// StartBulk starts op as a resumable operation on the fleet: it records
// the operation and schedules the task that runs it (type BulkType, due
// now), which a worker picks up. expect is the count the user confirmed
// (CountBulk); by names who starts it (empty: user@host of this
// process). A worker that stops or crashes while running it hands it on:
// another takes it over and continues (its counts too, up to one batch
// short after a crash), and nothing is applied twice — each item is
// looked up afresh and acted on only while it still matches. Follow it
// with Client.Bulk. It needs run records.
//
// An error means the operation did not start, with one exception that no
// call can rule out: a write whose every try answered an error may have
// committed. StartBulk marks such an operation failed, so that it is not
// left running with nothing to run it; a caller that must not start an
// operation twice gives it an id of its own (StartBulkAs) and sends the
// same id again.
func (c *Client) StartBulk(ctx context.Context, op BulkOp, expect int, by string) (Bulk, error) {
	now := c.o.Clock.Now().UTC()
	rnd := make([]byte, 3)
	_, _ = rand.Read(rnd)
	return c.startBulk(ctx, "bulk-"+now.Format("20060102-150405")+"-"+hex.EncodeToString(rnd), op, expect, by, now, true)
}

// MaxBulkIDLen is the longest id StartBulkAs takes.
const MaxBulkIDLen = 100

// StartBulkAs is StartBulk with the operation's id chosen by the caller:
// "bulk-" and 1 to 95 letters, digits, '-', '_' or '.' (a UUID after the
// prefix, say). The id makes a start safe to send again: when an
// operation of that id exists, nothing is started and the error wraps
// ErrBulkExists. Read it with Bulk to tell whether it is the one asked
// for, and whether it started: one failed with no attempt made
// (Attempts 0) never ran — its start failed — and another start needs
// another id. A start that answered an error after writing its record
// unanswered schedules the record's task all the same (best effort: an
// operation still running with Attempts 0 minutes later, in an outage
// that refused that too, has none, and needs another id).
func (c *Client) StartBulkAs(ctx context.Context, id string, op BulkOp, expect int, by string) (Bulk, error) {
	if err := ValidateBulkID(id); err != nil {
		return Bulk{}, err
	}
	return c.startBulk(ctx, id, op, expect, by, c.o.Clock.Now().UTC(), false)
}

// ValidateBulkID refuses an id StartBulkAs would not take, naming it and
// what is accepted (a SpecError of field "id", wrapping ErrInvalidTask).
func ValidateBulkID(id string) error {
	rest, ok := strings.CutPrefix(id, "bulk-")
	valid := ok && rest != "" && len(id) <= MaxBulkIDLen && !strings.ContainsFunc(rest, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.')
	})
	if !valid {
		return &SpecError{Field: "id", Accepted: fmt.Sprintf(`"bulk-" and 1 to %d letters, digits, '-', '_' or '.'`, MaxBulkIDLen-len("bulk-")),
			Err: fmt.Errorf("%w: bulk operation id %.60q is not \"bulk-\" and up to %d letters, digits, '-', '_' or '.'", ErrInvalidTask, id, MaxBulkIDLen-len("bulk-"))}
	}
	return nil
}

// startBulk starts op as id; drawn says the id was drawn here, so that a
// row of it can only be this call's.
func (c *Client) startBulk(ctx context.Context, id string, op BulkOp, expect int, by string, now time.Time, drawn bool) (Bulk, error) {
	if err := op.Validate(); err != nil {
		return Bulk{}, err
	}
	if c.runs == nil {
		return Bulk{}, fmt.Errorf("%w: a bulk operation keeps its progress with the run records", ErrNoRunRecords)
	}
	if expect < 0 {
		return Bulk{}, fmt.Errorf("%w: bulk %s: expected count %d: want the number CountBulk gave", ErrInvalidTask, op.Kind, expect)
	}
	b := Bulk{ID: id, Op: op, By: by, Expect: expect, State: runs.BulkRunning, Created: now, Updated: now}
	if b.By == "" {
		b.By = whoAmI()
	}
	if err := c.runs.CreateBulk(ctx, b.row()); err != nil {
		if errors.Is(err, runs.ErrBulkExists) {
			return Bulk{}, fmt.Errorf("bulk %s: %w", id, ErrBulkExists)
		}
		// Its insert may have committed though every try answered an
		// error: left so, it would stand running with no task to run it.
		// With an id drawn here it is marked failed (best effort; a row
		// never written is written failed, an operation asked for that
		// did not start): the caller cannot ask for it again. A caller's
		// id is not marked — its row may be another send's operation,
		// running (a review's find: marked failed, its walk stopped part
		// way) — but its task is scheduled all the same (best effort): a
		// row that stands is run, and the caller's resend finds it; a
		// task with no row ends at once (runBulk), and the resend writes
		// the row for it.
		if drawn {
			c.failBulk(ctx, b, "recording it failed: "+err.Error(), now)
		} else {
			_ = c.scheduleBulkTask(context.WithoutCancel(ctx), b.ID, now)
		}
		return Bulk{}, err
	}
	if err := c.scheduleBulkTask(ctx, b.ID, now); err != nil {
		if c.failUnstarted(ctx, b.ID, "scheduling it failed: "+err.Error(), now) {
			// Its task was written after all, and has taken the
			// operation up: started.
			return c.bulkOr(ctx, b), nil
		}
		return Bulk{}, fmt.Errorf("bulk %s: schedule its task: %w", b.ID, err)
	}
	return c.bulkOr(ctx, b), nil
}

// bulkOr reads operation b back, or returns b as this call built it when
// the read is refused: recorded and its task scheduled, it runs, and an
// error would have the caller start it again (a review of the HTTP API's
// bulk route).
func (c *Client) bulkOr(ctx context.Context, b Bulk) Bulk {
	if got, err := c.Bulk(ctx, b.ID); err == nil {
		return got
	}
	return b
}

// failUnstarted marks operation id failed with why — only while no
// attempt has taken it up, over the version it read — after its task's
// schedule answered an error whose write may have committed. It reports
// whether the operation was taken up (the task ran after all: started); a
// row it cannot read is left as it is (a review's find: marked failed
// unread, a walk already under way was stopped part way, and the
// operation said to have never run).
func (c *Client) failUnstarted(ctx context.Context, id, why string, now time.Time) (started bool) {
	ctx = context.WithoutCancel(ctx)
	r, err := c.runs.GetBulk(ctx, id)
	if err != nil {
		return false
	}
	if r.State != runs.BulkRunning || r.Attempts > 0 {
		return r.State != runs.BulkFailed || r.Attempts > 0
	}
	r.State, r.Error, r.Finished = runs.BulkFailed, why, now
	_, err = c.runs.SaveBulk(ctx, r)
	return errors.Is(err, runs.ErrBulkChanged)
}

// scheduleBulkTask schedules the task that runs operation id, due now. A
// task of BulkType pending under the id already is it (an earlier send's,
// scheduled though that send's record went unanswered).
func (c *Client) scheduleBulkTask(ctx context.Context, id string, now time.Time) error {
	payload, _ := json.Marshal(map[string]string{"bulk": id})
	_, err := c.Schedule(ctx, Item{ID: id, Type: BulkType, Payload: string(payload), Due: now, MaxAttempts: bulkMaxAttempts}, nil)
	if errors.Is(err, ErrAlreadyScheduled) {
		if st, serr := c.Status(ctx, id); serr == nil && st.Pending != nil && st.Pending.Type == BulkType {
			return nil
		}
	}
	return err
}

// failBulk marks b failed with why, best effort.
func (c *Client) failBulk(ctx context.Context, b Bulk, why string, now time.Time) {
	b.State, b.LastError, b.Finished = runs.BulkFailed, why, now
	_, _ = c.runs.SaveBulk(context.WithoutCancel(ctx), b.row())
}

// Bulk returns the bulk operation id (one request); an unknown id, or
// one no operation can have (empty, or holding / \ # ? or a control
// character), is an error wrapping ErrNotFound that says which.
func (c *Client) Bulk(ctx context.Context, id string) (Bulk, error) {
	if c.runs == nil {
		return Bulk{}, ErrNoRunRecords
	}
	if err := storage.ValidateKeyPart("bulk operation id", id); err != nil {
		// Sent to storage, such an id comes back as a refusal that reads
		// like a busy service.
		return Bulk{}, fmt.Errorf("%w: no bulk operation has such an id: %w", ErrNotFound, err)
	}
	r, err := c.runs.GetBulk(ctx, id)
	if errors.Is(err, runs.ErrNoBulk) {
		return Bulk{}, fmt.Errorf("%w: %w", ErrNotFound, err)
	}
	if err != nil {
		return Bulk{}, err
	}
	return bulkOf(r), nil
}

// Bulks returns the bulk operations kept, newest first (finished ones are
// kept for runs.retention_failed).
func (c *Client) Bulks(ctx context.Context) ([]Bulk, error) {
	if c.runs == nil {
		return nil, ErrNoRunRecords
	}
	rows, err := c.runs.ListBulk(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]Bulk, len(rows))
	for i, r := range rows {
		out[i] = bulkOf(r)
	}
	return out, nil
}

// runBulk is the handler of BulkType: it runs (or continues) the
// operation its payload names, saving its counts after every batch.
func (c *Client) runBulk(ctx context.Context, task Task) error {
	var p struct {
		Bulk string `json:"bulk"`
	}
	if err := json.Unmarshal(task.Payload, &p); err != nil || p.Bulk == "" {
		return fmt.Errorf("bulk task %s: payload %q does not name an operation", task.ID, trunc.Head(string(task.Payload), 100))
	}
	b, err := c.Bulk(ctx, p.Bulk)
	if errors.Is(err, ErrNotFound) {
		// Scheduled for a caller's id whose record went unanswered and
		// was never written (startBulk): nothing to run. A resend writes
		// the record and schedules the task again.
		return nil
	}
	if err != nil {
		return err
	}
	if b.State != runs.BulkRunning {
		return nil // finished before: never applied twice
	}
	b.Attempts++
	started := c.o.Clock.Now()
	var mu ctxlock.Mutex // held across the save
	// Every save is written over the version of the row this attempt
	// read or wrote last: an attempt that stalled (its worker frozen, its
	// claim lapsed) while another took the operation up or finished it
	// stops at its next save instead of acting on what matches by then
	// (issue 38, seed 17779: a walk resumed after the operation had
	// finished cancelled tasks scheduled since).
	save := func(done, failed int, lastErr string) error {
		mu.Lock()
		defer mu.Unlock()
		b.Done += done
		b.Failed += failed
		if lastErr != "" {
			b.LastError = lastErr
		}
		_ = Progress(ctx, b.Percent(), b.Summary())
		r, err := c.runs.SaveBulk(context.WithoutCancel(ctx), b.row())
		if errors.Is(err, runs.ErrBulkChanged) {
			// Changed by this very write, whose answer was lost and
			// whose retry met its own new version? Then the row says
			// what this attempt wrote.
			// (The time written tells it from another attempt's write
			// of the same counts.)
			if cur, rerr := c.runs.GetBulk(context.WithoutCancel(ctx), b.ID); rerr == nil && cur.State == b.State &&
				cur.Attempts == b.Attempts && cur.Done == b.Done && cur.Failed == b.Failed && cur.Updated.Sub(r.Updated).Abs() < time.Microsecond {
				r, err = cur, nil
			}
		}
		if err != nil {
			return fmt.Errorf("bulk %s: %w", b.ID, err)
		}
		b.etag = r.ETag
		return nil
	}
	if err := save(0, 0, ""); err != nil {
		return err
	}
	if err := b.Op.Validate(); err != nil {
		b.State, b.LastError, b.Finished = runs.BulkFailed, err.Error(), c.o.Clock.Now()
		return save(0, 0, "")
	}
	switch b.Op.Kind {
	case BulkRequeueDead:
		err = c.requeueDeadWhere(ctx, b, started, save)
	default:
		err = c.actOnPending(ctx, b.Op, save)
	}
	if err != nil {
		return err // taken up again by the next attempt
	}
	b.State, b.Finished = runs.BulkSucceeded, c.o.Clock.Now()
	return save(0, 0, "")
}

// requeueDeadWhere walks the poison queue until a walk finds nothing more
// to requeue, and until the records hidden by a walk of an earlier
// attempt (one that crashed) have come back into sight.
func (c *Client) requeueDeadWhere(ctx context.Context, b Bulk, started time.Time, save func(done, failed int, lastErr string) error) error {
	failed := map[string]bool{} // tried and failed: counted once
	for {
		// Still this attempt's operation, before requeueing each batch.
		gate := func() error { return save(0, 0, "") }
		st, err := c.dead.RequeueWhereGated(ctx, b.ID, b.Op.Filter.deadMatch, failed, gate, func(s queue.WhereStats) error {
			return save(s.Requeued, s.Failed, s.LastError)
		})
		if err != nil {
			return err
		}
		if st.Requeued > 0 {
			continue
		}
		if b.Attempts == 1 {
			return nil // no walk of this operation left records hidden
		}
		left, err := c.dead.Count(ctx)
		if err != nil {
			return err
		}
		// Beyond what did not match or failed, records are still hidden
		// by the walk of the attempt that stopped: wait for them, as long
		// as they can be hidden.
		if left <= st.Kept+st.Failed || c.o.Clock.Now().Sub(started) > queue.BulkScanVisibility+30*time.Second {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Second):
		}
	}
}

// actOnPending cancels or disables every pending task op matches, eight
// at a time, saving the counts after each page.
func (c *Client) actOnPending(ctx context.Context, op BulkOp, save func(done, failed int, lastErr string) error) error {
	var page []Item
	flush := func() error {
		if len(page) == 0 {
			return nil
		}
		// Still this attempt's operation, before acting on the page.
		if err := save(0, 0, ""); err != nil {
			return err
		}
		var mu sync.Mutex
		var g errgroup.Group
		g.SetLimit(8)
		done, failed, last := 0, 0, ""
		for _, it := range page {
			g.Go(func() error {
				var err error
				if op.Kind == BulkDisableSeries {
					// The id may hold another series by now: only a row
					// the filter selects when it is written is disabled.
					_, err = c.disable(ctx, it.ID, func(row Item) error {
						if !c.bulkSelects(op, row) {
							return fmt.Errorf("disable %s: %w: the operation no longer selects its row (type %s, recurring %t, disabled %t)", it.ID, errNotSelected, row.Type, row.Recurrence != "", !row.Disabled.IsZero())
						}
						return nil
					})
				} else {
					// Only the task listed: its id may have been
					// scheduled again as another task meanwhile.
					_, err = c.cancel(ctx, it.ID, &cancelOnly{listed: it, selects: func(row Item) bool { return c.bulkSelects(op, row) }, exact: op.Filter.Queue != ""})
				}
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil:
					done++
				case errors.Is(err, ErrNotFound), errors.Is(err, ErrAlreadyFinished), errors.Is(err, errNotSelected):
					// Gone meanwhile (it ran, or someone else acted):
					// nothing to do.
				default:
					failed++
					last = fmt.Sprintf("%s: %v", it.ID, err)
				}
				return nil
			})
		}
		_ = g.Wait() // every call reports into the counts
		page = page[:0]
		if err := ctx.Err(); err != nil {
			return err
		}
		return save(done, failed, last)
	}
	err := c.eachPending(ctx, op, func(it Item) error {
		page = append(page, it)
		if len(page) == 100 {
			return flush()
		}
		return nil
	})
	if err != nil {
		return err
	}
	return flush()
}
