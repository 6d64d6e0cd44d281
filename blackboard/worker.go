package blackboard

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"

	"github.com/leasecron/leasecron/internal/clock"
	"github.com/leasecron/leasecron/internal/instance"
	"github.com/leasecron/leasecron/internal/mutate"
	"github.com/leasecron/leasecron/internal/opt"
	"github.com/leasecron/leasecron/internal/randid"
	"github.com/leasecron/leasecron/internal/storage"
	"github.com/leasecron/leasecron/leasecrontype"
)

// Worker defaults and limits.
const (
	// DefaultCycle is how often a worker walks the board (config
	// blackboard.cycle).
	DefaultCycle = time.Hour
	// CycleJitter is the fraction by which each cycle is randomly
	// lengthened or shortened, so that workers drift apart.
	CycleJitter = 0.1
	// MinCycle is the shortest Cycle accepted (tests use sub-second cycles).
	MinCycle = 10 * time.Millisecond
	// MinLockTTL is the shortest LockTTL accepted when it is set.
	MinLockTTL = 100 * time.Millisecond
	// MaxConcurrentLimit is the largest MaxConcurrent accepted.
	MaxConcurrentLimit = 64
	// recordTimeout bounds the final write of a run, which is made on a
	// context detached from the worker's so that shutdown still records.
	recordTimeout = 30 * time.Second
)

// More sentinel errors, reported in RunReport.
var (
	// ErrClaimLost: another worker took the key over (its claim had
	// expired) while this worker ran it; this worker wrote nothing more.
	ErrClaimLost = errors.New("blackboard claim taken over by another worker")
	// ErrLockExpired: the worker could not extend its claim before the lock
	// TTL ran out by its own clock, so it cancelled the handler.
	ErrLockExpired = errors.New("blackboard claim expired before it could be extended")
	// ErrHandlerPanic wraps the value of a handler panic, recorded as the
	// run's error.
	ErrHandlerPanic = errors.New("handler panicked")
	// ErrShutdown is wrapped in the error of a run that failed because its
	// worker was shutting down; such a run is recorded with RunNow set, so
	// another worker runs the key again at its next cycle.
	ErrShutdown = errors.New("worker shutting down")
)

// Handlers looks a handler up by type; the queue's handler registry
// provides it. ok is false for an unknown type.
type Handlers func(taskType string) (h leasecrontype.Handler, ok bool)

// Settings are a blackboard worker's tunable settings, the part of Options
// a program configures (leasecron.WorkerOptions.Blackboard takes them as
// they are). Zero values take the defaults; negative values are refused.
type Settings struct {
	// Cycle is how often the board is walked (blackboard.cycle). Each
	// wait is jittered by ±CycleJitter. Default 1h (DefaultCycle); at
	// least MinCycle. A walk that runs handlers takes as long as they do;
	// the next walk starts one Cycle after the previous one started, or at
	// once if that time has passed.
	Cycle time.Duration
	// LockTTL is how long a claim stays valid without being extended
	// (blackboard.lock_ttl); a claim older than that is abandoned and taken
	// over. Default 0: each key's own Interval. At least MinLockTTL when
	// set. Every worker of a fleet should use the same value.
	LockTTL time.Duration
	// Heartbeat is how often a running claim is extended. Default: a third
	// of the lock TTL; it is capped at half the lock TTL.
	Heartbeat time.Duration
	// MaxConcurrent is how many keys one worker runs at once. Default 1
	// (the walk waits for a free slot); at most MaxConcurrentLimit.
	MaxConcurrent int
}

// Options configure a Worker. The zero value of every field but Handlers
// means its documented default.
type Options struct {
	// Settings are the tunable settings (see there).
	Settings
	// Table is the blackboard table. Default DefaultTable ("Blackboard").
	Table string
	// InstanceID names this worker in the Worker column and, as
	// "instance", in its log lines. Default
	// "{hostname}-{pid}-{8 random hex digits}".
	InstanceID string
	// Clock is the time source. Default the real clock.
	Clock clock.Clock
	// Logger receives the worker's logs. Default slog.Default().
	Logger *slog.Logger
	// Handlers finds the handler for a key's Type. Required. A key whose
	// type has no handler is left for other workers (and logged once).
	Handlers Handlers
	// Hooks are called for metrics and tests; nil hooks are skipped.
	Hooks Hooks
}

