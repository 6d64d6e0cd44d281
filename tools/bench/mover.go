package main

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azqueue"

	"github.com/leasecron/leasecron/azurite"
	"github.com/leasecron/leasecron/internal/storage"
	"github.com/leasecron/leasecron/queue"
	"github.com/leasecron/leasecron/schedule"
	"github.com/leasecron/leasecron/tools/bench/results"
)

// runMover is scenario 1: the mover moving N due rows, against the raw
// enqueue ceiling (N concurrent enqueues with the plain SDK) and the naive
// design (enqueue then delete, one row at a time), each on a fresh Azurite,
// repeated and interleaved. Two more sets add a fixed delay to every
// request, as a cloud round trip would: 10 ms, which still leaves the
// emulator's one thread the limit, and 100 ms, where the raw loop's 32
// enqueues in flight wait on the delay (about 320 a second) before they
// wait on the emulator, so the ratio measures how well the mover hides its
// table calls behind its enqueues.
func runMover(ctx context.Context, b *bench) error {
	const name = "mover"
	res := results.Mover{Concurrency: schedule.DefaultConcurrency}
	sets := []results.MoverSet{
		{Rows: b.s.moverRows, NaiveRows: b.s.naiveRows},
		{Rows: b.s.slowRows, NaiveRows: b.s.slowNaiveRows, AddedLatencyMS: float64(b.s.moverLatency / time.Millisecond)},
	}
	if b.s.tripRows > 0 {
		sets = append(sets, results.MoverSet{Rows: b.s.tripRows, NaiveRows: b.s.tripNaiveRows, AddedLatencyMS: float64(b.s.tripLatency / time.Millisecond)})
	}
	for si := range sets {
		set := &sets[si]
		lat := time.Duration(set.AddedLatencyMS * float64(time.Millisecond))
		// Both sets are repeated: on a single-threaded Azurite each
		// repetition's rates vary by ±15 %, and the ratio is the median of
		// the per-repetition ratios.
		reps := b.s.moverReps
		for rep := 1; rep <= reps; rep++ {
			tag := fmt.Sprintf("+%s rep %d/%d", lat, rep, reps)
			raw, err := b.moverRaw(ctx, set.Rows, res.Concurrency, lat)
			if err != nil {
				return fmt.Errorf("raw enqueue: %w", err)
			}
			set.Raw = append(set.Raw, raw)
			b.logf(name, "%s raw ceiling: %d enqueues in %.2fs = %.0f/s (CPU: bench %.1fs, Azurite %.1fs)", tag, raw.N, raw.Seconds, raw.PerSec, raw.ClientCPU, raw.ServerCPU)

			mv, reqs, tableTime, err := b.moverMover(ctx, set.Rows, lat)
			if err != nil {
				return fmt.Errorf("mover: %w", err)
			}
			set.Mover = append(set.Mover, mv)
			set.MoverTableSeconds = append(set.MoverTableSeconds, tableTime.Seconds())
			if lat == 0 {
				res.MoverRequests = reqs
			}
			b.logf(name, "%s mover: %d rows in %.2fs = %.0f rows/s (%.0f%% of raw); %.2fs in table calls (CPU: bench %.1fs, Azurite %.1fs)", tag, mv.N, mv.Seconds, mv.PerSec, 100*mv.PerSec/raw.PerSec, tableTime.Seconds(), mv.ClientCPU, mv.ServerCPU)

			nv, err := b.moverNaive(ctx, set.Rows, set.NaiveRows, lat)
			if err != nil {
				return fmt.Errorf("naive: %w", err)
			}
			set.Naive = append(set.Naive, nv)
			b.logf(name, "%s naive: %d of %d rows in %.2fs = %.0f rows/s", tag, nv.N, set.Rows, nv.Seconds, nv.PerSec)
		}
		r, m, n := results.MedianRate(set.Raw), results.MedianRate(set.Mover), results.MedianRate(set.Naive)
		b.logf(name, "+%s medians: raw %.0f/s, mover %.0f rows/s (%.0f%% of raw, %.1fx naive), naive %.0f rows/s", lat, r, m, 100*m/r, m/n, n)
	}
	res.Sets = sets
	return results.Write(b.out, results.MoverFile, res)
}

