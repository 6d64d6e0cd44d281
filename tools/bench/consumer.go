package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azqueue"

	"github.com/leasecron/leasecron/azurite"
	"github.com/leasecron/leasecron/internal/storage"
	"github.com/leasecron/leasecron/leasecrontype"
	"github.com/leasecron/leasecron/queue"
	"github.com/leasecron/leasecron/tools/bench/results"
	"github.com/leasecron/leasecron/tools/internal/fleet"
	"github.com/leasecron/leasecron/tools/internal/proc"
)

// rawConcurrency is the goroutine count of one raw consumer loop and the
// handler concurrency of the in-process consumers compared with it: one
// dequeue returns at most 32 messages.
const rawConcurrency = queue.MaxBatch

// defaultWorkerConcurrency is worker.concurrency's default.
const defaultWorkerConcurrency = 8

// runConsumer is scenario 2: draining M pre-filled no-op messages with 1, 2
// and 4 consumers — raw SDK loops, in-process queue.Consumers and worker
// processes of the built binary — each on a fresh Azurite.
func runConsumer(ctx context.Context, b *bench) error {
	const name = "consumer"
	m := b.s.consumerMsgs
	res := results.Consumer{Messages: m}
	add := func(row results.ConsumerRow) {
		row.Steady = results.SteadyRate(row.Rate.Progress, row.Rate.N)
		res.Rows = append(res.Rows, row)
		extra := ""
		if row.CPUSeconds > 0 {
			extra = fmt.Sprintf(", %.2f CPU s, Azurite %.2f CPU s", row.CPUSeconds, row.AzuriteCPUSeconds)
		}
		b.logf(name, "%-40s x%d: %d in %.2fs = %.0f/s (steady %.0f/s%s)", row.Label, row.Instances, row.Rate.N, row.Rate.Seconds, row.Rate.PerSec, row.Steady, extra)
	}
	for _, k := range b.s.instances {
		r, reqs, err := b.consumeRaw(ctx, m, k)
		if err != nil {
			return fmt.Errorf("raw x%d: %w", k, err)
		}
		add(results.ConsumerRow{Variant: results.VariantRaw, Label: "raw dequeue(32) + 32 concurrent deletes", Instances: k, Concurrency: rawConcurrency, Rate: r, Requests: reqs})
		for _, conc := range b.s.consumerConcs {
			r, reqs, err := b.consumeInProcess(ctx, m, k, conc)
			if err != nil {
				return fmt.Errorf("in-process x%d: %w", k, err)
			}
			add(results.ConsumerRow{Variant: results.VariantInProcess, Label: fmt.Sprintf("queue.Consumer, concurrency %d, no runs", conc), Instances: k, Concurrency: conc, Rate: r, Requests: reqs})
		}
	}
	// Worker processes, with run records and without, in interleaved pairs
	// (the machine's load drifts; medians are reported): on Azurite as is,
	// then through a proxy that adds a storage account's round trip.
	type procCase struct {
		k   int
		lat time.Duration
	}
	var cases []procCase
	for _, k := range b.s.instances {
		cases = append(cases, procCase{k: k})
	}
	if b.s.processLatency > 0 {
		for _, k := range b.s.instances {
			cases = append(cases, procCase{k: k, lat: b.s.processLatency})
		}
	}
	if len(cases) > 0 && b.s.processReps > 0 {
		// Built before any clock starts: the first pair would otherwise
		// time the build.
		if _, err := proc.Binary(); err != nil {
			return err
		}
	}
	for rep := 0; rep < b.s.processReps; rep++ {
		for _, pc := range cases {
			for _, runs := range b.s.processRuns {
				r, cpu, acpu, err := b.consumeProcesses(ctx, m, pc.k, runs, pc.lat)
				if err != nil {
					return fmt.Errorf("processes x%d: %w", pc.k, err)
				}
				label := "worker processes, defaults (runs on)"
				if !runs {
					label = "worker processes, worker.runs=false"
				}
				if pc.lat > 0 {
					label += fmt.Sprintf(", +%s per request", pc.lat)
				}
				add(results.ConsumerRow{Variant: results.VariantProcess, Label: label, Instances: pc.k, Concurrency: defaultWorkerConcurrency, Runs: runs,
					Rate: r, CPUSeconds: cpu, AzuriteCPUSeconds: acpu, LatencyMs: int(pc.lat / time.Millisecond), Rep: rep})
			}
		}
	}
	if n := b.s.tableCostEntities; n > 0 {
		costs, err := b.azuriteTableCosts(ctx, n)
		if err != nil {
			return err
		}
		res.TableCosts = costs
	}
	// Azurite's dequeue slows down as the queue grows: one raw loop on a
	// longer queue shows by how much.
	if deep := b.s.consumerDeep; deep > 0 {
		r, reqs, err := b.consumeRaw(ctx, deep, 1)
		if err != nil {
			return fmt.Errorf("raw on %d messages: %w", deep, err)
		}
		add(results.ConsumerRow{Variant: results.VariantRawDeep, Label: fmt.Sprintf("raw, on a queue of %d", deep), Instances: 1, Concurrency: rawConcurrency, Messages: deep, Rate: r, Requests: reqs})
	}
	return results.Write(b.out, results.ConsumerFile, res)
}

