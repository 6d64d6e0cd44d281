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
// worker that does not compete (worker.lead=false); and, on an Azurite of
// its own, a leader whose consumer does not listen (worker.listen_every
// negative: the previous release's leader, whose polling backs off like
// everyone's). Counting starts after a warm-up, so the consumers' polling
// has backed off to its maximum.
func runIdle(ctx context.Context, b *bench) error {
	const name = "idle"
	srv, err := b.startAzurite(ctx, name)
	if err != nil {
		return err
	}
	defer srv.Stop()
	quiet, err := b.startAzurite(ctx, name+"-nolisten")
	if err != nil {
		return err
	}
	defer quiet.Stop()
	routed, err := b.startAzurite(ctx, name+"-routes")
	if err != nil {
		return err
	}
	defer routed.Stop()
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	roles := []struct {
		role, label string
		runs        bool
		mod         func(*leasecron.WorkerOptions)
		alone       bool // on its own Azurite, so that it leads
		routes      bool // on the Azurite of the routed fleet (its first leads)
	}{
		{"leader", "leading, nothing to move (listening every 200 ms)", true, nil, false, false},
		{"standby", "standby (competes for the lease)", true, nil, false, false},
		{"standby-noruns", "standby, worker.runs=false", false, func(o *leasecron.WorkerOptions) { o.NoRuns = true }, false, false},
		{"consumer-only", "worker.lead=false (never leads)", true, func(o *leasecron.WorkerOptions) { o.NoLead = true }, false, false},
		{"leader-routes", "leading, 3 named queues x 4 priority levels (12 work queues)", true, routes12, false, true},
		{"standby-routes", "standby, 3 named queues x 4 priority levels", true, routes12, false, true},
		{"leader-nolisten", "leading, worker.listen_every=-1 (not listening, as before)", true,
			func(o *leasecron.WorkerOptions) { o.Consumer.ListenEvery = -1 }, true, false},
	}
	workers := make([]*txWorker, len(roles))
	for i, r := range roles {
		on := srv
		switch {
		case r.alone:
			on = quiet
		case r.routes:
			on = routed
		}
		w, err := startWorker(wctx, on, "idle-"+r.role, r.mod)
		if err != nil {
			return err
		}
		workers[i] = w
		if i == 0 || r.alone || r.role == "leader-routes" {
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
	if err := leading(workers, roles[len(roles)-1].alone); err != nil {
		return fmt.Errorf("during the warm-up: %w", err)
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
	if err := leading(workers, roles[len(roles)-1].alone); err != nil {
		return fmt.Errorf("while counting: %w", err)
	}
	for i, r := range roles {
		reqs := workers[i].w.Requests().Sub(before[i])
		counts, total := reqs.ByOp, reqs.Total
		row := results.IdleRow{Role: r.role, Label: r.label, Runs: r.runs, Requests: counts, PerHour: float64(total) * 3600 / window.Seconds()}
		res.Rows = append(res.Rows, row)
		b.logf(name, "%-34s %4d requests in %s = %.0f/hour %v", r.label, total, window.Round(time.Second), row.PerHour, counts)
	}
	return results.Write(b.out, results.IdleFile, res)
}

// routes12 makes a worker consume three named queues and route types to
// every priority level of each, so that all 12 work queues exist and are
// drained from the start (the idle cost of routes: it should be that of
// one queue).
func routes12(o *leasecron.WorkerOptions) {
	o.Queues = []string{"default", "gpu", "mail"}
	o.Routing.Types = map[string]leasecron.Route{}
	for _, q := range o.Queues {
		for p := 1; p <= 4; p++ {
			o.Routing.Types[fmt.Sprintf("%s-%d", q, p)] = leasecron.Route{Queue: q, Priority: p}
		}
	}
}

// leading reports an error unless the first worker, and the last when it
// has an Azurite of its own, still hold their leases.
func leading(workers []*txWorker, lastAlone bool) error {
	if !workers[0].w.HasControl() {
		return fmt.Errorf("the leader lost the lease")
	}
	if last := workers[len(workers)-1]; lastAlone && !last.w.HasControl() {
		return fmt.Errorf("the leader that does not listen lost the lease")
	}
	return nil
}