// moverRaw measures the raw ceiling on a fresh Azurite.
func (b *bench) moverRaw(ctx context.Context, n, conc int, lat time.Duration) (results.Rate, error) {
	srv, err := b.startAzurite(ctx, "mover")
	if err != nil {
		return results.Rate{}, err
	}
	defer srv.Stop()
	sc, err := clientsWith(srv, nil, lat)
	if err != nil {
		return results.Rate{}, err
	}
	if err := sc.EnsureQueue(ctx, workQueue); err != nil {
		return results.Rate{}, err
	}
	cpu := startCPU(srv.Dir())
	r, err := rawEnqueue(ctx, sc.Queue.NewQueueClient(workQueue), n, conc, nil)
	r.ClientCPU, r.ServerCPU = cpu.stop()
	return r, err
}

// moverMover runs schedule.Mover in-process over n due rows until all are
// moved, on a fresh Azurite. It returns the rate and the mover's storage
// requests.
func (b *bench) moverMover(ctx context.Context, n int, lat time.Duration) (results.Rate, map[string]int64, time.Duration, error) {
	srv, err := b.startAzurite(ctx, "mover")
	if err != nil {
		return results.Rate{}, nil, 0, err
	}
	defer srv.Stop()
	setup, err := clients(srv, nil)
	if err != nil {
		return results.Rate{}, nil, 0, err
	}
	t0 := time.Now()
	if err := insertDueRows(ctx, setup, n, time.Now()); err != nil {
		return results.Rate{}, nil, 0, err
	}
	if err := setup.EnsureQueue(ctx, workQueue); err != nil {
		return results.Rate{}, nil, 0, err
	}
	if err := setup.EnsureQueue(ctx, queue.DefaultPoisonQueue); err != nil {
		return results.Rate{}, nil, 0, err
	}
	b.logf("mover", "inserted %d due rows in %s", n, time.Since(t0).Round(time.Millisecond))

	counter := storage.NewCounter()
	tbl := &timedTable{}
	sc, err := storage.New(storage.Config{ConnectionString: srv.ConnectionString(), Counter: counter,
		Transport: tbl.wrap(slowTransport{c: sdkLikeClient, d: lat}, tablePort(srv))})
	if err != nil {
		return results.Rate{}, nil, 0, err
	}
	sched, err := schedule.NewAzure(sc.Table, schedule.Options{Table: scheduleTable, Logger: quietLogger("mover")})
	if err != nil {
		return results.Rate{}, nil, 0, err
	}
	qc, err := queue.NewClient(sc.Queue, queue.ClientOptions{Logger: quietLogger("mover")})
	if err != nil {
		return results.Rate{}, nil, 0, err
	}
	cpu := startCPU(srv.Dir())
	p := newProgress(100 * time.Millisecond)
	all := make(chan struct{})
	var once sync.Once
	m, err := schedule.NewMover(sched, schedule.MoverOptions{
		Generation: func() int64 { return 1 },
		Enqueuer:   qc,
		SetAside:   qc,
		Logger:     quietLogger("mover"),
		OnMoved: func(_ context.Context, envs []queue.Envelope) {
			if p.n.Add(int64(len(envs))) >= int64(n) {
				once.Do(func() { close(all) })
			}
		},
	})
	if err != nil {
		return results.Rate{}, nil, 0, err
	}
	mctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- m.Run(mctx) }()
	limit := time.NewTimer(10 * time.Minute)
	defer limit.Stop()
	var runErr error
	select {
	case <-all:
	case runErr = <-done:
		if runErr == nil {
			runErr = ctx.Err()
		}
	case <-limit.C:
		runErr = fmt.Errorf("moved %d of %d rows within 10 minutes", p.n.Load(), n)
	}
	pts, d := p.finish()
	ccpu, scpu := cpu.stop()
	cancel()
	if runErr == nil {
		runErr = <-done
	}
	if runErr != nil {
		return results.Rate{}, nil, 0, runErr
	}
	st := m.Stats()
	if st.Moved != int64(n) || st.Errors != 0 {
		return results.Rate{}, nil, 0, fmt.Errorf("mover stats: moved %d of %d, %d errors", st.Moved, n, st.Errors)
	}
	qd, err := depth(ctx, setup.Queue.NewQueueClient(workQueue))
	if err != nil {
		return results.Rate{}, nil, 0, err
	}
	if qd != n {
		return results.Rate{}, nil, 0, fmt.Errorf("queue holds %d messages after moving %d rows", qd, n)
	}
	_, reqs := counter.ByOp()
	r := results.NewRate(n, d, pts)
	r.ClientCPU, r.ServerCPU = ccpu, scpu
	return r, reqs, tbl.spent(), nil
}

