package runs

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/leasecron/leasecron/internal/clock"
	"github.com/leasecron/leasecron/internal/storage"
	"github.com/leasecron/leasecron/internal/table"
)

// gatedTable holds every transaction until the test lets it through, so
// that callers pile up behind the first one as they do behind a slow
// request.
type gatedTable struct {
	table.Table
	gate chan struct{}
	mu   sync.Mutex
	txns []int // operations per transaction, in order
}

func (g *gatedTable) Submit(ctx context.Context, ops []table.Op) ([]string, error) {
	<-g.gate
	g.mu.Lock()
	g.txns = append(g.txns, len(ops))
	g.mu.Unlock()
	return g.Table.Submit(ctx, ops)
}

func insertOps(pk string, keys ...string) []table.Op {
	var ops []table.Op
	for _, k := range keys {
		ops = append(ops, table.Op{Kind: table.Insert, PartitionKey: pk, RowKey: k, Props: table.Props{"K": k}})
	}
	return ops
}

// submitAll submits each call's ops, in order, while the first is held at
// the gate, waits until all the others wait behind it, lets the
// transactions through and returns each caller's error.
func submitAll(t *testing.T, g *grouper, gt *gatedTable, calls [][]table.Op) []error {
	t.Helper()
	errs := make([]error, len(calls))
	var wg sync.WaitGroup
	waiting := func() int {
		g.mu.Lock()
		defer g.mu.Unlock()
		if q := g.parts[calls[0][0].PartitionKey]; q != nil && q.busy > 0 {
			return len(q.waiting)
		}
		return -1
	}
	for i := range calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = g.submit(context.Background(), calls[i])
		}()
		// The first is taken at once (and held at the gate); each other
		// joins the queue behind it in turn.
		waitUntil(t, func() bool { return waiting() == i })
	}
	close(gt.gate)
	wg.Wait()
	return errs
}

func waitUntil(t *testing.T, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 10 s")
		}
		time.Sleep(time.Millisecond)
	}
}

// Callers that arrive while a transaction is on its way share the next
// one; each gets its own outcome, a failed condition included; rows that
// appear twice and transactions over maxOps are split.
func TestGrouper(t *testing.T) {
	// One lane, so that every caller after the first waits.
	newEnv := func() (*grouper, *gatedTable, *table.Memory) {
		mt := table.NewMemory("", clock.NewFake(t0))
		gt := &gatedTable{Table: mt, gate: make(chan struct{})}
		g := newGrouper(gt)
		g.lanes = 1
		return g, gt, mt
	}
	t.Run("shared", func(t *testing.T) {
		g, gt, mt := newEnv()
		var calls [][]table.Op
		for i := range 10 {
			calls = append(calls, insertOps("p0", fmt.Sprintf("a%d", i), fmt.Sprintf("b%d", i)))
		}
		for i, err := range submitAll(t, g, gt, calls) {
			if err != nil {
				t.Fatalf("call %d: %v", i, err)
			}
		}
		if fmt.Sprint(gt.txns) != "[2 18]" {
			t.Fatalf("transactions of %v operations; want the first alone, then the other nine together", gt.txns)
		}
		if n := mt.Len("p0"); n != 20 {
			t.Fatalf("%d rows written, want 20", n)
		}
	})
	t.Run("a failed condition is its caller's alone", func(t *testing.T) {
		g, gt, mt := newEnv()
		if err := submit(context.Background(), mt, insertOps("p0", "taken")); err != nil {
			t.Fatal(err)
		}
		calls := [][]table.Op{insertOps("p0", "x0"), insertOps("p0", "x1"), insertOps("p0", "taken"), insertOps("p0", "x3")}
		errs := submitAll(t, g, gt, calls)
		for i, err := range errs {
			if want := i == 2; errors.Is(err, storage.ErrAlreadyExists) != want || (!want && err != nil) {
				t.Fatalf("call %d: %v", i, err)
			}
		}
		// The first alone; the other three together, refused; each again.
		if fmt.Sprint(gt.txns) != "[1 3 1 1 1]" {
			t.Fatalf("transactions %v", gt.txns)
		}
		for _, k := range []string{"x0", "x1", "x3"} {
			if _, err := mt.Get(context.Background(), "p0", k); err != nil {
				t.Fatalf("%s not written", k)
			}
		}
	})
	t.Run("a row twice or too many operations split", func(t *testing.T) {
		g, gt, _ := newEnv()
		big := make([]string, 60)
		for i := range big {
			big[i] = fmt.Sprintf("big%02d", i)
		}
		calls := [][]table.Op{
			insertOps("p0", "first"),
			insertOps("p0", "s1"),
			{{Kind: table.UpsertMerge, PartitionKey: "p0", RowKey: "s1", Props: table.Props{"X": "again"}}},
			insertOps("p0", big[:50]...),
			insertOps("p0", big[50:]...),
		}
		for i, err := range submitAll(t, g, gt, calls) {
			if err != nil {
				t.Fatalf("call %d: %v", i, err)
			}
		}
		// s1 twice: the merge waits for the next transaction, and the 50
		// and the 10 after it join that one (61 operations fit).
		if fmt.Sprint(gt.txns) != "[1 1 61]" {
			t.Fatalf("transactions %v", gt.txns)
		}
	})
	t.Run("over table.MaxOps", func(t *testing.T) {
		g, gt, _ := newEnv()
		var calls [][]table.Op
		calls = append(calls, insertOps("p0", "first"))
		for i := range 3 {
			var keys []string
			for j := range 40 {
				keys = append(keys, fmt.Sprintf("k%d-%02d", i, j))
			}
			calls = append(calls, insertOps("p0", keys...))
		}
		for i, err := range submitAll(t, g, gt, calls) {
			if err != nil {
				t.Fatalf("call %d: %v", i, err)
			}
		}
		if fmt.Sprint(gt.txns) != "[1 80 40]" {
			t.Fatalf("transactions %v", gt.txns)
		}
	})
}

