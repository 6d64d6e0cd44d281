package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azqueue"

	"github.com/leasecron/leasecron/azurite"
	"github.com/leasecron/leasecron/internal/storage"
	"github.com/leasecron/leasecron/internal/table"
	"github.com/leasecron/leasecron/queue"
	"github.com/leasecron/leasecron/schedule"
	"github.com/leasecron/leasecron/tools/bench/results"
)

// Resource names the scenarios use (leasecron's defaults).
const (
	workQueue     = queue.DefaultQueue
	scheduleTable = schedule.DefaultTable
	noopType      = "noop"
)

// startAzurite starts a fresh Azurite (a new data directory) for one
// scenario or measurement.
func (b *bench) startAzurite(ctx context.Context, scenario string) (*azurite.Server, error) {
	t0 := time.Now()
	srv, err := azurite.Start(ctx, azurite.Options{})
	if err != nil {
		return nil, fmt.Errorf("start azurite: %w", err)
	}
	b.logf(scenario, "fresh Azurite up in %s (%s)", time.Since(t0).Round(time.Millisecond), srv.Dir())
	return srv, nil
}

// clients returns storage clients for srv, counting requests in counter
// when it is not nil.
func clients(srv *azurite.Server, counter *storage.Counter) (*storage.Clients, error) {
	return clientsWith(srv, counter, 0)
}

// clientsWith is clients with lat added before every request (and retry):
// Azurite answers in about a millisecond, a storage account in the cloud
// in several.
func clientsWith(srv *azurite.Server, counter *storage.Counter, lat time.Duration) (*storage.Clients, error) {
	cfg := storage.Config{ConnectionString: srv.ConnectionString(), Counter: counter}
	if lat > 0 {
		cfg.Transport = slowTransport{c: sdkLikeClient, d: lat}
	}
	return storage.New(cfg)
}

// sdkLikeClient pools connections as the Azure SDK's default client does
// (100 idle, 10 per host).
var sdkLikeClient = func() *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns, tr.MaxIdleConnsPerHost, tr.IdleConnTimeout = 100, 10, 90*time.Second
	return &http.Client{Transport: tr}
}()

// slowTransport delays every request by d, then sends it with c.
type slowTransport struct {
	c *http.Client
	d time.Duration
}

func (t slowTransport) Do(r *http.Request) (*http.Response, error) {
	if err := hold(r, t.d); err != nil {
		return nil, err
	}
	return t.c.Do(r)
}

// hold waits d, or until r's context ends.
func hold(r *http.Request, d time.Duration) error {
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-r.Context().Done():
		return r.Context().Err()
	case <-tm.C:
		return nil
	}
}

// quietLogger logs warnings and errors only, with the scenario's name.
func quietLogger(scenario string) *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})).With("scenario", scenario)
}

// envelopeText is a queue message as the mover would send it for task i.
func envelopeText(i int, now time.Time) string {
	env := queue.Envelope{
		V: queue.EnvelopeVersion, ID: fmt.Sprintf("task-%06d", i), Type: noopType,
		Payload: fmt.Sprintf(`{"n":%d}`, i), Due: now.UTC(), Enqueued: now.UTC(), Generation: 1,
	}
	text, _ := env.Encode()
	return text
}

// progress counts finished items and samples the count over time.
type progress struct {
	n     atomic.Int64
	start time.Time
	mu    sync.Mutex
	pts   []results.Point
	stop  chan struct{}
	done  chan struct{}
}

// newProgress starts sampling every interval.
func newProgress(interval time.Duration) *progress {
	p := &progress{start: time.Now(), stop: make(chan struct{}), done: make(chan struct{})}
	p.pts = append(p.pts, results.Point{})
	go func() {
		defer close(p.done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-p.stop:
				return
			case <-t.C:
				p.sample()
			}
		}
	}()
	return p
}

func (p *progress) sample() {
	p.mu.Lock()
	p.pts = append(p.pts, results.Point{X: time.Since(p.start).Seconds(), Y: float64(p.n.Load())})
	p.mu.Unlock()
}

// set records an externally observed count (queue depth polling).
func (p *progress) set(n int64) { p.n.Store(n) }

// finish stops sampling, adds a final sample and returns the samples and
// the wall time since the start.
func (p *progress) finish() ([]results.Point, time.Duration) {
	close(p.stop)
	<-p.done
	p.sample()
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pts, time.Since(p.start)
}

// parallel runs f(0..n-1) with conc goroutines and returns the first
// error.
func parallel(ctx context.Context, n, conc int, f func(i int) error) error {
	var next atomic.Int64
	var firstErr error
	var once sync.Once
	var wg sync.WaitGroup
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n || ctx.Err() != nil {
					return
				}
				if err := f(i); err != nil {
					once.Do(func() { firstErr = err })
					return
				}
			}
		}()
	}
	wg.Wait()
	if firstErr == nil {
		firstErr = ctx.Err()
	}
	return firstErr
}