// Hooks observe a worker. They run synchronously on the worker's
// goroutines and must return quickly.
type Hooks struct {
	// OnCycle is called at the end of every walk of the board (runs it
	// started may still be in progress).
	OnCycle func(CycleReport)
	// OnRun is called after every run, once its outcome was recorded (or
	// recording failed).
	OnRun func(RunReport)
}

// CycleReport describes one walk of the board.
type CycleReport struct {
	// Worker is the walking worker's InstanceID.
	Worker string
	// Started is when the walk began.
	Started time.Time
	// Keys is how many rows the board had; Due how many of them this
	// worker found due (or abandoned) and tried to claim; Claimed how many
	// it claimed, TakenOver how many of those were abandoned claims;
	// Conflicts how many claims lost a race against another writer.
	Keys, Due, Claimed, TakenOver, Conflicts int
	// Err is the error that ended the walk early (listing the board
	// failed), if any. Failures of single claims are logged and counted,
	// not reported here.
	Err error
}

// RunReport describes one run of one key.
type RunReport struct {
	// Key, Type and TaskID identify the run; Worker is the InstanceID.
	Key, Type, TaskID, Worker string
	// Start is when the key was claimed; Duration how long the handler ran.
	Start    time.Time
	Duration time.Duration
	// Err is the handler's error (a panic is reported wrapping
	// ErrHandlerPanic), nil on success.
	Err error
	// TakenOver reports that this run took over an abandoned claim of
	// TakenFrom.
	TakenOver bool
	TakenFrom string
	// Interrupted reports that the worker was shutting down and the run
	// was recorded with RunNow set.
	Interrupted bool
	// Recorded reports that Stop was written. When false, RecordErr says
	// why: ErrClaimLost (taken over), ErrNotFound (key removed, or removed
	// and added again, while it ran), or a storage error.
	Recorded  bool
	RecordErr error
}

// Worker walks the blackboard and runs due keys. Create one with NewWorker
// and call Run.
type Worker struct {
	opts    Options
	store   Store
	log     *slog.Logger
	sem     chan struct{}
	wg      sync.WaitGroup
	running atomic.Bool

	mu       sync.Mutex
	inflight map[string]bool
	warned   map[string]bool
	rng      *rand.Rand
}

// NewWorker returns a Worker over the blackboard table opts.Table (default
// DefaultTable) of the account behind svc, a table service client the
// caller built with its own credential. It does not contact the service.
func NewWorker(svc *aztables.ServiceClient, opts Options) (*Worker, error) {
	s, err := newTableStore(svc, opts.Table)
	if err != nil {
		return nil, err
	}
	return NewWorkerWithStore(s, opts)
}

// NewWorkerWithStore returns a Worker over any Store (NewMemoryStore in tests).
// opts.Table is ignored.
func NewWorkerWithStore(s Store, opts Options) (*Worker, error) {
	if s == nil {
		return nil, fmt.Errorf("%w: no store", ErrInvalid)
	}
	o := opts.WithDefaults()
	if err := o.validate(); err != nil {
		return nil, err
	}
	return &Worker{
		opts:     o,
		store:    s,
		log:      o.Logger.With("component", "blackboard", "instance", o.InstanceID),
		sem:      make(chan struct{}, o.MaxConcurrent),
		inflight: map[string]bool{},
		warned:   map[string]bool{},
		rng:      rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64())),
	}, nil
}

