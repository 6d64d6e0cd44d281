package trafficcop

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasecron/leasecron/azurite/azuritetest"
	"github.com/leasecron/leasecron/internal/clock"
)

func TestMain(m *testing.M) { azuritetest.Main(m) }

// crash stops the cop the way a killed process stops: no release, the
// lease is left to expire. (Test seam: hooks still run.)
func (c *Cop) crash() { c.stop(true) }

// lastRenewStart is the start of the current term's last successful
// renewal (zero without control).
func (c *Cop) lastRenewStart() time.Time {
	c.mu.Lock()
	k := c.k
	c.mu.Unlock()
	if k == nil {
		return time.Time{}
	}
	return k.lastStartTime()
}

// crash stops renewing the slot without releasing it.
func (sl *Slot) crash() { sl.once.Do(func() { sl.releaseErr = sl.stop(context.Background(), false) }) }

func testLogger(t testing.TB) *slog.Logger {
	if os.Getenv("LEASECRON_TEST_LOG") == "" {
		return slog.New(slog.DiscardHandler)
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})).With("test", t.Name())
}

var t0 = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

// events collects a service's test signals.
type events struct {
	t  testing.TB
	ch chan event
}

func newEvents(t testing.TB) *events { return &events{t: t, ch: make(chan event, 10000)} }

func (e *events) observe(ev event) { e.ch <- ev }

// wait returns the next event of kind, skipping others; it fails the test
// after 5 s of real time.
func (e *events) wait(kind string) event {
	e.t.Helper()
	timeout := time.After(5 * time.Second)
	for {
		select {
		case ev := <-e.ch:
			if ev.kind == kind {
				return ev
			}
		case <-timeout:
			e.t.Fatalf("no %q event within 5s", kind)
		}
	}
}

// none checks that no event of kind is queued now.
func (e *events) none(kind string) {
	e.t.Helper()
	for {
		select {
		case ev := <-e.ch:
			if ev.kind == kind {
				e.t.Fatalf("unexpected %q event at %v (err %v)", kind, ev.at, ev.err)
			}
		default:
			return
		}
	}
}

func waitTimers(t testing.TB, clk *clock.Fake, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := clk.WaitForTimers(ctx, n); err != nil {
		t.Fatalf("waiting for %d timers (have %d): %v", n, clk.Pending(), err)
	}
}

func waitDone(t testing.TB, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(5 * time.Second):
		t.Fatalf("%s did not happen within 5s", what)
	}
}

// partitionLock cuts one instance off from storage on demand: every call
// fails the way a dead network fails (transient), without the lease being
// released.
type partitionLock struct {
	Lock
	cut atomic.Bool
}

func (p *partitionLock) check(ctx context.Context) error {
	if p.cut.Load() {
		return fmt.Errorf("%s: %w", p.Lock, errTransient)
	}
	return ctx.Err()
}

func (p *partitionLock) Acquire(ctx context.Context, id string, d time.Duration) error {
	if err := p.check(ctx); err != nil {
		return err
	}
	return p.Lock.Acquire(ctx, id, d)
}

func (p *partitionLock) Renew(ctx context.Context, id string) error {
	if err := p.check(ctx); err != nil {
		return err
	}
	return p.Lock.Renew(ctx, id)
}

func (p *partitionLock) Get(ctx context.Context) (LockState, error) {
	if err := p.check(ctx); err != nil {
		return LockState{}, err
	}
	return p.Lock.Get(ctx)
}

func (p *partitionLock) SetMetadata(ctx context.Context, id, ifMatch string, md map[string]string) error {
	if err := p.check(ctx); err != nil {
		return err
	}
	return p.Lock.SetMetadata(ctx, id, ifMatch, md)
}

func (p *partitionLock) Release(ctx context.Context, id string) error {
	if err := p.check(ctx); err != nil {
		return err
	}
	return p.Lock.Release(ctx, id)
}