// rawEnqueue sends n messages with conc goroutines using the plain SDK
// (time-to-live −1, as leasecron sends them). visibility(i) is message i's
// initial invisibility in seconds (nil: visible at once). It returns the
// rate.
func rawEnqueue(ctx context.Context, qc *azqueue.QueueClient, n, conc int, visibility func(i int) int32) (results.Rate, error) {
	now := time.Now()
	texts := make([]string, n)
	for i := range texts {
		texts[i] = envelopeText(i, now)
	}
	p := newProgress(100 * time.Millisecond)
	err := parallel(ctx, n, conc, func(i int) error {
		o := &azqueue.EnqueueMessageOptions{TimeToLive: to.Ptr(int32(-1))}
		if visibility != nil {
			if v := visibility(i); v > 0 {
				o.VisibilityTimeout = to.Ptr(v)
			}
		}
		if _, err := qc.EnqueueMessage(ctx, texts[i], o); err != nil {
			return fmt.Errorf("enqueue: %w", storage.Translate(err))
		}
		p.n.Add(1)
		return nil
	})
	pts, d := p.finish()
	return results.NewRate(n, d, pts), err
}

// depth returns the queue's approximate message count (visible or not).
func depth(ctx context.Context, qc *azqueue.QueueClient) (int, error) {
	r, err := qc.GetProperties(ctx, nil)
	if err != nil {
		return 0, storage.Translate(err)
	}
	if r.ApproximateMessagesCount == nil {
		return 0, errors.New("queue properties without a message count")
	}
	return int(*r.ApproximateMessagesCount), nil
}

// waitDrained polls the queue depth every 100 ms until it is 0, feeding
// total − depth into p. It gives up after limit.
func waitDrained(ctx context.Context, qc *azqueue.QueueClient, total int, p *progress, limit time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	for {
		d, err := depth(ctx, qc)
		if err == nil {
			p.set(int64(total - d))
			if d == 0 {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("queue not drained within %s (%d of %d done): %w", limit, p.n.Load(), total, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// insertDueRows writes n due rows of type noop into shard "00" of the
// ScheduledItems table in transactions of 100, several at a time, as a
// program in any language could (RowKey {ticks:D19}_{id}, Message, Type).
// Row i is due at due − (n−i) ms, so the oldest comes first.
func insertDueRows(ctx context.Context, sc *storage.Clients, n int, due time.Time) error {
	if err := sc.EnsureTable(ctx, scheduleTable); err != nil {
		return err
	}
	tc := sc.Table.NewClient(scheduleTable)
	var batches [][]aztables.TransactionAction
	var acts []aztables.TransactionAction
	for i := range n {
		id := fmt.Sprintf("task-%06d", i)
		rk, err := schedule.RowKey(due.Add(-time.Duration(n-i)*time.Millisecond), id)
		if err != nil {
			return err
		}
		b, _ := json.Marshal(map[string]any{
			"PartitionKey": schedule.DefaultShard, "RowKey": rk,
			schedule.PropMessage: fmt.Sprintf(`{"n":%d}`, i), schedule.PropType: noopType, schedule.PropID: id,
		})
		acts = append(acts, aztables.TransactionAction{ActionType: aztables.TransactionTypeAdd, Entity: b})
		if len(acts) == table.MaxOps || i == n-1 {
			batches = append(batches, acts)
			acts = nil
		}
	}
	return parallel(ctx, len(batches), 8, func(i int) error {
		if _, err := tc.SubmitTransaction(ctx, batches[i], nil); err != nil {
			return fmt.Errorf("insert rows: %w", storage.Translate(err))
		}
		return nil
	})
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// mkdirFresh empties and creates dir.
func mkdirFresh(dir string) error {
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	return os.MkdirAll(dir, 0o755)
}

// latencyProxy puts a reverse proxy in front of each of srv's services
// that holds every request for d before passing it on, the round trip of a
// storage account in the cloud, for processes that cannot be given a slow
// transport. It returns the connection string of the proxies; they close
// when ctx ends.
func latencyProxy(ctx context.Context, srv *azurite.Server, d time.Duration) (string, error) {
	blob, queue, table := srv.Ports()
	var ports []int
	for _, p := range []int{blob, queue, table} {
		target, err := url.Parse(fmt.Sprintf("http://127.0.0.1:%d", p))
		if err != nil {
			return "", err
		}
		rp := httputil.NewSingleHostReverseProxy(target)
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConnsPerHost = 256
		rp.Transport = delayedTrip{rt: tr, d: d}
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return "", err
		}
		s := &http.Server{Handler: rp, ReadHeaderTimeout: time.Minute}
		go func() { _ = s.Serve(l) }()
		context.AfterFunc(ctx, func() { _ = s.Close() })
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return azurite.ConnectionString("127.0.0.1", ports[0], ports[1], ports[2]), nil
}

// delayedTrip holds each request for d, then sends it with rt.
type delayedTrip struct {
	rt http.RoundTripper
	d  time.Duration
}

func (t delayedTrip) RoundTrip(r *http.Request) (*http.Response, error) {
	if err := hold(r, t.d); err != nil {
		return nil, err
	}
	return t.rt.RoundTrip(r)
}
