package runs

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasecron/leasecron/azurite"
	"github.com/leasecron/leasecron/azurite/azuritetest"
	"github.com/leasecron/leasecron/internal/clock"
	"github.com/leasecron/leasecron/internal/storage"
)

// seed writes runs as the layout keeps them (Import).
func seed(t testing.TB, s *Store, rs []Run) {
	t.Helper()
	n, err := s.Import(context.Background(), rs)
	if err != nil || n != len(rs) {
		t.Fatalf("Import wrote %d of %d runs: %v", n, len(rs), err)
	}
}

// history is a generated run history (Sample).
type history struct {
	base time.Time
	runs []Run
}

func (h history) newest(n int, keep func(Run) bool) []string { return Newest(h.runs, n, keep) }

func ids(rs []Run) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.ID
	}
	return out
}

// privateEnv is a Store on its own Azurite (a large table slows Azurite
// down for every other test).
func privateEnv(t *testing.T, o Options) (env, string) {
	t.Helper()
	srv := azuritetest.StartWith(t, azurite.Options{InMemory: true})
	cnt := storage.NewCounter()
	sc, err := storage.New(storage.Config{ConnectionString: srv.ConnectionString(), Counter: cnt})
	if err != nil {
		t.Fatal(err)
	}
	if o.Table == "" {
		o.Table = "Runs"
	}
	s, err := New(sc, o)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.ensure(context.Background()); err != nil {
		t.Fatal(err)
	}
	e := env{s: s, requests: cnt.Total, now: time.Now}
	if fc, ok := o.Clock.(*clock.Fake); ok {
		e.now, e.advance = fc.Now, fc.Advance
	}
	return e, srv.ConnectionString()
}

// 100,000 run records (20,000 in make test): the newest 50 failed, the running ones and a
// series' history each cost at most 5 requests and come back right and in
// order; then retention with short settings removes exactly the expired
// records, at a counted cost.
func TestHistoryAtScale(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 20,000 records")
	}
	t.Parallel()
	base := time.Now().UTC().Truncate(time.Second)
	fc := clock.NewFake(base.Add(time.Minute))
	e, _ := privateEnv(t, Options{Clock: fc}) // the default retentions: 7 and 30 days
	// make test seeds 20,000 (a page still reads the same few rows per
	// partition); make test-long the 100,000 the README's figures cite.
	n := 20_000
	if os.Getenv("LEASECRON_LONG") != "" {
		n = 100_000
	}
	if v, err := strconv.Atoi(os.Getenv("RUNS_HISTORY_N")); err == nil {
		n = v // for trying the test out quickly
	}
	h := history{base: base, runs: Sample(base, n)}
	began := time.Now()
	seed(t, e.s, h.runs)
	t.Logf("seeded %d runs in %s", n, time.Since(began).Round(time.Second))
	ctx := context.Background()

	query := func(what string, q Query, want []string) Page {
		t.Helper()
		var p Page
		cost := e.cost(func() {
			var err error
			if p, err = e.s.Query(ctx, q); err != nil {
				t.Fatalf("%s: %v", what, err)
			}
		})
		t.Logf("%s: %d runs, %d requests", what, len(p.Runs), cost)
		if cost > 5 {
			t.Errorf("%s cost %d requests, want at most 5", what, cost)
		}
		if got := strings.Join(ids(p.Runs), " "); got != strings.Join(want, " ") {
			t.Errorf("%s = %.300s…\nwant %.300s…", what, got, strings.Join(want, " "))
		}
		return p
	}
	isState := func(st State) func(Run) bool { return func(r Run) bool { return r.State == st } }
	failed := h.newest(100, isState(Failed))
	p := query("the newest 50 failed", Query{State: Failed}, failed[:50])
	query("the next 50 failed", Query{State: Failed, Continue: p.Continue}, failed[50:])
	running := h.newest(1000, isState(Running))
	query("the running ones", Query{State: Running, Limit: 1000}, running)
	series := h.newest(50, func(r Run) bool { return r.Series == "nightly" })
	query("the series' newest 50", Query{Series: "nightly"}, series)
	query("the newest 50 of any state", Query{}, h.newest(50, func(Run) bool { return true }))
	query("the newest 50 succeeded", Query{State: Succeeded}, h.newest(50, isState(Succeeded)))
	since := base.Add(-time.Hour)
	query("failed within the last hour", Query{State: Failed, Since: since, Limit: 1000},
		h.newest(1000, func(r Run) bool { return r.State == Failed && !r.Due.Before(since) }))
	if c := e.cost(func() {
		if r, err := e.s.Get(ctx, failed[0]); err != nil || r.State != Failed || r.LastError == "" {
			t.Fatalf("Get = %+v, %v", r, err)
		}
	}); c != 1 {
		t.Errorf("status of one run cost %d requests, want 1", c)
	}

	// Retention with the defaults: the history spans eight days, so the
	// succeeded and cancelled runs of its oldest day are expired; the
	// failed and dead ones (30 days) and the live ones stay. A smaller
	// history spans less: the clock moves on so that its oldest part
	// is as old.
	fc.Advance(time.Duration(100_000-min(n, 100_000)) * 7 * time.Second)
	now := fc.Now()
	expired := map[string]bool{}
	for _, r := range h.runs {
		if e.s.expired(r, now) {
			expired[r.ID] = true
		}
	}
	var st CleanStats
	cost := e.cost(func() {
		var err error
		if st, err = e.s.Clean(ctx); err != nil {
			t.Fatal(err)
		}
	})
	t.Logf("clean: %d of %d runs expired, %d requests (%.1f per 1,000 expired)", st.Expired, n, cost, float64(cost)*1000/float64(st.Expired))
	if st.Expired != len(expired) {
		t.Errorf("Clean removed %d runs, want the %d expired", st.Expired, len(expired))
	}
	if per100 := float64(cost) * 100 / float64(st.Expired); per100 > 2.5 {
		t.Errorf("Clean cost %.2f requests per 100 expired runs, want at most 2.5", per100)
	}
	left := map[string]bool{}
	q := Query{Limit: MaxLimit}
	for {
		p, err := e.s.Query(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range p.Runs {
			left[r.ID] = true
		}
		if p.Continue == "" {
			break
		}
		q.Continue = p.Continue
	}
	wrong := 0
	for _, r := range h.runs {
		if left[r.ID] == expired[r.ID] && wrong < 10 {
			wrong++
			t.Errorf("%s (%s, finished %s): kept %v, expired %v", r.ID, r.State, r.Finished.Format(time.RFC3339), left[r.ID], expired[r.ID])
		}
	}
	if runs := e.verify(t); runs != n-len(expired) {
		t.Errorf("%d runs left in the table, want %d", runs, n-len(expired))
	}
	// Nothing expired is left for a second pass.
	if st, err := e.s.Clean(ctx); err != nil || st.Expired != 0 {
		t.Errorf("a second pass removed %d, %v", st.Expired, err)
	}
}

