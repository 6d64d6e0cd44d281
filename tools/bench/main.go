// Command bench runs leasecron's benchmark scenarios against private
// Azurites and writes one JSON record per scenario (see package results):
//
//	go run ./bench -out DIR [-quick] [-only mover,consumer,...]
//
// Scenarios: mover (mover vs the raw enqueue ceiling and the naive
// design), consumer (consumers vs raw dequeue+delete), lateness (on-time
// delivery with and without early enqueue), failover (leader loss to first
// move), transactions (storage requests per task), idle (requests per hour
// of idle workers), footprint (worker RSS and CPU), dashboard (page render
// time and storage requests per page over a large account), batch
// (ScheduleMany against one Schedule per task), history (what run
// history listings and retention cost on a table of 100,000 records) and
// account (the consumer scenario's worker-process pairs against a real
// storage account, whose connection string LEASECRON_BENCH_ACCOUNT holds;
// left out without it). Each of the others starts a fresh Azurite. The
// count-based scenarios (transactions, idle) run alongside failover,
// which spends most of its time waiting for leases to expire.
// `go run ./bench/report` renders the records as
// docs/BENCHMARKS.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/leasecron/leasecron/tools/bench/results"
)

// scale sizes the scenarios.
type scale struct {
	moverRows, naiveRows, moverReps int
	moverLatency                    time.Duration
	slowRows, slowNaiveRows         int
	tripLatency                     time.Duration // the mover's round-trip-bound set: raw enqueues wait on this, not on Azurite
	tripRows, tripNaiveRows         int
	consumerMsgs, consumerDeep      int
	instances                       []int
	consumerConcs                   []int
	processRuns                     []bool
	processReps                     int           // interleaved repetitions of the worker-process pairs
	processLatency                  time.Duration // the proxy's delay for the latency pairs (each process count)
	accountMsgs                     int           // messages per measurement of the account scenario
	tableCostEntities               int           // entities inserted per size when measuring Azurite's table costs
	latTasks                        int
	latWindow, latSettle            time.Duration
	foLeases                        []time.Duration
	foReps                          int
	idleWarmup, idleWindow          time.Duration
	txWarmup, txBaseline            time.Duration
	txSpacing                       time.Duration
	txLone, txBurst, txSeries       int
	txSeriesWindow                  time.Duration
	fpTasks                         int
	fpIdle                          time.Duration
	historyRuns                     int
	dashPending, dashRuns, dashReps int
	batchTasks, batchSingle         int
	batchLatency                    time.Duration
	rateTasks, rateCount            int
	shardsTasks                     int
	capacityTasks                   int
	ratePer, rateIdle               time.Duration
}

var full = scale{
	moverRows: 10_000, naiveRows: 1_000, moverReps: 3, moverLatency: 10 * time.Millisecond, slowRows: 10_000, slowNaiveRows: 500,
	tripLatency: 100 * time.Millisecond, tripRows: 5_000, tripNaiveRows: 40,
	consumerMsgs: 2_000, consumerDeep: 5_000, instances: []int{1, 2, 4}, consumerConcs: []int{32, 8}, processRuns: []bool{true, false},
	processReps: 3, processLatency: 10 * time.Millisecond, tableCostEntities: 9_000, accountMsgs: 5_000,
	latTasks: 300, latWindow: 30 * time.Second, latSettle: 10 * time.Second,
	foLeases: []time.Duration{15 * time.Second, 60 * time.Second}, foReps: 3,
	idleWarmup: 60 * time.Second, idleWindow: 4 * time.Minute,
	txWarmup: 60 * time.Second, txBaseline: 60 * time.Second, txSpacing: 10 * time.Second,
	txLone: 6, txBurst: 300, txSeries: 100, txSeriesWindow: 30 * time.Second,
	fpTasks: 2_000, fpIdle: 12 * time.Second,
	historyRuns: 100_000,
	dashPending: 10_000, dashRuns: 100_000, dashReps: 5,
	batchTasks: 10_000, batchSingle: 1_000, batchLatency: 10 * time.Millisecond,
	rateTasks: 100, rateCount: 10, ratePer: 10 * time.Second, rateIdle: 10 * time.Second,
	shardsTasks: 600, capacityTasks: 1_000,
}

