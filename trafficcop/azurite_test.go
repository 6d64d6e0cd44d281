package trafficcop

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasecron/leasecron/azurite/azuritetest"
)

// TestAzuriteThreeCops runs three cops on one blob (15 s lease, 2 s poll)
// through a graceful handover, a crash and a network partition of the
// holder, sampling HasControl every 100 ms.
func TestAzuriteThreeCops(t *testing.T) {
	t.Parallel()
	cc := azuriteContainer(t)
	const (
		blobName = "locks/scheduler"
		lease    = 15 * time.Second
		poll     = 2 * time.Second
		hold     = 7 * time.Second // long enough for one renewal (every 5 s)
	)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	type termSpan struct {
		id         string
		gen        int64
		start, end time.Time
	}
	var (
		mu    sync.Mutex
		cops  = map[string]*Cop{}
		locks = map[string]*partitionLock{}
		spans []*termSpan
		runs  sync.WaitGroup
	)
	started := make(chan *termSpan, 100)
	startCop := func(id string) {
		pl := &partitionLock{Lock: newBlobLock(t, cc, blobName)}
		cop, err := NewCop(pl, Options{
			Timing:   Timing{LeaseTiming: LeaseTiming{LeaseDuration: lease}, PollEvery: poll},
			Identity: id,
			Logger:   testLogger(t),
		})
		if err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		cops[id], locks[id] = cop, pl
		mu.Unlock()
		runs.Add(1)
		go func() {
			defer runs.Done()
			err := cop.Run(ctx, func(ctx context.Context) error {
				term, _ := TermFrom(ctx)
				s := &termSpan{id: id, gen: term.Generation, start: time.Now()}
				mu.Lock()
				spans = append(spans, s)
				mu.Unlock()
				started <- s
				<-ctx.Done()
				mu.Lock()
				s.end = time.Now()
				mu.Unlock()
				return nil
			})
			if err != nil {
				t.Errorf("%s: Run: %v", id, err)
			}
		}()
	}
	next := func(within time.Duration, what string) *termSpan {
		t.Helper()
		select {
		case s := <-started:
			return s
		case <-time.After(within):
			t.Fatalf("%s: no cop took control within %v", what, within)
			return nil
		}
	}
	noneStarted := func(what string) {
		t.Helper()
		select {
		case s := <-started:
			t.Fatalf("%s: %s took control (generation %d)", what, s.id, s.gen)
		default:
		}
	}
	holderIs := func(s *termSpan) {
		t.Helper()
		hi, err := ReadHolder(ctx, newBlobLock(t, cc, blobName))
		if err != nil || hi.Holder != s.id || hi.Generation != s.gen || !hi.Held() || hi.State != LeaseLeased {
			t.Fatalf("ReadHolder = %+v, %v; want %s generation %d, leased", hi, err, s.id, s.gen)
		}
	}

	// Sample HasControl of every cop every 100 ms.
	var samples, maxHolders atomic.Int64
	samplerDone := make(chan struct{})
	stopSampler := make(chan struct{})
	go func() {
		defer close(samplerDone)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stopSampler:
				return
			case <-tick.C:
			}
			mu.Lock()
			var holders []string
			for id, c := range cops {
				if c.HasControl() {
					holders = append(holders, id)
				}
			}
			mu.Unlock()
			samples.Add(1)
			if n := int64(len(holders)); n > maxHolders.Load() {
				maxHolders.Store(n)
			}
			if len(holders) > 1 {
				t.Errorf("%d cops have control at once: %v", len(holders), holders)
			}
		}
	}()
	began := time.Now()

	// 1. Three cops start together on a container that does not exist yet.
	for i := range 3 {
		startCop(fmt.Sprintf("cop-%d", i))
	}
	first := next(10*time.Second, "start")
	t.Logf("first acquisition by %s (generation %d) %v after start", first.id, first.gen, first.start.Sub(began).Round(time.Millisecond))
	holderIs(first)
	time.Sleep(hold)
	noneStarted("while the first holder renews")

	// 2. Graceful handover: Stop releases the lease.
	mu.Lock()
	holder := cops[first.id]
	mu.Unlock()
	stopAt := time.Now()
	holder.Stop()
	stopped := time.Now()
	second := next(poll+time.Second, "after Stop")
	handover := second.start.Sub(stopped)
	t.Logf("graceful handover %s → %s: %v after the release (%v after Stop was called; Stop took %v)",
		first.id, second.id, handover.Round(time.Millisecond), second.start.Sub(stopAt).Round(time.Millisecond), stopped.Sub(stopAt).Round(time.Millisecond))
	if handover > poll+time.Second {
		t.Errorf("takeover after Stop took %v, want ≤ PollEvery + 1s", handover)
	}
	holderIs(second)
	startCop("cop-3") // the stopped instance comes back

	// 3. Crash: the holder stops renewing and does not release.
	time.Sleep(hold)
	noneStarted("while the second holder renews")
	mu.Lock()
	holder = cops[second.id]
	lastRenew := holder.lastRenewStart()
	mu.Unlock()
	crashAt := time.Now()
	holder.crash()
	third := next(lease+poll+time.Second, "after the crash")
	t.Logf("takeover after crash %s → %s: %v after the crash, %v after the crashed holder's last renewal started",
		second.id, third.id, third.start.Sub(crashAt).Round(time.Millisecond), third.start.Sub(lastRenew).Round(time.Millisecond))
	if d := third.start.Sub(lastRenew); d < lease-time.Second {
		t.Errorf("takeover %v after the last renewal: the lease (%v) cannot have expired yet", d, lease)
	}
	holderIs(third)
	startCop("cop-4")

	// 4. Partition: the holder can no longer reach storage. It must stop
	// believing it leads before the lease runs out for the others.
	time.Sleep(hold)
	noneStarted("while the third holder renews")
	mu.Lock()
	holder = cops[third.id]
	lastRenew = holder.lastRenewStart()
	locks[third.id].cut.Store(true)
	mu.Unlock()
	cutAt := time.Now()
	fourth := next(lease+poll+2*time.Second, "after the partition")
	mu.Lock()
	localLoss := third.end
	mu.Unlock()
	if localLoss.IsZero() {
		t.Fatal("the partitioned holder still leads after another took over")
	}
	t.Logf("partition of %s: it gave up control %v after its last renewal started (deadline %v); %s took over %v after that renewal, %v after the cut; gap without a leader %v",
		third.id, localLoss.Sub(lastRenew).Round(time.Millisecond), lease-2*time.Second, fourth.id,
		fourth.start.Sub(lastRenew).Round(time.Millisecond), fourth.start.Sub(cutAt).Round(time.Millisecond),
		fourth.start.Sub(localLoss).Round(time.Millisecond))
	if d := localLoss.Sub(lastRenew); d > lease-2*time.Second+500*time.Millisecond {
		t.Errorf("partitioned holder kept control %v after its last renewal started, want ≤ 13s", d)
	}
	holderIs(fourth)
	locks[third.id].cut.Store(false)
	time.Sleep(3 * time.Second)
	noneStarted("after the partition healed")

	// Wind down.
	close(stopSampler)
	<-samplerDone
	mu.Lock()
	all := make([]*Cop, 0, len(cops))
	for _, c := range cops {
		all = append(all, c)
	}
	mu.Unlock()
	for _, c := range all {
		c.Stop()
	}
	runs.Wait()
	hi, err := ReadHolder(ctx, newBlobLock(t, cc, blobName))
	if err != nil || hi.Held() || hi.Holder != fourth.id || hi.Generation != fourth.gen {
		t.Errorf("after everyone stopped: %+v, %v", hi, err)
	}

	elapsed := time.Since(began)
	t.Logf("%d samples over %v; at most %d cop(s) with control at once", samples.Load(), elapsed.Round(time.Second), maxHolders.Load())
	if elapsed < 40*time.Second || samples.Load() < 350 {
		t.Errorf("sampled only %d times over %v", samples.Load(), elapsed)
	}
	// Terms never overlap and generations strictly increase.
	mu.Lock()
	defer mu.Unlock()
	for i := 1; i < len(spans); i++ {
		p, s := spans[i-1], spans[i]
		if s.gen <= p.gen {
			t.Errorf("generation %d (%s) after %d (%s)", s.gen, s.id, p.gen, p.id)
		}
		if !s.start.After(p.end) {
			t.Errorf("term %d of %s began at %v, before term %d of %s ended at %v", s.gen, s.id, s.start, p.gen, p.id, p.end)
		}
	}
	if len(spans) != 4 {
		t.Errorf("%d terms, want 4", len(spans))
	}
}