// A cleaner killed (SIGKILL) in the middle of its work leaves only whole
// runs: the table is consistent, nothing younger than the retention is
// gone, and the next pass removes the rest.
func TestCleanerKilledMidway(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 10,000 records and kills a process")
	}
	t.Parallel()
	base := time.Now().UTC().Truncate(time.Second)
	at := base.Add(72 * time.Hour) // with a 1-day retention most succeeded runs are expired
	o := Options{Clock: clock.NewFake(at), Retention: 24 * time.Hour, RetentionFailed: 72 * time.Hour}
	e, conn := privateEnv(t, o)
	h := history{base: base, runs: Sample(base, 10_000)}
	seed(t, e.s, h.runs)
	expired := map[string]bool{}
	for _, r := range h.runs {
		if e.s.expired(r, at) {
			expired[r.ID] = true
		}
	}

	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), "RUNS_CLEANER_CHILD="+strings.Join([]string{conn, e.s.Table(), at.Format(time.RFC3339Nano)}, "|"))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc2 := bufio.NewScanner(out)
	killed := false
	for sc2.Scan() {
		line := sc2.Text()
		if n, ok := strings.CutPrefix(line, "cleaned "); ok {
			if k, _ := strconv.Atoi(n); k >= 1000 && !killed {
				_ = cmd.Process.Kill() // SIGKILL on Unix
				killed = true
				t.Logf("killed the cleaner after it reported %d runs removed", k)
			}
		}
	}
	_ = cmd.Wait()
	if !killed {
		t.Fatal("the cleaner finished before it could be killed")
	}
	// Consistent, and nothing younger than its retention gone.
	remaining := e.verify(t)
	if remaining <= len(h.runs)-len(expired) {
		t.Fatalf("%d runs left after the kill: the cleaner was not stopped midway", remaining)
	}
	for _, r := range h.runs {
		if !expired[r.ID] {
			if _, err := e.s.Get(context.Background(), r.ID); err != nil {
				t.Fatalf("%s (not expired) is gone: %v", r.ID, err)
			}
		}
	}
	// Restarted, it finishes the job.
	st, err := e.s.Clean(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if got := e.verify(t); got != len(h.runs)-len(expired) {
		t.Fatalf("%d runs left after the second pass (which removed %d), want %d", got, st.Expired, len(h.runs)-len(expired))
	}
	t.Logf("kill midway: %d runs left, the second pass removed %d more; %d expired of %d in all", remaining, st.Expired, len(expired), len(h.runs))
}

