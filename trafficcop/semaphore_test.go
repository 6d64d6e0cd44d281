package trafficcop

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/leasecron/leasecron/internal/clock"
	"github.com/leasecron/leasecron/internal/memstore"
	"github.com/leasecron/leasecron/leasecrontype"
)

func newMemSemaphore(t *testing.T, clk *clock.Fake, n int) (*Semaphore, []*MemoryLock, *events) {
	t.Helper()
	mems := make([]*MemoryLock, n)
	locks := make([]Lock, n)
	for i := range mems {
		mems[i] = NewMemoryLock(fmt.Sprintf("slots/test/%d", i), clk)
		locks[i] = mems[i]
	}
	sem, err := NewSemaphoreWithLocks("test", locks, SemaphoreOptions{
		LeaseTiming: LeaseTiming{LeaseDuration: 15 * time.Second}, Clock: clk, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	ev := newEvents(t)
	sem.observe = ev.observe
	return sem, mems, ev
}

func TestSemaphoreLimitsToN(t *testing.T) {
	clk := clock.NewFake(t0)
	sem, mems, _ := newMemSemaphore(t, clk, 3)
	ctx := context.Background()
	var slots []*Slot
	seen := map[int]bool{}
	for range 3 {
		sl, err := sem.TryAcquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if seen[sl.Index()] {
			t.Fatalf("slot %d handed out twice", sl.Index())
		}
		seen[sl.Index()] = true
		slots = append(slots, sl)
	}
	if _, err := sem.TryAcquire(ctx); !errors.Is(err, ErrNoSlot) {
		t.Fatalf("4th TryAcquire: %v, want ErrNoSlot", err)
	}
	if n, err := sem.Held(ctx); err != nil || n != 3 {
		t.Fatalf("Held = %d, %v; want 3", n, err)
	}
	for _, m := range mems {
		if m.Count(OpEnsure) != 1 {
			t.Errorf("%s ensured %d times, want once (created on first use)", m, m.Count(OpEnsure))
		}
	}
	if err := slots[1].Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := slots[1].Release(ctx); err != nil {
		t.Fatalf("second Release: %v", err)
	}
	if slots[1].Held() || !errors.Is(context.Cause(slots[1].Context()), ErrSlotReleased) {
		t.Fatalf("released slot: held %v, cause %v", slots[1].Held(), context.Cause(slots[1].Context()))
	}
	if n, _ := sem.Held(ctx); n != 2 {
		t.Fatalf("Held = %d after a release, want 2", n)
	}
	sl, err := sem.TryAcquire(ctx)
	if err != nil || sl.Index() != slots[1].Index() {
		t.Fatalf("TryAcquire after release: %v, %v; want slot %d", sl, err, slots[1].Index())
	}
	slots[1] = sl
	for _, s := range slots {
		if err := s.Release(ctx); err != nil {
			t.Error(err)
		}
	}
	if n, _ := sem.Held(ctx); n != 0 {
		t.Fatalf("Held = %d after releasing all", n)
	}
}

func TestSemaphoreSpreadsContenders(t *testing.T) {
	clk := clock.NewFake(t0)
	sem, _, _ := newMemSemaphore(t, clk, 3)
	ctx := context.Background()
	first := map[int]int{}
	for range 90 {
		sl, err := sem.TryAcquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		first[sl.Index()]++
		if err := sl.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if len(first) != 3 {
		t.Fatalf("a free semaphore always handed out slots %v: the start index is not random", first)
	}
}

// newMemstoreSemaphore is a semaphore of n slots over blob leases of an
// in-memory account (memstore) whose service clock is clk.
func newMemstoreSemaphore(t *testing.T, clk *clock.Fake, n int) (*Semaphore, *events) {
	t.Helper()
	srv := memstore.New(memstore.Options{Now: clk.Now})
	sem, err := NewSemaphore(memstoreContainer(t, srv, "leasecron"), "test", n, SemaphoreOptions{
		LeaseTiming: LeaseTiming{LeaseDuration: 15 * time.Second}, Clock: clk, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	ev := newEvents(t)
	sem.observe = ev.observe
	return sem, ev
}

func TestSemaphoreSlotRenewsAndCrashedSlotFreesAtExpiry(t *testing.T) {
	t.Run("memory", func(t *testing.T) {
		clk := clock.NewFake(t0)
		sem, _, ev := newMemSemaphore(t, clk, 2)
		crashedSlotFreesAtExpiry(t, clk, sem, ev)
	})
	t.Run("memstore", func(t *testing.T) {
		clk := clock.NewFake(t0)
		sem, ev := newMemstoreSemaphore(t, clk, 2)
		crashedSlotFreesAtExpiry(t, clk, sem, ev)
	})
}

func crashedSlotFreesAtExpiry(t *testing.T, clk *clock.Fake, sem *Semaphore, ev *events) {
	ctx := context.Background()
	a, err := sem.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b, err := sem.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Release(ctx)
	b.crash()
	if b.Held() {
		t.Fatal("crashed slot still held")
	}
	// a keeps renewing (2 timers); b's lease runs out at t0+15s.
	for i := 1; i <= 30; i++ {
		waitTimers(t, clk, 2)
		clk.Advance(time.Second)
		if i%5 == 0 {
			ev.wait("renewed")
		}
		sl, err := sem.TryAcquire(ctx)
		at := clk.Now().Sub(t0)
		switch {
		case err == nil:
			defer sl.Release(ctx)
			if at < 15*time.Second {
				t.Fatalf("slot %d acquired at %v, before the crashed holder's lease expired", sl.Index(), at)
			}
			if sl.Index() != b.Index() {
				t.Fatalf("got slot %d, want the crashed holder's %d", sl.Index(), b.Index())
			}
			if !a.Held() || a.Context().Err() != nil {
				t.Fatal("the renewing holder lost its slot")
			}
			return
		case !errors.Is(err, ErrNoSlot):
			t.Fatal(err)
		}
	}
	t.Fatal("crashed slot never freed")
}

func TestSemaphoreSlotLostOnRefusedRenewal(t *testing.T) {
	clk := clock.NewFake(t0)
	sem, mems, ev := newMemSemaphore(t, clk, 1)
	ctx := context.Background()
	sl, err := sem.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	mems[0].SetFault(func(_ context.Context, op Op) error {
		if op == OpRenew {
			return fmt.Errorf("%w: lease lost", leasecrontype.ErrLeaseConflict)
		}
		return nil
	})
	waitTimers(t, clk, 2)
	clk.Advance(5 * time.Second)
	ev.wait("lost")
	waitDone(t, sl.Context().Done(), "slot context cancellation")
	if !errors.Is(context.Cause(sl.Context()), ErrLeaseLost) || sl.Held() {
		t.Fatalf("cause %v, held %v", context.Cause(sl.Context()), sl.Held())
	}
	if err := sl.Release(ctx); err != nil {
		t.Fatalf("Release of a lost slot: %v", err)
	}
}

func TestSemaphoreReportsStorageTrouble(t *testing.T) {
	clk := clock.NewFake(t0)
	sem, mems, _ := newMemSemaphore(t, clk, 2)
	for _, m := range mems {
		m.SetFault(func(context.Context, Op) error { return errTransient })
	}
	_, err := sem.TryAcquire(context.Background())
	if err == nil || errors.Is(err, ErrNoSlot) || !errors.Is(err, errTransient) {
		t.Fatalf("TryAcquire with storage down: %v; want the storage error, not ErrNoSlot", err)
	}
	if _, err := sem.Held(context.Background()); !errors.Is(err, errTransient) {
		t.Fatalf("Held with storage down: %v", err)
	}
}
