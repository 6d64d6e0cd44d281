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

	"github.com/leasecron/leasecron/internal/clock"
	"github.com/leasecron/leasecron/internal/ctxlock"
	"github.com/leasecron/leasecron/internal/randid"
	"github.com/leasecron/leasecron/internal/storage"
	"github.com/leasecron/leasecron/leasecrontype"
)

// Cop competes for one blob lease and, while it holds it, runs a lead
// function with a context that is cancelled the moment control is lost.
// Build one with NewCop over a Lock; run it once with Run; end it with Stop
// or by cancelling Run's context.
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
	lastGen  int64   // generation of this cop's last ended term (0: none)
	// announce asks the holder to write its note now (Announce).
	announce chan struct{}

	waitedFor string // the generation last logged as waited out (Run's goroutine only)
}

// NewCop returns a Cop over lock: for Azure Storage, the lease blob from
// NewBlobLock on a container client the caller built; in tests, a MemoryLock.
// It validates opts (errors wrap ErrInvalidOptions and name the field) and
// does not contact the service: Run creates the lease record (for a blob,
// the container and the blob) if it is missing.
func NewCop(lock Lock, opts Options) (*Cop, error) {
	if lock == nil {
		return nil, fmt.Errorf("%w: nil Lock", ErrInvalidOptions)
	}
	o := opts.WithDefaults()
	if err := o.validate(); err != nil {
		return nil, err
	}
	return newCop(lock, o), nil
}

func newCop(lock Lock, o Options) *Cop {
	return &Cop{
		o:        o,
		lock:     lock,
		log:      o.Logger.With("lock", lock.String(), "identity", o.Identity),
		observe:  func(event) {},
		done:     make(chan struct{}),
		announce: make(chan struct{}, 1),
	}
}

// Identity returns the identity this cop writes as holder.
func (c *Cop) Identity() string { return c.o.Identity }

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
// Without control it looks at the lease at once and then every PollEvery
// (each wait shortened by up to 20 % at random), or sooner: when the
// holder's lease would run out unless renewed again (its last recorded
// renewal + LeaseDuration), so a crashed leader is replaced as soon as its
// lease expires. When the lease may be taken it acquires it, with a fresh
// random lease ID each time. A poll costs one request while another
// instance leads. On acquisition it
// writes holder, acquired, generation (previous + 1) and renewed to the
// blob's metadata with If-Match on the ETag it read and the new lease ID;
// if that write fails it releases the lease and counts the attempt as
// failed.
//
// A lease that was released gracefully (its holder marks it released
// first) or never led is taken at once. Otherwise the cop takes it only
// once the previous holder's last recorded renewal is LeaseDuration old:
// a lease that expired normally is that old already, so a crashed leader
// is replaced as soon as its lease runs out, but a lease that vanished
// early (Azurite reports every lease expired after a restart; someone may
// break it) is left alone until the old holder's local deadline has passed.
// Meanwhile a live holder renews the lease again and keeps control. This
// is why the holder records each renewal in the metadata (renewed): one
// more request per renewal.
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
// (unless the service has refused the lease) marks the lease released and
// releases it, each call bounded by CallTimeout, so that another instance
// can take over within its next poll; OnLost is then queued.
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
		a, err := c.tryAcquire(ctx)
		var ny *notYet
		if errors.As(err, &ny) && ny.wait > 0 && ny.wait < wait {
			wait = ny.wait
		}
		if err != nil {
			continue
		}
		c.hold(ctx, a, lead, hooks)
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

// acquisition is a lease just acquired and stamped.
type acquisition struct {
	term Term
	k    *keeper
	md   map[string]string // the metadata as stamped
	tm   *termMeta         // the metadata the term keeps writing
}

// notYet: the lease may not be taken now. wait, when positive, is when to
// look again: the end of a takeover wait (see Cop.takeoverWait) or the
// moment a lease in force runs out unless renewed (see Cop.expiryWait).
type notYet struct {
	wait time.Duration
	why  string
}

func (e *notYet) Error() string {
	if e.wait <= 0 {
		return fmt.Sprintf("%s: %s", leasecrontype.ErrLeaseConflict, e.why)
	}
	return fmt.Sprintf("%s: %s; looking again in %v", leasecrontype.ErrLeaseConflict, e.why, e.wait.Round(time.Millisecond))
}

func (e *notYet) Unwrap() error { return leasecrontype.ErrLeaseConflict }