// WithDefaults returns s with every zero field set to its default. A
// zero LockTTL stays zero (each key's interval), and so does a zero
// Heartbeat (a third of the lock TTL in force).
func (s Settings) WithDefaults() Settings {
	s.Cycle = cmp.Or(s.Cycle, DefaultCycle)
	s.MaxConcurrent = cmp.Or(s.MaxConcurrent, 1)
	return s
}

func (s Settings) validate() error {
	switch {
	case s.LockTTL < 0 || (s.LockTTL > 0 && s.LockTTL < MinLockTTL):
		return opt.Invalid(ErrInvalidOptions, "blackboard.Settings.LockTTL", s.LockTTL, fmt.Sprintf("0 (each key's interval) or at least %v", MinLockTTL))
	case s.Heartbeat < 0:
		return opt.Invalid(ErrInvalidOptions, "blackboard.Settings.Heartbeat", s.Heartbeat, "a positive value, or 0 for a third of the lock TTL")
	}
	return opt.First(
		opt.AtLeast(ErrInvalidOptions, "blackboard.Settings.Cycle", s.Cycle, DefaultCycle, MinCycle),
		opt.In(ErrInvalidOptions, "blackboard.Settings.MaxConcurrent", s.MaxConcurrent, 1, 1, MaxConcurrentLimit),
	)
}

// WithDefaults returns o with every zero field set to its default.
func (o Options) WithDefaults() Options {
	o.Settings = o.Settings.WithDefaults()
	o.Table = cmp.Or(o.Table, DefaultTable)
	o.InstanceID = cmp.Or(o.InstanceID, instance.NewID())
	o.Clock = clock.OrReal(o.Clock)
	o.Logger = cmp.Or(o.Logger, slog.Default())
	return o
}

func (o Options) validate() error {
	if err := storage.ValidateTableName(o.Table); err != nil {
		return fmt.Errorf("%w: Table: %w", ErrInvalidOptions, err)
	}
	if o.Handlers == nil {
		return fmt.Errorf("%w: Handlers is nil: pass the handler registry's lookup", ErrInvalidOptions)
	}
	return o.Settings.validate()
}

// ID returns the worker's InstanceID.
func (w *Worker) ID() string { return w.opts.InstanceID }

// Run walks the board every cycle (the first walk at once) until ctx ends,
// then waits for the runs in progress, whose context is cancelled too, to
// be recorded (an interrupted run is recorded with RunNow set). It returns nil after a shutdown, and an
// error only if the worker is already running.
func (w *Worker) Run(ctx context.Context) error {
	if !w.running.CompareAndSwap(false, true) {
		return fmt.Errorf("blackboard worker %s is already running", w.opts.InstanceID)
	}
	defer w.running.Store(false)
	if err := w.store.Ensure(ctx); err != nil && ctx.Err() == nil {
		w.log.Warn("cannot create the blackboard table; will retry by listing it", "err", err)
	}
	w.log.Info("blackboard worker started", "cycle", w.opts.Cycle, "lock_ttl", w.opts.LockTTL, "max_concurrent", w.opts.MaxConcurrent)
	for ctx.Err() == nil {
		start := w.opts.Clock.Now()
		w.walk(ctx, nil)
		wait := w.jittered(w.opts.Cycle) - w.opts.Clock.Now().Sub(start)
		if err := clock.Sleep(ctx, w.opts.Clock, wait); err != nil && ctx.Err() != nil {
			break
		}
	}
	w.wg.Wait()
	w.log.Info("blackboard worker stopped")
	return nil
}

// RunOnce walks the board once, runs what it claims, and returns when
// those runs are recorded. It is Run's cycle without the loop, for tests
// and for one-shot commands.
func (w *Worker) RunOnce(ctx context.Context) (CycleReport, error) {
	var cycle sync.WaitGroup
	rep := w.walk(ctx, &cycle)
	cycle.Wait()
	return rep, rep.Err
}

func (w *Worker) jittered(d time.Duration) time.Duration {
	w.mu.Lock()
	f := 1 + CycleJitter*(2*w.rng.Float64()-1)
	w.mu.Unlock()
	return time.Duration(float64(d) * f)
}