// TestAzuriteSemaphore: 5 contenders on 3 slots never hold more than 3; a
// crashed holder's slot frees itself when its lease expires.
func TestAzuriteSemaphore(t *testing.T) {
	t.Parallel()
	cc := azuriteContainer(t)
	const lease = 15 * time.Second
	newSem := func() *Semaphore {
		s, err := NewSemaphore(cc, "limited-type", 3, SemaphoreOptions{
			LeaseTiming: LeaseTiming{LeaseDuration: lease}, Logger: testLogger(t)})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	ctx := context.Background()

	// Phase 1: churn. Holds of up to 6 s span renewals.
	var (
		holding, maxHolding, acquisitions, refusals atomic.Int64
		wg                                          sync.WaitGroup
	)
	stop := make(chan struct{})
	for c := range 5 {
		sem := newSem() // one per contender, as separate processes would have
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				sl, err := sem.TryAcquire(ctx)
				if errors.Is(err, ErrNoSlot) {
					refusals.Add(1)
					time.Sleep(200 * time.Millisecond)
					continue
				}
				if err != nil {
					t.Errorf("contender %d: %v", c, err)
					return
				}
				acquisitions.Add(1)
				n := holding.Add(1)
				for {
					m := maxHolding.Load()
					if n <= m || maxHolding.CompareAndSwap(m, n) {
						break
					}
				}
				hold := time.Duration(500+(c*1300+i*700)%5500) * time.Millisecond
				select {
				case <-time.After(hold):
				case <-stop:
				}
				if !sl.Held() {
					t.Errorf("contender %d lost slot %d while holding it", c, sl.Index())
				}
				holding.Add(-1)
				if err := sl.Release(ctx); err != nil {
					t.Errorf("contender %d: release: %v", c, err)
				}
			}
		}()
	}
	watcher := newSem()
	deadline := time.Now().Add(9 * time.Second)
	polls := 0
	for time.Now().Before(deadline) {
		n, err := watcher.Held(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if n > 3 {
			t.Errorf("Held = %d", n)
		}
		if h := holding.Load(); h > 3 {
			t.Errorf("%d contenders hold a slot at once", h)
		}
		polls++
		time.Sleep(100 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	t.Logf("churn: %d acquisitions, %d ErrNoSlot refusals, at most %d held at once, %d Held polls",
		acquisitions.Load(), refusals.Load(), maxHolding.Load(), polls)
	if maxHolding.Load() != 3 || refusals.Load() == 0 {
		t.Errorf("churn never filled the semaphore (max %d, refusals %d)", maxHolding.Load(), refusals.Load())
	}
	if n, err := watcher.Held(ctx); err != nil || n != 0 {
		t.Fatalf("Held = %d, %v after everyone released", n, err)
	}

	// Phase 2: fill all three slots, crash one holder.
	var held []*Slot
	for range 3 {
		sl, err := newSem().TryAcquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, sl)
	}
	defer func() {
		for _, sl := range held[1:] {
			_ = sl.Release(ctx)
		}
	}()
	time.Sleep(6 * time.Second) // let everyone renew once
	crashed := held[0]
	lastRenew := crashed.k.lastStartTime()
	crashAt := time.Now()
	crashed.crash()
	contender := newSem()
	var got *Slot
	for got == nil {
		sl, err := contender.TryAcquire(ctx)
		switch {
		case err == nil:
			got = sl
		case errors.Is(err, ErrNoSlot):
			if time.Since(crashAt) > lease+4*time.Second {
				t.Fatalf("crashed slot not free %v after the crash", time.Since(crashAt))
			}
			// Until just before the crashed lease can run out, all three
			// are leased (after that, the watcher may see it expired).
			if n, _ := watcher.Held(ctx); n != 3 && time.Since(lastRenew) < lease-time.Second {
				t.Errorf("Held = %d while 3 slots are leased", n)
			}
			time.Sleep(100 * time.Millisecond)
		default:
			t.Fatal(err)
		}
	}
	defer got.Release(ctx)
	freed := time.Now()
	t.Logf("crashed slot %d freed %v after the crash, %v after its last renewal started (lease %v)",
		crashed.Index(), freed.Sub(crashAt).Round(time.Millisecond), freed.Sub(lastRenew).Round(time.Millisecond), lease)
	if got.Index() != crashed.Index() {
		t.Errorf("got slot %d, want the crashed %d", got.Index(), crashed.Index())
	}
	// Never before the lease could have run out (the slot's safety); soon
	// after it (liveness). The upper bound allows for the contender's 100 ms
	// polls, each trying every slot, slowing down on a loaded CI machine.
	if d := freed.Sub(lastRenew); d < lease-time.Second || d > lease+4*time.Second {
		t.Errorf("slot freed %v after the last renewal, want in [lease − 1 s, lease + 4 s] (lease %v)", d, lease)
	}
	for _, sl := range held[1:] {
		if !sl.Held() {
			t.Errorf("slot %d lost while renewing", sl.Index())
		}
	}
}

// TestAzuriteNewCop: a cop on a blob lock creates container and blob,
// stamps the holder, and releases on Stop.
func TestAzuriteNewCop(t *testing.T) {
	t.Parallel()
	cc := azuriteContainer(t)
	cop, err := NewCop(newBlobLock(t, cc, "locks/scheduler"), Options{
		Timing: Timing{LeaseTiming: LeaseTiming{LeaseDuration: 15 * time.Second}}, Identity: "solo", Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	leading := make(chan Term, 1)
	done := make(chan error, 1)
	go func() {
		done <- cop.Run(context.Background(), func(ctx context.Context) error {
			term, _ := TermFrom(ctx)
			leading <- term
			<-ctx.Done()
			return nil
		})
	}()
	var term Term
	select {
	case term = <-leading:
	case <-time.After(10 * time.Second):
		t.Fatal("no control within 10s")
	}
	hi, err := cop.Holder(context.Background())
	if err != nil || hi.Holder != "solo" || hi.Generation != 1 || !hi.Held() || !hi.Acquired.Equal(term.Acquired) {
		t.Fatalf("Holder = %+v, %v (term %+v)", hi, err, term)
	}
	cop.Stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	hi, err = ReadHolder(context.Background(), newBlobLock(t, cc, "locks/scheduler"))
	if err != nil || hi.Held() || hi.State != LeaseAvailable || hi.Generation != 1 {
		t.Fatalf("after Stop: %+v, %v", hi, err)
	}
}

// TestAzuriteRestartNeverTwoLeaders: Azurite forgets leases when it
// restarts, so the standby can acquire the lease while the old holder still
// believes it leads until its next renewal is refused. The standby must
// wait that out: at no sample do two cops have control.
func TestAzuriteRestartNeverTwoLeaders(t *testing.T) {
	azuritetest.SkipUnderMemstore(t, "an in-memory account keeps its leases across a restart; the test needs Azurite's forgetting them")
	t.Parallel()
	srv := azuritetest.Start(t)
	cc := containerOn(t, srv, "leasecron")
	const lease, poll = 15 * time.Second, time.Second
	var (
		mu    sync.Mutex
		terms []string // "identity/generation" in the order they took control
	)
	cops := make([]*Cop, 2)
	var runs sync.WaitGroup
	for i := range cops {
		c, err := NewCop(newBlobLock(t, cc, "locks/scheduler"), Options{
			Timing: Timing{PollEvery: poll, LeaseTiming: LeaseTiming{LeaseDuration: lease}}, Identity: fmt.Sprintf("cop-%d", i), Logger: testLogger(t),
			OnAcquired: func(term Term) {
				mu.Lock()
				terms = append(terms, fmt.Sprintf("%s/%d", term.Holder, term.Generation))
				mu.Unlock()
			}})
		if err != nil {
			t.Fatal(err)
		}
		cops[i] = c
		runs.Add(1)
		go func() {
			defer runs.Done()
			if err := c.Run(context.Background(), func(ctx context.Context) error { <-ctx.Done(); return nil }); err != nil {
				t.Errorf("Run: %v", err)
			}
		}()
	}
	defer func() {
		for _, c := range cops {
			c.Stop()
		}
		runs.Wait()
	}()
	leaders := func() (n int, who string) {
		for _, c := range cops {
			if term, ok := c.Term(); ok {
				n++
				who = fmt.Sprintf("%s/%d", term.Holder, term.Generation)
			}
		}
		return n, who
	}
	// sample watches for the given time and returns the last leader seen.
	sample := func(d time.Duration) string {
		var last string
		for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
			n, who := leaders()
			if n > 1 {
				t.Fatalf("%d cops have control at once", n)
			}
			if n == 1 {
				last = who
			}
		}
		return last
	}
	first := sample(3 * time.Second)
	if first == "" {
		t.Fatal("no cop took control within 3 s")
	}
	restarted := time.Now()
	if err := srv.Restart(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Logf("Azurite restarted in %v", time.Since(restarted).Round(time.Millisecond))
	// The old term ends at its next refused renewal (≤ RenewEvery); the
	// new one begins a lease after its acquisition. Watch past both.
	last := sample(2*lease + 5*time.Second)
	mu.Lock()
	defer mu.Unlock()
	t.Logf("terms: %v; leader before the restart %s, after it %s", terms, first, last)
	if last == "" {
		t.Fatal("no cop in control 35 s after the restart")
	}
}