// tryAcquire makes one attempt to take the lease and stamp the blob.
func (c *Cop) tryAcquire(ctx context.Context) (acquisition, error) {
	fail := func(err error) (acquisition, error) {
		c.observe(event{kind: "acquire-failed", at: c.o.Clock.Now(), err: err})
		return acquisition{}, err
	}
	var prior LockState
	err := c.call(ctx, func(cctx context.Context) (err error) { prior, err = c.lock.Get(cctx); return err })
	if err == nil {
		if prior.State == LeaseLeased || prior.State == LeaseBreaking {
			if c.o.OnNote != nil && prior.Metadata[MetaNote] != "" {
				c.o.OnNote(prior.Metadata[MetaNote])
			}
			if c.o.OnFleet != nil {
				c.o.OnFleet(prior.Metadata[MetaFleet])
			}
			err = &notYet{wait: c.expiryWait(prior),
				why: fmt.Sprintf("%s is %s by %q", c.lock, prior.State, prior.Metadata[MetaHolder])}
		} else if wait, why := c.takeoverWait(prior); wait > 0 {
			err = &notYet{wait: wait, why: why}
		}
	}
	leaseID := randid.UUID()
	start := c.o.Clock.Now() // before the request: the term is trusted from here
	if err == nil {
		err = c.call(ctx, func(cctx context.Context) error { return c.lock.Acquire(cctx, leaseID, c.o.LeaseDuration) })
	}
	if err != nil {
		var ny *notYet
		switch {
		case errors.As(err, &ny) && (prior.State == LeaseLeased || prior.State == LeaseBreaking):
			c.log.Debug("lease is held by another instance", "err", err)
		case errors.As(err, &ny):
			if gen := prior.Metadata[MetaGeneration]; gen != c.waitedFor {
				c.waitedFor = gen
				c.log.Warn("lease ended without being released while its holder may still lead; waiting until its term must have ended",
					"previous_holder", prior.Metadata[MetaHolder], "previous_generation", gen, "state", prior.State, "why", ny.why,
					"wait", ny.wait.Round(time.Millisecond))
			}
		case errors.Is(err, leasecrontype.ErrLeaseConflict):
			c.log.Debug("lease is held by another instance", "err", err)
		case errors.Is(err, leasecrontype.ErrNotFound):
			c.log.Warn("lease blob missing; recreating it", "err", err)
			if eerr := c.call(ctx, c.lock.Ensure); eerr != nil {
				c.log.Warn("cannot recreate lease blob", "err", eerr)
			}
		case ctx.Err() == nil:
			c.log.Warn("lease acquire failed", "err", err)
		}
		return fail(err)
	}
	k := newKeeper(c.lock, leaseID, start, c.o.LeaseTiming, c.o.Clock, c.log, c.observe)
	term, md, err := c.stamp(ctx, leaseID, start)
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
		return fail(err)
	}
	c.log.Debug("acquired the lease", "generation", term.Generation, "previous_state", prior.State,
		"previous_holder", prior.Metadata[MetaHolder], "previous_renewed", prior.Metadata[MetaRenewed])
	tm := &termMeta{md: maps.Clone(md), leaseID: leaseID, written: c.o.Clock.Now()}
	k.heartbeat = c.heartbeat(tm)
	return acquisition{term: term, k: k, md: md, tm: tm}, nil
}

// takeoverWait says how long the cop must leave a lease that is not in
// force before taking it, and why: zero if the previous term was released,
// was this cop's own (ended), or never was; otherwise until the previous
// holder's last recorded renewal (or acquisition) is LeaseDuration old,
// when that holder's local deadline has certainly passed (as long as its
// clock lags ours by less than SafetyMargin). A lease that expired normally
// is that old already.
func (c *Cop) takeoverWait(prior LockState) (time.Duration, string) {
	md := prior.Metadata
	gen := md[MetaGeneration]
	g, err := parseGeneration(gen)
	switch {
	case err != nil || g == 0:
		return 0, "" // never led (or unreadable: stamp refuses it)
	case md[MetaReleased] == gen:
		return 0, ""
	case md[MetaHolder] == c.o.Identity && g == c.lastEnded():
		return 0, "" // our own term, which has ended here
	}
	at, what, ok := lastRenewal(md)
	if !ok {
		return 0, "" // written by something else: nothing to go by
	}
	now := c.o.Clock.Now()
	wait := at.Add(c.o.LeaseDuration).Sub(now)
	if wait <= 0 {
		return 0, ""
	}
	return wait, fmt.Sprintf("the lease is %s but its holder %s it %v ago", prior.State, what, now.Sub(at).Round(time.Millisecond))
}

