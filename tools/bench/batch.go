package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/leasecron/leasecron/schedule"
	"github.com/leasecron/leasecron/tools/bench/results"
)

// runBatch is the batch-scheduling scenario: N tasks scheduled with
// schedule.Client.AddMany (what leasecron.Client.ScheduleMany does) against
// M scheduled one Add at a time, sequentially and by 16 callers (what
// leasecron.Client.Schedule does; run records start when the mover sends a
// task, so scheduling writes none either way), on Azurite as is and with a delay added before every request (what a storage
// account in the cloud adds), each on a fresh Azurite, every storage
// request counted.
func runBatch(ctx context.Context, b *bench) error {
	var res results.Batch
	for _, lat := range []time.Duration{0, b.s.batchLatency} {
		for _, m := range []struct {
			name  string
			tasks int
			conc  int
		}{
			{"batch", b.s.batchTasks, 0},
			{"single", b.s.batchSingle, 1},
			{"single-16", b.s.batchSingle, 16},
		} {
			c, err := b.batchCase(ctx, m.name, m.tasks, m.conc, lat)
			if err != nil {
				return fmt.Errorf("%s (+%v): %w", m.name, lat, err)
			}
			b.logf("batch", "%s, +%v per request: %d tasks in %.2f s (%.0f/s), %.3f requests/task",
				m.name, lat, c.Tasks, c.Rate.Seconds, c.Rate.PerSec, c.PerTask)
			res.Cases = append(res.Cases, c)
		}
	}
	return results.Write(b.out, results.BatchFile, res)
}

// batchCase schedules tasks tasks on a fresh Azurite: with AddMany when
// conc is 0, else one Add per task with conc callers; lat is added before
// every request.
func (b *bench) batchCase(ctx context.Context, method string, tasks, conc int, lat time.Duration) (results.BatchCase, error) {
	srv, err := b.startAzurite(ctx, "batch")
	if err != nil {
		return results.BatchCase{}, err
	}
	defer srv.Stop()
	tc, err := newTxClientWith(ctx, srv, lat)
	if err != nil {
		return results.BatchCase{}, err
	}
	now := time.Now()
	items := make([]schedule.Item, tasks)
	for i := range items {
		items[i] = schedule.Item{ID: fmt.Sprintf("batch-%06d", i), Type: noopType, Payload: fmt.Sprintf(`{"n":%d}`, i), Due: now.Add(time.Hour)}
	}
	tc.counter.Reset()
	t0 := time.Now()
	if conc == 0 {
		err = tc.scheduleMany(ctx, items)
	} else {
		err = tc.scheduleEach(ctx, items, conc)
	}
	took := time.Since(t0)
	if err != nil {
		return results.BatchCase{}, err
	}
	c := results.BatchCase{Method: method, AddedLatencyMS: float64(lat) / float64(time.Millisecond), Tasks: tasks, Rate: results.NewRate(tasks, took, nil), Requests: map[string]int64{}}
	keys, counts := tc.counter.ByOp()
	for _, k := range keys {
		c.Requests[k] = counts[k]
	}
	c.PerTask = float64(tc.counter.Total()) / float64(tasks)
	return c, nil
}

// scheduleMany is leasecron.Client.ScheduleMany over counted clients.
func (c *txClient) scheduleMany(ctx context.Context, items []schedule.Item) error {
	_, err := c.sched.AddMany(ctx, items, schedule.AddManyOptions{})
	return err
}

// scheduleEach schedules one task per call with conc callers.
func (c *txClient) scheduleEach(ctx context.Context, items []schedule.Item, conc int) error {
	return eachLimit(len(items), conc, func(i int) error { return c.schedule(ctx, items[i]) })
}

// eachLimit runs f(0..n-1) with at most limit at once and returns the
// errors joined.
func eachLimit(n, limit int, f func(i int) error) error {
	sem := make(chan struct{}, limit)
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for i := range n {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := f(i); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}
