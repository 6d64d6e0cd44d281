// Package retry holds the backoff arithmetic every loop in leasecron
// shares, and Transient, which retries a storage call through short faults
// (throttling, timeouts, dropped connections) before a caller gives up on
// it.
package retry

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/leasecron/leasecron/internal/clock"
	"github.com/leasecron/leasecron/internal/storage"
)

// Exp returns the delay after failures failed attempts (1 for the first)
// before jitter: base·2^(failures−1), capped at max.
func Exp(base, max time.Duration, failures int) time.Duration {
	if failures < 1 {
		failures = 1
	}
	d := base
	for i := 1; i < failures; i++ {
		if d >= max/2 {
			return max
		}
		d *= 2
	}
	if d > max {
		return max
	}
	return d
}

// Jitter spreads d over [d/2, d] ("equal jitter"): retries of many calls
// that failed together do not come back together, and none waits longer
// than d. r is a uniform random number in [0, 1).
func Jitter(d time.Duration, r float64) time.Duration {
	if d <= 0 {
		return 0
	}
	half := d / 2
	return half + time.Duration(float64(d-half)*r)
}

// After is the wait before the next try after failures consecutive
// failures, the last being err: the exponential backoff from base to max,
// jittered, but never shorter than what the service asked for
// (storage.RetryAfter).
func After(err error, base, max time.Duration, failures int, r float64) time.Duration {
	return Wait(Jitter(Exp(base, max, failures), r), err)
}

// Wait is d, or the service's Retry-After when err carries a longer one.
func Wait(d time.Duration, err error) time.Duration {
	return max(d, storage.RetryAfter(err))
}

// Policy bounds Transient.
type Policy struct {
	// Tries is how many times f is called at most. Default 4.
	Tries int
	// Base and Max bound the backoff between tries. Default 250 ms and 4 s.
	Base, Max time.Duration
	// Clock paces the waits. Default the real clock.
	Clock clock.Clock
}

// Transient calls f until it succeeds, fails with an error that is not
// transient (storage.IsTransient), has been tried p.Tries times, or ctx
// ends; between tries it waits as After says. It returns f's last error.
func Transient(ctx context.Context, p Policy, f func(ctx context.Context) error) error {
	tries := p.Tries
	if tries <= 0 {
		tries = 4
	}
	base, maxWait := p.Base, p.Max
	if base <= 0 {
		base = 250 * time.Millisecond
	}
	if maxWait <= 0 {
		maxWait = 4 * time.Second
	}
	clk := clock.OrReal(p.Clock)
	var err error
	for i := 1; ; i++ {
		if err = f(ctx); err == nil || !storage.IsTransient(err) || i >= tries || ctx.Err() != nil {
			return err
		}
		if clock.Sleep(ctx, clk, After(err, base, maxWait, i, rand.Float64())) != nil {
			return err
		}
	}
}
