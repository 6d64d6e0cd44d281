package main

import (
	"context"
	"fmt"
	"time"

	"github.com/leasecron/leasecron"
	"github.com/leasecron/leasecron/tools/bench/results"
)

// runIdle is scenario 5, part two: storage requests per hour of idle
// in-process workers with default options (lease poll 15 s, consumer
// poll_max 30 s, blackboard cycle 1 h) on one fresh Azurite: the leader, a
// standby competing for the lease, a standby without run records, and a
// worker that does not compete (worker.lead=false). Counting starts after
// a warm-up, so the consumers' polling has backed off to its maximum.
func runIdle(ctx context.Context, b *bench) error {
	const name = "idle"
	srv, err := b.startAzurite(ctx, name)
	if err != nil {
		return err
	}
	defer srv.Stop()
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	roles := []struct {
		role, label string
		runs        bool
		mod         func(*leasecron.WorkerOptions)
	}{
		{"leader", "leading, nothing to move", true, nil},
		{"standby", "standby (competes for the lease)", true, nil},
		{"standby-noruns", "standby, worker.runs=false", false, func(o *leasecron.WorkerOptions) { o.NoRuns = true }},
		{"consumer-only", "worker.lead=false (never leads)", true, func(o *leasecron.WorkerOptions) { o.NoLead = true }},
	}
	workers := make([]*txWorker, len(roles))
	for i, r := range roles {
		w, err := startWorker(wctx, srv, "idle-"+r.role, r.mod)
		if err != nil {
			return err
		}
		workers[i] = w
		if i == 0 {
			if err := w.waitLeading(ctx, 30*time.Second); err != nil {
				return err
			}
		}
	}
	defer func() {
		stop()
		for _, w := range workers {
			<-w.done
		}
	}()
	b.logf(name, "%d idle workers up; warming up %s, then counting for %s", len(roles), b.s.idleWarmup, b.s.idleWindow)
	if err := sleep(ctx, b.s.idleWarmup); err != nil {
		return err
	}
	if !workers[0].w.HasControl() {
		return fmt.Errorf("the first worker lost the lease during the warm-up")
	}
	before := make([]leasecron.RequestCounts, len(workers))
	for i, w := range workers {
		before[i] = w.w.Requests()
	}
	t0 := time.Now()
	for el := time.Duration(0); el < b.s.idleWindow; el += time.Minute {
		if err := sleep(ctx, min(time.Minute, b.s.idleWindow-el)); err != nil {
			return err
		}
		if el+time.Minute < b.s.idleWindow {
			b.logf(name, "counting: %s of %s", (el + time.Minute).Round(time.Second), b.s.idleWindow)
		}
	}
	window := time.Since(t0)
	res := results.Idle{WarmupSeconds: b.s.idleWarmup.Seconds(), WindowSeconds: window.Seconds()}
	for i, r := range roles {
		if i == 0 && !workers[0].w.HasControl() {
			return fmt.Errorf("the leader lost the lease while counting")
		}
		reqs := workers[i].w.Requests().Sub(before[i])
		counts, total := reqs.ByOp, reqs.Total
		row := results.IdleRow{Role: r.role, Label: r.label, Runs: r.runs, Requests: counts, PerHour: float64(total) * 3600 / window.Seconds()}
		res.Rows = append(res.Rows, row)
		b.logf(name, "%-34s %4d requests in %s = %.0f/hour %v", r.label, total, window.Round(time.Second), row.PerHour, counts)
	}
	return results.Write(b.out, results.IdleFile, res)
}
