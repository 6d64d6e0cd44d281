package leasecron

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/leasecron/leasecron/internal/clock"
	"github.com/leasecron/leasecron/internal/opt"
	"github.com/leasecron/leasecron/internal/storage"
	"github.com/leasecron/leasecron/leasecrontype"
	"github.com/leasecron/leasecron/queue"
	"github.com/leasecron/leasecron/schedule"
)

// ClientOptions configure NewClient.
type ClientOptions struct {
	// Storage locates the account. Required.
	Storage Storage
	// Names of the storage resources. Empty fields take defaults.
	Names Names
	// NoRuns turns off run records: Cancel can only remove tasks that have
	// not been moved yet, and there is no run history. It must match the
	// fleet's workers (WorkerOptions.NoRuns): a client with records beside
	// workers without them answers a cancel of a task already in the queue
	// with success, and the task still runs.
	NoRuns bool
	// Runs configures run records (retention).
	Runs RunsOptions
	// MaxPayload is the largest payload accepted, in bytes. Default
	// 1048576 (1 MiB).
	MaxPayload int
	// SendWithin: a one-off task that Schedule, ScheduleMany or RunNow
	// makes due within this of now is sent to the queue by the client at
	// once (with run records on), rather than by the mover's next pass.
	// Default DefaultSendWithin (5s, one mover pass; the CLI uses
	// mover.poll_every); negative leaves every task to the mover. Give it
	// the workers' poll interval when they do not use the default: a
	// disable or cancel of a series also stops the occurrences a mover
	// pass may be moving, those due within twice it (and 2 s).
	SendWithin time.Duration
	// Logger receives warnings. Default slog.Default().
	Logger *slog.Logger
	// Clock is the time source. Default the real clock.
	Clock leasecrontype.Clock
	// Limits, MaxDepth and ResumeBelow describe the fleet as its workers
	// are configured (WorkerOptions.Limits, WorkerOptions.Mover.MaxDepth
	// and ResumeBelow), for Limits and Backpressure. With MaxDepth set, the
	// client sends tasks due now itself (SendWithin) only while the work
	// queue is below it (the depth is read at most once a second), and
	// leaves the rest to the mover, which holds back.
	Limits                map[string]int
	MaxDepth, ResumeBelow int
	// Routing says where messages go: the workers' WorkerOptions.Routing
	// should be the same.
	Routing Routing
}

// WithDefaults returns o with every zero field set to its default.
func (o ClientOptions) WithDefaults() ClientOptions {
	o.Names = o.Names.WithDefaults()
	o.Runs = o.Runs.WithDefaults()
	o.MaxPayload = cmp.Or(o.MaxPayload, schedule.DefaultMaxPayload)
	o.SendWithin = cmp.Or(o.SendWithin, DefaultSendWithin)
	o.Logger = cmp.Or(o.Logger, slog.Default())
	o.Clock = clock.OrReal(o.Clock)
	return o
}

func (o ClientOptions) validate() error {
	if err := o.Names.validate(); err != nil {
		return err
	}
	if err := o.Runs.validate(); err != nil {
		return err
	}
	if err := o.Routing.validate("ClientOptions"); err != nil {
		return err
	}
	return opt.In(ErrInvalidOptions, "ClientOptions.MaxPayload", o.MaxPayload, schedule.DefaultMaxPayload, 1, schedule.MaxPayloadLimit)
}

// Client schedules, cancels and inspects tasks. It is safe for concurrent use.
type Client struct {
	parts
	o       ClientOptions
	dead    *queue.DeadLetters
	counter *storage.Counter // nil for a worker's client (see Worker.Requests)
	budget  sendBudget       // what it may send itself under backpressure
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
	o = o.WithDefaults()
	if err := o.validate(); err != nil {
		return nil, err
	}
	counter := storage.NewCounter()
	sc, err := storage.New(o.Storage.config(counter))
	if err != nil {
		return nil, err
	}
	p, err := newParts(sc, o.Names, o.Routing, o.NoRuns, o.Runs, o.MaxPayload, "", o.Clock, o.Logger)
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
	c.dead = queue.NewDeadLetters(c.queue, rq).WithKeys(func(ctx context.Context, env queue.Envelope) error {
		states, _ := schedule.ParseUniqueStates(env.UniqueStates)
		own := schedule.Unique{For: time.Duration(env.UniqueFor) * time.Second, States: states}
		return c.sched.Retake(ctx, env.Type, env.UniqueKey, env.ID, env.Token, own, c.holdsKey)
	}).WithPendingCheck(c.pendingAgain)
	return c
}

// pendingAgain refuses the requeue of env's dead task when its id has a
// task pending now of another due time (one point read): the id was
// scheduled again since the task died. An occurrence of a series is its
// series' and is not looked up.
func (c *Client) pendingAgain(ctx context.Context, env queue.Envelope) error {
	if env.Series != "" || env.Due.IsZero() {
		return nil
	}
	it, err := c.sched.Get(ctx, env.ID)
	switch {
	case errors.Is(err, ErrNotFound):
		return nil
	case err != nil:
		return err
	case !it.Due.Truncate(100 * time.Nanosecond).Equal(env.Due.Truncate(100 * time.Nanosecond)):
		return fmt.Errorf("%w: a task of id %s due %s is pending", leasecrontype.ErrScheduledAgain, env.ID, it.Due.UTC().Format(time.RFC3339))
	}
	return nil
}

// Clock returns the client's time source.
func (c *Client) Clock() leasecrontype.Clock { return c.o.Clock }

// RunRecords reports whether the client keeps run records (see
// ClientOptions.NoRuns).
func (c *Client) RunRecords() bool { return c.runs != nil }
