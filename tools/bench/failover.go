package main

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"time"

	"github.com/leasecron/leasecron"
	"github.com/leasecron/leasecron/tools/bench/results"
	"github.com/leasecron/leasecron/tools/internal/fleet"
)

// failoverPoll is lease.poll_every in the failover fleets (the default).
const failoverPoll = 15 * time.Second

// runFailover is scenario 4: for each lease duration, a fleet of two
// worker processes with default intervals; the leader is stopped (SIGTERM)
// or killed (SIGKILL), a marker task due at that moment is scheduled, and
// the time until it is moved (its row gone, its run record naming the new
// generation) is the takeover time. The stopped worker is replaced by a
// fresh standby before the next repetition.
func runFailover(ctx context.Context, b *bench) error {
	const name = "failover"
	res := results.Failover{PollEverySeconds: failoverPoll.Seconds()}
	for _, lease := range b.s.foLeases {
		dir, err := b.scratch(fmt.Sprintf("failover-%s", lease))
		if err != nil {
			return err
		}
		f, err := fleet.Start(ctx, fleet.Options{Dir: dir, Workers: 2, Config: workerConfig(map[string]any{
			"lease": map[string]any{"duration": lease.String(), "poll_every": failoverPoll.String()},
		})})
		if err != nil {
			return err
		}
		b.logf(name, "lease %s: fleet of 2 up (logs in %s)", lease, dir)
		for rep := 1; rep <= b.s.foReps; rep++ {
			for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
				s := b.failoverOnce(ctx, f, lease, sig, rep)
				res.Samples = append(res.Samples, s)
				if s.Error != "" {
					b.logf(name, "lease %s %s rep %d: FAILED: %s", lease, sigName(sig), rep, s.Error)
				} else {
					b.logf(name, "lease %s %s rep %d: %s (gen %d) -> %s (gen %d): lease taken after %.1fs, first move after %.1fs",
						lease, sigName(sig), rep, s.OldLeader, s.OldGeneration, s.NewLeader, s.NewGeneration, s.Acquired, s.Takeover)
				}
				if ctx.Err() != nil {
					f.Stop()
					return ctx.Err()
				}
			}
		}
		f.Stop()
	}
	if err := results.Write(b.out, results.FailoverFile, res); err != nil {
		return err
	}
	for _, s := range res.Samples {
		if s.Error != "" {
			return errors.New("some failover samples failed (see failover.json)")
		}
	}
	return nil
}

func sigName(s syscall.Signal) string {
	if s == syscall.SIGKILL {
		return "SIGKILL"
	}
	return "SIGTERM"
}

// failoverOnce takes the current leader down with sig and measures the
// takeover.
func (b *bench) failoverOnce(ctx context.Context, f *fleet.Fleet, lease time.Duration, sig syscall.Signal, rep int) results.FailoverSample {
	s := results.FailoverSample{LeaseSeconds: lease.Seconds(), Signal: sigName(sig), Rep: rep}
	fail := func(err error) results.FailoverSample { s.Error = err.Error(); return s }
	// The marker is the mover's to move: a client that sends tasks due
	// now itself (SendWithin) would enqueue it without any leader, and
	// its run record would name no generation.
	cl, err := leasecron.NewClient(leasecron.ClientOptions{Storage: leasecron.Storage{ConnectionString: f.Azurite.ConnectionString()}, SendWithin: -1})
	if err != nil {
		return fail(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 2*lease+time.Minute)
	defer cancel()
	old, err := f.WaitLeader(wctx, "")
	if err != nil {
		return fail(err)
	}
	s.OldLeader, s.OldGeneration = old.Holder, old.Generation
	// The standby must be up and polling: give a freshly started one a
	// moment.
	if err := sleep(ctx, 3*time.Second); err != nil {
		return fail(err)
	}

	t0 := time.Now()
	f.Signal(old.Holder, sig) // SIGKILL waits for the exit
	id := fmt.Sprintf("failover-%s-%s-%d", lease, sigName(sig), rep)
	if _, err := cl.Schedule(wctx, leasecron.Item{ID: id, Type: noopType, Due: t0, Payload: "{}"}, nil); err != nil {
		return fail(fmt.Errorf("schedule marker: %w", err))
	}
	moved, acquired := time.Duration(0), time.Duration(0)
	nextNote := 15 * time.Second
	for moved == 0 || acquired == 0 {
		if el := time.Since(t0); el >= nextNote {
			b.logf("failover", "lease %s %s rep %d: waiting, %s since the signal", lease, sigName(sig), rep, el.Round(time.Second))
			nextNote += 15 * time.Second
		}
		if acquired == 0 {
			if h, err := f.Leader(wctx); err == nil && h.Held() && h.Holder != old.Holder {
				acquired = time.Since(t0)
				s.NewLeader, s.NewGeneration = h.Holder, h.Generation
			}
		}
		if moved == 0 {
			if _, err := cl.Get(wctx, id); errors.Is(err, leasecron.ErrNotFound) {
				moved = time.Since(t0)
			}
		}
		if wctx.Err() != nil {
			return fail(fmt.Errorf("no takeover within %s (acquired after %s, moved after %s)", 2*lease+time.Minute, acquired, moved))
		}
		time.Sleep(50 * time.Millisecond)
	}
	s.Takeover, s.Acquired = moved.Seconds(), acquired.Seconds()
	// The run record learns its generation just after the move (the
	// mover's bookkeeping) or at the claim.
	var gen int64
	for {
		st, err := cl.Status(wctx, id)
		if err != nil {
			return fail(fmt.Errorf("marker status: %w", err))
		}
		if st.Run != nil && st.Run.Generation > 0 {
			gen = st.Run.Generation
			break
		}
		if time.Since(t0) > moved+10*time.Second || wctx.Err() != nil {
			return fail(fmt.Errorf("the marker's run record names no generation 10s after the move"))
		}
		time.Sleep(100 * time.Millisecond)
	}
	if gen <= old.Generation {
		return fail(fmt.Errorf("marker moved by generation %d, not a new leader's (old %d)", gen, old.Generation))
	}
	s.NewGeneration = gen
	// Replace the stopped worker with a fresh standby.
	if p := f.Worker(old.Holder); p != nil {
		select {
		case <-p.Done():
		case <-time.After(30 * time.Second):
			f.Signal(old.Holder, syscall.SIGKILL)
		}
	}
	if _, err := f.StartWorker(); err != nil {
		return fail(fmt.Errorf("start a new standby: %w", err))
	}
	return s
}
