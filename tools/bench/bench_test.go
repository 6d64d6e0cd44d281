package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/runtime"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/service"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azqueue"

	"github.com/leasecron/leasecron/azurite"
	"github.com/leasecron/leasecron/internal/runs"
	"github.com/leasecron/leasecron/internal/storage"
	"github.com/leasecron/leasecron/tools/bench/results"
)

func TestCPUModelAndMemory(t *testing.T) {
	cpuinfo := "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 7B13 64-Core Processor\nflags\t\t: fpu\n\nprocessor\t: 1\nmodel name\t: AMD EPYC 7B13 64-Core Processor\n"
	if got := cpuModel(cpuinfo); got != "AMD EPYC 7B13 64-Core Processor" {
		t.Errorf("cpuModel = %q", got)
	}
	if got := cpuModel("processor: 0\n"); got != "unknown" {
		t.Errorf("cpuModel without a model = %q", got)
	}
	if got := memTotalMiB("MemTotal:       24684084 kB\nMemFree:        21902000 kB\n"); got != 24105 {
		t.Errorf("memTotalMiB = %d, want 24105", got)
	}
}

func TestParseProc(t *testing.T) {
	status := "Name:\tleasecron\nVmPeak:\t 1642968 kB\nVmHWM:\t   23860 kB\nVmRSS:\t   19276 kB\nThreads:\t9\n"
	rss, hwm := parseStatus(status)
	if rss != 19276 || hwm != 23860 {
		t.Errorf("parseStatus = %d, %d", rss, hwm)
	}
	// A command name with spaces and a parenthesis must not shift fields;
	// utime is 150 ticks and stime 29.
	stat := "4242 (my (odd) proc) S 1 4242 4242 0 -1 4194560 2411 0 0 0 150 29 0 0 20 0 9 0 1234 1642968 4819 18446744073709551615"
	cpu, err := parseStatCPU(stat)
	if err != nil {
		t.Fatal(err)
	}
	if cpu != 1.79 {
		t.Errorf("parseStatCPU = %v, want 1.79", cpu)
	}
	if _, err := parseStatCPU("4242 (short) S 1"); err == nil {
		t.Error("a truncated stat line parsed")
	}
	// This process: readable, with some RSS.
	u, err := readProc(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if u.RSSKiB <= 0 || u.HWMKiB < u.RSSKiB {
		t.Errorf("readProc(self) = %+v", u)
	}
}

func TestSelectScenarios(t *testing.T) {
	all, err := selectScenarios("", true)
	if err != nil || len(all) != len(scenarios) {
		t.Fatalf("all: %d, %v", len(all), err)
	}
	// Without an account, "all" leaves the account scenario out and
	// naming it is an error that says what to set.
	all, err = selectScenarios("", false)
	if err != nil || len(all) != len(scenarios)-1 || slices.ContainsFunc(all, func(s scenario) bool { return s.name == accountScenario }) {
		t.Fatalf("all without an account: %d, %v", len(all), err)
	}
	if _, err := selectScenarios("consumer,account", false); !errors.Is(err, errNoAccount) || !strings.Contains(err.Error(), AccountEnv) {
		t.Errorf("account without one: %v", err)
	}
	sel, err := selectScenarios("idle, mover", false)
	if err != nil {
		t.Fatal(err)
	}
	if len(sel) != 2 || sel[0].name != "mover" || sel[1].name != "idle" {
		t.Errorf("selection keeps the canonical order: got %v", []string{sel[0].name, sel[1].name})
	}
	if _, err := selectScenarios("mover,nope", false); err == nil || !strings.Contains(err.Error(), `"nope"`) {
		t.Errorf("unknown scenario: %v", err)
	}
}

// tiny sizes the scenarios for tests.
var tiny = scale{
	moverRows: 150, naiveRows: 20, moverReps: 1, moverLatency: 5 * time.Millisecond, slowRows: 60, slowNaiveRows: 10,
	tripLatency: 20 * time.Millisecond, tripRows: 60, tripNaiveRows: 5,
	consumerMsgs: 120, instances: []int{1, 2}, consumerConcs: []int{32}, tableCostEntities: 120, accountMsgs: 60,
	txWarmup: time.Second, txBaseline: 2 * time.Second, txSpacing: 3 * time.Second,
	txLone: 2, txBurst: 20, txSeries: 3, txSeriesWindow: 7 * time.Second, // > mover.poll_every
	idleWarmup: time.Second, idleWindow: 3 * time.Second,
	dashPending: 200, dashRuns: 300, dashReps: 1,
	batchTasks: 250, batchSingle: 20, batchLatency: 5 * time.Millisecond,
	rateTasks: 12, rateCount: 5, ratePer: 2 * time.Second, rateIdle: 4 * time.Second,
	shardsTasks: 20,
}

// needAzurite skips when Azurite is not installed, unless
// LEASECRON_REQUIRE_AZURITE is set.
func needAzurite(t *testing.T) {
	t.Helper()
	if _, err := azurite.FindBinary(""); errors.Is(err, azurite.ErrNotInstalled) {
		if os.Getenv("LEASECRON_REQUIRE_AZURITE") != "" {
			t.Fatalf("LEASECRON_REQUIRE_AZURITE is set: %v", err)
		}
		t.Skip(err)
	}
}

// scenarioCtx bounds one parallel subtest from when it starts running:
// a deadline shared by all of them would also count the time each waits
// for a free slot, which grows with the other parallel tests of the
// package on a small machine.
func scenarioCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func tinyBench(t *testing.T) *bench {
	return &bench{out: t.TempDir(), s: tiny, start: time.Now()}
}

// TestScenariosOnAzurite runs the in-process scenarios at tiny sizes
// against real Azurites and checks their records.
func TestScenariosOnAzurite(t *testing.T) {
	needAzurite(t)
	t.Parallel()

	t.Run("dashboard", func(t *testing.T) {
		t.Parallel()
		ctx := scenarioCtx(t)
		b := tinyBench(t)
		if err := runDashboard(ctx, b); err != nil {
			t.Fatal(err)
		}
		var d results.Dashboard
		if err := results.Read(b.out, results.DashboardFile, &d); err != nil {
			t.Fatal(err)
		}
		byPath := map[string]results.DashboardPage{}
		for _, p := range d.Pages {
			byPath[p.Path] = p
			if p.MS.N != 1 || p.Bytes == 0 {
				t.Errorf("%s: %+v", p.Path, p)
			}
		}
		// A page of pending tasks is one query however many are pending;
		// the overview's reads are fixed (4 slots of one limited type, the
		// presence listing, the counters and latency charts' minute rows: a
		// query per day partition, the queues made on the first view).
		if p := byPath["/tasks"]; p.Requests != 1 {
			t.Errorf("/tasks: %d requests %v, want 1", p.Requests, p.ByOp)
		}
		// Minute rows are read a query per day partition: the last hour's
		// span two in the first hour of a UTC day, the last 24 hours'
		// three in its last minute (the page was measured within the last
		// minute).
		beyond := func(at time.Time) int { return runs.ExtraDayPartitions(at, time.Hour, 24*time.Hour) }
		extra := int64(max(beyond(time.Now().Add(-time.Minute)), beyond(time.Now())))
		// 18, and since named queues the queues section's listing, a
		// count per work queue and a presence listing (3 here).
		if p := byPath["/"]; p.Requests < 6 || p.Requests > 21+extra {
			t.Errorf("/: %d requests %v, want 6 to %d", p.Requests, p.ByOp, 21+extra)
		}
		if d.BaselineMS <= 0 || d.CachedMS <= 0 {
			t.Errorf("baseline %v, cached %v", d.BaselineMS, d.CachedMS)
		}
	})

	t.Run("shards", func(t *testing.T) {
		t.Parallel()
		ctx := scenarioCtx(t)
		b := tinyBench(t)
		if err := runShards(ctx, b); err != nil {
			t.Fatal(err)
		}
		var r results.Shards
		if err := results.Read(b.out, results.ShardsFile, &r); err != nil {
			t.Fatal(err)
		}
		if len(r.Cases) != 6 {
			t.Fatalf("cases %+v", r.Cases)
		}
		for _, c := range r.Cases {
			if c.Tasks != 20 || c.PerSecond <= 0 || c.Requests == 0 || (c.Design != "single lease") != (c.Shards == 8 && c.Queues == 4) {
				t.Errorf("case %+v", c)
			}
		}
	})

	t.Run("rate", func(t *testing.T) {
		t.Parallel()
		ctx := scenarioCtx(t)
		b := tinyBench(t)
		if err := runRate(ctx, b); err != nil {
			t.Fatal(err)
		}
		var r results.RateLimit
		if err := results.Read(b.out, results.RateFile, &r); err != nil {
			t.Fatal(err)
		}
		if len(r.Cases) != 2 || r.Cases[0].Limit != "" || r.Cases[1].Limit != "5/2s" {
			t.Fatalf("cases %+v", r.Cases)
		}
		base, lim := r.Cases[0], r.Cases[1]
		// The limited run had to wait for its budget (12 tasks at 5 per
		// 2 s: two windows at least) and put tasks back; each start read
		// and wrote the rate row (a point read per start at least, which
		// the idle workers' reads only add to), so it costs more than an
		// unlimited one. The idle rate subtracted is measured over 4 s: over
		// 1 s, a lease renewal or counter flush caught in it made the idle
		// rate, times the limited run's 8 s, swallow the difference.
		if lim.Seconds < 4 || lim.Deferred == 0 || lim.MarginalPerTask <= base.MarginalPerTask ||
			lim.Requests["table get-entity"] < base.Requests["table get-entity"]+int64(lim.Tasks) {
			t.Errorf("limited %+v against %+v", lim, base)
		}
	})

	t.Run("mover", func(t *testing.T) {
		t.Parallel()
		ctx := scenarioCtx(t)
		b := tinyBench(t)
		if err := runMover(ctx, b); err != nil {
			t.Fatal(err)
		}
		var m results.Mover
		if err := results.Read(b.out, results.MoverFile, &m); err != nil {
			t.Fatal(err)
		}
		if len(m.Sets) != 3 || m.Sets[1].AddedLatencyMS != 5 || m.Sets[2].AddedLatencyMS != 20 {
			t.Fatalf("sets: %+v", m.Sets)
		}
		for _, s := range m.Sets {
			if len(s.Raw) != 1 || len(s.Mover) != 1 || len(s.Naive) != 1 {
				t.Fatalf("set %+v: want one repetition each", s)
			}
			if s.Mover[0].N != s.Rows || s.Mover[0].PerSec <= 0 || s.Raw[0].PerSec <= 0 || s.Naive[0].N != s.NaiveRows {
				t.Errorf("set %v: raw %+v mover %+v naive %+v", s.AddedLatencyMS, s.Raw[0], s.Mover[0], s.Naive[0])
			}
		}
		// The mover sent exactly one enqueue per row and committed the
		// deletes in batches of at most 100 rows.
		if got := m.MoverRequests["queue enqueue"]; got != 150 {
			t.Errorf("mover enqueues = %d, want 150", got)
		}
		if got := m.MoverRequests["table batch"]; got < 2 || got > 4 {
			t.Errorf("mover batches = %d, want 2 (plus the fence write)", got)
		}
	})

	t.Run("consumer", func(t *testing.T) {
		t.Parallel()
		ctx := scenarioCtx(t)
		b := tinyBench(t)
		if err := runConsumer(ctx, b); err != nil {
			t.Fatal(err)
		}
		var c results.Consumer
		if err := results.Read(b.out, results.ConsumerFile, &c); err != nil {
			t.Fatal(err)
		}
		if len(c.Rows) != 4 { // raw and queue.Consumer, 1 and 2 instances
			t.Fatalf("rows: %+v", c.Rows)
		}
		for _, r := range c.Rows {
			if r.Rate.N != 120 || r.Steady <= 0 || r.Requests["queue delete-message"] != 120 {
				t.Errorf("%s x%d: rate %+v steady %v deletes %d", r.Label, r.Instances, r.Rate, r.Steady, r.Requests["queue delete-message"])
			}
		}
		// Azurite's table costs: 120 entities in requests of 1, 3, 6, 30.
		want := map[int]int{1: 120, 3: 40, 6: 20, 30: 4}
		if len(c.TableCosts) != len(want) {
			t.Fatalf("table costs: %+v", c.TableCosts)
		}
		for _, tc := range c.TableCosts {
			if want[tc.EntitiesPerRequest] != tc.Requests || tc.AzuriteCPUSeconds < 0 {
				t.Errorf("table cost %+v", tc)
			}
		}
	})

	// The latency proxy passes requests on, each after its delay.
	t.Run("latency proxy", func(t *testing.T) {
		t.Parallel()
		ctx := scenarioCtx(t)
		b := tinyBench(t)
		srv, err := b.startAzurite(ctx, "proxy")
		if err != nil {
			t.Fatal(err)
		}
		defer srv.Stop()
		const lat = 100 * time.Millisecond
		cs, err := latencyProxy(ctx, srv, lat)
		if err != nil {
			t.Fatal(err)
		}
		sc, err := storage.New(storage.Config{ConnectionString: cs})
		if err != nil {
			t.Fatal(err)
		}
		for _, ensure := range []func(context.Context, string) error{sc.EnsureQueue, sc.EnsureTable, sc.EnsureContainer} {
			t0 := time.Now()
			if err := ensure(ctx, "proxied"); err != nil {
				t.Fatal(err)
			}
			if d := time.Since(t0); d < lat {
				t.Errorf("a request through the proxy took %s, less than its %s delay", d, lat)
			}
		}
		if _, err := sc.Queue.NewQueueClient("proxied").GetProperties(ctx, nil); err != nil {
			t.Fatalf("the queue created through the proxy: %v", err)
		}
	})

	t.Run("batch", func(t *testing.T) {
		t.Parallel()
		ctx := scenarioCtx(t)
		b := tinyBench(t)
		if err := runBatch(ctx, b); err != nil {
			t.Fatal(err)
		}
		var bt results.Batch
		if err := results.Read(b.out, results.BatchFile, &bt); err != nil {
			t.Fatal(err)
		}
		if len(bt.Cases) != 6 {
			t.Fatalf("%d cases, want 6", len(bt.Cases))
		}
		for _, c := range bt.Cases {
			// 250 tasks in one shard: 3 transactions of index rows and
			// 3 of task rows; one transaction per task one at a time.
			want := int64(c.Tasks)
			if c.Method == "batch" {
				want = 6
			}
			if c.Requests["table batch"] != want || len(c.Requests) != 1 || c.Rate.PerSec <= 0 {
				t.Errorf("%s +%v ms: %d tasks, requests %v, rate %+v; want %d transactions and nothing else", c.Method, c.AddedLatencyMS, c.Tasks, c.Requests, c.Rate, want)
			}
		}
	})

	t.Run("counts", func(t *testing.T) {
		t.Parallel()
		ctx := scenarioCtx(t)
		b := tinyBench(t)
		var wg sync.WaitGroup
		var txErr, idleErr error
		wg.Add(2)
		go func() { defer wg.Done(); txErr = runTransactions(ctx, b) }()
		go func() { defer wg.Done(); idleErr = runIdle(ctx, b) }()
		wg.Wait()
		if txErr != nil || idleErr != nil {
			t.Fatalf("transactions: %v; idle: %v", txErr, idleErr)
		}
		var tx results.Transactions
		if err := results.Read(b.out, results.TransactionsFile, &tx); err != nil {
			t.Fatal(err)
		}
		if len(tx.Cases) != 8 {
			t.Fatalf("%d cases, want 8", len(tx.Cases))
		}
		for _, c := range tx.Cases {
			// Every task is enqueued once (a duplicate would need a failed
			// write or a leader change, and nothing fails here): by the client for a task due now (with run
			// records), by the mover otherwise; for a series the client's
			// enqueue is its first occurrence's, paid once. Every message
			// is deleted exactly once: its task run, or (an occurrence the
			// mover sent just before its series was cancelled, on a loaded
			// machine) found cancelled.
			if c.Tasks <= 0 || c.Messages < c.Tasks || c.Deleted != c.Messages ||
				c.Kind == "one-off" && (c.Messages > c.Tasks*3/2 || c.Worker["queue delete-message"] > 1.1) {
				t.Errorf("%s %s runs=%v: %d tasks, %d messages, %d deleted, worker %v, client %v", c.Kind, c.Pattern, c.Runs, c.Tasks, c.Messages, c.Deleted, c.Worker, c.Client)
			}
			// One transaction writes the row and its index row; with run
			// records the client that sends a task due now records its
			// run in one more.
			wantBatches := 1.0
			if c.Runs {
				wantBatches = 2
			}
			if c.Kind == "one-off" && c.Client["table batch"] != wantBatches {
				t.Errorf("%s %s runs=%v: client batches per task %v, want %v (row + index row, and the run record)", c.Kind, c.Pattern, c.Runs, c.Client["table batch"], wantBatches)
			}
		}
		var idle results.Idle
		if err := results.Read(b.out, results.IdleFile, &idle); err != nil {
			t.Fatal(err)
		}
		roles := map[string]results.IdleRow{}
		for _, r := range idle.Rows {
			roles[r.Role] = r
		}
		if len(roles) != 7 || roles["leader-routes"].PerHour == 0 || roles["standby-routes"].PerHour == 0 {
			t.Fatalf("idle rows: %+v", idle.Rows)
		}
		// The listening leader polls every worker.listen_every; the one
		// that does not backs off like the others.
		if l, q := roles["leader"].Requests["queue dequeue"], roles["leader-nolisten"].Requests["queue dequeue"]; l < 5*q || l == 0 {
			t.Errorf("idle dequeues: listening leader %d, leader with listening off %d; want the first many times the second", l, q)
		}
		for op := range roles["consumer-only"].Requests {
			if strings.HasPrefix(op, "blob lease") || op == "table query" {
				t.Errorf("a worker that never leads made %q requests: %v", op, roles["consumer-only"].Requests)
			}
		}
	})
}

// A whole run without an account removes an account record an earlier run
// left (it would decide a check for other code); a partial run keeps it.
func TestWholeRunDropsStaleAccountRecord(t *testing.T) {
	for i, partial := range []bool{false, true} {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			b := tinyBench(t)
			b.partial = partial
			if err := results.Write(b.out, results.AccountFile, results.Consumer{Messages: 1}); err != nil {
				t.Fatal(err)
			}
			if err := b.run(context.Background(), nil); err != nil {
				t.Fatal(err)
			}
			var c results.Consumer
			err := results.Read(b.out, results.AccountFile, &c)
			if kept := err == nil; kept != partial {
				t.Errorf("partial %v: account record kept %v (%v)", partial, kept, err)
			}
		})
	}
}