// walk makes one pass over the board. Runs it starts are added to cycle,
// when not nil, as well as to the worker's wait group.
func (w *Worker) walk(ctx context.Context, cycle *sync.WaitGroup) CycleReport {
	rep := CycleReport{Worker: w.opts.InstanceID, Started: w.opts.Clock.Now()}
	defer func() {
		if w.opts.Hooks.OnCycle != nil {
			w.opts.Hooks.OnCycle(rep)
		}
	}()
	rows, err := w.store.List(ctx)
	if err != nil {
		if ctx.Err() == nil {
			if errors.Is(err, leasecrontype.ErrNotFound) {
				_ = w.store.Ensure(ctx)
			}
			w.log.Warn("cannot list the blackboard", "err", err)
		}
		rep.Err = err
		return rep
	}
	rep.Keys = len(rows)
	w.mu.Lock()
	w.rng.Shuffle(len(rows), func(i, j int) { rows[i], rows[j] = rows[j], rows[i] })
	w.mu.Unlock()

	for _, e := range rows {
		if ctx.Err() != nil {
			break
		}
		if !e.Removed.IsZero() {
			w.dropRemoved(ctx, e)
			continue
		}
		if _, ok := w.eligible(e, w.opts.Clock.Now()); !ok {
			continue
		}
		rep.Due++
		select {
		case w.sem <- struct{}{}:
		case <-ctx.Done():
			return rep
		}
		c, conflict, err := w.claim(ctx, e)
		if conflict {
			rep.Conflicts++
		}
		if err != nil && ctx.Err() == nil {
			w.log.Warn("claim failed", "key", e.Key, "err", err)
		}
		if c == nil {
			<-w.sem
			continue
		}
		rep.Claimed++
		if c.takeover {
			rep.TakenOver++
		}
		w.setInflight(c.key, true)
		w.wg.Add(1)
		if cycle != nil {
			cycle.Add(1)
		}
		go func() {
			defer func() {
				if cycle != nil {
					cycle.Done()
				}
				w.wg.Done()
			}()
			r := w.execute(ctx, c)
			w.setInflight(c.key, false)
			<-w.sem
			if w.opts.Hooks.OnRun != nil {
				w.opts.Hooks.OnRun(r)
			}
		}()
	}
	return rep
}

func (w *Worker) setInflight(key string, on bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if on {
		w.inflight[key] = true
	} else {
		delete(w.inflight, key)
	}
}

// warnOnce logs msg for key once per worker.
func (w *Worker) warnOnce(key, msg string, args ...any) {
	w.mu.Lock()
	seen := w.warned[key+"\x00"+msg]
	w.warned[key+"\x00"+msg] = true
	w.mu.Unlock()
	if !seen {
		w.log.Warn(msg, append([]any{"key", key}, args...)...) //nolint:sloglint // msg is a constant at every call site
	}
}

// eligible reports whether e should be claimed at now by this worker, and
// its handler.
func (w *Worker) eligible(e Entry, now time.Time) (leasecrontype.Handler, bool) {
	if e.Interval < MinInterval {
		w.warnOnce(e.Key, "skipping key with an invalid interval", "interval", e.Interval)
		return nil, false
	}
	w.mu.Lock()
	busy := w.inflight[e.Key]
	w.mu.Unlock()
	if busy || !e.Removed.IsZero() {
		return nil, false
	}
	due := e.Due(now)
	if mutate.On(mutate.BoardEarly) {
		due = e.RunNow || e.Start.IsZero() || !now.Before(e.Start.Add(e.Interval/2))
	}
	running := e.Running && !(mutate.On(mutate.BoardTwoAtOnce) && due)
	if !(running && e.Abandoned(now)) && (running || !due) || mutate.On(mutate.BoardStall) && e.Runs >= 3 {
		return nil, false
	}
	if err := e.Validate(); err != nil {
		// A row written by hand with, say, no interval would otherwise run
		// on every cycle.
		w.warnOnce(e.Key, "skipping an invalid blackboard row", "err", err)
		return nil, false
	}
	h, ok := w.opts.Handlers(e.Type)
	if !ok || h == nil {
		w.warnOnce(e.Key, "no handler for the key's type; leaving it to other workers", "type", e.Type)
		return nil, false
	}
	return h, true
}

