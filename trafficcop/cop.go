package trafficcop

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/leasecron/leasecron/internal/clock"
	"github.com/leasecron/leasecron/internal/storage"
)

// Cop competes for one blob lease and, while it holds it, runs a lead
// function with a context that is cancelled the moment control is lost.
// Build one with NewCop (over Azure Storage) or NewCopWithLock; run it once
// with Run; end it with Stop or by cancelling Run's context.
type Cop struct {
	o       Options
	lock    Lock
	log     *slog.Logger
	observe func(event) // test signal; never nil

	mu       sync.Mutex
	running  bool // Run was called
	stopping bool
	abandon  bool // stop without releasing: a simulated crash (tests)
	cancel   context.CancelCauseFunc
	done     chan struct{}
	term     Term
	k        *keeper // non-nil while a term is in force
}

// NewCop returns a Cop on the lease blob opts.Container/opts.Blob of the
// account behind clients. It validates opts (errors wrap ErrInvalidOptions
// and name the field) and does not contact the service: Run creates the
// container and blob if they are missing.
func NewCop(clients *storage.Clients, opts Options) (*Cop, error) {
	o := opts.withDefaults()
	if err := o.validate(); err != nil {
		return nil, err
	}
	lock, err := NewBlobLock(clients, o.Container, o.Blob)
	if err != nil {
		return nil, err
	}
	return newCop(lock, o), nil
}

// NewCopWithLock returns a Cop over any Lock, such as a MemLock in tests.
// opts.Container and opts.Blob are ignored.
func NewCopWithLock(lock Lock, opts Options) (*Cop, error) {
	if lock == nil {
		return nil, fmt.Errorf("%w: nil Lock", ErrInvalidOptions)
	}
	o := opts.withDefaults()
	if err := o.validate(); err != nil {
		return nil, err
	}
	return newCop(lock, o), nil
}

func newCop(lock Lock, o Options) *Cop {
	return &Cop{
		o:       o,
		lock:    lock,
		log:     o.Logger.With("lock", lock.String(), "identity", o.Identity),
		observe: func(event) {},
		done:    make(chan struct{}),
	}
}

// Identity returns the identity this cop writes as holder.
func (c *Cop) Identity() string { return c.o.Identity }

// Options returns the options in force, defaults filled in.
func (c *Cop) Options() Options { return c.o }

// HasControl reports whether this cop holds control now: it acquired the
// lease, has not lost it, and the local deadline (start of the last
// successful renewal + LeaseDuration − SafetyMargin) has not passed. It
// turns false at the deadline even before the renewal loop notices.
func (c *Cop) HasControl() bool {
	c.mu.Lock()
	k := c.k
	c.mu.Unlock()
	return k != nil && k.valid()
}

// Term returns the term in force and true while HasControl is true.
func (c *Cop) Term() (Term, bool) {
	c.mu.Lock()
	k, t := c.k, c.term
	c.mu.Unlock()
	if k == nil || !k.valid() {
		return Term{}, false
	}
	return t, true
}

// Check returns the term in force, or an error wrapping ErrNotLeader.
func (c *Cop) Check() (Term, error) {
	t, ok := c.Term()
	if !ok {
		return Term{}, fmt.Errorf("%w: %s does not hold %s", ErrNotLeader, c.o.Identity, c.lock)
	}
	return t, nil
}

// Holder reads who holds the lease, without competing for it.
func (c *Cop) Holder(ctx context.Context) (HolderInfo, error) {
	return readHolder(ctx, c.lock)
}

type termKey struct{}

// TermFrom returns the term carried by a lead context (the context Run
// passes to the lead function).
func TermFrom(ctx context.Context) (Term, bool) {
	t, ok := ctx.Value(termKey{}).(Term)
	return t, ok
}

