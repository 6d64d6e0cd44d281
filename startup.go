package leasecron

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/leasecron/leasecron/internal/clock"
	"github.com/leasecron/leasecron/internal/retry"
	"github.com/leasecron/leasecron/internal/storage"
)

// A worker never dies of a busy account. Its start-up — creating the
// tables, queues and container — retries what storage refuses for a while
// (throttling, timeouts, an account not reachable yet) with backoff and
// jitter, honouring Retry-After, until it succeeds or the worker is
// stopped; meanwhile /readyz answers 503 with the reason and the log says
// one line per back-off step. What cannot succeed by waiting (bad
// credentials, a name the service refuses) still fails at once.

// startupBackoff bounds the waits between start-up tries.
const (
	startupBase = 500 * time.Millisecond
	startupMax  = 30 * time.Second
)

// startup is the readiness of a worker that is still starting.
type startup struct {
	mu   sync.Mutex
	done bool
	last error // why the last try failed
}

// ready returns nil once started, else why not.
func (s *startup) ready() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.done:
		return nil
	case s.last != nil:
		return fmt.Errorf("starting: storage not ready: %w", s.last)
	}
	return errors.New("starting")
}

func (s *startup) set(done bool, last error) {
	s.mu.Lock()
	s.done, s.last = done, last
	s.mu.Unlock()
}

// start runs w.ensure until it succeeds, retrying transient failures; it
// returns ctx's error when stopped first, and a failure that waiting cannot
// cure at once.
func (w *Worker) start(ctx context.Context, s *startup) error {
	for try := 1; ; try++ {
		err := w.ensure(ctx)
		if err == nil {
			s.set(true, nil)
			if try > 1 {
				w.log.Info("storage ready", "tries", try)
			}
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if !storage.IsTransient(err) {
			return err
		}
		s.set(false, err)
		wait := retry.After(err, startupBase, startupMax, try, rand.Float64())
		w.log.Warn("storage not ready at start-up; retrying", "err", err, "try", try, "retry_in", wait.Round(time.Millisecond))
		if err := clock.Sleep(ctx, w.o.Clock, wait); err != nil {
			return err
		}
	}
}

// check is ready, while starting, or else next.
func (s *startup) check(next func(context.Context) error) func(context.Context) error {
	return func(ctx context.Context) error {
		if err := s.ready(); err != nil {
			return err
		}
		return next(ctx)
	}
}