// claim is a run this worker holds.
type claim struct {
	key      string
	id       string
	handler  leasecrontype.Handler
	entry    Entry // the row as we last wrote it, with its ETag
	start    time.Time
	ttl      time.Duration
	deadline time.Time // our lock's expiry by our own clock
	takeover bool
	from     string
}

func (w *Worker) lockTTL(e Entry) time.Duration {
	if w.opts.LockTTL > 0 {
		return w.opts.LockTTL
	}
	return e.Interval
}

func (w *Worker) heartbeat(ttl time.Duration) time.Duration {
	if hb := w.opts.Heartbeat; hb > 0 && hb <= ttl/2 {
		return hb
	}
	return ttl / 3
}

// claim tries to claim e with a write conditional on its ETag. When the
// write fails, the row is read again: if it carries the claim, the write
// landed and its answer was lost, and the claim stands; if the write was
// refused because the row changed since it was listed and the row is
// still claimable, the claim is retried once. conflict reports that a
// write was refused and the key was not claimed.
func (w *Worker) claim(ctx context.Context, e Entry) (c *claim, conflict bool, err error) {
	for attempt := 0; attempt < 2; attempt++ {
		now := w.opts.Clock.Now()
		h, ok := w.eligible(e, now)
		if !ok {
			return nil, attempt > 0, nil
		}
		ttl := w.lockTTL(e)
		next := e
		next.Start, next.ClaimedAt = now, now
		next.Running = true
		next.Worker = w.opts.InstanceID
		next.ClaimID = randid.UUID()
		next.LockedUntil = now.Add(ttl)
		next.RunNow = false
		next.Runs++
		next.Stoppable, next.StopClaim = true, "" // a StopClaim left is of the claim taken over
		etag, err := w.store.Replace(ctx, next, e.ETag)
		if err != nil && !errors.Is(err, leasecrontype.ErrNotFound) {
			// The write may have landed with its answer lost (the SDK's
			// retry of it then meets its own change as a conflict): a
			// row carrying this claim's id is this claim, to run now
			// rather than leave claimed by nobody until its lock expires.
			fresh, gerr := w.store.Get(ctx, e.Key)
			switch {
			case gerr == nil && fresh.Running && fresh.ClaimID == next.ClaimID && fresh.StopClaim == next.ClaimID:
				// This claim landed, its answer lost, and a remove marked
				// it before the read-back: not run, the claim ended.
				return nil, false, w.endStopped(ctx, fresh)
			case gerr == nil && fresh.Running && fresh.ClaimID == next.ClaimID:
				next, etag, err = fresh, fresh.ETag, nil
			case gerr == nil && errors.Is(err, ErrConflict):
				e = fresh
				continue
			case errors.Is(gerr, leasecrontype.ErrNotFound):
				return nil, errors.Is(err, ErrConflict), nil
			case gerr != nil && errors.Is(err, ErrConflict):
				return nil, true, gerr
			}
		}
		if err == nil {
			next.ETag = etag
			c := &claim{key: e.Key, id: next.ClaimID, handler: h, entry: next, start: now, ttl: ttl,
				deadline: now.Add(ttl), takeover: e.Running, from: e.Worker}
			if c.takeover {
				w.log.Warn("taking over an abandoned claim", "key", e.Key, "from", e.Worker,
					"claimed_at", e.ClaimedAt, "locked_until", e.LockedUntil)
			}
			return c, false, nil
		}
		if errors.Is(err, leasecrontype.ErrNotFound) {
			return nil, false, nil // removed meanwhile
		}
		return nil, errors.Is(err, ErrConflict), err
	}
	return nil, true, nil
}