// Run competes for the lease until ctx ends or Stop is called, and returns
// nil then. It returns an error only if the lease blob cannot be created
// for a reason that retrying will not cure (authentication, bad name), or
// ErrAlreadyRunning if Run was called before.
//
// Without control it tries to acquire at once and then every PollEvery
// (each wait shortened by up to 20 % at random), with a fresh random lease
// ID each time. On acquisition it
// writes holder, acquired and generation (previous + 1) to the blob's
// metadata with If-Match on the ETag it read and the new lease ID; if that
// write fails it releases the lease and counts the attempt as failed.
//
// While holding, lead runs with a context carrying the Term (TermFrom) that
// is cancelled — cause ErrLeaseLost, ErrStopped or ErrLeadReturned — the
// moment the term ends; the cop renews every RenewEvery meanwhile. A term
// ends when a renewal is refused, when the local deadline passes without a
// successful renewal, when Run is stopped, or when lead returns. If lead
// returns while the cop still holds control, the cop releases the lease and
// competes again after PollEvery: lead is meant to run until its context is
// cancelled, and a leader whose work failed gives the others a chance.
//
// Whenever a term ends the cop cancels lead, waits for it to return, then
// (unless the service has refused the lease) releases the lease with a
// fresh context bounded by CallTimeout, so that another instance can take
// over within its next poll; OnLost is then queued.
//
// Neither lead nor a hook may call Stop (it waits for Run): cancel Run's
// context instead.
func (c *Cop) Run(ctx context.Context, lead func(ctx context.Context) error) error {
	if lead == nil {
		return errors.New("trafficcop: Run: nil lead function")
	}
	c.mu.Lock()
	if c.running {
		c.mu.Unlock()
		return ErrAlreadyRunning
	}
	c.running = true
	if c.stopping {
		c.mu.Unlock()
		close(c.done)
		return nil
	}
	ctx, cancel := context.WithCancelCause(ctx)
	c.cancel = cancel
	c.mu.Unlock()
	defer close(c.done)
	defer cancel(nil)
	hooks := newHookQueue()
	defer hooks.close()

	if err := c.ensure(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	c.log.Info("traffic cop competing for control", "lease_duration", c.o.LeaseDuration, "poll_every", c.o.PollEvery)
	var wait time.Duration
	for {
		if err := clock.Sleep(ctx, c.o.Clock, wait); err != nil {
			return nil
		}
		wait = c.jitteredPoll()
		term, k, err := c.tryAcquire(ctx)
		if err != nil {
			continue
		}
		c.hold(ctx, term, k, lead, hooks)
	}
}

// Stop ends Run: it cancels the lead context, waits for lead to return,
// releases the lease and waits for Run to return. It is idempotent, safe to
// call before Run (Run then returns at once) and from any goroutine other
// than lead's and the hooks'.
func (c *Cop) Stop() { c.stop(false) }

func (c *Cop) stop(abandon bool) {
	c.mu.Lock()
	c.stopping = true
	if abandon {
		c.abandon = true
	}
	cancel, running := c.cancel, c.running
	c.mu.Unlock()
	if cancel != nil {
		cancel(ErrStopped)
	}
	if running {
		<-c.done
	}
}

// jitteredPoll is PollEvery shortened by up to pollJitter at random, so
// contenders spread out but a released lease is still tried within one
// PollEvery.
func (c *Cop) jitteredPoll() time.Duration {
	f := 1 - pollJitter*rand.Float64()
	return time.Duration(float64(c.o.PollEvery) * f)
}

// call runs one lease operation with its own CallTimeout deadline.
func (c *Cop) call(ctx context.Context, f func(context.Context) error) error {
	cctx, cancel := context.WithTimeout(ctx, c.o.CallTimeout)
	defer cancel()
	return f(cctx)
}

// ensure creates the lease blob, retrying transient failures every
// PollEvery.
func (c *Cop) ensure(ctx context.Context) error {
	for {
		err := c.call(ctx, c.lock.Ensure)
		if err == nil {
			return nil
		}
		if !storage.IsTransient(err) {
			return fmt.Errorf("trafficcop: %w", err)
		}
		c.log.Warn("cannot create lease blob yet; retrying", "err", err, "retry_in", c.o.PollEvery)
		if err := clock.Sleep(ctx, c.o.Clock, c.jitteredPoll()); err != nil {
			return err
		}
	}
}

// tryAcquire makes one attempt to take the lease and stamp the blob.
func (c *Cop) tryAcquire(ctx context.Context) (Term, *keeper, error) {
	leaseID := uuid.NewString()
	start := c.o.Clock.Now() // before the request: the term is trusted from here
	err := c.call(ctx, func(cctx context.Context) error { return c.lock.Acquire(cctx, leaseID, c.o.LeaseDuration) })
	if err != nil {
		switch {
		case errors.Is(err, storage.ErrLeaseConflict):
			c.log.Debug("lease is held by another instance", "err", err)
		case errors.Is(err, storage.ErrNotFound):
			c.log.Warn("lease blob missing; recreating it", "err", err)
			if eerr := c.call(ctx, c.lock.Ensure); eerr != nil {
				c.log.Warn("cannot recreate lease blob", "err", eerr)
			}
		case ctx.Err() == nil:
			c.log.Warn("lease acquire failed", "err", err)
		}
		c.observe(event{kind: "acquire-failed", at: c.o.Clock.Now(), err: err})
		return Term{}, nil, err
	}
	k := newKeeper(c.lock, leaseID, start, c.o.LeaseTiming, c.o.Clock, c.log, c.observe)
	term, err := c.stamp(ctx, leaseID)
	if err == nil && !k.valid() {
		err = fmt.Errorf("%w: stamping %s took past the local deadline", ErrLeaseLost, c.lock)
	}
	if err != nil {
		if ctx.Err() == nil {
			c.log.Warn("acquired the lease but could not stamp it; releasing", "err", err)
		}
		if rerr := k.release(context.WithoutCancel(ctx)); rerr != nil {
			c.log.Debug("release after failed stamp", "err", rerr)
		}
		c.observe(event{kind: "acquire-failed", at: c.o.Clock.Now(), err: err})
		return Term{}, nil, err
	}
	return term, k, nil
}

// stamp writes holder, acquired and generation = previous + 1 with If-Match
// on the ETag just read and the lease ID of the new term.
func (c *Cop) stamp(ctx context.Context, leaseID string) (Term, error) {
	var st LockState
	err := c.call(ctx, func(cctx context.Context) (err error) { st, err = c.lock.Get(cctx); return err })
	if err != nil {
		return Term{}, err
	}
	prev, err := parseGeneration(st.Metadata[MetaGeneration])
	if err != nil {
		return Term{}, fmt.Errorf("%s: %w", c.lock, err)
	}
	acquired := c.o.Clock.Now().UTC().Round(0)
	term := Term{Generation: prev + 1, Holder: c.o.Identity, Acquired: acquired, LeaseID: leaseID}
	md := maps.Clone(st.Metadata)
	if md == nil {
		md = map[string]string{}
	}
	md[MetaHolder] = term.Holder
	md[MetaAcquired] = acquired.Format(time.RFC3339Nano)
	md[MetaGeneration] = strconv.FormatInt(term.Generation, 10)
	err = c.call(ctx, func(cctx context.Context) error { return c.lock.SetMetadata(cctx, leaseID, st.ETag, md) })
	if err != nil {
		return Term{}, err
	}
	return term, nil
}

func parseGeneration(s string) (int64, error) {
	if s == "" {
		return 0, nil
	}
	g, err := strconv.ParseInt(s, 10, 64)
	if err != nil || g < 0 {
		return 0, fmt.Errorf("generation metadata %q is not a non-negative integer; refusing to lead until it is fixed", s)
	}
	return g, nil
}

// hold runs one term: lead plus the renewal loop, until the term ends.
func (c *Cop) hold(ctx context.Context, term Term, k *keeper, lead func(context.Context) error, hooks *hookQueue) {
	// Not a child of ctx: it is cancelled below, with the reason as cause,
	// when the term ends for whatever reason (including ctx ending).
	leadCtx, cancelLead := context.WithCancelCause(context.WithValue(context.WithoutCancel(ctx), termKey{}, term))
	defer cancelLead(nil)
	c.mu.Lock()
	c.term, c.k = term, k
	c.mu.Unlock()
	log := c.log.With("generation", term.Generation)
	log.Info("acquired control")
	c.observe(event{kind: "acquired", at: c.o.Clock.Now()})
	if f := c.o.OnAcquired; f != nil {
		hooks.push(func() { f(term) })
	}

	keepCtx, stopKeep := context.WithCancel(ctx)
	defer stopKeep()
	keepDone := make(chan error, 1)
	go func() {
		keepDone <- k.run(keepCtx, func(err error) {
			// The moment of loss: HasControl is already false.
			cancelLead(err)
		})
	}()
	leadDone := make(chan error, 1)
	go func() { leadDone <- lead(leadCtx) }()

	var reason error
	leadFinished := false
	select {
	case reason = <-keepDone:
	case lerr := <-leadDone:
		leadFinished = true
		stopKeep()
		reason = <-keepDone // a loss that raced with lead's return wins
		if reason == nil && ctx.Err() == nil {
			reason = ErrLeadReturned
			if lerr != nil && !errors.Is(lerr, context.Canceled) {
				reason = fmt.Errorf("%w: %w", ErrLeadReturned, lerr)
			}
		}
	}
	if reason == nil {
		reason = stopCause(ctx)
	}
	stopKeep()
	k.end()
	c.mu.Lock()
	c.term, c.k = Term{}, nil
	abandon := c.abandon
	c.mu.Unlock()
	cancelLead(reason)
	if !leadFinished {
		if lerr := <-leadDone; lerr != nil && !errors.Is(lerr, context.Canceled) {
			log.Warn("lead function returned an error", "err", lerr)
		}
	}
	// Logged once lead has returned and before the release, whose call can
	// take up to CallTimeout when storage hangs: the line's time is when
	// this instance stopped acting as leader, and precedes any successor's
	// acquisition after the release.
	if errors.Is(reason, ErrLeaseLost) {
		log.Warn("lost control", "reason", reason)
	} else {
		log.Info("gave up control", "reason", reason)
	}
	if !abandon {
		// A fresh context: ctx is cancelled when the cop stops.
		if err := k.release(context.WithoutCancel(ctx)); err != nil {
			log.Debug("release lease", "err", err)
		}
	}
	c.observe(event{kind: "term-ended", at: c.o.Clock.Now(), err: reason})
	if f := c.o.OnLost; f != nil {
		hooks.push(func() { f(term, reason) })
	}
}

func stopCause(ctx context.Context) error {
	cause := context.Cause(ctx)
	if cause == nil || errors.Is(cause, ErrStopped) {
		return ErrStopped
	}
	return fmt.Errorf("%w: %w", ErrStopped, cause)
}
