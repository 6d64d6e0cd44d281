package leasecron

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/leasecron/leasecron/internal/clock"
	"github.com/leasecron/leasecron/internal/runs"
	"github.com/leasecron/leasecron/internal/storage"
	"github.com/leasecron/leasecron/leasecrontype"
	"github.com/leasecron/leasecron/queue"
	"github.com/leasecron/leasecron/schedule"
	"github.com/leasecron/leasecron/trafficcop"
)

// Errors callers branch on.
var (
	// ErrNotFound is wrapped by every "no such task, run, key or dead
	// letter" error of every package (leasecrontype.ErrNotFound).
	ErrNotFound = leasecrontype.ErrNotFound
	// ErrAlreadyScheduled: Schedule was given an id that is pending.
	ErrAlreadyScheduled = schedule.ErrAlreadyScheduled
	// ErrAlreadyFinished: Cancel found the run already finished.
	ErrAlreadyFinished = runs.ErrAlreadyFinished
)

// ClientOptions configure NewClient.
type ClientOptions struct {
	// Storage locates the account. Required.
	Storage Storage
	// Names of the storage resources. Empty fields take defaults.
	Names Names
	// NoRuns turns off run records: Cancel can only remove tasks that have
	// not been moved yet, and there is no run history.
	NoRuns bool
	// Runs configures run records (retention).
	Runs RunsOptions
	// MaxPayload is the largest payload accepted, in bytes. Default
	// 1048576 (1 MiB).
	MaxPayload int
	// Logger receives warnings. Default slog.Default().
	Logger *slog.Logger
	// Clock is the time source. Default the real clock.
	Clock leasecrontype.Clock
	// Limits, MaxDepth and ResumeBelow describe the fleet as its workers
	// are configured (WorkerOptions.Limits, MoverOptions.MaxDepth and
	// ResumeBelow), for Limits and Backpressure.
	Limits                map[string]int
	MaxDepth, ResumeBelow int
}

// Client schedules, cancels and inspects tasks. It is safe for concurrent use.
type Client struct {
	parts
	o       ClientOptions
	dead    *queue.DeadLetters
	counter *storage.Counter // nil for a worker's client (see Worker.Requests)
}

// Requests returns the storage requests this client has made, by
// operation (empty for a worker's Client; see Worker.Requests).
func (c *Client) Requests() RequestCounts {
	if c.counter == nil {
		return RequestCounts{ByOp: map[string]int64{}}
	}
	return requestCountsOf(c.counter)
}

