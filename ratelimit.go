package leasecron

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/leasecron/leasecron/internal/payload"
	"github.com/leasecron/leasecron/internal/rate"
	"github.com/leasecron/leasecron/internal/storage"
	"github.com/leasecron/leasecron/internal/table"
	"github.com/leasecron/leasecron/queue"
)

// RateLimit caps how many tasks of a type start per time window, across
// every worker of the fleet (WorkerOptions.Rates; config
// limits.<type>.rate: 10/1m). A task over its budget is put back until the
// budget frees, without using an attempt. See the README's "Rate limits".
type RateLimit struct {
	// Count starts are allowed in any window of Per: 1 to 3000, Per 1 s to
	// 7 days.
	Count int
	Per   time.Duration
	// Key, when set, gives each key its own budget within the type:
	// "unique" (the task's unique key) or "payload.<field>" (a top-level
	// field of its JSON payload; a task without one shares the type's
	// keyless budget).
	Key string
}

// ParseRateLimit reads "COUNT/WINDOW" ("10/1m", "100/1h").
func ParseRateLimit(s string) (RateLimit, error) {
	r, err := rate.Parse(s)
	if err != nil {
		return RateLimit{}, fmt.Errorf("%w: %w", ErrInvalidOptions, err)
	}
	return RateLimit{Count: r.Count, Per: r.Per}, nil
}

func (l RateLimit) validate(typ string) error {
	if err := (rate.Rate{Count: l.Count, Per: l.Per}).Validate(); err != nil {
		return fmt.Errorf("%w: WorkerOptions.Rates[%s]: %w", ErrInvalidOptions, typ, err)
	}
	if l.Key != "" && l.Key != "unique" && (!strings.HasPrefix(l.Key, "payload.") || len(l.Key) == len("payload.")) {
		return fmt.Errorf("%w: WorkerOptions.Rates[%s].Key %q: want \"unique\" or \"payload.<field>\"", ErrInvalidOptions, typ, l.Key)
	}
	return nil
}

// rateLimiter is the consumer's queue.RateLimiter over the schedule table.
type rateLimiter struct {
	l     *rate.Limiter
	rates map[string]RateLimit
}

func newRateLimiter(t table.Table, rates map[string]RateLimit, now func() time.Time) *rateLimiter {
	return &rateLimiter{l: rate.New(t, now, rate.DefaultMargin), rates: rates}
}

// Take records a start, or returns when to look again: when the budget
// frees, plus up to a tenth of the window at random so that the tasks
// waiting for a budget do not all come back at once.
func (r *rateLimiter) Take(ctx context.Context, env queue.Envelope) (time.Duration, error) {
	wait, _, err := r.TakeStart(ctx, env)
	return wait, err
}

// TakeStart is Take that also says when the start it recorded was taken
// (zero when none was: the type has no rate, or its budget is spent), so
// that the consumer can tell a start recorded long before its handler
// would begin.
func (r *rateLimiter) TakeStart(ctx context.Context, env queue.Envelope) (time.Duration, time.Time, error) {
	return r.take(ctx, env, time.Time{})
}

// MoveStart moves the start TakeStart recorded at from to now, for a
// delivery whose claim answered long after it (rate.Limiter.Move); refused,
// the start is taken out and the wait returned, as TakeStart's.
func (r *rateLimiter) MoveStart(ctx context.Context, env queue.Envelope, from time.Time) (time.Duration, time.Time, error) {
	return r.take(ctx, env, from)
}

// ReleaseStart takes the start TakeStart or MoveStart recorded at from
// out of the window, for a delivery put back before its handler began.
func (r *rateLimiter) ReleaseStart(ctx context.Context, env queue.Envelope, from time.Time) error {
	rt, key, ok := r.rateOf(env)
	if !ok {
		return nil
	}
	return r.l.Release(ctx, env.Type, key, rt, from)
}

// rateOf is env's rate and budget key (false: its type has no rate).
func (r *rateLimiter) rateOf(env queue.Envelope) (rate.Rate, string, bool) {
	lim, ok := r.rates[env.Type]
	if !ok {
		return rate.Rate{}, "", false
	}
	return rate.Rate{Count: lim.Count, Per: lim.Per}, rateKey(lim.Key, env), true
}

// take is TakeStart, or MoveStart when from is set.
func (r *rateLimiter) take(ctx context.Context, env queue.Envelope, from time.Time) (time.Duration, time.Time, error) {
	rt, key, ok := r.rateOf(env)
	if !ok {
		return 0, time.Time{}, nil
	}
	var wait time.Duration
	var at time.Time
	var err error
	if from.IsZero() {
		wait, at, err = r.l.Take(ctx, env.Type, key, rt)
	} else {
		wait, at, err = r.l.Move(ctx, env.Type, key, rt, from)
	}
	switch {
	case err != nil:
		return 0, time.Time{}, err
	case wait == 0:
		return 0, at, nil
	}
	return wait + time.Duration(rand.Float64()*float64(rt.Per)/10), time.Time{}, nil
}

// rateKey is the budget key of env under key ("" for the type's budget).
func rateKey(key string, env queue.Envelope) string {
	var k string
	switch {
	case key == "unique":
		k = env.UniqueKey
	case strings.HasPrefix(key, "payload."):
		k, _ = payload.Field(env.Payload, strings.TrimPrefix(key, "payload."))
	}
	if len(k) > 200 || storage.ValidateKeyPart("rate key", k) != nil {
		return "" // a key no row can hold: the type's budget
	}
	return k
}