// TestAccountScenario runs the account scenario against an Azurite given
// as the account: worker-process pairs on queues and tables of their own,
// all deleted afterwards.
func TestAccountScenario(t *testing.T) {
	needAzurite(t)
	t.Parallel()
	ctx := scenarioCtx(t)
	srv, err := azurite.Start(ctx, azurite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Stop() })
	b := tinyBench(t)
	b.s.processReps = 1
	if err := runAccount(ctx, b); !errors.Is(err, errNoAccount) {
		t.Fatalf("without an account: %v", err)
	}
	b.account = srv.ConnectionString()
	if err := runAccount(ctx, b); err != nil {
		t.Fatal(err)
	}
	var c results.Consumer
	if err := results.Read(b.out, results.AccountFile, &c); err != nil {
		t.Fatal(err)
	}
	// One pair (runs on, off) per process count; each drained its own
	// queue of 60 (a worker left on the default queue would never drain
	// it).
	var got []string
	for _, r := range c.Rows {
		got = append(got, fmt.Sprintf("x%d runs=%v", r.Instances, r.Runs))
		if r.Variant != results.VariantProcess || r.Rate.N != 60 || r.Rate.PerSec <= 0 || r.Steady <= 0 {
			t.Errorf("%s x%d: %+v steady %v", r.Label, r.Instances, r.Rate, r.Steady)
		}
	}
	if want := []string{"x1 runs=true", "x1 runs=false", "x2 runs=true", "x2 runs=false"}; !slices.Equal(got, want) {
		t.Errorf("rows %v, want %v", got, want)
	}
	// Nothing of the measurements is left on the account.
	sc, err := storage.New(storage.Config{ConnectionString: srv.ConnectionString()})
	if err != nil {
		t.Fatal(err)
	}
	queues, err := listAll(ctx, sc.Queue.NewListQueuesPager(&azqueue.ListQueuesOptions{Prefix: to.Ptr("lcb")}), func(p azqueue.ListQueuesResponse) (n []string) {
		for _, q := range p.Queues {
			n = append(n, *q.Name)
		}
		return n
	})
	if err != nil {
		t.Fatal(err)
	}
	tables, err := listAll(ctx, sc.Table.NewListTablesPager(nil), func(p aztables.ListTablesResponse) (n []string) {
		for _, tb := range p.Tables {
			if strings.HasPrefix(*tb.Name, "lcb") {
				n = append(n, *tb.Name)
			}
		}
		return n
	})
	if err != nil {
		t.Fatal(err)
	}
	containers, err := listAll(ctx, sc.Blob.NewListContainersPager(&service.ListContainersOptions{Prefix: to.Ptr("lcb")}), func(p service.ListContainersResponse) (n []string) {
		for _, c := range p.ContainerItems {
			n = append(n, *c.Name)
		}
		return n
	})
	if err != nil {
		t.Fatal(err)
	}
	if left := slices.Concat(queues, tables, containers); len(left) > 0 {
		t.Errorf("left on the account: %v", left)
	}
}

// listAll pages through p and returns the names each page yields.
func listAll[T any](ctx context.Context, p *runtime.Pager[T], names func(T) []string) ([]string, error) {
	var out []string
	for p.More() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, err
		}
		out = append(out, names(page)...)
	}
	return out, nil
}