// execute runs c's handler, extends the claim while it runs, and records
// the outcome.
func (w *Worker) execute(ctx context.Context, c *claim) RunReport {
	e := c.entry
	rep := RunReport{Key: c.key, Type: e.Type, TaskID: taskID(c.key, c.start), Worker: w.opts.InstanceID,
		Start: c.start, TakenOver: c.takeover, TakenFrom: c.from}
	log := w.log.With("key", c.key, "task_id", rep.TaskID)
	task := leasecrontype.Task{ID: rep.TaskID, Type: e.Type, Payload: []byte(e.Payload), Due: c.start, Attempt: 1, Key: c.key}

	hb := w.heartbeat(c.ttl)
	margin := c.ttl / 10
	if late := w.opts.Clock.Now(); !late.Before(c.deadline.Add(-margin)) {
		// The claim answered too late to run within its lock: another
		// worker may take the key over any moment. It runs again at the
		// next cycle instead.
		log.Warn("claim answered too late to run within its lock; the key runs at the next cycle", "claimed", c.start, "lock_deadline", c.deadline)
		rep.Err = fmt.Errorf("%w: the claim of %s answered at %s, past its lock's margin", ErrLockExpired, c.start.Format(time.RFC3339Nano), late.Format(time.RFC3339Nano))
		w.record(ctx, c, &rep, func(r *Entry) { r.Running, r.LockedUntil, r.RunNow = false, time.Time{}, true })
		return rep
	}

	runCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	done := make(chan error, 1)
	go func() { done <- callHandler(runCtx, c.handler, task, log) }()

	var herr, lostErr error
	expired := false
	// The heartbeats count from the claim: one answered late is extended
	// at once.
	timer := w.opts.Clock.NewTimer(c.start.Add(hb).Sub(w.opts.Clock.Now()))
wait:
	for {
		select {
		case herr = <-done:
			break wait
		case <-timer.C():
		}
		now := w.opts.Clock.Now()
		err := w.extend(ctx, c, now, margin)
		switch {
		case err == nil:
			c.deadline = now.Add(c.ttl)
		case errors.Is(err, ErrClaimLost), errors.Is(err, ErrNotFound):
			lostErr = err
			if errors.Is(err, errStopped) {
				log.Info("the key was removed while it ran; cancelling the handler", "err", err)
			} else {
				log.Warn("claim lost while running; cancelling the handler", "err", err)
			}
			cancel(err)
			herr = <-done
			break wait
		default:
			if ctx.Err() == nil {
				log.Warn("cannot extend the claim", "err", err, "lock_deadline", c.deadline)
			}
		}
		left := c.deadline.Add(-margin).Sub(w.opts.Clock.Now())
		if left <= 0 {
			log.Error("claim expiring without renewal; cancelling the handler", "lock_deadline", c.deadline)
			cancel(ErrLockExpired)
			expired = true
			herr = <-done
			break wait
		}
		timer = w.opts.Clock.NewTimer(min(hb, left))
	}
	timer.Stop()
	stop := w.opts.Clock.Now()
	rep.Duration = stop.Sub(c.start)
	rep.Err = herr
	if expired && herr != nil {
		herr = fmt.Errorf("%w: %w", ErrLockExpired, herr)
		rep.Err = herr
	}
	if herr != nil && ctx.Err() != nil && lostErr == nil && !expired {
		rep.Interrupted = true
		herr = fmt.Errorf("interrupted: %w: %w", ErrShutdown, herr)
		rep.Err = herr
	}
	if errors.Is(lostErr, errStopped) {
		// Removed (or removed and added again) while it ran: with the
		// handler returned, the claim ends (the row deleted, or left to
		// the key's new definition).
		if err := w.record(ctx, c, &rep, endRun(stop, rep.Duration, herr, false)); err != nil && !errors.Is(err, errStopped) {
			log.Warn("run stopped, but its claim could not be ended; the key waits for its lock to lapse", "err", err)
		}
		rep.Recorded, rep.RecordErr = false, lostErr
		return rep
	}
	if lostErr != nil {
		rep.RecordErr = lostErr
		return rep
	}
	if herr != nil {
		log.Warn("run failed", "err", herr, "duration", rep.Duration)
	} else {
		log.Debug("run succeeded", "duration", rep.Duration)
	}

	err := w.record(ctx, c, &rep, endRun(stop, rep.Duration, herr, rep.Interrupted))
	switch {
	case errors.Is(err, errStopped):
		log.Info("run finished after its key was removed; its outcome is not recorded", "err", err)
	case err != nil:
		log.Warn("run finished but its outcome was not recorded", "err", err)
	}
	return rep
}

