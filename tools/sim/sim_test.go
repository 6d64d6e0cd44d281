package sim

import (
	"fmt"
	"maps"
	"os"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestMain trades memory for time: a run allocates much and keeps little.
func TestMain(m *testing.M) {
	debug.SetGCPercent(400)
	os.Exit(m.Run())
}

// The fixed seeds make sim runs (and make test with it): chosen once, kept,
// so that a change that breaks a promise they exercise fails the same way
// every time; SIM_SEEDS=N runs N more from SIM_FROM (make sim-long).
// fixedAPISeeds more, the seeds after them, run with the second client
// through the HTTP API (Config.API).
const (
	fixedSeeds    = 24
	fixedAPISeeds = 4
)

// envInt reads an integer from the environment (def when unset).
func envInt(t *testing.T, name string, def int64) int64 {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		t.Fatalf("%s=%q: want a whole number", name, v)
	}
	return n
}

// seedSet is seeds [from, from+n), with the second client through the
// HTTP API when api (Config.API).
type seedSet struct {
	from, n int64
	api     bool
}

// runSeeds runs the seeds of sets two at a time, reports each failing one
// shrunk, and prints the coverage of them all.
func runSeeds(t *testing.T, sets ...seedSet) {
	from, n := sets[0].from, int64(0)
	for _, set := range sets {
		n += set.n
	}
	total := NewCoverage()
	var mu sync.Mutex
	var failed []int64
	first := map[string][]int64{} // the seeds by their first violation's invariant
	var found []string            // each failing seed's violations and fleet, as reported
	var virtual time.Duration
	tasks, done := 0, 0
	start := time.Now()
	report := os.Getenv("SIM_REPORT")
	// progress rewrites the report while a long run goes on, every 50
	// seeds: how far it got and which seeds failed so far, so that an
	// hours-long run shows where it is and a stopped one what it found.
	progress := func() {
		if report == "" || done%50 != 0 || int64(done) == n {
			return
		}
		wall := time.Since(start)
		line := fmt.Sprintf("in progress: %d of %d seeds from %d in %v, %.1f fleet-hours per wall-clock minute; %d failed %v\n",
			done, n, from, wall.Truncate(time.Second), virtual.Hours()/wall.Minutes(), len(failed), failed)
		if err := os.WriteFile(report, []byte(line+strings.Join(found, "")), 0o644); err != nil {
			t.Error(err)
		}
	}
	t.Run("seeds", func(t *testing.T) {
		for _, set := range sets {
			for seed := set.from; seed < set.from+set.n; seed++ {
				name := strconv.FormatInt(seed, 10)
				if set.api {
					name = "api-" + name
				}
				t.Run(name, func(t *testing.T) {
					t.Parallel()
					sc := Plan(seed)
					sc.API = sc.API || set.api
					res := Run(t, sc)
					var rep string // a failure's report, built once
					if res.Failed() {
						rep = Report(res, sc)
					}
					mu.Lock()
					total.Merge(res.Coverage)
					virtual += res.Virtual
					tasks += res.Tasks
					done++
					if res.Failed() {
						failed = append(failed, seed)
						first[res.Violations[0].Invariant] = append(first[res.Violations[0].Invariant], seed)
						found = append(found, headOf(rep, 12))
					}
					progress()
					mu.Unlock()
					if !res.Failed() {
						return
					}
					t.Errorf("%s", rep)
					keepLog(t, seed, res)
					if os.Getenv("SIM_SHRINK") != "0" {
						small := Shrink(t, sc, res.Violations[0].Invariant, 3, 5*time.Minute)
						t.Errorf("shrunk to %d operations and %d fault windows:\n%s", len(small.Ops), len(small.Faults), small.Describe())
					}
					t.Logf("last log lines:\n%s", strings.Join(res.Log[max(0, len(res.Log)-60):], "\n"))
				})
			}
		}
	})
	wall := time.Since(start)
	var b strings.Builder
	total.Print(&b)
	fmt.Fprintf(&b, "%d seeds in %v: %d tasks, %v of fleet time (%.1f fleet-hours per wall-clock minute); %d failed %v\n",
		n, wall.Truncate(time.Second), tasks, virtual.Truncate(time.Second), virtual.Hours()/wall.Minutes(), len(failed), failed)
	for _, inv := range slices.Sorted(maps.Keys(first)) {
		fmt.Fprintf(&b, "  first violated %q: %d %v\n", inv, len(first[inv]), first[inv])
	}
	b.WriteString(strings.Join(found, ""))
	t.Log("\n" + b.String())
	if report != "" {
		if err := os.WriteFile(report, []byte(b.String()), 0o644); err != nil {
			t.Error(err)
		}
	}
}

// headOf returns the first n lines of a report (its violations, the
// replay line and the fleet), ending in a newline.
func headOf(report string, n int) string {
	lines := strings.SplitAfterN(report, "\n", n+1)
	head := strings.Join(lines[:min(n, len(lines))], "")
	if !strings.HasSuffix(head, "\n") {
		head += "\n"
	}
	return head
}

// TestSim runs the fixed seeds (make sim; SIM_FIXED=n the first n, and
// SIM_FIXED_API=n the first n of the API seeds), or SIM_SEED alone. It is CPU-bound on both cores: make test runs it last,
// in a go test of its own after every other package (LEASECRON_SIM set
// only there), so the end-to-end timing tests stay honest.
func TestSim(t *testing.T) {
	if os.Getenv("LEASECRON_SIM") == "" && os.Getenv("SIM_SEED") == "" {
		t.Skip("long: make sim (LEASECRON_SIM=1) runs the fixed seeds, make sim SEED=n one")
	}
	if s := os.Getenv("SIM_SEED"); s != "" {
		// A replay: the seed's workload and faults are the same every
		// time, the interleaving of goroutines within one virtual instant
		// is Go's; SIM_TRIES runs it until it fails.
		seed := envInt(t, "SIM_SEED", 0)
		sc := Plan(seed)
		t.Log("\n" + sc.Describe())
		tries := envInt(t, "SIM_TRIES", 1)
		for try := int64(1); try <= tries; try++ {
			res := Run(t, sc)
			t.Logf("seed %d, run %d: %d storage requests, %d tasks, %v of fleet time; requests by operation: %v", seed, try, res.Coverage.Requests, res.Tasks, res.Virtual, res.Coverage.ByOp)
			if res.Failed() {
				t.Errorf("%s", Report(res, sc))
				t.Logf("last log lines:\n%s", strings.Join(res.Log, "\n"))
				if os.Getenv("SIM_SHRINK") != "0" {
					small := Shrink(t, sc, res.Violations[0].Invariant, 3, 10*time.Minute)
					t.Errorf("shrunk to %d operations and %d fault windows:\n%s", len(small.Ops), len(small.Faults), small.Describe())
				}
				return
			}
		}
		return
	}
	runSeeds(t, seedSet{from: 1, n: envInt(t, "SIM_FIXED", fixedSeeds)},
		seedSet{from: fixedSeeds + 1, n: envInt(t, "SIM_FIXED_API", fixedAPISeeds), api: true})
}

// TestSimLong runs SIM_SEEDS seeds from SIM_FROM (make sim-long).
func TestSimLong(t *testing.T) {
	n := envInt(t, "SIM_SEEDS", 0)
	if n == 0 {
		t.Skip("SIM_SEEDS not set: make sim-long SEEDS=N runs N seeds")
	}
	runSeeds(t, seedSet{from: envInt(t, "SIM_FROM", 1000), n: n})
}
