package trafficcop_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"os/signal"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"

	"github.com/leasecron/leasecron/trafficcop"
)

// A Cop over an in-memory lock: the lead function runs while the cop holds
// the lease and reads its term from its context.
func ExampleCop() {
	lock := trafficcop.NewMemoryLock("scheduler", nil)
	cop, err := trafficcop.NewCop(lock, trafficcop.Options{Identity: "worker-1"})
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

// A leader elector on Azure Storage, for any program: the cop runs over a
// blob the program names, in a container client it builds itself with the
// Azure SDK and its own credential (here a connection string's shared key;
// container.NewClient with an azidentity credential works the same way).
// Compile-only: it needs a storage account or Azurite.
func ExampleNewBlobLock() {
	cc, err := container.NewClientFromConnectionString(os.Getenv("AZURE_STORAGE_CONNECTION_STRING"), "myapp", nil)
	if err != nil {
		log.Fatal(err)
	}
	lock, err := trafficcop.NewBlobLock(cc, "locks/nightly-report")
	if err != nil {
		log.Fatal(err)
	}
	cop, err := trafficcop.NewCop(lock, trafficcop.Options{
		Timing:     trafficcop.Timing{LeaseTiming: trafficcop.LeaseTiming{LeaseDuration: 30 * time.Second}},
		OnAcquired: func(t trafficcop.Term) { log.Printf("leading, generation %d", t.Generation) },
		OnLost:     func(t trafficcop.Term, reason error) { log.Printf("term %d ended: %v", t.Generation, reason) },
	})
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	go func() {
		// Only one instance at a time runs this function; it must stop
		// when ctx is cancelled (control lost or shutdown).
		_ = cop.Run(ctx, func(ctx context.Context) error {
			term, _ := trafficcop.TermFrom(ctx)
			for ctx.Err() == nil {
				// Do one step of the leader's work. Writes that must never
				// come from a stale leader carry term.Generation as a fence.
				fmt.Println("working as generation", term.Generation)
				select {
				case <-ctx.Done():
				case <-time.After(10 * time.Second):
				}
			}
			return nil
		})
	}()

	// Any instance can ask who leads without competing.
	if h, err := trafficcop.ReadHolder(ctx, lock); err == nil && h.Held() {
		fmt.Printf("%s leads (generation %d since %s)\n", h.Holder, h.Generation, h.Acquired)
	}
	<-ctx.Done()
	cop.Stop() // releases the lease: another instance takes over within its poll
}

// Handover: two instances compete for one lease; when the leader stops,
// the standby takes over with the next generation. An in-memory lock on
// the real clock stands in for the blob.
func ExampleCop_handover() {
	lock := trafficcop.NewMemoryLock("scheduler", nil)
	opts := func(id string) trafficcop.Options {
		return trafficcop.Options{Timing: trafficcop.Timing{PollEvery: 100 * time.Millisecond}, Identity: id}
	}
	a, _ := trafficcop.NewCop(lock, opts("a"))
	b, _ := trafficcop.NewCop(lock, opts("b"))
	leading := make(chan trafficcop.Term)
	lead := func(ctx context.Context) error {
		t, _ := trafficcop.TermFrom(ctx)
		leading <- t
		<-ctx.Done()
		return nil
	}
	go func() { _ = a.Run(context.Background(), lead) }()
	t := <-leading
	fmt.Printf("%s leads, generation %d\n", t.Holder, t.Generation)

	go func() { _ = b.Run(context.Background(), lead) }()
	a.Stop() // graceful: marks the lease released and releases it
	t = <-leading
	fmt.Printf("%s leads, generation %d; a has control: %v\n", t.Holder, t.Generation, a.HasControl())
	b.Stop()
	// Output:
	// a leads, generation 1
	// b leads, generation 2; a has control: false
}

// A per-type concurrency limit of two over in-memory slots.
func ExampleSemaphore() {
	locks := []trafficcop.Lock{trafficcop.NewMemoryLock("slots/report/0", nil), trafficcop.NewMemoryLock("slots/report/1", nil)}
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