// endRun is the write that ends a run stopped at stop after d, with herr.
func endRun(stop time.Time, d time.Duration, herr error, interrupted bool) func(*Entry) {
	return func(r *Entry) {
		r.Running = false
		r.Stop = stop
		r.LastDuration = d
		r.LockedUntil = time.Time{}
		r.LastError = ""
		if herr != nil {
			r.LastError = herr.Error()
			r.Failures++
		}
		if interrupted {
			r.RunNow = true
		}
	}
}

// errStopped: the key was removed, or removed and added again, while this
// claim's run held it (Entry.StopClaim names the claim). It is wrapped
// with ErrNotFound: the key this run was of is gone.
var errStopped = errors.New("the key was removed while it ran")

// stopped is the error of a write of c met by its StopClaim on fresh.
func stopped(c *claim, fresh Entry) error {
	if fresh.Removed.IsZero() {
		return fmt.Errorf("%w: %w: %q was removed and added again", ErrNotFound, errStopped, c.key)
	}
	return fmt.Errorf("%w: %w: %q", ErrNotFound, errStopped, c.key)
}

// dropRemoved deletes the row of a key removed while a run held it, once
// that run's claim has ended or lapsed (its worker deletes it itself when
// the run stops; this is for a worker that died first).
func (w *Worker) dropRemoved(ctx context.Context, e Entry) {
	if e.Running && !e.Abandoned(w.opts.Clock.Now()) {
		return // its run is stopping
	}
	err := w.store.Delete(ctx, e.Key, e.ETag)
	if err != nil && !errors.Is(err, ErrConflict) && !errors.Is(err, leasecrontype.ErrNotFound) && ctx.Err() == nil {
		w.log.Warn("cannot delete the row of a removed key; the next cycle tries again", "key", e.Key, "err", err)
	}
}

// record writes the end of c's run (fn on its row) on a context detached
// from the worker's, so that a shutdown still records, and notes in rep
// whether it was recorded.
func (w *Worker) record(ctx context.Context, c *claim, rep *RunReport, fn func(*Entry)) error {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
	defer cancel()
	err := w.writeOwn(rctx, c, fn)
	rep.RecordErr, rep.Recorded = err, err == nil
	return err
}

// extend writes c's lock extension from now, given up when the clock
// reaches the lock's deadline less margin: the handler must stop there
// unless extended, so a slow answer cannot keep it running past the lock
// another worker may take over.
func (w *Worker) extend(ctx context.Context, c *claim, now time.Time, margin time.Duration) error {
	left := c.deadline.Add(-margin).Sub(w.opts.Clock.Now())
	if left <= 0 {
		return fmt.Errorf("extend the claim of %q: %w", c.key, ErrLockExpired)
	}
	wctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := w.opts.Clock.NewTimer(left)
	defer stop.Stop()
	go func() {
		select {
		case <-stop.C():
			cancel(ErrLockExpired)
		case <-wctx.Done():
		}
	}()
	return w.writeOwn(wctx, c, func(r *Entry) { r.LockedUntil = now.Add(c.ttl) })
}