// stuckTable holds the transactions that touch row "stuck" until the test
// lets them go, as a request retried through a storage outage.
type stuckTable struct {
	table.Table
	release chan struct{}
}

func (s *stuckTable) Submit(ctx context.Context, ops []table.Op) ([]string, error) {
	for _, o := range ops {
		if o.RowKey == "stuck" {
			<-s.release
		}
	}
	return s.Table.Submit(ctx, ops)
}

// A transaction stuck on its way holds up one lane, not its partition:
// the callers behind it go out on the others.
func TestGrouperStuckLane(t *testing.T) {
	mt := table.NewMemory("", clock.NewFake(t0))
	st := &stuckTable{Table: mt, release: make(chan struct{})}
	g := newGrouper(st)
	stuck := make(chan error, 1)
	go func() { stuck <- g.submit(context.Background(), insertOps("p0", "stuck")) }()
	waitUntil(t, func() bool {
		g.mu.Lock()
		defer g.mu.Unlock()
		q := g.parts["p0"]
		return q != nil && q.busy == 1 && len(q.waiting) == 0
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := range 20 {
		if err := g.submit(ctx, insertOps("p0", fmt.Sprintf("next%d", i))); err != nil {
			t.Fatalf("a call behind the stuck transaction: %v", err)
		}
	}
	close(st.release)
	if err := <-stuck; err != nil {
		t.Fatal(err)
	}
	if n := mt.Len("p0"); n != 21 {
		t.Fatalf("%d rows, want 21", n)
	}
}

// Claims and finishes of concurrent deliveries share transactions on the
// real service too, and every run ends recorded exactly as alone.
func TestStoreGroupedClaims(t *testing.T) {
	t.Parallel()
	e := azureEnv(t, Options{})
	ctx := context.Background()
	var mu sync.Mutex
	sizes := map[int]int{}
	e.s.group.onSubmit = func(n int) {
		mu.Lock()
		sizes[n]++
		mu.Unlock()
	}
	const n = 64
	var wg sync.WaitGroup
	before := e.requests()
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := fmt.Sprintf("g-%02d", i)
			if _, err := e.s.Claim(ctx, id, "w1", 1, time.Now().Add(time.Minute), Meta{Type: "t", Due: time.Now()}); err != nil {
				t.Error(err)
				return
			}
			if err := e.s.Finish(ctx, id, Succeeded, nil, "ok"); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	reqs := e.requests() - before
	mu.Lock()
	t.Logf("%d claims and finishes in %d requests; transactions by callers: %v", n, reqs, sizes)
	mu.Unlock()
	if reqs >= 2*n {
		t.Errorf("%d requests for %d claims and finishes: nothing was shared", reqs, n)
	}
	for i := range n {
		r, err := e.s.Get(ctx, fmt.Sprintf("g-%02d", i))
		if err != nil || r.State != Succeeded || r.OutputTail != "ok" || r.Worker != "w1" {
			t.Fatalf("g-%02d: %+v, %v", i, r, err)
		}
	}
	if problems, runs, err := e.s.Verify(ctx); err != nil || len(problems) > 0 || runs != n {
		t.Fatalf("Verify: %d runs, %v, %v", runs, problems, err)
	}
}
