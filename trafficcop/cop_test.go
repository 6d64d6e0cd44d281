package trafficcop

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasecron/leasecron/internal/clock"
	"github.com/leasecron/leasecron/leasecrontype"
)

type hookCall struct {
	kind   string // "acquired" or "lost"
	term   Term
	reason error
}

type copHarness struct {
	t      *testing.T
	clk    *clock.Fake
	cop    *Cop
	ev     *events
	leads  chan context.Context
	hooks  chan hookCall
	runErr chan error
}

// unitOptions: 15 s lease ⇒ RenewEvery 5 s, SafetyMargin 2 s (deadline
// 13 s after the last successful renewal start), RetryEvery 500 ms.
func unitOptions(identity string) Options {
	return Options{
		Timing:   Timing{LeaseTiming: LeaseTiming{LeaseDuration: 15 * time.Second, CallTimeout: 8 * time.Second}, PollEvery: 3 * time.Second},
		Identity: identity,
	}
}

// startCop runs a cop on lock whose lead reports its context on h.leads
// and returns when that context ends (or, with lead set, runs lead).
func startCop(t *testing.T, clk *clock.Fake, lock *MemoryLock, opts Options, lead func(context.Context) error) *copHarness {
	t.Helper()
	return startCopOn(t, clk, lock, opts, lead)
}