// writeOwn applies fn to the row as c last wrote it and writes it back,
// conditional on c's ETag. When the row changed, it is re-read: if it still
// carries c's claim (someone set RunNow or replaced the definition), fn is
// applied to the fresh row and the write retried; otherwise the claim was
// taken over (ErrClaimLost) or the key removed (ErrNotFound), and nothing
// is written.
func (w *Worker) writeOwn(ctx context.Context, c *claim, fn func(*Entry)) error {
	base := c.entry
	for attempt := 0; attempt < maxModifyAttempts; attempt++ {
		next := base
		fn(&next)
		if base.StopClaim == c.id && base.ClaimID == c.id && base.Running {
			// A row read back marked (stopped below, or by claim): its
			// run is never written on.
			if !next.Running {
				if err := w.endStopped(ctx, base); err != nil {
					return err
				}
			}
			return stopped(c, base)
		}
		if next.Running {
			next.Stoppable = true // (an earlier release's client may have written it away)
		}
		etag, err := w.store.Replace(ctx, next, base.ETag)
		if err == nil {
			next.ETag = etag
			c.entry = next
			return nil
		}
		if errors.Is(err, leasecrontype.ErrNotFound) {
			return fmt.Errorf("%w: %q was removed while running: %w", ErrNotFound, c.key, err)
		}
		if !errors.Is(err, ErrConflict) {
			return err
		}
		fresh, err := w.store.Get(ctx, c.key)
		if errors.Is(err, leasecrontype.ErrNotFound) {
			return fmt.Errorf("%w: %q was removed while running: %w", ErrNotFound, c.key, err)
		}
		if err != nil {
			return err
		}
		if fresh.ClaimID == c.id && !fresh.Running && !next.Running {
			// This claim's end is recorded already: only its own worker
			// writes it, so this is the write whose answer was lost (its
			// retry met it as a conflict). Not written twice.
			c.entry = fresh
			return nil
		}
		if !fresh.Running || fresh.ClaimID != c.id {
			return fmt.Errorf("%w: %q is now claimed by %s since %s", ErrClaimLost, c.key, fresh.Worker, fresh.ClaimedAt.Format(time.RFC3339Nano))
		}
		base = fresh // (marked by a remove: the check above stops it)
	}
	return fmt.Errorf("update blackboard key %q: %w after %d attempts", c.key, ErrConflict, maxModifyAttempts)
}

// endStopped ends the claim on fresh, a row whose StopClaim names it, once
// its run has stopped: a removed key's row is deleted; one added again
// since is left unclaimed, due at once (Board.Add). A row changed
// meanwhile is read again.
func (w *Worker) endStopped(ctx context.Context, fresh Entry) error {
	id := fresh.ClaimID
	for attempt := 0; attempt < maxModifyAttempts; attempt++ {
		var err error
		if fresh.Removed.IsZero() {
			next := fresh
			next.Running, next.LockedUntil, next.StopClaim = false, time.Time{}, ""
			_, err = w.store.Replace(ctx, next, fresh.ETag)
		} else {
			err = w.store.Delete(ctx, fresh.Key, fresh.ETag)
		}
		if err == nil || errors.Is(err, leasecrontype.ErrNotFound) {
			return nil
		}
		if !errors.Is(err, ErrConflict) {
			return err
		}
		if fresh, err = w.store.Get(ctx, fresh.Key); err != nil {
			if errors.Is(err, leasecrontype.ErrNotFound) {
				return nil
			}
			return err
		}
		if fresh.ClaimID != id || fresh.StopClaim != id || !fresh.Running {
			return nil // ended already (this write's own, its answer lost) or taken over
		}
	}
	return fmt.Errorf("end the stopped claim of %q: %w after %d attempts", fresh.Key, ErrConflict, maxModifyAttempts)
}

// callHandler runs h, turning a panic into an error (its stack is logged).
func callHandler(ctx context.Context, h leasecrontype.Handler, t leasecrontype.Task, log *slog.Logger) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: %v", ErrHandlerPanic, r)
			log.Error("handler panicked", "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
		}
	}()
	return h(ctx, t)
}