// prefilled starts a fresh Azurite whose work queue holds m no-op
// envelopes.
func (b *bench) prefilled(ctx context.Context, m int) (*azurite.Server, *storage.Clients, error) {
	srv, err := b.startAzurite(ctx, "consumer")
	if err != nil {
		return nil, nil, err
	}
	sc, err := clients(srv, nil)
	if err == nil {
		for _, q := range []string{workQueue, queue.DefaultPoisonQueue} {
			if err = sc.EnsureQueue(ctx, q); err != nil {
				break
			}
		}
	}
	if err == nil {
		_, err = rawEnqueue(ctx, sc.Queue.NewQueueClient(workQueue), m, rawConcurrency, nil)
	}
	if err != nil {
		srv.Stop()
		return nil, nil, err
	}
	return srv, sc, nil
}

// consumeRaw drains the queue with k loops of the plain SDK, each
// dequeuing 32 messages and deleting them with 32 goroutines.
func (b *bench) consumeRaw(ctx context.Context, m, k int) (results.Rate, map[string]int64, error) {
	srv, _, err := b.prefilled(ctx, m)
	if err != nil {
		return results.Rate{}, nil, err
	}
	counter := storage.NewCounter()
	defer srv.Stop()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	p := newProgress(100 * time.Millisecond)
	var firstErr error
	var errOnce sync.Once
	fail := func(err error) { errOnce.Do(func() { firstErr = err; cancel() }) }
	var wg sync.WaitGroup
	for range k {
		sc, err := clients(srv, counter) // separate clients per instance
		if err != nil {
			return results.Rate{}, nil, err
		}
		qc := sc.Queue.NewQueueClient(workQueue)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil && p.n.Load() < int64(m) {
				resp, err := qc.DequeueMessages(ctx, &azqueue.DequeueMessagesOptions{NumberOfMessages: to.Ptr(int32(queue.MaxBatch)), VisibilityTimeout: to.Ptr(int32(60))})
				if err != nil {
					if ctx.Err() == nil {
						fail(fmt.Errorf("dequeue: %w", storage.Translate(err)))
					}
					return
				}
				var dw sync.WaitGroup
				for _, msg := range resp.Messages {
					dw.Add(1)
					go func() {
						defer dw.Done()
						if _, err := qc.DeleteMessage(ctx, *msg.MessageID, *msg.PopReceipt, nil); err != nil {
							if ctx.Err() == nil {
								fail(fmt.Errorf("delete: %w", storage.Translate(err)))
							}
							return
						}
						p.n.Add(1)
					}()
				}
				dw.Wait()
			}
		}()
	}
	wg.Wait()
	pts, d := p.finish()
	if firstErr != nil {
		return results.Rate{}, nil, firstErr
	}
	if got := p.n.Load(); got != int64(m) {
		return results.Rate{}, nil, fmt.Errorf("raw consumers deleted %d of %d messages", got, m)
	}
	return results.NewRate(m, d, pts), byOp(counter), nil
}

// consumeInProcess drains the queue with k queue.Consumers (separate
// storage clients each) running a no-op Go handler, without run records.
func (b *bench) consumeInProcess(ctx context.Context, m, k, conc int) (results.Rate, map[string]int64, error) {
	srv, sc, err := b.prefilled(ctx, m)
	if err != nil {
		return results.Rate{}, nil, err
	}
	counter := storage.NewCounter()
	defer srv.Stop()
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	p := newProgress(100 * time.Millisecond)
	all := make(chan struct{})
	obs := &deleteCounter{p: p, total: int64(m), all: all}
	noop := func(context.Context, leasecrontype.Task) error { return nil }
	var wg sync.WaitGroup
	errs := make(chan error, k)
	for i := range k {
		csc, err := clients(srv, counter)
		if err != nil {
			return results.Rate{}, nil, err
		}
		c, err := queue.NewConsumer(csc.Queue, queue.ConsumerOptions{
			ConsumerSettings: queue.ConsumerSettings{Concurrency: conc, ShutdownGrace: 5 * time.Second}, InstanceID: fmt.Sprintf("bench-c%d", i),
			Logger: quietLogger("consumer"), Observer: obs,
		})
		if err != nil {
			return results.Rate{}, nil, err
		}
		c.Handle(noopType, noop)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := c.Run(cctx); err != nil {
				errs <- err
			}
		}()
	}
	var waitErr error
	select {
	case <-all:
	case <-time.After(10 * time.Minute):
		waitErr = fmt.Errorf("deleted %d of %d within 10 minutes", p.n.Load(), m)
	case <-ctx.Done():
		waitErr = ctx.Err()
	}
	pts, d := p.finish()
	cancel()
	wg.Wait()
	close(errs)
	for err := range errs {
		waitErr = errors.Join(waitErr, err)
	}
	if waitErr == nil {
		if qd, err := depth(ctx, sc.Queue.NewQueueClient(workQueue)); err != nil || qd != 0 {
			waitErr = fmt.Errorf("queue depth %d after all were handled (%w)", qd, err)
		}
	}
	if waitErr != nil {
		return results.Rate{}, nil, waitErr
	}
	return results.NewRate(m, d, pts), byOp(counter), nil
}