// startCopOn is startCop on any Lock.
func startCopOn(t *testing.T, clk *clock.Fake, lock Lock, opts Options, lead func(context.Context) error) *copHarness {
	t.Helper()
	h := &copHarness{t: t, clk: clk, ev: newEvents(t),
		leads: make(chan context.Context, 100), hooks: make(chan hookCall, 100), runErr: make(chan error, 1)}
	opts.Clock = clk
	opts.Logger = testLogger(t)
	if opts.OnAcquired == nil {
		opts.OnAcquired = func(term Term) { h.hooks <- hookCall{kind: "acquired", term: term} }
	}
	if opts.OnLost == nil {
		opts.OnLost = func(term Term, reason error) { h.hooks <- hookCall{kind: "lost", term: term, reason: reason} }
	}
	cop, err := NewCop(lock, opts)
	if err != nil {
		t.Fatal(err)
	}
	cop.observe = h.ev.observe
	h.cop = cop
	if lead == nil {
		lead = func(ctx context.Context) error {
			h.leads <- ctx
			<-ctx.Done()
			return nil
		}
	}
	go func() { h.runErr <- cop.Run(context.Background(), lead) }()
	t.Cleanup(func() {
		cop.Stop()
		if err := <-h.runErr; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return h
}

func (h *copHarness) lead() context.Context {
	h.t.Helper()
	select {
	case ctx := <-h.leads:
		return ctx
	case <-time.After(5 * time.Second):
		h.t.Fatal("lead not called within 5s")
		return nil
	}
}

func (h *copHarness) hook(kind string) hookCall {
	h.t.Helper()
	select {
	case c := <-h.hooks:
		if c.kind != kind {
			h.t.Fatalf("hook %q called, want %q", c.kind, kind)
		}
		return c
	case <-time.After(5 * time.Second):
		h.t.Fatalf("hook %q not called within 5s", kind)
		return hookCall{}
	}
}

// advance moves the fake clock once the cop is waiting on n timers.
func (h *copHarness) advance(n int, d time.Duration) {
	h.t.Helper()
	waitTimers(h.t, h.clk, n)
	h.clk.Advance(d)
}

func TestCopAcquires(t *testing.T) {
	clk := clock.NewFake(t0)
	lock := NewMemoryLock("scheduler", clk)
	h := startCop(t, clk, lock, unitOptions("cop-a"), nil)

	ctx := h.lead()
	if !h.cop.HasControl() {
		t.Fatal("HasControl false while lead runs")
	}
	term, ok := h.cop.Term()
	if !ok || term.Generation != 1 || term.Holder != "cop-a" || term.LeaseID == "" || !term.Acquired.Equal(t0) {
		t.Fatalf("Term() = %+v, %v", term, ok)
	}
	if ct, ok := TermFrom(ctx); !ok || ct != term {
		t.Fatalf("TermFrom(lead ctx) = %+v, %v; want %+v", ct, ok, term)
	}
	if _, err := h.cop.Check(); err != nil {
		t.Fatalf("Check: %v", err)
	}
	if lock.Count(OpEnsure) == 0 {
		t.Error("lease record was not ensured")
	}
	if got := lock.LeaseID(); got != term.LeaseID {
		t.Errorf("lock held with %q, term has %q", got, term.LeaseID)
	}
	st, err := lock.Get(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{MetaHolder: "cop-a", MetaGeneration: "1", MetaAcquired: "2030-01-02T03:04:05Z"}
	for k, v := range want {
		if st.Metadata[k] != v {
			t.Errorf("metadata %s = %q, want %q", k, st.Metadata[k], v)
		}
	}
	hi, err := h.cop.Holder(context.Background())
	if err != nil || hi.Holder != "cop-a" || hi.Generation != 1 || !hi.Held() || hi.State != LeaseLeased || !hi.Acquired.Equal(t0) {
		t.Errorf("Holder() = %+v, %v", hi, err)
	}
	if c := h.hook("acquired"); c.term != term {
		t.Errorf("OnAcquired(%+v), want %+v", c.term, term)
	}
}

func TestCopRenewsOnSchedule(t *testing.T) {
	clk := clock.NewFake(t0)
	lock := NewMemoryLock("scheduler", clk)
	h := startCop(t, clk, lock, unitOptions("cop-a"), nil)
	h.ev.wait("acquired")
	ctx := h.lead()

	for i := 1; i <= 6; i++ {
		h.advance(2, time.Second) // renewal timer + deadline timer
		h.ev.none("renew-start")
		h.advance(2, 4*time.Second)
		ev := h.ev.wait("renew-start")
		if want := t0.Add(time.Duration(i) * 5 * time.Second); !ev.at.Equal(want) {
			t.Fatalf("renewal %d at %v, want %v (every RenewEvery = 5s)", i, ev.at.Sub(t0), want.Sub(t0))
		}
		h.ev.wait("renewed")
	}
	// 30 s in: twice the lease duration, still in control.
	if !h.cop.HasControl() || ctx.Err() != nil {
		t.Fatal("lost control although every renewal succeeded")
	}
	if got := lock.Count(OpRenew); got != 6 {
		t.Errorf("%d renewals, want 6", got)
	}
}

var errTransient = errors.New("dial tcp 127.0.0.1:10000: connect: connection refused")

func TestCopLosesControlAtLocalDeadlineWhileRenewalsFail(t *testing.T) {
	clk := clock.NewFake(t0)
	lock := NewMemoryLock("scheduler", clk)
	h := startCop(t, clk, lock, unitOptions("cop-a"), nil)
	h.ev.wait("acquired")
	ctx := h.lead()

	h.advance(2, 5*time.Second) // first renewal at t0+5s succeeds
	if ev := h.ev.wait("renewed"); !ev.at.Equal(t0.Add(5 * time.Second)) {
		t.Fatalf("renewed at %v", ev.at.Sub(t0))
	}
	lock.SetFault(func(_ context.Context, op Op) error {
		if op == OpRenew {
			return errTransient
		}
		return nil
	})
	// Deadline: last successful renewal start (t0+5s) + 15s − 2s = t0+18s.
	deadline := t0.Add(18 * time.Second)
	h.advance(2, 5*time.Second) // t0+10s: renewal fails, retried every 500 ms
	h.ev.wait("renew-failed")
	retries := 0
	for clk.Now().Before(deadline.Add(-500 * time.Millisecond)) {
		h.advance(2, 500*time.Millisecond)
		h.ev.wait("renew-failed")
		retries++
	}
	if retries != 15 { // t0+10.5s … t0+17.5s
		t.Errorf("%d retries between t0+10s and t0+17.5s, want 15", retries)
	}
	h.advance(2, 499*time.Millisecond)
	if !h.cop.HasControl() || ctx.Err() != nil {
		t.Fatalf("lost control at %v, before the deadline", clk.Now().Sub(t0))
	}
	h.clk.Advance(time.Millisecond) // exactly the deadline
	if h.cop.HasControl() {
		t.Fatal("HasControl true at the local deadline")
	}
	if ev := h.ev.wait("lost"); !ev.at.Equal(deadline) || !errors.Is(ev.err, ErrLeaseLost) {
		t.Fatalf("lost at %v (%v), want at %v with ErrLeaseLost", ev.at.Sub(t0), ev.err, deadline.Sub(t0))
	}
	waitDone(t, ctx.Done(), "lead context cancellation")
	if cause := context.Cause(ctx); !errors.Is(cause, ErrLeaseLost) {
		t.Errorf("lead context cause %v, want ErrLeaseLost", cause)
	}
	h.hook("acquired")
	if c := h.hook("lost"); !errors.Is(c.reason, ErrLeaseLost) || c.term.Generation != 1 {
		t.Errorf("OnLost(%+v, %v)", c.term, c.reason)
	}
	// The cop still tried to release (the service might still hold it for us).
	h.ev.wait("released")
}

func TestCopHungRenewalDoesNotExtendControl(t *testing.T) {
	clk := clock.NewFake(t0)
	lock := NewMemoryLock("scheduler", clk)
	unblock := make(chan struct{})
	defer close(unblock)
	h := startCop(t, clk, lock, unitOptions("cop-a"), nil)
	h.ev.wait("acquired")
	ctx := h.lead()
	lock.SetFault(func(ctx context.Context, op Op) error {
		if op != OpRenew {
			return nil
		}
		select { // hangs until the cop gives up on it
		case <-ctx.Done():
			return ctx.Err()
		case <-unblock:
			return nil
		}
	})
	h.advance(2, 5*time.Second)
	h.ev.wait("renew-start") // t0+5s, never answers
	// Only the deadline timer is left: t0 + 15s − 2s.
	h.advance(1, 7999*time.Millisecond)
	if !h.cop.HasControl() {
		t.Fatalf("lost control at %v", clk.Now().Sub(t0))
	}
	h.clk.Advance(time.Millisecond)
	if h.cop.HasControl() {
		t.Fatal("a hung renewal extended control past acquisition + 13s")
	}
	if ev := h.ev.wait("lost"); !ev.at.Equal(t0.Add(13 * time.Second)) {
		t.Fatalf("lost at %v, want 13s", ev.at.Sub(t0))
	}
	waitDone(t, ctx.Done(), "lead context cancellation")
	if cause := context.Cause(ctx); !errors.Is(cause, ErrLeaseLost) {
		t.Errorf("cause %v", cause)
	}
	h.ev.wait("term-ended")
}

func TestCopLosesControlOnRefusedRenewalAndCompetesAgain(t *testing.T) {
	clk := clock.NewFake(t0)
	lock := NewMemoryLock("scheduler", clk)
	h := startCop(t, clk, lock, unitOptions("cop-a"), nil)
	h.ev.wait("acquired")
	ctx := h.lead()
	first, _ := h.cop.Term()
	lock.SetFault(func(_ context.Context, op Op) error {
		if op == OpRenew {
			return fmt.Errorf("%w: LeaseIdMismatchWithLeaseOperation", leasecrontype.ErrLeaseConflict)
		}
		return nil
	})
	h.advance(2, 5*time.Second)
	if ev := h.ev.wait("lost"); !ev.at.Equal(t0.Add(5*time.Second)) || !errors.Is(ev.err, leasecrontype.ErrLeaseConflict) {
		t.Fatalf("lost at %v with %v; want at once (5s) with the refusal", ev.at.Sub(t0), ev.err)
	}
	waitDone(t, ctx.Done(), "lead context cancellation")
	if h.cop.HasControl() {
		t.Fatal("HasControl after a refused renewal")
	}
	if cause := context.Cause(ctx); !errors.Is(cause, ErrLeaseLost) || !errors.Is(cause, leasecrontype.ErrLeaseConflict) {
		t.Errorf("cause %v", cause)
	}
	h.ev.wait("term-ended")
	lock.SetFault(nil)
	// Competes again within PollEvery with a fresh lease ID and the
	// next generation.
	h.advance(1, 3600*time.Millisecond)
	h.lead()
	second, ok := h.cop.Term()
	if !ok || second.Generation != first.Generation+1 || second.LeaseID == first.LeaseID {
		t.Fatalf("second term %+v after %+v", second, first)
	}
}

func TestCopStopReleasesAndAnotherTakesOver(t *testing.T) {
	clk := clock.NewFake(t0)
	lock := NewMemoryLock("scheduler", clk)
	a := startCop(t, clk, lock, unitOptions("cop-a"), nil)
	a.ev.wait("acquired")
	ctxA := a.lead()
	a.hook("acquired")

	b := startCop(t, clk, lock, unitOptions("cop-b"), nil)
	b.ev.wait("acquire-failed") // held by a
	if b.cop.HasControl() {
		t.Fatal("b has control while a holds the lease")
	}

	a.cop.Stop()
	a.cop.Stop() // idempotent
	if err := <-a.runErr; err != nil {
		t.Fatalf("Run returned %v after Stop", err)
	}
	a.runErr <- nil // for the cleanup
	if ctxA.Err() == nil || !errors.Is(context.Cause(ctxA), ErrStopped) {
		t.Fatalf("lead context after Stop: err %v, cause %v", ctxA.Err(), context.Cause(ctxA))
	}
	if id := lock.LeaseID(); id != "" {
		t.Fatalf("lease still held (%s) after Stop", id)
	}
	if c := a.hook("lost"); !errors.Is(c.reason, ErrStopped) {
		t.Errorf("OnLost reason %v, want ErrStopped", c.reason)
	}
	hi, err := ReadHolder(context.Background(), lock)
	if err != nil || hi.Held() || hi.State != LeaseAvailable || hi.Holder != "cop-a" || hi.Generation != 1 ||
		!hi.Released || !hi.Renewed.Equal(t0) {
		t.Errorf("after release: %+v, %v", hi, err)
	}

	// b takes over at its next poll, with the next generation.
	b.advance(1, 3600*time.Millisecond)
	b.lead()
	term, ok := b.cop.Term()
	if !ok || term.Holder != "cop-b" || term.Generation != 2 {
		t.Fatalf("b's term %+v, %v", term, ok)
	}
}

// TestCopLeavesALeaseThatExpiredEarly: Azurite reports every lease
// expired after it restarts. A standby that finds the lease expired although
// its holder renewed it recently must leave it alone: the holder, alive,
// renews it again and keeps control.
func TestCopLeavesALeaseThatExpiredEarly(t *testing.T) {
	clk := clock.NewFake(t0)
	lock := NewMemoryLock("scheduler", clk)
	a := startCop(t, clk, lock, unitOptions("cop-a"), nil)
	ctxA := a.lead()
	b := startCop(t, clk, lock, unitOptions("cop-b"), nil)
	b.ev.wait("acquire-failed")

	lock.ExpireLease()
	for clk.Now().Before(t0.Add(25 * time.Second)) {
		b.advance(3, 500*time.Millisecond) // a: renew + deadline; b: poll
		if b.cop.HasControl() {
			t.Fatalf("b took control at %v while a leads", clk.Now().Sub(t0))
		}
	}
	var waited bool
	for {
		select {
		case ev := <-b.ev.ch:
			var ny *notYet
			if ev.kind == "acquire-failed" && errors.As(ev.err, &ny) {
				waited = true
			}
			continue
		default:
		}
		break
	}
	if !waited {
		t.Error("b never found the lease expired early")
	}
	if ctxA.Err() != nil || !a.cop.HasControl() {
		t.Fatal("a lost control")
	}
	if term, _ := a.cop.Term(); term.Generation != 1 || lock.LeaseID() != term.LeaseID {
		t.Fatalf("a's term %+v; lease %s", term, lock.LeaseID())
	}
	hi, err := ReadHolder(context.Background(), lock)
	if err != nil || hi.Generation != 1 || !hi.Held() {
		t.Fatalf("lease %+v, %v", hi, err)
	}
	if st, _ := lock.Get(context.Background()); st.Metadata[MetaRenewed] == t0.Format(time.RFC3339Nano) {
		t.Errorf("renewals not recorded: renewed = %s", st.Metadata[MetaRenewed])
	}
}

// TestCopWaitsOutAPartitionedHolder: the lease expires early while its
// holder is cut off from storage. The holder believes it leads until its
// local deadline (13 s after its last renewal); the standby takes over only
// once that renewal is a lease (15 s) old.
func TestCopWaitsOutAPartitionedHolder(t *testing.T) {
	clk := clock.NewFake(t0)
	lock := NewMemoryLock("scheduler", clk)
	pa := &partitionLock{Lock: lock}
	a := startCopOn(t, clk, pa, unitOptions("cop-a"), nil)
	ctxA := a.lead()
	a.advance(2, 5*time.Second)
	a.ev.wait("renewed") // renewal started at 5 s
	pa.cut.Store(true)
	lock.ExpireLease()
	b := startCop(t, clk, lock, unitOptions("cop-b"), nil)
	var ny *notYet
	if ev := b.ev.wait("acquire-failed"); !errors.As(ev.err, &ny) || ny.wait != 15*time.Second {
		t.Fatalf("b's first attempt at 5s: %v; want to wait until 20s", ev.err)
	}
	var lostAt time.Time
	for b.cop.HasControl() == false {
		if clk.Now().Sub(t0) > 30*time.Second {
			t.Fatal("b never took over")
		}
		if lostAt.IsZero() && ctxA.Err() != nil {
			lostAt = clk.Now()
		}
		waitTimers(t, clk, 2)
		clk.Advance(250 * time.Millisecond)
		select {
		case <-b.leads:
		case <-time.After(10 * time.Millisecond):
		}
	}
	tookOver := clk.Now()
	if lostAt.IsZero() {
		lostAt = tookOver
		if ctxA.Err() == nil {
			t.Fatal("a still leads after b took over")
		}
	}
	t.Logf("a lost control at %v, b took over at %v", lostAt.Sub(t0), tookOver.Sub(t0))
	if lostAt.Sub(t0) > 18*time.Second+250*time.Millisecond {
		t.Errorf("a lost control at %v, after its deadline (18s)", lostAt.Sub(t0))
	}
	if tookOver.Sub(t0) < 20*time.Second || !tookOver.After(lostAt) {
		t.Errorf("b took over at %v, before a's last renewal (5s) was a lease old", tookOver.Sub(t0))
	}
}

func TestCopCrashLeavesLeaseToExpire(t *testing.T) {
	clk := clock.NewFake(t0)
	lock := NewMemoryLock("scheduler", clk)
	a := startCop(t, clk, lock, unitOptions("cop-a"), nil)
	a.lead()
	b := startCop(t, clk, lock, unitOptions("cop-b"), nil)
	b.ev.wait("acquire-failed")

	a.cop.crash()
	if lock.LeaseID() == "" {
		t.Fatal("crash released the lease")
	}
	// b polls every ~3 s; the lease expires at t0+15s, unless renewed, as
	// the renewal time recorded at acquisition (t0) says: b looks again
	// then (+ 250 ms) instead of up to a poll later.
	for {
		b.advance(1, time.Second)
		select {
		case <-b.leads:
			if at := clk.Now().Sub(t0); at < 15*time.Second || at > 16*time.Second {
				t.Fatalf("b took over at %v, want within [15s, 16s]", at)
			}
			if term, _ := b.cop.Term(); term.Generation != 2 {
				t.Fatalf("generation %d after takeover, want 2", term.Generation)
			}
			return
		case <-time.After(20 * time.Millisecond):
		}
		if clk.Now().Sub(t0) > 30*time.Second {
			t.Fatal("no takeover within 30s")
		}
	}
}

// TestCopLooksAgainWhenTheLeaseWouldExpire: a standby that sees the lease
// held looks again when it would run out unless renewed (the holder's last
// recorded renewal + the lease), not a whole poll later: with a 10 s poll
// its polls would fall at about 9 s and 18 s, but it takes over a crashed
// holder's lease at 15.25 s.
func TestCopLooksAgainWhenTheLeaseWouldExpire(t *testing.T) {
	clk := clock.NewFake(t0)
	lock := NewMemoryLock("scheduler", clk)
	a := startCop(t, clk, lock, unitOptions("cop-a"), nil)
	a.lead()
	opts := unitOptions("cop-b")
	opts.PollEvery = 10 * time.Second
	b := startCop(t, clk, lock, opts, nil)
	b.ev.wait("acquire-failed")
	a.cop.crash()
	for {
		waitTimers(t, clk, 1)
		clk.Advance(250 * time.Millisecond)
		select {
		case <-b.leads:
			if at := clk.Now().Sub(t0); at < 15*time.Second || at > 15500*time.Millisecond {
				t.Fatalf("b took over at %v, want at the expiry (15.25s)", at)
			}
			return
		case <-time.After(5 * time.Millisecond):
		}
		if clk.Now().Sub(t0) > 30*time.Second {
			t.Fatal("no takeover within 30s")
		}
	}
}

func TestCopLeadReturningReleasesAndGenerationIncrements(t *testing.T) {
	clk := clock.NewFake(t0)
	lock := NewMemoryLock("scheduler", clk)
	var (
		mu   sync.Mutex
		gens []int64
	)
	leadErr := errors.New("mover failed")
	h := startCop(t, clk, lock, unitOptions("cop-a"), func(ctx context.Context) error {
		term, _ := TermFrom(ctx)
		mu.Lock()
		gens = append(gens, term.Generation)
		mu.Unlock()
		return leadErr
	})
	for i := 1; i <= 4; i++ {
		if ev := h.ev.wait("released"); ev.err != nil {
			t.Fatalf("release: %v", ev.err)
		}
		if lock.LeaseID() != "" {
			t.Fatal("lease kept after lead returned")
		}
		ev := h.ev.wait("term-ended")
		if !errors.Is(ev.err, ErrLeadReturned) || !errors.Is(ev.err, leadErr) {
			t.Fatalf("term ended with %v", ev.err)
		}
		h.hook("acquired")
		if c := h.hook("lost"); c.term.Generation != int64(i) || !errors.Is(c.reason, leadErr) {
			t.Fatalf("OnLost(%+v, %v)", c.term, c.reason)
		}
		h.advance(1, 3600*time.Millisecond) // next poll
	}
	h.ev.wait("term-ended")
	mu.Lock()
	defer mu.Unlock()
	for i, g := range gens {
		if g != int64(i+1) {
			t.Fatalf("generations %v, want 1, 2, 3, …", gens)
		}
	}
}

func TestCopMetadataWriteFailureMeansNotAcquired(t *testing.T) {
	clk := clock.NewFake(t0)
	lock := NewMemoryLock("scheduler", clk)
	lock.SetFault(func(_ context.Context, op Op) error {
		if op == OpSetMetadata {
			return fmt.Errorf("%w: ConditionNotMet", leasecrontype.ErrPreconditionFailed)
		}
		return nil
	})
	h := startCop(t, clk, lock, unitOptions("cop-a"), nil)
	ev := h.ev.wait("acquire-failed")
	if !errors.Is(ev.err, leasecrontype.ErrPreconditionFailed) {
		t.Fatalf("acquire failed with %v", ev.err)
	}
	if h.cop.HasControl() || lock.LeaseID() != "" || lock.Count(OpRelease) != 1 {
		t.Fatalf("after a failed stamp: control %v, lease %q, releases %d", h.cop.HasControl(), lock.LeaseID(), lock.Count(OpRelease))
	}
	select {
	case <-h.leads:
		t.Fatal("lead ran without a stamped term")
	case c := <-h.hooks:
		t.Fatalf("hook %s called", c.kind)
	default:
	}
	lock.SetFault(nil)
	h.advance(1, 3600*time.Millisecond)
	h.lead()
	if term, _ := h.cop.Term(); term.Generation != 1 {
		t.Fatalf("generation %d, want 1 (the failed attempt must not count)", term.Generation)
	}
}

func TestCopRefusesMalformedGeneration(t *testing.T) {
	clk := clock.NewFake(t0)
	lock := NewMemoryLock("scheduler", clk)
	ctx := context.Background()
	if err := lock.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	st, _ := lock.Get(ctx)
	if err := lock.SetMetadata(ctx, "", st.ETag, map[string]string{MetaGeneration: "seven"}); err != nil {
		t.Fatal(err)
	}
	h := startCop(t, clk, lock, unitOptions("cop-a"), nil)
	ev := h.ev.wait("acquire-failed")
	if ev.err == nil || !strings.Contains(ev.err.Error(), "generation") {
		t.Fatalf("acquire failed with %v", ev.err)
	}
	if lock.LeaseID() != "" {
		t.Fatal("lease kept")
	}
	if _, err := ReadHolder(ctx, lock); err == nil {
		t.Error("ReadHolder accepted a malformed generation")
	}
}

func TestCopSlowHookDoesNotBlockRenewals(t *testing.T) {
	clk := clock.NewFake(t0)
	lock := NewMemoryLock("scheduler", clk)
	release := make(chan struct{})
	var order []string
	var mu sync.Mutex
	record := func(s string) { mu.Lock(); order = append(order, s); mu.Unlock() }
	opts := unitOptions("cop-a")
	opts.OnAcquired = func(Term) { <-release; record("acquired") }
	opts.OnLost = func(_ Term, reason error) { record("lost: " + reason.Error()) }
	h := startCop(t, clk, lock, opts, nil)
	h.lead()
	for range 3 {
		h.advance(2, 5*time.Second)
		h.ev.wait("renewed")
	}
	if !h.cop.HasControl() {
		t.Fatal("lost control while a hook was blocked")
	}
	close(release)
	h.cop.Stop()
	mu.Lock()
	defer mu.Unlock()
	if len(order) != 2 || order[0] != "acquired" || order[1] != "lost: "+ErrStopped.Error() {
		t.Fatalf("hooks ran as %q", order)
	}
}

func TestCopStopBeforeRunAndRunTwice(t *testing.T) {
	clk := clock.NewFake(t0)
	cop, err := NewCop(NewMemoryLock("x", clk), Options{Clock: clk, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	cop.Stop()
	lead := func(context.Context) error { t.Error("lead ran after Stop"); return nil }
	if err := cop.Run(context.Background(), lead); err != nil {
		t.Fatalf("Run after Stop: %v", err)
	}
	if err := cop.Run(context.Background(), lead); !errors.Is(err, ErrAlreadyRunning) {
		t.Fatalf("second Run: %v, want ErrAlreadyRunning", err)
	}
	if _, err := cop.Check(); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("Check: %v, want ErrNotLeader", err)
	}
	cop.Stop()
}

func TestCopRunContextCancel(t *testing.T) {
	clk := clock.NewFake(t0)
	lock := NewMemoryLock("scheduler", clk)
	cop, err := NewCop(lock, Options{Timing: Timing{LeaseTiming: LeaseTiming{LeaseDuration: 20 * time.Second}}, Clock: clk, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	leadCtx := make(chan context.Context, 1)
	done := make(chan error, 1)
	go func() {
		done <- cop.Run(ctx, func(ctx context.Context) error { leadCtx <- ctx; <-ctx.Done(); return ctx.Err() })
	}()
	lc := <-leadCtx
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if !errors.Is(context.Cause(lc), ErrStopped) || lock.LeaseID() != "" {
		t.Fatalf("cause %v, lease %q", context.Cause(lc), lock.LeaseID())
	}
}

// Acquire polls spread contenders out but never wait longer than PollEvery,
// so a released lease is taken within one poll interval.
func TestPollJitterNeverExceedsPollEvery(t *testing.T) {
	c, err := NewCop(NewMemoryLock("j", clock.NewFake(time.Unix(0, 0))), Options{Timing: Timing{LeaseTiming: LeaseTiming{LeaseDuration: 15 * time.Second}, PollEvery: 10 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	lo, hi := time.Hour, time.Duration(0)
	for range 2000 {
		d := c.jitteredPoll()
		lo, hi = min(lo, d), max(hi, d)
	}
	if hi > 10*time.Second || lo < 8*time.Second || hi-lo < time.Second {
		t.Fatalf("poll waits ranged over [%v, %v], want spread within [8s, 10s]", lo, hi)
	}
}

// TestCopReleaseRecordsTheLastRenewal: the release mark comes with the
// start of the holder's last renewal, for `leasecron leader`.
func TestCopReleaseRecordsTheLastRenewal(t *testing.T) {
	clk := clock.NewFake(t0)
	lock := NewMemoryLock("scheduler", clk)
	h := startCop(t, clk, lock, unitOptions("cop-a"), nil)
	h.lead()
	h.advance(2, 5*time.Second)
	h.ev.wait("renewed")
	h.cop.Stop()
	hi, err := ReadHolder(context.Background(), lock)
	if err != nil || !hi.Released || hi.Held() || !hi.Renewed.Equal(t0.Add(5*time.Second)) {
		t.Fatalf("after Stop: %+v, %v; want released, renewed at +5s", hi, err)
	}
}
