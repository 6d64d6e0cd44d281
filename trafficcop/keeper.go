package trafficcop

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/leasecron/leasecron/internal/clock"
	"github.com/leasecron/leasecron/internal/storage"
)

// event is a test signal (in the manner of river's testsignal): services
// report what they did so that fake-clock tests wait for it instead of
// sleeping.
type event struct {
	kind string // "acquired", "acquire-failed", "renew-start", "renewed", "renew-failed", "lost", "released", "term-ended"
	at   time.Time
	err  error
}

// keeper holds one acquired lease for a Cop term or a Semaphore slot: it
// renews the lease on schedule and decides, by the local monotonic clock,
// until when control may be believed. It is the one renewal loop of the
// package.
type keeper struct {
	lock    Lock
	leaseID string
	t       LeaseTiming
	clk     clock.Clock
	log     *slog.Logger
	observe func(event)
	// heartbeat, if set, records a successful renewal that started at
	// start; the renewal counts only once it has succeeded, and its errors
	// are classified like the renewal's.
	heartbeat func(ctx context.Context, start time.Time) error

	mu        sync.Mutex
	lastStart time.Time // start of the acquisition or last successful renewal
	deadline  time.Time // lastStart + LeaseDuration − SafetyMargin
	lost      bool
}

// newKeeper starts bookkeeping for a lease acquired by a call that started
// at start (captured before the request was sent).
func newKeeper(lock Lock, leaseID string, start time.Time, t LeaseTiming, clk clock.Clock, log *slog.Logger, observe func(event)) *keeper {
	if observe == nil {
		observe = func(event) {}
	}
	return &keeper{lock: lock, leaseID: leaseID, t: t, clk: clk, log: log, observe: observe,
		lastStart: start, deadline: start.Add(t.LeaseDuration - t.SafetyMargin)}
}

// valid reports whether control may still be believed: not lost and the
// local deadline not reached. It reads the clock itself, so it turns false
// at the deadline even if the renewal loop has not noticed yet.
func (k *keeper) valid() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return !k.lost && k.clk.Now().Before(k.deadline)
}

// end marks the lease as no longer believed (loss, stop or release).
func (k *keeper) end() {
	k.mu.Lock()
	k.lost = true
	k.mu.Unlock()
}

func (k *keeper) currentDeadline() time.Time {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.deadline
}

type renewResult struct {
	start time.Time
	err   error
}

// run renews the lease until ctx ends (it returns nil) or control is lost
// (it returns an error wrapping ErrLeaseLost). onLoss, if not nil, is
// called at the moment of loss, before run returns.
//
// Renewals happen RenewEvery after the start of the last successful one. A
// refused renewal loses control at once; a transient failure is retried
// every RetryEvery. Whatever happens to renewals, control is lost at
// lastStart + LeaseDuration − SafetyMargin: a renewal still in flight at
// that moment (a hung call) cannot extend it, and one that succeeds after
// it does not revive it.
func (k *keeper) run(ctx context.Context, onLoss func(error)) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // ends a renewal still in flight

	lose := func(err error) error {
		k.end()
		k.observe(event{kind: "lost", at: k.clk.Now(), err: err})
		if onLoss != nil {
			onLoss(err)
		}
		return err
	}

	now := k.clk.Now()
	k.mu.Lock()
	renewT := k.clk.NewTimer(k.lastStart.Add(k.t.RenewEvery).Sub(now))
	deadlineT := k.clk.NewTimer(k.deadline.Sub(now))
	k.mu.Unlock()
	defer func() {
		if renewT != nil {
			renewT.Stop()
		}
		deadlineT.Stop()
	}()
	var (
		inflight chan renewResult // non-nil while a renewal is in flight
		renewC   <-chan time.Time
	)
	renewC = renewT.C()

	for {
		select {
		case <-ctx.Done():
			return nil

		case <-deadlineT.C():
			now := k.clk.Now()
			if d := k.currentDeadline(); now.Before(d) { // extended meanwhile
				deadlineT = k.clk.NewTimer(d.Sub(now))
				continue
			}
			return lose(fmt.Errorf("%w: no successful renewal of %s since %s: local deadline passed",
				ErrLeaseLost, k.lock, k.lastStartTime().Format(time.RFC3339Nano)))

		case <-renewC:
			renewT, renewC = nil, nil
			inflight = make(chan renewResult, 1)
			start := k.clk.Now() // captured before the request is sent
			k.observe(event{kind: "renew-start", at: start})
			go func(ch chan<- renewResult) {
				cctx, ccancel := context.WithTimeout(ctx, k.t.CallTimeout)
				defer ccancel()
				err := k.lock.Renew(cctx, k.leaseID)
				if err == nil && k.heartbeat != nil {
					hctx, hcancel := context.WithTimeout(ctx, k.t.CallTimeout)
					defer hcancel()
					err = k.heartbeat(hctx, start)
				}
				ch <- renewResult{start: start, err: err}
			}(inflight)

		case r := <-inflight:
			inflight = nil
			if ctx.Err() != nil {
				return nil
			}
			now := k.clk.Now()
			var next time.Duration
			switch {
			case r.err == nil:
				k.mu.Lock()
				if !now.Before(k.deadline) {
					k.mu.Unlock()
					return lose(fmt.Errorf("%w: renewal of %s succeeded only after the local deadline", ErrLeaseLost, k.lock))
				}
				k.lastStart = r.start
				k.deadline = r.start.Add(k.t.LeaseDuration - k.t.SafetyMargin)
				deadline := k.deadline
				k.mu.Unlock()
				deadlineT.Stop()
				deadlineT = k.clk.NewTimer(deadline.Sub(now))
				next = r.start.Add(k.t.RenewEvery).Sub(now)
				k.observe(event{kind: "renewed", at: r.start})
			case !storage.IsTransient(r.err):
				return lose(fmt.Errorf("%w: renewal refused: %w", ErrLeaseLost, r.err))
			default:
				k.log.Warn("lease renewal failed; retrying", "lock", k.lock.String(), "err", r.err,
					"retry_in", k.t.RetryEvery, "deadline_in", k.currentDeadline().Sub(now))
				k.observe(event{kind: "renew-failed", at: now, err: r.err})
				next = k.t.RetryEvery
			}
			renewT = k.clk.NewTimer(next)
			renewC = renewT.C()
		}
	}
}

func (k *keeper) lastStartTime() time.Time {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.lastStart
}

// release gives the lease up, the call bounded by CallTimeout.
func (k *keeper) release(ctx context.Context) error {
	k.end()
	cctx, cancel := context.WithTimeout(ctx, k.t.CallTimeout)
	defer cancel()
	err := k.lock.Release(cctx, k.leaseID)
	k.observe(event{kind: "released", at: k.clk.Now(), err: err})
	return err
}