var quick = scale{
	moverRows: 1_000, naiveRows: 200, moverReps: 1, moverLatency: 10 * time.Millisecond, slowRows: 500, slowNaiveRows: 50,
	tripLatency: 100 * time.Millisecond, tripRows: 500, tripNaiveRows: 10,
	consumerMsgs: 1_000, instances: []int{1, 4}, consumerConcs: []int{32}, processRuns: []bool{true}, processReps: 1, accountMsgs: 1_000,
	latTasks: 60, latWindow: 10 * time.Second, latSettle: 4 * time.Second,
	foLeases: []time.Duration{15 * time.Second}, foReps: 1,
	idleWarmup: 10 * time.Second, idleWindow: 60 * time.Second,
	txWarmup: 10 * time.Second, txBaseline: 15 * time.Second, txSpacing: 5 * time.Second,
	txLone: 2, txBurst: 100, txSeries: 20, txSeriesWindow: 10 * time.Second,
	fpTasks: 1_000, fpIdle: 7 * time.Second,
	historyRuns: 10_000,
	dashPending: 2_000, dashRuns: 10_000, dashReps: 3,
	batchTasks: 2_000, batchSingle: 200, batchLatency: 10 * time.Millisecond,
	rateTasks: 30, rateCount: 10, ratePer: 5 * time.Second, rateIdle: 5 * time.Second,
	shardsTasks: 150, capacityTasks: 300,
}

// scenario is one benchmark: run writes its record into dir.
type scenario struct {
	name string
	run  func(ctx context.Context, b *bench) error
}

var scenarios = []scenario{
	{"mover", runMover},
	{"consumer", runConsumer},
	{"lateness", runLateness},
	{"failover", runFailover},
	{"transactions", runTransactions},
	{"idle", runIdle},
	{"footprint", runFootprint},
	{"history", runHistory},
	{"dashboard", runDashboard},
	{"batch", runBatch},
	{"rate", runRate},
	{"shards", runShards},
	{"api", runAPI},
	{"capacity", runCapacity},
	{accountScenario, runAccount},
}

// accountScenario is the one scenario that needs a storage account
// (AccountEnv) and is left out of a run without one.
const accountScenario = "account"

// concurrent are the scenarios that run together (counts and lease
// expiries; none measures throughput).
var concurrent = map[string]bool{"failover": true, "transactions": true, "idle": true}

// bench is the shared state of one run.
type bench struct {
	out   string
	quick bool
	// partial: only some scenarios were asked for (-only), so the
	// results directory keeps the others' records.
	partial bool
	// account is the connection string of the account scenario's storage
	// account ("" without one).
	account string
	s       scale
	start   time.Time
	logMu   sync.Mutex
}

// logf prints a progress line: elapsed time, scenario, message.
func (b *bench) logf(scenario, format string, args ...any) {
	b.logMu.Lock()
	defer b.logMu.Unlock()
	el := time.Since(b.start).Round(time.Second)
	fmt.Fprintf(os.Stderr, "%s [%6s] %-12s %s\n", time.Now().Format("15:04:05"), el, scenario, fmt.Sprintf(format, args...))
}

