package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasecron/leasecron"
	"github.com/leasecron/leasecron/azurite"
	"github.com/leasecron/leasecron/internal/storage"
	"github.com/leasecron/leasecron/leasecrontype"
	"github.com/leasecron/leasecron/schedule"
	"github.com/leasecron/leasecron/tools/bench/results"
)

// runTransactions is scenario 5, part one: the storage requests one task
// costs, with and without run records. An in-process leasecron.Worker
// (default options) leads and consumes; its Requests() counter is read
// around each pattern, and its idle request rate, measured first, is
// subtracted (the marginal cost). The scheduling side is counted with its
// own counter: a leasecron.Client's Requests around its Schedule calls
// (a task due now is sent by the client, so its enqueue and run record
// count there). Both
// cases run at once on separate Azurites.
func runTransactions(ctx context.Context, b *bench) error {
	var mu sync.Mutex
	var res results.Transactions
	var errs []error
	var wg sync.WaitGroup
	for _, withRuns := range []bool{true, false} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cases, err := b.txCases(ctx, withRuns)
			mu.Lock()
			defer mu.Unlock()
			res.Cases = append(res.Cases, cases...)
			if err != nil {
				errs = append(errs, fmt.Errorf("runs %v: %w", withRuns, err))
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return results.Write(b.out, results.TransactionsFile, res)
}

// txClient schedules with schedule.Client (the table layer leasecron's
// Client writes through) over a counted client, for the batch scenario's
// comparison of ScheduleMany's transactions with one Add per task.
type txClient struct {
	sched   *schedule.Client
	counter *storage.Counter
}

// newTxClientWith connects a txClient to srv with lat added before every
// request (see clientsWith).
func newTxClientWith(ctx context.Context, srv *azurite.Server, lat time.Duration) (*txClient, error) {
	c := &txClient{counter: storage.NewCounter()}
	sc, err := clientsWith(srv, c.counter, lat)
	if err != nil {
		return nil, err
	}
	if c.sched, err = schedule.NewAzure(sc.Table, schedule.Options{Logger: quietLogger("transactions")}); err != nil {
		return nil, err
	}
	if err := c.sched.Ensure(ctx); err != nil {
		return nil, err
	}
	c.counter.Reset()
	return c, nil
}

func (c *txClient) schedule(ctx context.Context, it schedule.Item) error {
	_, err := c.sched.Add(ctx, it, schedule.AddOptions{})
	return err
}

// txWorker is an in-process worker counting handled tasks.
type txWorker struct {
	w       *leasecron.Worker
	handled atomic.Int64
	done    chan error
}

// startWorker runs a worker with default options (plus opts) and waits
// until it leads, unless it is not to lead.
func startWorker(ctx context.Context, srv *azurite.Server, id string, mod func(*leasecron.WorkerOptions)) (*txWorker, error) {
	return startWorkerAt(ctx, srv.ConnectionString(), id, 0, mod)
}

// startWorkerAt is startWorker against the account of a connection
// string (a proxy), with a handler that takes work (0: returns at once).
func startWorkerAt(ctx context.Context, cs, id string, work time.Duration, mod func(*leasecron.WorkerOptions)) (*txWorker, error) {
	o := leasecron.WorkerOptions{
		Storage:    leasecron.Storage{ConnectionString: cs},
		InstanceID: id,
		Logger:     quietLogger(id),
	}
	if mod != nil {
		mod(&o)
	}
	w, err := leasecron.NewWorker(o)
	if err != nil {
		return nil, err
	}
	tw := &txWorker{w: w, done: make(chan error, 1)}
	w.Handle(noopType, func(ctx context.Context, _ leasecrontype.Task) error {
		if work > 0 {
			select {
			case <-time.After(work):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		tw.handled.Add(1)
		return nil
	})
	go func() { tw.done <- w.Run(ctx) }()
	return tw, nil
}

// waitLeading waits until w holds the lease.
func (tw *txWorker) waitLeading(ctx context.Context, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for !tw.w.HasControl() {
		if time.Now().After(deadline) {
			return fmt.Errorf("worker did not take the lease within %s", limit)
		}
		select {
		case err := <-tw.done:
			return fmt.Errorf("worker stopped: %w", err)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return nil
}

// passes returns the passes the worker's mover has completed.
func (tw *txWorker) passes() int64 {
	st, _ := tw.w.MoverStats()
	return st.Passes
}

// moved returns the rows the worker's mover has moved.
func (tw *txWorker) moved() int64 {
	st, _ := tw.w.MoverStats()
	return st.Moved
}

// settle waits (at most limit) until the mover has moved at least want
// tasks, two passes have completed since settle was called (so a whole
// one began after it: a pass that read a series' row before its cancel
// may still be sending an occurrence), every moved one-off task has been handled, and every
// message enqueued since the counts w0 and c0 (by the worker or the
// client) has been deleted; then a little longer for the bookkeeping that
// follows. For a series (cancelled) a message may be deleted without its
// task running: an occurrence moved just before the cancel is received,
// found cancelled and deleted, so moved and handled are not compared.
func (tw *txWorker) settle(ctx context.Context, cl *leasecron.Client, w0, c0 leasecron.RequestCounts, moved0, handled0, want int64, recurring bool, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	passes0 := tw.passes()
	for {
		moved, handled := tw.moved()-moved0, tw.handled.Load()-handled0
		enq, del := sentAndDeleted(tw.w.Requests().Sub(w0), cl.Requests().Sub(c0))
		if moved >= want && (recurring || handled >= moved) && del >= enq && tw.passes() >= passes0+2 {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("handled %d of %d moved tasks (want %d), deleted %d of %d messages, %d passes within %s; consumer %+v", handled, moved, want, del, enq, tw.passes()-passes0, limit, tw.w.ConsumerStats().Total)
		}
		if err := sleep(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
	return sleep(ctx, 2*time.Second)
}

// sentAndDeleted returns the messages the worker and the client enqueued
// and the messages the worker deleted, from their request counts.
func sentAndDeleted(worker, client leasecron.RequestCounts) (enqueued, deleted int64) {
	return worker.ByOp["queue enqueue"] + client.ByOp["queue enqueue"], worker.ByOp["queue delete-message"]
}

// byOp returns a counter's counts by "service op".
func byOp(c *storage.Counter) map[string]int64 {
	_, m := c.ByOp()
	return m
}

// txCases measures every pattern for one runs setting.
func (b *bench) txCases(ctx context.Context, withRuns bool) ([]results.TxCase, error) {
	name := "transactions"
	tag := map[bool]string{true: "runs on", false: "runs off"}[withRuns]
	srv, err := b.startAzurite(ctx, name)
	if err != nil {
		return nil, err
	}
	defer srv.Stop()
	wctx, stop := context.WithCancel(ctx)
	tw, err := startWorker(wctx, srv, "tx-"+map[bool]string{true: "runs", false: "noruns"}[withRuns], func(o *leasecron.WorkerOptions) {
		o.NoRuns = !withRuns
		// Early enqueue off (one pass ahead, as before it existed): each
		// recurring pattern ends by cancelling its series, and with the
		// default window the occurrences of the next 75 s would already be
		// in the queue, costing enqueues and deletes for tasks that never
		// run. A series that is not cancelled pays one enqueue per occurrence
		// either way.
		o.Mover.Early = -1
	})
	if err != nil {
		stop()
		return nil, err
	}
	defer func() { stop(); <-tw.done }()
	if err := tw.waitLeading(ctx, 30*time.Second); err != nil {
		return nil, err
	}
	cl, err := leasecron.NewClient(leasecron.ClientOptions{
		Storage: leasecron.Storage{ConnectionString: srv.ConnectionString()},
		NoRuns:  !withRuns, Logger: quietLogger("transactions-client"),
	})
	if err != nil {
		return nil, err
	}
	// Create the tables and queue outside the counted window.
	if _, err := cl.List(ctx, &leasecron.ListOptions{Limit: 1}); err != nil {
		return nil, err
	}
	b.logf(name, "%s: worker leads; idling %s, then counting the idle rate for %s", tag, b.s.txWarmup, b.s.txBaseline)
	if err := sleep(ctx, b.s.txWarmup); err != nil {
		return nil, err
	}
	idle0 := tw.w.Requests()
	if err := sleep(ctx, b.s.txBaseline); err != nil {
		return nil, err
	}
	idle := tw.w.Requests().Sub(idle0)
	base, baseTotal := idle.ByOp, idle.Total
	b.logf(name, "%s: idle rate %.1f requests/min %v", tag, float64(baseTotal)/b.s.txBaseline.Minutes(), base)

	var out []results.TxCase
	// measure takes a snapshot of the worker's requests and resets the
	// client's counter, runs f (which returns the number of tasks), waits
	// for the worker to settle and computes the marginal cost per task.
	measure := func(kind, pattern string, spacing time.Duration, want int64, f func() (series int, err error)) error {
		w0, c0 := tw.w.Requests(), cl.Requests()
		m0, h0 := tw.moved(), tw.handled.Load()
		t0 := time.Now()
		series, err := f()
		if err != nil {
			return fmt.Errorf("%s %s: %w", pattern, kind, err)
		}
		clientCounts := cl.Requests().Sub(c0).ByOp // before any cancels
		if kind == "recurring" {
			if err := cancelSeries(ctx, cl, pattern); err != nil {
				return err
			}
		}
		if err := tw.settle(ctx, cl, w0, c0, m0, h0, want, kind == "recurring", 2*time.Minute); err != nil {
			return fmt.Errorf("%s %s: %w", pattern, kind, err)
		}
		window := time.Since(t0)
		n := tw.handled.Load() - h0
		if n <= 0 {
			return fmt.Errorf("%s %s: no task ran", pattern, kind)
		}
		c := results.TxCase{Kind: kind, Pattern: pattern, Runs: withRuns, Tasks: int(n), WindowSeconds: window.Seconds(),
			SpacingSeconds: spacing.Seconds(), Client: map[string]float64{}, Worker: map[string]float64{}}
		wd := tw.w.Requests().Sub(w0)
		enq, del := sentAndDeleted(wd, cl.Requests().Sub(c0))
		c.Messages, c.Deleted = int(enq), int(del)
		for op, v := range wd.ByOp {
			c.Worker[op] = float64(v) / float64(n)
		}
		for op, v := range base {
			c.Worker[op] -= float64(v) * window.Seconds() / b.s.txBaseline.Seconds() / float64(n)
		}
		div := float64(n)
		if series > 0 {
			div = float64(series) // a series is scheduled once: report that cost per series
		}
		for op, v := range clientCounts {
			c.Client[op] = float64(v) / div
		}
		for _, v := range c.Worker {
			c.WorkerTotal += v
		}
		for _, v := range c.Client {
			c.ClientTotal += v
		}
		c.Total = c.WorkerTotal
		if series == 0 {
			c.Total += c.ClientTotal
		}
		out = append(out, c)
		b.logf(name, "%s: %s %s: %d tasks over %.0fs: worker %.1f + client %.1f requests per task (worker %v)", tag, pattern, kind, n, window.Seconds(), c.WorkerTotal, c.ClientTotal, rounded(c.Worker))
		return nil
	}

	spacing := b.s.txSpacing
	// Lone one-off tasks, one every spacing.
	if err := measure("one-off", "lone", spacing, int64(b.s.txLone), func() (int, error) {
		for i := range b.s.txLone {
			if err := schedule1(ctx, cl, leasecron.Item{ID: fmt.Sprintf("lone-%d", i), Type: noopType, Due: time.Now(), Payload: "{}"}); err != nil {
				return 0, err
			}
			if err := sleep(ctx, spacing); err != nil {
				return 0, err
			}
		}
		return 0, nil
	}); err != nil {
		return out, err
	}
	// One recurring series, @every spacing, for as long.
	if err := measure("recurring", "lone", spacing, 0, func() (int, error) {
		if err := schedule1(ctx, cl, leasecron.Item{ID: "lone-series", Type: noopType, Due: time.Now(), Payload: "{}", Recurrence: "@every " + spacing.String()}); err != nil {
			return 1, err
		}
		return 1, sleep(ctx, time.Duration(b.s.txLone)*spacing)
	}); err != nil {
		return out, err
	}
	// A burst of one-off tasks due at once.
	if err := measure("one-off", "burst", 0, int64(b.s.txBurst), func() (int, error) {
		return 0, parallel(ctx, b.s.txBurst, 8, func(i int) error {
			return schedule1(ctx, cl, leasecron.Item{ID: fmt.Sprintf("burst-%04d", i), Type: noopType, Due: time.Now(), Payload: "{}"})
		})
	}); err != nil {
		return out, err
	}
	// Many recurring series at once.
	if err := measure("recurring", "burst", spacing, 0, func() (int, error) {
		err := parallel(ctx, b.s.txSeries, 8, func(i int) error {
			return schedule1(ctx, cl, leasecron.Item{ID: fmt.Sprintf("burst-series-%03d", i), Type: noopType, Due: time.Now(), Payload: "{}", Recurrence: "@every " + spacing.String()})
		})
		if err != nil {
			return b.s.txSeries, err
		}
		return b.s.txSeries, sleep(ctx, b.s.txSeriesWindow)
	}); err != nil {
		return out, err
	}
	return out, nil
}

// cancelSeries cancels the series the recurring pattern scheduled.
func cancelSeries(ctx context.Context, cl *leasecron.Client, pattern string) error {
	page, err := cl.List(ctx, &leasecron.ListOptions{Limit: 1000})
	if err != nil {
		return err
	}
	for _, it := range page.Items {
		if it.Recurrence == "" {
			continue
		}
		if _, err := cl.Cancel(ctx, it.ID); err != nil && !errors.Is(err, leasecron.ErrNotFound) {
			return fmt.Errorf("%s: cancel %s: %w", pattern, it.ID, err)
		}
	}
	return nil
}

// rounded rounds a per-op map to one decimal for progress lines.
func rounded(m map[string]float64) map[string]float64 {
	out := make(map[string]float64, len(m))
	for k, v := range m {
		out[k] = float64(int64(v*10+0.5*sign(v))) / 10
	}
	return out
}

func sign(v float64) float64 {
	if v < 0 {
		return -1
	}
	return 1
}

// schedule1 schedules it as a user would, with Client.Schedule: a task due
// now is sent by the client itself (ClientOptions.SendWithin).
func schedule1(ctx context.Context, cl *leasecron.Client, it leasecron.Item) error {
	_, err := cl.Schedule(ctx, it, nil)
	return err
}