// lastRenewal returns the start of the holder's last recorded renewal, or
// its acquisition when it has not renewed yet (a holder that records no
// renewals), and which of the two it is; false when neither parses.
func lastRenewal(md map[string]string) (time.Time, string, bool) {
	last, what := md[MetaRenewed], "renewed"
	if last == "" {
		last, what = md[MetaAcquired], "acquired"
	}
	at, err := time.Parse(time.RFC3339Nano, last)
	return at, what, err == nil
}

// expiryMargin is how long after the expiry computed from a holder's last
// recorded renewal a standby looks again: the service counts the lease from
// when it received that renewal, a little after the holder started it.
const expiryMargin = 250 * time.Millisecond

// expiryWait returns how long until a lease in force runs out if its holder
// does not renew it again: its last recorded renewal + LeaseDuration (+ a
// margin). A standby looks again then rather than a whole poll later, so a
// crashed leader is replaced as soon as its lease expires. It is 0 when
// there is nothing to go by or that moment has passed (a holder renewing
// without recording it, e.g. an older version): poll as usual.
func (c *Cop) expiryWait(st LockState) time.Duration {
	at, _, ok := lastRenewal(st.Metadata)
	if !ok {
		return 0
	}
	return max(0, at.Add(c.o.LeaseDuration+expiryMargin).Sub(c.o.Clock.Now()))
}

// note puts Options.Note's and Options.Fleet's current values into md (or
// removes notes left by an earlier holder).
func (c *Cop) note(md map[string]string) {
	c.noteAs(md, MetaNote, c.o.Note)
	c.noteAs(md, MetaFleet, c.o.Fleet)
}

// noteAs puts what note returns into md under key.
func (c *Cop) noteAs(md map[string]string, key string, note func() string) {
	if note == nil {
		delete(md, key)
		return
	}
	n := note()
	ok := len(n) <= MaxNote
	for i := 0; ok && i < len(n); i++ {
		ok = n[i] >= 0x20 && n[i] <= 0x7e
	}
	switch {
	case n == "":
		delete(md, key)
	case !ok:
		c.log.Warn("lease note dropped: want at most MaxNote bytes of printable ASCII", "key", key, "len", len(n))
		delete(md, key)
	default:
		md[key] = n
	}
}

// stampTime formats a time for the lease metadata (UTC, no monotonic part).
func stampTime(t time.Time) string { return t.UTC().Round(0).Format(time.RFC3339Nano) }

// termMeta is the metadata a term keeps writing: at each renewal (with
// the renewal's start) and when its note is announced (Announce). The two
// kinds of write are serialised, so the last one written carries the last
// renewal.
type termMeta struct {
	// mu is held across the metadata writes (a renewal's heartbeat, an
	// announcement) so that they never interleave; a ctxlock, so that a
	// waiter whose term ends stops waiting.
	mu      ctxlock.Mutex
	md      map[string]string
	leaseID string
	written time.Time // when it was last written (the cop's clock)
}

// heartbeat records each renewal of the term in the lease's metadata.
func (c *Cop) heartbeat(tm *termMeta) func(context.Context, time.Time) error {
	return func(ctx context.Context, start time.Time) error {
		if err := tm.mu.LockContext(ctx); err != nil {
			return err
		}
		defer tm.mu.Unlock()
		tm.md[MetaRenewed] = stampTime(start)
		c.note(tm.md)
		tm.written = c.o.Clock.Now()
		return c.lock.SetMetadata(ctx, tm.leaseID, "", tm.md)
	}
}

// announceEvery is the shortest interval between two writes of the note.
const announceEvery = time.Second

// Announce asks the holder to write its note (Options.Note) into the lease
// metadata now rather than at its next renewal, so that the instances
// waiting for the lease hear of a change within their next look: at most
// one write a second, nothing while this cop does not hold the lease. It
// never blocks.
func (c *Cop) Announce() {
	select {
	case c.announce <- struct{}{}:
	default:
	}
}

// announcer writes the note whenever Announce asks, until ctx ends.
func (c *Cop) announcer(ctx context.Context, tm *termMeta) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.announce:
		}
		tm.mu.Lock()
		wait := tm.written.Add(announceEvery).Sub(c.o.Clock.Now())
		tm.mu.Unlock()
		if wait > 0 && clock.Sleep(ctx, c.o.Clock, wait) != nil {
			return
		}
		if tm.mu.LockContext(ctx) != nil {
			return
		}
		c.note(tm.md)
		tm.written = c.o.Clock.Now()
		err := c.call(ctx, func(cctx context.Context) error { return c.lock.SetMetadata(cctx, tm.leaseID, "", tm.md) })
		tm.mu.Unlock()
		if err != nil && ctx.Err() == nil {
			c.log.Debug("announce the lease note", "err", err)
		}
	}
}

