package trafficcop

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strconv"
	"time"

	"github.com/leasecron/leasecron/internal/clock"
	"github.com/leasecron/leasecron/internal/instance"
	"github.com/leasecron/leasecron/internal/opt"
	"github.com/leasecron/leasecron/leasecrontype"
)

// Defaults used when a field of Options, SemaphoreOptions or LeaseTiming is
// left at its zero value, and bounds the constructors enforce.
const (
	// DefaultSlotPrefix is the folder under which semaphore slot blobs live:
	// {prefix}/{name}/{i}.
	DefaultSlotPrefix = "slots"
	// DefaultLeaseDuration is the lease length asked of the service.
	DefaultLeaseDuration = 60 * time.Second
	// DefaultPollEvery is how often a cop without control tries to acquire.
	DefaultPollEvery = 15 * time.Second

	// MinLeaseDuration and MaxLeaseDuration bound LeaseDuration: the Blob
	// service accepts fixed leases of 15 to 60 seconds.
	MinLeaseDuration = 15 * time.Second
	// MaxLeaseDuration: see MinLeaseDuration.
	MaxLeaseDuration = 60 * time.Second

	// MinPollEvery keeps a misconfigured cop from hammering storage.
	MinPollEvery = 100 * time.Millisecond
	// MaxSlots bounds the n of a Semaphore.
	MaxSlots = 1000
)

// pollJitter is the ± fraction applied to PollEvery.
const pollJitter = 0.2

// LeaseTiming is the timing of one held lease, shared by Cop and Semaphore.
// The invariants, checked by the constructors, are
//
//	15s ≤ LeaseDuration ≤ 60s (whole seconds)
//	0 < SafetyMargin < LeaseDuration
//	0 < RetryEvery ≤ RenewEvery
//	RenewEvery + CallTimeout ≤ LeaseDuration − SafetyMargin
//
// so that a renewal that starts on time has either succeeded or timed out,
// with time left to retry, before the holder's local deadline.
type LeaseTiming struct {
	// LeaseDuration is the lease length asked of the service (lease.duration).
	// Default 60s.
	LeaseDuration time.Duration
	// RenewEvery is the interval between renewals while holding, measured
	// from the start of the last successful renewal (or the acquisition).
	// Default LeaseDuration/3.
	RenewEvery time.Duration
	// RetryEvery is the interval between attempts after a renewal failed
	// transiently (timeout, 5xx, connection refused). Default RenewEvery/10,
	// at least 250 ms.
	RetryEvery time.Duration
	// SafetyMargin is subtracted from the lease: control is believed only
	// until (start of the last successful renewal) + LeaseDuration −
	// SafetyMargin on the local monotonic clock. It absorbs clock-rate drift
	// between this host and the service and the time a cancelled leader
	// needs to notice. Default max(2 s, LeaseDuration/10).
	SafetyMargin time.Duration
	// CallTimeout is the deadline of each lease call (acquire, renew,
	// release, metadata). The SDK's own retries could otherwise outlast the
	// lease. Default min(5 s, LeaseDuration/6).
	CallTimeout time.Duration
}

// MinRetryEvery is the shortest interval at which a failed renewal is
// retried: RetryEvery defaults to max(MinRetryEvery, RenewEvery/10), and a
// RenewEvery shorter than RetryEvery is refused, so it is the shortest
// RenewEvery too.
const MinRetryEvery = 250 * time.Millisecond

// WithDefaults returns t with every zero field set to its default.
func (t LeaseTiming) WithDefaults() LeaseTiming {
	t.LeaseDuration = cmp.Or(t.LeaseDuration, DefaultLeaseDuration)
	t.RenewEvery = cmp.Or(t.RenewEvery, t.LeaseDuration/3)
	t.RetryEvery = cmp.Or(t.RetryEvery, max(MinRetryEvery, t.RenewEvery/10))
	t.SafetyMargin = cmp.Or(t.SafetyMargin, max(2*time.Second, t.LeaseDuration/10))
	t.CallTimeout = cmp.Or(t.CallTimeout, min(5*time.Second, t.LeaseDuration/6))
	return t
}

