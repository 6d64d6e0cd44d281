package main

import (
	"context"
	"fmt"
	"time"

	"github.com/leasecron/leasecron"
	"github.com/leasecron/leasecron/queue"
	"github.com/leasecron/leasecron/tools/bench/results"
)

// rateWorkers is how many in-process workers run the rate scenario.
const rateWorkers = 3

// runRate is the rate-limit scenario: a backlog of tasks due at once, run
// by three in-process workers (consumers polling at most every second) on
// a fresh Azurite, once without a limit and once with COUNT/WINDOW on its
// type; the workers' requests are counted from the scheduling to the last
// task handled (less their idle rate, measured first), so the difference per task is what a rate-limited start
// costs (the rate row's read and write, and the looks of the tasks that
// find the budget spent).
func runRate(ctx context.Context, b *bench) error {
	res := results.RateLimit{Workers: rateWorkers}
	for _, lim := range []*leasecron.RateLimit{nil, {Count: b.s.rateCount, Per: b.s.ratePer}} {
		c, err := b.rateCase(ctx, lim)
		if err != nil {
			return err
		}
		b.logf("rate", "limit %q: %d tasks in %.1f s, %.2f requests/task (%.2f beyond the idle rate of %.1f/s), %d deferrals", c.Limit, c.Tasks, c.Seconds, c.PerTask, c.MarginalPerTask, c.IdlePerSecond, c.Deferred)
		res.Cases = append(res.Cases, c)
	}
	return results.Write(b.out, results.RateFile, res)
}

func (b *bench) rateCase(ctx context.Context, lim *leasecron.RateLimit) (results.RateCase, error) {
	srv, err := b.startAzurite(ctx, "rate")
	if err != nil {
		return results.RateCase{}, err
	}
	defer srv.Stop()
	wctx, stop := context.WithCancel(ctx)
	workers := make([]*txWorker, rateWorkers)
	defer func() {
		stop()
		for _, w := range workers {
			if w != nil {
				<-w.done
			}
		}
	}()
	label := ""
	if lim != nil {
		label = fmt.Sprintf("%d/%s", lim.Count, lim.Per)
	}
	for i := range workers {
		w, err := startWorker(wctx, srv, fmt.Sprintf("rate-%d", i), func(o *leasecron.WorkerOptions) {
			o.Consumer = queue.ConsumerSettings{PollMax: time.Second}
			if lim != nil {
				o.Rates = map[string]leasecron.RateLimit{noopType: *lim}
			}
		})
		if err != nil {
			return results.RateCase{}, err
		}
		workers[i] = w
	}
	for lead := time.Now().Add(time.Minute); ; {
		led := false
		for _, w := range workers {
			led = led || w.w.HasControl()
		}
		if led {
			break
		}
		if time.Now().After(lead) {
			return results.RateCase{}, fmt.Errorf("limit %q: no worker took the lease within a minute", label)
		}
		if err := sleep(ctx, 100*time.Millisecond); err != nil {
			return results.RateCase{}, err
		}
	}
	cl, err := leasecron.NewClient(leasecron.ClientOptions{Storage: leasecron.Storage{ConnectionString: srv.ConnectionString()}, Logger: quietLogger("rate")})
	if err != nil {
		return results.RateCase{}, err
	}
	// The workers' idle rate first (lease, polls, counters), to take out
	// of the counts: the limited run lasts longer.
	idleFrom, idleFor := total(workers), b.s.rateIdle
	if err := sleep(ctx, idleFor); err != nil {
		return results.RateCase{}, err
	}
	idlePerSec := float64(total(workers)-idleFrom) / idleFor.Seconds()
	before := make([]leasecron.RequestCounts, len(workers))
	for i, w := range workers {
		before[i] = w.w.Requests()
	}
	items := make([]leasecron.Item, b.s.rateTasks)
	now := time.Now()
	for i := range items {
		items[i] = leasecron.Item{ID: fmt.Sprintf("rate-%04d", i), Type: noopType, Due: now}
	}
	t0 := time.Now()
	if _, err := cl.ScheduleMany(ctx, items, leasecron.ScheduleManyOptions{}); err != nil {
		return results.RateCase{}, err
	}
	deadline := time.Now().Add(time.Duration(b.s.rateTasks/b.s.rateCount+3)*2*b.s.ratePer + time.Minute)
	for {
		var handled int64
		for _, w := range workers {
			handled += w.handled.Load()
		}
		if handled >= int64(b.s.rateTasks) {
			break
		}
		if time.Now().After(deadline) {
			return results.RateCase{}, fmt.Errorf("limit %q: %d of %d tasks handled by the deadline", label, handled, b.s.rateTasks)
		}
		if err := sleep(ctx, 100*time.Millisecond); err != nil {
			return results.RateCase{}, err
		}
	}
	c := results.RateCase{Limit: label, Tasks: b.s.rateTasks, Seconds: time.Since(t0).Seconds(), Requests: map[string]int64{}}
	var sum int64
	for i, w := range workers {
		reqs := w.w.Requests().Sub(before[i])
		for k, v := range reqs.ByOp {
			c.Requests[k] += v
		}
		sum += reqs.Total
		c.Deferred += w.w.ConsumerStats().Total.Deferred
	}
	c.PerTask = float64(sum) / float64(c.Tasks)
	c.IdlePerSecond = idlePerSec
	c.MarginalPerTask = (float64(sum) - idlePerSec*c.Seconds) / float64(c.Tasks)
	return c, nil
}

// total sums the workers' requests so far.
func total(workers []*txWorker) int64 {
	var n int64
	for _, w := range workers {
		n += w.w.Requests().Total
	}
	return n
}