// moverNaive measures the naive design of the seed on a fresh Azurite: read
// the due rows, then for each row one enqueue followed by one delete,
// sequentially. The table holds total rows; the first n are moved.
func (b *bench) moverNaive(ctx context.Context, total, n int, lat time.Duration) (results.Rate, error) {
	srv, err := b.startAzurite(ctx, "mover")
	if err != nil {
		return results.Rate{}, err
	}
	defer srv.Stop()
	setup, err := clients(srv, nil)
	if err != nil {
		return results.Rate{}, err
	}
	now := time.Now()
	if err := insertDueRows(ctx, setup, total, now); err != nil {
		return results.Rate{}, err
	}
	sc, err := clientsWith(srv, nil, lat)
	if err != nil {
		return results.Rate{}, err
	}
	if err := sc.EnsureQueue(ctx, workQueue); err != nil {
		return results.Rate{}, err
	}
	tc := sc.Table.NewClient(scheduleTable)
	qc := sc.Queue.NewQueueClient(workQueue)

	cpu := startCPU(srv.Dir())
	p := newProgress(100 * time.Millisecond)
	filter := fmt.Sprintf("PartitionKey eq '%s' and RowKey lt '%s'", schedule.DefaultShard, schedule.TickPrefix(now.Add(time.Second)))
	pager := tc.NewListEntitiesPager(&aztables.ListEntitiesOptions{Filter: &filter, Top: to.Ptr(int32(min(n, 1000)))})
	moved := 0
	for moved < n && pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			return results.Rate{}, storage.Translate(err)
		}
		for _, raw := range page.Entities {
			if moved >= n {
				break
			}
			var e aztables.EDMEntity
			if err := e.UnmarshalJSON(raw); err != nil {
				return results.Rate{}, err
			}
			if _, err := qc.EnqueueMessage(ctx, envelopeText(moved, now), &azqueue.EnqueueMessageOptions{TimeToLive: to.Ptr(int32(-1))}); err != nil {
				return results.Rate{}, storage.Translate(err)
			}
			etag := azcore.ETag(e.ETag)
			if _, err := tc.DeleteEntity(ctx, e.PartitionKey, e.RowKey, &aztables.DeleteEntityOptions{IfMatch: &etag}); err != nil {
				return results.Rate{}, storage.Translate(err)
			}
			moved++
			p.n.Add(1)
		}
	}
	pts, d := p.finish()
	if moved != n {
		return results.Rate{}, fmt.Errorf("naive moved %d of %d rows", moved, n)
	}
	r := results.NewRate(n, d, pts)
	r.ClientCPU, r.ServerCPU = cpu.stop()
	return r, nil
}

// timedTable measures the time spent in requests to the table service.
type timedTable struct {
	mu sync.Mutex
	d  time.Duration
}

// tablePort is the port of srv's table service.
func tablePort(srv *azurite.Server) string {
	_, _, p := srv.Ports()
	return strconv.Itoa(p)
}

// wrap returns next, timing the requests to the table service's port.
func (t *timedTable) wrap(next policy.Transporter, port string) policy.Transporter {
	return transportFunc(func(r *http.Request) (*http.Response, error) {
		if r.URL.Port() != port {
			return next.Do(r)
		}
		defer t.add(time.Now())
		return next.Do(r)
	})
}

// transportFunc adapts a function to policy.Transporter.
type transportFunc func(*http.Request) (*http.Response, error)

func (f transportFunc) Do(r *http.Request) (*http.Response, error) { return f(r) }

func (t *timedTable) add(t0 time.Time) {
	t.mu.Lock()
	t.d += time.Since(t0)
	t.mu.Unlock()
}

func (t *timedTable) spent() time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.d
}