// invalid refuses value for field in the form every leasecron option
// error has: "…: field = value: want accepted".
func invalid(field string, value any, accepted string) error {
	return opt.Invalid(ErrInvalidOptions, field, value, accepted)
}

func (t LeaseTiming) validate() error {
	d := t.LeaseDuration
	if d < MinLeaseDuration || d > MaxLeaseDuration || d%time.Second != 0 {
		return invalid("LeaseDuration", d, "whole seconds from 15s to 60s (the Blob service's fixed lease range)")
	}
	if t.SafetyMargin <= 0 || t.SafetyMargin >= d {
		return invalid("SafetyMargin", t.SafetyMargin, fmt.Sprintf("> 0 and < LeaseDuration (%v)", d))
	}
	trusted := d - t.SafetyMargin
	if t.RenewEvery <= 0 || t.RenewEvery >= trusted {
		return invalid("RenewEvery", t.RenewEvery, fmt.Sprintf("> 0 and < LeaseDuration − SafetyMargin (%v)", trusted))
	}
	if t.RetryEvery <= 0 || t.RetryEvery > t.RenewEvery {
		return invalid("RetryEvery", t.RetryEvery, fmt.Sprintf("> 0 and ≤ RenewEvery (%v)", t.RenewEvery))
	}
	if t.CallTimeout <= 0 || t.RenewEvery+t.CallTimeout > trusted {
		return invalid("CallTimeout", t.CallTimeout, fmt.Sprintf("> 0 and ≤ LeaseDuration − SafetyMargin − RenewEvery (%v)", trusted-t.RenewEvery))
	}
	return nil
}

// Term describes one period of control: one successful acquisition and the
// renewals that followed it.
type Term struct {
	// Generation is the fencing token: the lease blob's generation metadata,
	// incremented on every acquisition with If-Match on the ETag read just
	// before. It strictly increases from one term to the next.
	Generation int64
	// Holder is the identity of the cop that holds the term.
	Holder string
	// Acquired is when the term began (written to the blob in RFC 3339).
	Acquired time.Time
	// LeaseID is the lease ID of the term, fresh for every acquisition.
	LeaseID string
}

// Timing is a Cop's timing: the lease it holds and how often it tries to
// take it. It is the part of Options a program configures
// (leasecron.WorkerOptions.Lease takes it as it is).
type Timing struct {
	// LeaseTiming: LeaseDuration, RenewEvery, RetryEvery, SafetyMargin and
	// CallTimeout. See LeaseTiming for defaults and invariants.
	LeaseTiming

	// PollEvery is how often a cop without control tries to acquire, each
	// wait shortened by up to 20 % at random so contenders spread out and
	// a released lease is tried within one PollEvery (lease.poll_every).
	// Default 15s; at least 100ms.
	PollEvery time.Duration
}

// WithDefaults returns t with every zero field set to its default.
func (t Timing) WithDefaults() Timing {
	t.LeaseTiming = t.LeaseTiming.WithDefaults()
	t.PollEvery = cmp.Or(t.PollEvery, DefaultPollEvery)
	return t
}

