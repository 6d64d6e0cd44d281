package trafficcop_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/leasecron/leasecron/internal/storage"
	"github.com/leasecron/leasecron/trafficcop"
)

// A Cop over an in-memory lock: the lead function runs while the cop holds
// the lease and reads its term from its context.
func ExampleCop() {
	lock := trafficcop.NewMemLock("scheduler", nil)
	cop, err := trafficcop.NewCopWithLock(lock, trafficcop.Options{Identity: "worker-1"})
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	err = cop.Run(ctx, func(ctx context.Context) error {
		term, _ := trafficcop.TermFrom(ctx)
		fmt.Printf("%s leads, generation %d, has control: %v\n", term.Holder, term.Generation, cop.HasControl())
		stop() // a real leader works until ctx is cancelled
		<-ctx.Done()
		fmt.Println("lead context ended:", errors.Is(context.Cause(ctx), trafficcop.ErrStopped))
		return nil
	})
	fmt.Println("Run returned", err, "- lease released:", lock.LeaseID() == "")
	// Output:
	// worker-1 leads, generation 1, has control: true
	// lead context ended: true
	// Run returned <nil> - lease released: true
}

// The scheduler's cop on Azure Storage (compile-only: needs an account).
func ExampleNewCop() {
	clients, err := storage.New(storage.Config{ConnectionString: "UseDevelopmentStorage=true"})
	if err != nil {
		log.Fatal(err)
	}
	cop, err := trafficcop.NewCop(clients, trafficcop.Options{
		LeaseTiming: trafficcop.LeaseTiming{LeaseDuration: 30 * time.Second},
		OnAcquired:  func(t trafficcop.Term) { log.Printf("leading, generation %d", t.Generation) },
		OnLost:      func(t trafficcop.Term, reason error) { log.Printf("term %d ended: %v", t.Generation, reason) },
	})
	if err != nil {
		log.Fatal(err)
	}
	go func() {
		_ = cop.Run(context.Background(), func(ctx context.Context) error {
			<-ctx.Done() // move due tasks until control ends
			return nil
		})
	}()
	defer cop.Stop()

	h, err := trafficcop.ReadHolder(context.Background(), clients, "", "")
	if err == nil && h.Held() {
		fmt.Printf("%s leads (generation %d since %s)\n", h.Holder, h.Generation, h.Acquired)
	}
}

// A per-type concurrency limit of two over in-memory slots.
func ExampleSemaphore() {
	locks := []trafficcop.Lock{trafficcop.NewMemLock("slots/report/0", nil), trafficcop.NewMemLock("slots/report/1", nil)}
	sem, err := trafficcop.NewSemaphoreWithLocks("report", locks, trafficcop.SemaphoreOptions{})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	a, _ := sem.TryAcquire(ctx)
	b, _ := sem.TryAcquire(ctx)
	_, err = sem.TryAcquire(ctx)
	fmt.Println("third:", errors.Is(err, trafficcop.ErrNoSlot))
	held, _ := sem.Held(ctx)
	fmt.Println("held:", held)

	_ = a.Release(ctx)
	c, err := sem.TryAcquire(ctx)
	fmt.Println("after a release:", err == nil, c.Context().Err() == nil)
	_ = b.Release(ctx)
	_ = c.Release(ctx)
	// Output:
	// third: true
	// held: 2
	// after a release: true true
}