// deleteCounter counts succeeded outcomes (settled after the delete) into
// a progress and closes all when total is reached.
type deleteCounter struct {
	p     *progress
	total int64
	all   chan struct{}
	once  sync.Once
}

func (d *deleteCounter) OnHandled(_ string, o queue.Outcome, _ time.Duration) {
	if o == queue.OutcomeSucceeded && d.p.n.Add(1) >= d.total {
		d.once.Do(func() { close(d.all) })
	}
}

func (*deleteCounter) OnPoll(int, time.Duration) {}

// workerConfig is the fleet configuration of benchmark worker processes:
// the product's default intervals, a no-op "log" handler whose lines are
// not written (log.level warn), no blackboard.
func workerConfig(extra map[string]any) map[string]any {
	cfg := map[string]any{
		"lease":      map[string]any{"duration": "60s", "poll_every": "15s"},
		"mover":      map[string]any{"poll_every": "5s"},
		"worker":     map[string]any{"poll_max": "30s", "shutdown_grace": "10s", "visibility_timeout": "60s"},
		"retry":      map[string]any{"backoff_base": "2s", "backoff_max": "10m"},
		"blackboard": map[string]any{"cycle": "1h", "enabled": false},
		"log":        map[string]any{"level": "warn"},
		"handlers":   map[string]any{noopType: map[string]any{"kind": "log"}},
	}
	fleetMerge(cfg, extra)
	return cfg
}

// fleetMerge merges src over dst, recursively for maps.
func fleetMerge(dst, src map[string]any) {
	for k, v := range src {
		if sm, ok := v.(map[string]any); ok {
			if dm, ok := dst[k].(map[string]any); ok {
				fleetMerge(dm, sm)
				continue
			}
		}
		dst[k] = v
	}
}

// consumeProcesses drains the queue with k worker processes (not leading),
// their storage requests delayed by lat when it is not 0, and returns the
// rate (from the depth, polled every 100 ms) and the CPU seconds the
// processes and Azurite used.
func (b *bench) consumeProcesses(ctx context.Context, m, k int, runs bool, lat time.Duration) (results.Rate, float64, float64, error) {
	srv, sc, err := b.prefilled(ctx, m)
	if err != nil {
		return results.Rate{}, 0, 0, err
	}
	defer srv.Stop()
	dir, err := b.scratch(fmt.Sprintf("consumer-x%d-runs-%v-lat-%s", k, runs, lat))
	if err != nil {
		return results.Rate{}, 0, 0, err
	}
	var env []string
	if lat > 0 {
		pctx, cancel := context.WithCancel(ctx)
		defer cancel()
		cs, err := latencyProxy(pctx, srv, lat)
		if err != nil {
			return results.Rate{}, 0, 0, err
		}
		env = append(env, "LEASECRON_STORAGE_CONNECTION_STRING="+cs)
	}
	az0, err := readProc(srv.Pid())
	if err != nil {
		return results.Rate{}, 0, 0, fmt.Errorf("azurite's CPU: %w", err)
	}
	p := newProgress(100 * time.Millisecond)
	f, err := fleet.Start(ctx, fleet.Options{Dir: dir, Workers: k, Azurite: srv, Env: env, Config: workerConfig(map[string]any{
		"worker": map[string]any{"lead": false, "runs": runs},
	})})
	if err != nil {
		return results.Rate{}, 0, 0, err
	}
	defer f.Stop()
	derr := waitDrained(ctx, sc.Queue.NewQueueClient(workQueue), m, p, 10*time.Minute)
	pts, d := p.finish()
	cpu := fleetCPU(f)
	az1, err := readProc(srv.Pid())
	if derr == nil && err != nil {
		derr = fmt.Errorf("azurite's CPU: %w", err)
	}
	if derr != nil {
		return results.Rate{}, 0, 0, fmt.Errorf("%w (logs in %s)", derr, dir)
	}
	return results.NewRate(m, d, pts), cpu, az1.CPU - az0.CPU, nil
}

// fleetCPU is the CPU seconds (user+system) f's running workers have used;
// a worker whose /proc entry cannot be read counts nothing.
func fleetCPU(f *fleet.Fleet) float64 {
	var cpu float64
	for _, n := range f.Names() {
		if u, err := readProc(f.Worker(n).Pid()); err == nil {
			cpu += u.CPU
		}
	}
	return cpu
}

// scratch returns a fresh directory under the output directory's work
// area for logs and configs.
func (b *bench) scratch(name string) (string, error) {
	dir, err := filepath.Abs(filepath.Join(b.out, "work", name))
	if err != nil {
		return "", err
	}
	return dir, mkdirFresh(dir)
}