func (c *Cop) lastEnded() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lastGen
}

// stamp writes holder, acquired, generation = previous + 1 and renewed (the
// start of the acquisition) with If-Match on the ETag just read and the
// lease ID of the new term, and returns the term and the metadata written.
func (c *Cop) stamp(ctx context.Context, leaseID string, start time.Time) (Term, map[string]string, error) {
	var st LockState
	err := c.call(ctx, func(cctx context.Context) (err error) { st, err = c.lock.Get(cctx); return err })
	if err != nil {
		return Term{}, nil, err
	}
	prev, err := parseGeneration(st.Metadata[MetaGeneration])
	if err != nil {
		return Term{}, nil, fmt.Errorf("%s: %w", c.lock, err)
	}
	acquired := c.o.Clock.Now().UTC().Round(0)
	term := Term{Generation: prev + 1, Holder: c.o.Identity, Acquired: acquired, LeaseID: leaseID}
	// The previous holder's last note (written with its last renewal, or
	// as it released the lease) is handed on before it is replaced: what it
	// announced still matters to the new holder.
	if c.o.OnNote != nil && st.Metadata[MetaNote] != "" {
		c.o.OnNote(st.Metadata[MetaNote])
	}
	md := maps.Clone(st.Metadata)
	if md == nil {
		md = map[string]string{}
	}
	delete(md, MetaReleased)
	md[MetaHolder] = term.Holder
	md[MetaAcquired] = acquired.Format(time.RFC3339Nano)
	md[MetaGeneration] = strconv.FormatInt(term.Generation, 10)
	md[MetaRenewed] = stampTime(start)
	c.note(md)
	err = c.call(ctx, func(cctx context.Context) error { return c.lock.SetMetadata(cctx, leaseID, st.ETag, md) })
	if err != nil {
		return Term{}, nil, err
	}
	return term, md, nil
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
func (c *Cop) hold(ctx context.Context, a acquisition, lead func(context.Context) error, hooks *hookQueue) {
	term, k := a.term, a.k
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
	announced := make(chan struct{})
	go func() { defer close(announced); c.announcer(keepCtx, a.tm) }()
	defer func() { stopKeep(); <-announced }()
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
	c.endTerm(ctx, a, reason, log)
	if f := c.o.OnLost; f != nil {
		hooks.push(func() { f(term, reason) })
	}
}

// endTerm releases the lease of a term that has ended (unless the cop was
// abandoned, a simulated crash): it first marks the lease released, unless
// it was lost, so that the successor knows this instance no longer leads.
func (c *Cop) endTerm(ctx context.Context, a acquisition, reason error, log *slog.Logger) {
	a.k.end()
	c.mu.Lock()
	c.lastGen = a.term.Generation
	abandon := c.abandon
	c.mu.Unlock()
	if !abandon {
		// A fresh context: ctx is cancelled when the cop stops.
		rctx := context.WithoutCancel(ctx)
		if !errors.Is(reason, ErrLeaseLost) {
			md := maps.Clone(a.md)
			if a.tm != nil {
				a.tm.mu.Lock()
				md = maps.Clone(a.tm.md)
				a.tm.mu.Unlock()
			}
			md[MetaRenewed] = stampTime(a.k.lastStartTime())
			md[MetaReleased] = strconv.FormatInt(a.term.Generation, 10)
			// The last note, so that the successor hears of everything
			// this term announced, also since its last renewal.
			c.note(md)
			if err := c.call(rctx, func(cctx context.Context) error { return c.lock.SetMetadata(cctx, a.term.LeaseID, "", md) }); err != nil {
				log.Debug("mark lease released", "err", err)
			}
		}
		if err := a.k.release(rctx); err != nil {
			log.Debug("release lease", "err", err)
		}
	}
	c.observe(event{kind: "term-ended", at: c.o.Clock.Now(), err: reason})
}

func stopCause(ctx context.Context) error {
	cause := context.Cause(ctx)
	if cause == nil || errors.Is(cause, ErrStopped) {
		return ErrStopped
	}
	return fmt.Errorf("%w: %w", ErrStopped, cause)
}