// cleanerChild is the process TestCleanerKilledMidway kills (TestMain runs
// it instead of the tests when RUNS_CLEANER_CHILD is set): a Clean pass that
// reports its progress on stdout.
func cleanerChild(spec string) error {
	parts := strings.SplitN(spec, "|", 3)
	if len(parts) != 3 {
		return fmt.Errorf("RUNS_CLEANER_CHILD %q: want connection|table|time", spec)
	}
	at, err := time.Parse(time.RFC3339Nano, parts[2])
	if err != nil {
		return err
	}
	sc, err := storage.New(storage.Config{ConnectionString: parts[0]})
	if err != nil {
		return err
	}
	s, err := New(sc, Options{Table: parts[1], Clock: clock.NewFake(at), Retention: 24 * time.Hour, RetentionFailed: 72 * time.Hour})
	if err != nil {
		return err
	}
	var mu sync.Mutex
	total := 0
	s.onCleaned = func(n int) {
		mu.Lock()
		defer mu.Unlock()
		total += n
		fmt.Printf("cleaned %d\n", total)
	}
	_, err = s.Clean(context.Background())
	return err
}

// Retention removes exactly the runs past it — per class, to the second —
// and none younger, nor any live run however old.
func retentionBehaviour(t *testing.T, e env) {
	ctx := context.Background()
	now := e.now()
	var rs []Run
	var want []string
	add := func(id string, st State, finishedAgo time.Duration, expired bool) {
		r := newRun(id, st)
		r.Due = now.Add(-finishedAgo - time.Minute)
		r.Type = "t"
		if st.Finished() || st == Failed {
			r.Finished = now.Add(-finishedAgo)
		}
		rs = append(rs, r)
		if !expired {
			want = append(want, id)
		}
	}
	const h = time.Hour
	add("ok-young", Succeeded, 1*h-time.Second, false)
	add("ok-old", Succeeded, 1*h+time.Second, true)
	add("cancelled-young", Cancelled, 1*h-time.Second, false)
	add("cancelled-old", Cancelled, 1*h+time.Second, true)
	add("failed-young", Failed, 3*h-time.Second, false)
	add("failed-old", Failed, 3*h+time.Second, true)
	add("dead-young", Dead, 3*h-time.Second, false)
	add("dead-old", Dead, 3*h+time.Second, true)
	add("ok-between", Succeeded, 2*h, true)
	add("failed-between", Failed, 2*h, false)
	add("queued-ancient", Queued, 100*h, false)
	add("running-ancient", Running, 100*h, false)
	for i := 0; i < 200; i++ {
		add(fmt.Sprintf("bulk-%03d", i), Succeeded, 2*h+time.Duration(i)*time.Second, true)
		add(fmt.Sprintf("keep-%03d", i), Succeeded, 30*time.Minute, false)
	}
	seed(t, e.s, rs)
	if _, err := e.s.Get(ctx, "ok-old"); !errors.Is(err, ErrExpired) || !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get of an expired record before the cleaner ran: %v, want ErrExpired", err)
	}
	var st CleanStats
	cost := e.cost(func() {
		var err error
		if st, err = e.s.Clean(ctx); err != nil {
			t.Fatal(err)
		}
	})
	t.Logf("removed %d expired runs with %d requests", st.Expired, cost)
	if last, err := e.s.LastClean(ctx); err != nil || !last.Equal(stored(now)) {
		t.Errorf("LastClean = %v, %v; want %v", last, err, now)
	}
	if st.Expired != len(rs)-len(want) {
		t.Errorf("Clean removed %d, want %d", st.Expired, len(rs)-len(want))
	}
	// 5 classes × 4 partitions of reads, and 205 succeeded runs in
	// transactions of 50 per partition, plus the few others.
	if cost > 40 {
		t.Errorf("Clean cost %d requests, want at most 40", cost)
	}
	p, err := e.s.Query(ctx, Query{Limit: MaxLimit})
	if err != nil {
		t.Fatal(err)
	}
	got := ids(p.Runs)
	sort.Strings(got)
	sort.Strings(want)
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("left after Clean:\n%v\nwant\n%v", got, want)
	}
	if n := e.verify(t); n != len(want) {
		t.Errorf("%d runs in the table, want %d", n, len(want))
	}
	if _, err := e.s.Get(ctx, "ok-old"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get of a removed record: %v", err)
	}
}

func TestMemRetention(t *testing.T) {
	e := memEnv(t)
	e.s.o.Retention, e.s.o.RetentionFailed = time.Hour, 3*time.Hour
	retentionBehaviour(t, e)
}

func TestStoreRetention(t *testing.T) {
	t.Parallel()
	retentionBehaviour(t, azureEnv(t, Options{Clock: clock.NewFake(time.Now()), Retention: time.Hour, RetentionFailed: 3 * time.Hour}))
}