// Options configures a Cop. Zero values take the documented defaults.
type Options struct {
	// Timing is the lease's timing (see there).
	Timing

	// Identity names this cop in the blob's holder metadata and in logs.
	// Default DefaultIdentity(): "{hostname}-{pid}-{8 random hex digits}".
	// At most 256 printable ASCII characters (it travels in an HTTP
	// header).
	Identity string

	// Clock drives renew schedules, polls and the local deadline. Default
	// the real clock. (Each call's CallTimeout is a real context deadline
	// because it bounds network I/O.)
	Clock leasecrontype.Clock
	// Logger receives the cop's logs. Default slog.Default().
	Logger *slog.Logger

	// OnAcquired, if set, is called when a term begins. OnLost, if set, is
	// called exactly once for every term that began, when it ends, with the
	// reason (wrapping ErrLeaseLost, ErrStopped or ErrLeadReturned). Hooks
	// run in order on a goroutine of their own: a slow hook delays later
	// hooks, never renewals. Run waits for queued hooks before it returns.
	OnAcquired func(Term)
	// OnLost: see OnAcquired.
	OnLost func(t Term, reason error)

	// Note, if set, is called by the holder before it records its
	// acquisition, each renewal and its release in the lease metadata; what it returns
	// (printable ASCII, at most MaxNote bytes) is stored with them under
	// MetaNote. It lets a leader tell the instances waiting for the lease
	// something they need if it dies — leasecron's worker publishes when
	// the tasks it has already enqueued come due, so that the others'
	// consumers look for them on time. It must be quick.
	Note func() string
	// OnNote, if set, is called with the holder's note each time this cop,
	// not holding the lease, reads it held by another instance, and with the
	// previous holder's last note (written at its last renewal, or when it
	// released the lease) when this cop takes the lease over.
	OnNote func(note string)
	// Fleet and OnFleet are a second note, under MetaFleet, with the same
	// rules: what the holder tells every instance waiting for the lease
	// about the fleet now (leasecron's worker: which work queues exist and
	// which instances are asked to drain), read by them at every look.
	Fleet   func() string
	OnFleet func(note string)
}

// WithDefaults returns o with every zero field set to its default.
func (o Options) WithDefaults() Options {
	o.Timing = o.Timing.WithDefaults()
	o.Identity = cmp.Or(o.Identity, DefaultIdentity())
	o.Clock = clock.OrReal(o.Clock)
	o.Logger = cmp.Or(o.Logger, slog.Default())
	return o
}

var identityRE = regexp.MustCompile(`^[\x20-\x7e]{1,256}$`)

func (o Options) validate() error {
	if err := o.LeaseTiming.validate(); err != nil {
		return err
	}
	if o.PollEvery < MinPollEvery {
		return invalid("PollEvery", o.PollEvery, "at least 100ms")
	}
	if !identityRE.MatchString(o.Identity) {
		return invalid("Identity", strconv.Quote(o.Identity), "1-256 printable ASCII characters")
	}
	return nil
}

func validateBlobName(name string) error {
	ok := len(name) >= 1 && len(name) <= 1024 && name[0] != ' ' && name[len(name)-1] != ' '
	for i := 0; ok && i < len(name); i++ {
		ok = name[i] >= 0x20 && name[i] <= 0x7e
	}
	if !ok {
		return errors.New("1-1024 printable ASCII characters, not starting or ending with a space")
	}
	return nil
}

// DefaultIdentity returns "{hostname}-{pid}-{8 random hex digits}": unique
// per process even when several share a host name (containers). It is the
// identity every leasecron component gives itself when none is set (the
// worker's worker.instance_id), so a cop inside a worker and the worker's
// run records name the process alike.
func DefaultIdentity() string { return instance.NewID() }

// SemaphoreOptions configures a Semaphore. Zero values take the documented
// defaults.
type SemaphoreOptions struct {
	// Prefix is the folder of the slot blobs: slot i of semaphore name is
	// the blob {Prefix}/{name}/{i}. Default "slots".
	Prefix string
	// LeaseTiming of every held slot. See LeaseTiming.
	LeaseTiming
	// Clock drives renewals and deadlines. Default the real clock.
	Clock leasecrontype.Clock
	// Logger receives logs. Default slog.Default().
	Logger *slog.Logger
}

// WithDefaults returns o with every zero field set to its default.
func (o SemaphoreOptions) WithDefaults() SemaphoreOptions {
	o.Prefix = cmp.Or(o.Prefix, DefaultSlotPrefix)
	o.LeaseTiming = o.LeaseTiming.WithDefaults()
	o.Clock = clock.OrReal(o.Clock)
	o.Logger = cmp.Or(o.Logger, slog.Default())
	return o
}

var slotNameRE = regexp.MustCompile(`^[A-Za-z0-9._-]{1,200}$`)

func (o SemaphoreOptions) validate() error {
	if err := validateBlobName(o.Prefix + "/x"); err != nil || len(o.Prefix) > 500 {
		return invalid("Prefix", strconv.Quote(o.Prefix), "at most 500 printable ASCII characters")
	}
	return o.LeaseTiming.validate()
}