// NewClient connects to the account (without contacting it yet). Tables,
// queues and containers are created on first use.
func NewClient(o ClientOptions) (*Client, error) {
	o.Names = o.Names.withDefaults()
	if err := o.Names.validate(); err != nil {
		return nil, err
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	o.Clock = clock.OrReal(o.Clock)
	if err := o.Runs.fill(); err != nil {
		return nil, err
	}
	counter := storage.NewCounter()
	sc, err := storage.New(o.Storage.config(counter))
	if err != nil {
		return nil, err
	}
	p, err := newParts(sc, o.Names, o.NoRuns, o.Runs, o.MaxPayload, "", o.Clock, o.Logger)
	if err != nil {
		return nil, err
	}
	c := clientOf(p, o)
	c.counter = counter
	return c, nil
}

// clientOf is the Client over parts already built (a Worker's; see
// Worker.Client); o must have its defaults filled in.
func clientOf(p parts, o ClientOptions) *Client {
	c := &Client{o: o, parts: p}
	var rq queue.RunRequeuer
	if c.runs != nil {
		rq = c.runs
	}
	c.dead = queue.NewDeadLetters(c.queue, rq)
	return c
}

// Clock returns the client's time source.
func (c *Client) Clock() leasecrontype.Clock { return c.o.Clock }

// RunRecords reports whether the client keeps run records (see
// ClientOptions.NoRuns).
func (c *Client) RunRecords() bool { return c.runs != nil }

// Payload reads a payload kept in a blob (Item.PayloadBlob, a claim-check
// reference) and returns its bytes.
func (c *Client) Payload(ctx context.Context, ref string) ([]byte, error) {
	return c.payloads.Get(ctx, ref)
}

// Recent returns the newest n runs of a recurring series, newest first:
// one read of the series' summary, or a query of its history when the
// summary does not say (written by an earlier release).
func (c *Client) Recent(ctx context.Context, series string, n int) ([]Run, error) {
	if c.runs != nil {
		rs, ok, err := c.runs.Recent(ctx, series)
		if err != nil || ok {
			return rs[:min(n, len(rs))], err
		}
	}
	p, err := c.Runs(ctx, RunQuery{Series: series, Limit: n})
	return p.Runs, err
}

// Schedule adds a task. An empty ID is generated; an id that is already
// pending is refused with ErrAlreadyScheduled unless replace is true.
// Input is validated before anything is written.
func (c *Client) Schedule(ctx context.Context, it Item, replace bool) (Item, error) {
	// On a fresh account Add creates the table and payload container. The
	// run record starts when the mover sends the task: until then the
	// pending row is the task's record (Status reads it).
	return c.sched.Add(ctx, it, schedule.AddOptions{Replace: replace})
}

// CancelResult says what Cancel did.
type CancelResult struct {
	// ID is the task id.
	ID string
	// Removed is true when the task was still pending and its row was
	// deleted (a recurring series stops).
	Removed bool
	// Marked is true when the task had already been moved to the queue and
	// its run was marked cancelled: the worker that receives it
	// acknowledges it without running it.
	Marked bool
}

// Cancel stops a task: before it is moved its row is deleted; after, its
// run is marked cancelled. It returns ErrNotFound for an unknown id and
// ErrAlreadyFinished for a run that has already ended.
func (c *Client) Cancel(ctx context.Context, id string) (CancelResult, error) {
	res := CancelResult{ID: id}
	it, err := c.sched.Cancel(ctx, id)
	switch {
	case err == nil:
		res.Removed = true
	case !errors.Is(err, ErrNotFound):
		return res, err
	}
	if c.runs == nil {
		if !res.Removed {
			return res, fmt.Errorf("%w: no pending task %q (run records are off, so a task already moved to the queue cannot be cancelled)", ErrNotFound, id)
		}
		return res, nil
	}
	// Record the run cancelled too: the row may have been moved while we
	// deleted it, and status then says what became of the task.
	var rerr error
	if res.Removed && it.Recurrence == "" {
		rerr = c.runs.CancelPending(ctx, id, runs.Meta{Type: it.Type, Due: it.Due})
	} else {
		_, rerr = c.runs.Cancel(ctx, id)
	}
	switch {
	case rerr == nil:
		res.Marked = !res.Removed
	case errors.Is(rerr, runs.ErrNotFound):
		if !res.Removed {
			return res, fmt.Errorf("%w: no pending task or run with id %q", ErrNotFound, id)
		}
	case errors.Is(rerr, runs.ErrAlreadyFinished):
		if !res.Removed {
			return res, rerr
		}
	default:
		if !res.Removed {
			return res, rerr
		}
		c.o.Logger.Warn("run record not marked cancelled", "task_id", id, "err", rerr)
	}
	return res, nil
}

// Reschedule moves a pending task to a new due time atomically.
func (c *Client) Reschedule(ctx context.Context, id string, due time.Time) (Item, error) {
	return c.sched.Reschedule(ctx, id, due)
}

// Get returns a pending task.
func (c *Client) Get(ctx context.Context, id string) (Item, error) {
	it, err := c.sched.Get(ctx, id)
	return it, err
}

// List returns a page of pending tasks in due order.
func (c *Client) List(ctx context.Context, o schedule.ListOptions) ([]Item, string, error) {
	return c.sched.List(ctx, o) // a missing table lists as empty
}

// Status is what is known about a task id: its pending row and/or its run
// record.
type Status struct {
	// ID is the task id.
	ID string
	// Pending is the scheduled row, if the task is still in the table.
	Pending *Item
	// Run is the run record, if there is one.
	Run *Run
}

// State summarises Status in one word: the run's state, or "scheduled".
func (s Status) State() string {
	switch {
	case s.Run != nil && (s.Pending == nil || (s.Run.State != runs.Scheduled && s.Run.State != runs.Queued)):
		// While its row is still in the schedule a task is scheduled, even
		// if the mover has just recorded its run as queued before sending.
		return string(s.Run.State)
	case s.Pending != nil:
		return string(runs.Scheduled)
	}
	return "unknown"
}

// Status looks a task id up in the schedule and in the run records.
func (c *Client) Status(ctx context.Context, id string) (Status, error) {
	st := Status{ID: id}
	it, err := c.sched.Get(ctx, id)
	switch {
	case err == nil:
		st.Pending = &it
	case !errors.Is(err, ErrNotFound):
		return st, err
	}
	if c.runs != nil {
		r, err := c.runs.Get(ctx, id)
		switch {
		case err == nil:
			pr := r.Public()
			st.Run = &pr
		case errors.Is(err, runs.ErrExpired) && st.Pending == nil:
			return st, err
		case !errors.Is(err, runs.ErrNotFound):
			return st, err
		}
	}
	if st.Pending == nil && st.Run == nil {
		return st, fmt.Errorf("%w: no pending task or run with id %q", ErrNotFound, id)
	}
	return st, nil
}

// DeadLetters returns the dead-letter operations (list, requeue, purge).
func (c *Client) DeadLetters() *queue.DeadLetters { return c.dead }

// Stats is a fleet-wide snapshot for operators.
type Stats struct {
	// QueueDepth is the work queue's approximate message count.
	QueueDepth int `json:"queue_depth"`
	// PoisonDepth is the poison queue's approximate message count.
	PoisonDepth int `json:"poison_depth"`
	// Due is the due backlog still in the schedule table.
	Due schedule.DueStats `json:"due"`
	// Counters sums every worker's flushed counters (handled, failed,
	// retried, dead, duplicates, ...).
	Counters *Counters `json:"counters,omitempty"`
	// Leader is who holds the traffic-cop lease.
	Leader trafficcop.HolderInfo `json:"leader"`
}

// Stats gathers queue depths, the due backlog, the leader and the workers'
// counters.
func (c *Client) Stats(ctx context.Context) (Stats, error) {
	var s Stats
	var err error
	if s.QueueDepth, err = c.queue.Depth(ctx); err != nil {
		return s, fmt.Errorf("queue depth: %w", err)
	}
	if s.PoisonDepth, err = c.queue.Poison().Count(ctx); err != nil {
		return s, fmt.Errorf("poison queue depth: %w", err)
	}
	if s.Due, err = c.sched.Due(ctx, c.o.Clock.Now()); err != nil {
		return s, fmt.Errorf("due backlog: %w", err)
	}
	if c.runs != nil {
		sum, err := c.runs.SumCounters(ctx)
		if err != nil {
			return s, fmt.Errorf("counters: %w", err)
		}
		cs := countersOf(sum)
		s.Counters = &cs
	}
	if s.Leader, err = c.Leader(ctx); err != nil {
		return s, err
	}
	return s, nil
}

// Leader reads who holds the traffic-cop lease, without competing for it.
func (c *Client) Leader(ctx context.Context) (trafficcop.HolderInfo, error) {
	h, err := trafficcop.ReadHolder(ctx, c.lease)
	if errors.Is(err, storage.ErrNotFound) {
		return trafficcop.HolderInfo{State: trafficcop.LeaseAvailable}, nil
	}
	return h, err
}
