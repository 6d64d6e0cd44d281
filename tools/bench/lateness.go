package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/leasecron/leasecron"
	"github.com/leasecron/leasecron/tools/bench/results"
	"github.com/leasecron/leasecron/tools/internal/fleet"
)

// latCase is one lateness run: two workers with the product's defaults, or
// three with a 15 s lease whose leader gets sig (SIGKILL or SIGTERM) as
// the tasks come due.
type latCase struct {
	label, early string
	sig          syscall.Signal // 0: no handover
}

// runLateness is scenario 3: tasks due over several mover poll windows,
// run by worker processes with the product's default intervals; lateness
// = handler start − due, with early enqueue on (the default) and off
// (mover.early negative), through a leader SIGKILL with the default
// window (one failover) and with a window of one pass, and through a
// graceful handover (SIGTERM: the leader releases the lease and its
// successor hears of what it sent early).
func runLateness(ctx context.Context, b *bench) error {
	const name = "lateness"
	var res results.Lateness
	for _, c := range []latCase{
		{label: "early enqueue on (default)", early: "0s"},
		{label: "early enqueue off (mover.early -1s)", early: "-1s"},
		{label: "leader SIGKILLed, early enqueue on (default: one failover)", early: "0s", sig: syscall.SIGKILL},
		{label: "leader SIGKILLed, mover.early 5s (one pass)", early: "5s", sig: syscall.SIGKILL},
		{label: "leader SIGTERMed (graceful handover), early enqueue on (default)", early: "0s", sig: syscall.SIGTERM},
	} {
		run, err := b.latenessRun(ctx, c)
		if err != nil {
			return fmt.Errorf("%s: %w", c.label, err)
		}
		s := run.Summary
		b.logf(name, "%s: %d tasks, p50 %.3fs p99 %.3fs max %.3fs min %.3fs, %d duplicates, per worker %v %s", c.label, run.Ran, s.P50, s.P99, s.Max, s.Min, run.Duplicates, run.PerWorker, run.Kill)
		res.Runs = append(res.Runs, run)
	}
	return results.Write(b.out, results.LatenessFile, res)
}

func (b *bench) latenessRun(ctx context.Context, c latCase) (results.LatenessRun, error) {
	const name = "lateness"
	label, early := c.label, c.early
	run := results.LatenessRun{Label: label, Early: early, Workers: 2, Tasks: b.s.latTasks, WindowSeconds: b.s.latWindow.Seconds()}
	tag := "lateness-early" + early
	extra := map[string]any{"mover": map[string]any{"early": early}}
	run.Config = map[string]string{
		"mover.poll_every": "5s", "mover.early": early, "worker.poll_min": "200ms", "worker.poll_max": "30s",
		"worker.concurrency": "8", "handler": "rec (exec /bin/sh: printf >> file)",
	}
	// Tasks come due 6 s after scheduling; with a leader to kill, at least
	// a failover (lease 15 s + lease poll 15 s) after, so that the default
	// window has enqueued them all before the kill.
	ahead := 6 * time.Second
	if c.sig != 0 {
		run.Workers, tag, ahead = 3, tag+"-"+strings.ToLower(sigName(c.sig)), 35*time.Second
		extra["lease"] = map[string]any{"duration": "15s", "poll_every": "15s"}
		run.Config["lease.duration"], run.Config["lease.poll_every"] = "15s", "15s"
	}
	dir, err := b.scratch(tag)
	if err != nil {
		return run, err
	}
	cfg := workerConfig(extra)
	f, err := fleet.Start(ctx, fleet.Options{Dir: dir, Workers: run.Workers, Config: cfg})
	if err != nil {
		return run, err
	}
	defer f.Stop()
	b.logf(name, "%s: fleet of %d up (logs in %s)", label, run.Workers, dir)
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	leader, err := f.WaitLeader(wctx, "")
	if err != nil {
		return run, err
	}
	// Let the consumers settle into idle polling first, as in a fleet
	// that has been waiting for work.
	if err := sleep(ctx, b.s.latSettle); err != nil {
		return run, err
	}
	cl, err := f.Client()
	if err != nil {
		return run, err
	}
	start := time.Now().Add(ahead)
	dues, err := scheduleSpread(ctx, cl, b.s.latTasks, start, b.s.latWindow, "rec")
	if err != nil {
		return run, err
	}
	b.logf(name, "%s: leader %s, %d tasks due over %s from %s", label, leader.Holder, len(dues), b.s.latWindow, start.Format("15:04:05"))
	run.Leader = leader.Holder
	if c.sig != 0 {
		if err := sleep(ctx, time.Until(start)); err != nil {
			return run, err
		}
		killed := time.Now()
		f.Signal(leader.Holder, c.sig)
		next, err := f.WaitLeader(wctx, leader.Holder)
		if err != nil {
			return run, fmt.Errorf("no takeover after the %s of %s: %w", sigName(c.sig), leader.Holder, err)
		}
		run.TakeoverSeconds = time.Since(killed).Seconds()
		run.Kill = fmt.Sprintf("%s of the leader %s as the first task came due; %s took over %.1f s later", sigName(c.sig), leader.Holder, next.Holder, run.TakeoverSeconds)
		b.logf(name, "%s: %s", label, run.Kill)
	}
	var want []string
	for id := range dues {
		want = append(want, id)
	}
	rctx, rcancel := context.WithDeadline(ctx, start.Add(b.s.latWindow+90*time.Second))
	defer rcancel()
	missing, err := f.WaitRecords(rctx, want)
	if err != nil {
		return run, fmt.Errorf("%d of %d tasks did not run: %w", len(missing), len(want), err)
	}
	recs, err := f.Records()
	if err != nil {
		return run, err
	}
	starts := fleet.Starts(recs)
	for id, due := range dues {
		rs := starts[id]
		if len(rs) == 0 {
			continue
		}
		first, by := rs[0].At, rs[0].Worker
		for _, r := range rs[1:] {
			if r.At.Before(first) {
				first, by = r.At, r.Worker
			}
		}
		if run.PerWorker == nil {
			run.PerWorker = map[string]int{}
		}
		run.PerWorker[by]++
		run.Ran++
		run.Duplicates += len(rs) - 1
		run.Lateness = append(run.Lateness, first.Sub(due).Seconds())
	}
	run.Summary = results.Summarize(run.Lateness)
	return run, nil
}

// scheduleSpread schedules n tasks of type typ due uniformly at random over
// [start, start+window), eight at a time, and returns their due times by id.
func scheduleSpread(ctx context.Context, cl *leasecron.Client, n int, start time.Time, window time.Duration, typ string) (map[string]time.Time, error) {
	dues := map[string]time.Time{}
	var mu sync.Mutex
	err := parallel(ctx, n, 8, func(i int) error {
		due := start.Add(time.Duration(rand.Int64N(int64(window))))
		it, err := cl.Schedule(ctx, leasecron.Item{ID: fmt.Sprintf("late-%04d", i), Type: typ, Due: due, Payload: "{}"}, nil)
		if err != nil {
			return err
		}
		mu.Lock()
		dues[it.ID] = it.Due
		mu.Unlock()
		return nil
	})
	return dues, err
}