func main() {
	out := flag.String("out", "", "directory for the JSON records (required)")
	q := flag.Bool("quick", false, "smoke run: small sizes, one repetition (under 5 minutes)")
	only := flag.String("only", "", "comma-separated scenarios to run (default all): "+names())
	flag.Parse()
	if *out == "" {
		fmt.Fprintln(os.Stderr, "bench: -out DIR is required")
		flag.Usage()
		os.Exit(2)
	}
	account := accountFromEnv()
	sel, err := selectScenarios(*only, account != "")
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	b := &bench{out: *out, quick: *q, s: full, start: time.Now(), account: account, partial: *only != ""}
	if *q {
		b.s = quick
	}
	if err := b.run(ctx, sel); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func names() string {
	var n []string
	for _, s := range scenarios {
		n = append(n, s.name)
	}
	return strings.Join(n, ",")
}

// selectScenarios returns the scenarios only names (all when empty), in
// their canonical order; the account scenario runs only with an account
// (withAccount): left out of "all" without one, an error when named.
func selectScenarios(only string, withAccount bool) ([]scenario, error) {
	if only == "" {
		var out []scenario
		for _, s := range scenarios {
			if s.name != accountScenario || withAccount {
				out = append(out, s)
			}
		}
		return out, nil
	}
	want := map[string]bool{}
	for _, n := range strings.Split(only, ",") {
		want[strings.TrimSpace(n)] = true
	}
	var out []scenario
	for _, s := range scenarios {
		if want[s.name] {
			out = append(out, s)
			delete(want, s.name)
		}
	}
	for n := range want {
		return nil, fmt.Errorf("-only: unknown scenario %q (known: %s)", n, names())
	}
	for _, s := range out {
		if s.name == accountScenario && !withAccount {
			return nil, errNoAccount
		}
	}
	return out, nil
}

// run runs the selected scenarios and writes machine.json last.
func (b *bench) run(ctx context.Context, sel []scenario) error {
	if err := os.MkdirAll(b.out, 0o755); err != nil {
		return err
	}
	m := machineInfo()
	m.Quick, m.Started = b.quick, b.start
	if !b.partial && b.account == "" {
		// A whole run without an account: an account record left by an
		// earlier run would describe other code, and would decide a check.
		if err := os.Remove(filepath.Join(b.out, results.AccountFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	// A partial run (-only) into a directory with earlier records keeps
	// the other scenarios' entries.
	var prev results.Machine
	if b.partial && results.Read(b.out, results.MachineFile, &prev) == nil && prev.Quick == b.quick {
		rerun := map[string]bool{}
		for _, s := range sel {
			rerun[s.name] = true
		}
		for _, st := range prev.Scenarios {
			if !rerun[st.Name] {
				m.Scenarios = append(m.Scenarios, st)
			}
		}
		// Each scenario once, in the order of its latest re-run.
		for _, n := range prev.Rerun {
			if !rerun[n] && !slices.Contains(m.Rerun, n) {
				m.Rerun = append(m.Rerun, n)
			}
		}
		for _, s := range sel {
			m.Rerun = append(m.Rerun, s.name)
		}
		m.Started, m.LoadStart = prev.Started, prev.LoadStart
	}
	b.logf("bench", "%d cores, %s, Go %s, Azurite %s, load %s; results into %s", m.Cores, m.CPUModel, m.GoVersion, m.AzuriteVersion, m.LoadStart, b.out)

	var mu sync.Mutex
	var failed []string
	one := func(s scenario) {
		b.logf(s.name, "starting")
		t0 := time.Now()
		err := s.run(ctx, b)
		st := results.ScenarioTime{Name: s.name, Seconds: time.Since(t0).Seconds()}
		if err != nil {
			st.Error = err.Error()
			b.logf(s.name, "FAILED after %s: %v", time.Since(t0).Round(time.Second), err)
		} else {
			b.logf(s.name, "done in %s", time.Since(t0).Round(time.Second))
		}
		mu.Lock()
		m.Scenarios = append(m.Scenarios, st)
		if err != nil {
			failed = append(failed, s.name)
		}
		mu.Unlock()
	}
	var group []scenario
	flush := func() {
		var wg sync.WaitGroup
		for _, s := range group {
			wg.Add(1)
			go func() { defer wg.Done(); one(s) }()
		}
		wg.Wait()
		group = nil
	}
	for _, s := range sel {
		if ctx.Err() != nil {
			break
		}
		if concurrent[s.name] {
			group = append(group, s)
			continue
		}
		flush()
		one(s)
	}
	flush()
	m.Finished = time.Now()
	m.LoadEnd = loadAvg()
	if err := results.Write(b.out, results.MachineFile, m); err != nil {
		return err
	}
	b.logf("bench", "finished in %s", time.Since(b.start).Round(time.Second))
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if len(failed) > 0 {
		return errors.New("scenarios failed: " + strings.Join(failed, ", "))
	}
	return nil
}
