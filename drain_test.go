package leasecron_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leasecron/leasecron"
	"github.com/leasecron/leasecron/queue"
	"github.com/leasecron/leasecron/schedule"
	"github.com/leasecron/leasecron/trafficcop"
)

// A drained worker that leads and runs a task stops taking work, hands the
// lease over, finishes the task, and is gone; Run returns ErrDrained. The
// fleet shows it draining meanwhile, and every task scheduled after it saw
// the request runs elsewhere.
func TestDrainAWorker(t *testing.T) {
	t.Parallel()
	st, names := testAccount(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	release := make(chan struct{})
	start := func(id string) (*leasecron.Worker, chan error) {
		w, err := leasecron.NewWorker(leasecron.WorkerOptions{
			Storage: st, Names: names, InstanceID: id, DrainCheck: 200 * time.Millisecond,
			Lease:    trafficcop.Timing{LeaseTiming: trafficcop.LeaseTiming{LeaseDuration: 15 * time.Second}, PollEvery: 500 * time.Millisecond},
			Mover:    schedule.MoverSettings{PollEvery: 200 * time.Millisecond},
			Consumer: queue.ConsumerSettings{PollMax: 200 * time.Millisecond, Concurrency: 2},
		})
		if err != nil {
			t.Fatal(err)
		}
		w.Handle("job", func(ctx context.Context, task leasecron.Task) error {
			if string(task.Payload) == "long" {
				select {
				case <-release:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			return nil
		})
		done := make(chan error, 1)
		go func() { done <- w.Run(ctx) }()
		return w, done
	}
	c, err := leasecron.NewClient(leasecron.ClientOptions{Storage: st, Names: names})
	if err != nil {
		t.Fatal(err)
	}
	until := func(what string, ok func() (bool, string)) { t.Helper(); eventually(ctx, t, what, ok) }
	instance := func(id string) (leasecron.Instance, bool) {
		all, err := c.Instances(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, in := range all {
			if in.ID == id && in.Present {
				return in, true
			}
		}
		return leasecron.Instance{}, false
	}
	ranOn := func(id, worker string) func() (bool, string) {
		return func() (bool, string) {
			s, err := c.Status(ctx, id)
			if err != nil || s.Run == nil {
				return false, fmt.Sprint(err)
			}
			return s.State() == string(leasecron.RunSucceeded) && s.Run.Worker == worker, fmt.Sprintf("%s on %q", s.State(), s.Run.Worker)
		}
	}

	a, aDone := start("drainee")
	until("drainee leads", func() (bool, string) { return a.HasControl(), "" })
	if _, err := c.Schedule(ctx, leasecron.Item{ID: "long", Type: "job", Payload: "long", Due: time.Now()}, nil); err != nil {
		t.Fatal(err)
	}
	until("the long task runs on the drainee", func() (bool, string) {
		s, err := c.Status(ctx, "long")
		return err == nil && s.State() == string(leasecron.RunRunning) && s.Run.Worker == "drainee", fmt.Sprint(s.State(), err)
	})
	b, bDone := start("other")
	until("other shows", func() (bool, string) { _, ok := instance("other"); return ok, "" })

	if _, err := c.Drain(ctx, "nobody", "tester"); !errors.Is(err, leasecron.ErrNotFound) || !strings.Contains(err.Error(), "running: drainee, other") {
		t.Errorf("draining an id nobody runs: %v, want ErrNotFound naming drainee and other", err)
	}
	if _, err := c.Drain(ctx, " ", "tester"); !errors.Is(err, leasecron.ErrInvalidOptions) {
		t.Errorf("draining no id: %v, want ErrInvalidOptions", err)
	}
	asked := time.Now()
	in, err := c.Drain(ctx, "drainee", "tester")
	if err != nil || !in.Draining || in.DrainBy != "tester" {
		t.Fatalf("Drain: %+v, %v", in, err)
	}
	if again, err := c.Drain(ctx, "drainee", "someone else"); err != nil || again.DrainBy != "tester" {
		t.Errorf("asking again: %+v, %v; want the first request kept", again, err)
	}
	var seen time.Time
	until("the drainee says it is draining", func() (bool, string) {
		in, ok := instance("drainee")
		seen = in.DrainStarted
		return ok && in.Draining && !in.DrainStarted.IsZero(), fmt.Sprintf("%+v", in)
	})
	t.Logf("the drainee saw the request %v after it was made", seen.Sub(asked).Round(time.Millisecond))
	until("other takes the lease over", func() (bool, string) { return b.HasControl(), "" })
	if a.HasControl() {
		t.Fatal("two leaders")
	}
	for i := range 6 {
		if _, err := c.Schedule(ctx, leasecron.Item{ID: fmt.Sprint("after-", i), Type: "job", Due: time.Now()}, nil); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 6 {
		until(fmt.Sprint("after-", i, " runs on other"), ranOn(fmt.Sprint("after-", i), "other"))
	}
	select {
	case err := <-aDone:
		t.Fatalf("the drainee stopped before its task finished: %v", err)
	default:
	}
	if _, ok := instance("drainee"); !ok {
		t.Error("the drainee vanished from the fleet while it still ran a task")
	}
	close(release)
	until("the long task finishes on the drainee", ranOn("long", "drainee"))
	select {
	case err := <-aDone:
		if !errors.Is(err, leasecron.ErrDrained) {
			t.Errorf("drained Run returned %v, want ErrDrained", err)
		}
	case <-ctx.Done():
		t.Fatal("the drainee never stopped")
	}
	if _, ok := instance("drainee"); ok {
		t.Error("the drainee still shows after it stopped")
	}
	if _, err := c.Drain(ctx, "drainee", "tester"); !errors.Is(err, leasecron.ErrNotFound) {
		t.Errorf("draining a stopped instance: %v, want ErrNotFound", err)
	}
	cancel()
	if err := <-bDone; err != nil {
		t.Errorf("other: %v", err)
	}
}

// eventually polls ok until it holds, failing t with ok's last word when
// ctx ends first.
func eventually(ctx context.Context, t *testing.T, what string, ok func() (bool, string)) {
	t.Helper()
	for {
		done, last := ok()
		if done {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("%s never happened (last: %s)", what, last)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A standby hears of a drain request through the leader's note in the
// lease (which it reads at every lease poll) rather than by reading its
// own presence every drain_check: it drains within a renewal and a poll.
func TestDrainAStandbyThroughTheLeadersNote(t *testing.T) {
	t.Parallel()
	st, names := testAccount(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	start := func(id string) (*leasecron.Worker, chan error) {
		w, err := leasecron.NewWorker(leasecron.WorkerOptions{
			Storage: st, Names: names, InstanceID: id,
			Lease:    trafficcop.Timing{LeaseTiming: trafficcop.LeaseTiming{LeaseDuration: 15 * time.Second}, PollEvery: 500 * time.Millisecond},
			Mover:    schedule.MoverSettings{PollEvery: 200 * time.Millisecond},
			Consumer: queue.ConsumerSettings{PollMax: 200 * time.Millisecond},
		})
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- w.Run(ctx) }()
		return w, done
	}
	lead, leadDone := start("lead")
	defer func() { cancel(); <-leadDone }()
	eventually(ctx, t, "lead leads", func() (bool, string) { return lead.HasControl(), "" })
	stand, standDone := start("stand")
	c, err := leasecron.NewClient(leasecron.ClientOptions{Storage: st, Names: names})
	if err != nil {
		t.Fatal(err)
	}
	eventually(ctx, t, "stand shows", func() (bool, string) {
		all, err := c.Instances(ctx)
		return err == nil && slices.ContainsFunc(all, func(in leasecron.Instance) bool { return in.ID == "stand" && in.Present }), fmt.Sprint(err)
	})
	before := stand.Requests()
	asked := time.Now()
	if _, err := c.Drain(ctx, "stand", "tester"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-standDone:
		if !errors.Is(err, leasecron.ErrDrained) {
			t.Fatalf("the standby's Run returned %v, want ErrDrained", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the standby did not drain within 60s (a renewal every 5s and a lease poll every 500ms)")
	}
	took := time.Since(asked)
	heads := stand.Requests().Sub(before).ByOp["blob head"]
	t.Logf("the standby drained %v after the request, with %d blob reads meanwhile", took.Round(time.Millisecond), heads)
	if lead.HasControl() == false {
		t.Error("the leader lost the lease")
	}
}
