package main

import (
	"cmp"
	"context"
	"fmt"
	"html"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"sync/atomic"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"

	"github.com/leasecron/leasecron"
	"github.com/leasecron/leasecron/blackboard"
	"github.com/leasecron/leasecron/dashboard"
	"github.com/leasecron/leasecron/internal/runs"
	"github.com/leasecron/leasecron/leasecrontype"
	"github.com/leasecron/leasecron/queue"
	"github.com/leasecron/leasecron/tools/bench/results"
)

// runDashboard is scenario 7: render every dashboard page in-process over
// an account holding many pending tasks and run records, timing the
// server and counting storage requests per page. Each render has a fresh
// handler, so nothing comes from the shared cache; a plain table query of
// 50 entities on the same Azurite is the baseline.
func runDashboard(ctx context.Context, b *bench) error {
	const name = "dashboard"
	srv, err := b.startAzurite(ctx, name)
	if err != nil {
		return err
	}
	defer srv.Stop()
	st := leasecron.Storage{ConnectionString: srv.ConnectionString()}
	c, err := leasecron.NewClient(leasecron.ClientOptions{Storage: st, Limits: map[string]int{"mail": 4}, Logger: quietLogger(name)})
	if err != nil {
		return err
	}
	res := results.Dashboard{Pending: b.s.dashPending, Series: b.s.dashPending / 100, Runs: b.s.dashRuns, DeadLetters: 40, Keys: 20, Reps: b.s.dashReps,
		RecentPerSeries: dashboard.RecentPerSeries, SeriesReadsAtOnce: dashboard.SeriesReadsAtOnce}

	// The account: pending tasks (1 in 100 a recurring series) ...
	t0 := time.Now()
	now := time.Now()
	types := []string{"mail", "report", "sync", "noop"}
	if err := parallel(ctx, res.Pending, 16, func(i int) error {
		it := leasecron.Item{ID: fmt.Sprintf("task-%06d", i), Type: types[i%len(types)], Due: now.Add(time.Hour + time.Duration(i)*time.Second), Payload: fmt.Sprintf(`{"n":%d}`, i)}
		if i%100 == 0 {
			it.ID, it.Recurrence = fmt.Sprintf("series-%04d", i/100), "@every 1h"
		}
		_, err := c.Schedule(ctx, it, nil)
		return err
	}); err != nil {
		return fmt.Errorf("schedule: %w", err)
	}
	b.logf(name, "%d pending tasks scheduled in %s", res.Pending, time.Since(t0).Round(time.Second))

	// ... run records in every state, occurrences of the series among them ...
	t0 = time.Now()
	sc, err := clients(srv, nil)
	if err != nil {
		return err
	}
	rs, err := runs.New(sc, runs.Options{Logger: quietLogger(name)})
	if err != nil {
		return err
	}
	missed, err := seedRuns(ctx, rs, res.Runs, res.Series, now)
	if err != nil {
		return err
	}
	b.logf(name, "%d run records written in %s (%d writes failed)", res.Runs, time.Since(t0).Round(time.Second), missed)

	// ... dead letters, blackboard keys and three workers' counters.
	qc, err := queue.NewClient(sc.Queue, queue.ClientOptions{Logger: quietLogger(name)})
	if err != nil {
		return err
	}
	for i := range res.DeadLetters {
		if err := qc.SetAside(ctx, envelopeText(i, now), "failed 5 of 5 attempts; last error: exit code 1"); err != nil {
			return err
		}
	}
	for i := range res.Keys {
		if err := c.AddBlackboardKey(ctx, blackboard.Entry{Key: fmt.Sprintf("city-%02d", i), Interval: time.Hour, Type: "cities"}, nil); err != nil {
			return err
		}
	}
	for i := range 3 {
		cs := runs.Counters{Instance: fmt.Sprintf("w%d", i+1), ByType: map[string]leasecrontype.Counts{"mail": {Handled: int64(1000 * (i + 1))}}}
		cs.Total = cs.ByType["mail"]
		if err := rs.FlushCounters(ctx, cs); err != nil {
			return err
		}
	}
	// A day of history for the latency pages: three workers' counters
	// rows for each of the last 24 hours' minutes (every minute busy, the
	// heaviest case), rolled up into hours.
	t0 = time.Now()
	var l runs.Latency
	for k := range 60 {
		l.Wait.Observe(time.Duration(k) * 20 * time.Millisecond)
		l.Run.Observe(time.Duration(k) * 150 * time.Millisecond)
	}
	var minutes []time.Time
	span := 24 * 60
	if res.Runs < 100_000 {
		span = 30 // a quick run (make test): half an hour
	}
	for m := span; m > 0; m-- {
		minutes = append(minutes, now.Add(-time.Duration(m)*time.Minute))
	}
	hist := runs.Counters{ByType: map[string]leasecrontype.Counts{}, Lat: map[string]runs.Latency{}}
	for _, typ := range types {
		hist.ByType[typ] = leasecrontype.Counts{Handled: 15, Failed: 1}
		hist.Lat[typ] = l
		hist.Total.Add(hist.ByType[typ])
	}
	if err := rs.SeedCounters(ctx, []string{"w1", "w2", "w3"}, minutes, hist); err != nil {
		return err
	}
	if err := rs.RollUp(ctx); err != nil {
		return err
	}
	b.logf(name, "%d counters rows of history written and rolled up in %s", 3*len(minutes), time.Since(t0).Round(time.Second))

	// The baseline: the least a page reads, one query of 50 entities.
	tc := sc.Table.NewClient(scheduleTable)
	var base []float64
	for range res.Reps {
		t := time.Now()
		pager := tc.NewListEntitiesPager(&aztables.ListEntitiesOptions{Filter: to.Ptr("PartitionKey eq '00'"), Top: to.Ptr[int32](50)})
		if _, err := pager.NextPage(ctx); err != nil {
			return err
		}
		base = append(base, ms(time.Since(t)))
	}
	res.BaselineMS = results.Median(base)

	// Deep pages: the 100th page of tasks and the 20th page of runs (fewer
	// in a quick run).
	deepTasks, err := follow(ctx, c, "/tasks", min(100, res.Pending/50/2))
	if err != nil {
		return err
	}
	deepRuns, err := follow(ctx, c, "/runs", min(20, res.Runs/50/2))
	if err != nil {
		return err
	}
	pages := []string{"/", "/tasks", "/tasks?type=report", deepTasks, fmt.Sprintf("/tasks/task-%06d", res.Pending/2+1), fmt.Sprintf("/tasks/series-%04d", res.Series/2),
		"/recurring", "/runs", "/runs?state=failed", "/runs?state=succeeded&type=mail", deepRuns,
		"/deadletters", "/blackboard", "/fleet", "/api/overview", "/api/runs",
		"/search?q=" + url.QueryEscape("id:task-0001*"), "/search?q=" + url.QueryEscape("type:mail state:succeeded"),
		"/search?q=" + url.QueryEscape(fmt.Sprintf("series:series-%04d", res.Series/2)), "/search?q=" + url.QueryEscape("type:report since:1h"),
		"/search?q=" + url.QueryEscape("state:scheduled type:sync"),
		"/latency", "/latency?range=6h", "/latency?range=24h", "/latency?range=24h&type=mail", "/latency?range=7d", "/audit", "/bulk"}
	pages = slices.Compact(pages)
	labels := map[string]string{deepTasks: fmt.Sprintf("/tasks, page %d", min(100, res.Pending/50/2)), deepRuns: fmt.Sprintf("/runs, page %d", min(20, res.Runs/50/2))}
	for _, p := range pages {
		row := results.DashboardPage{Path: p, Label: labels[p]}
		var times []float64
		for range res.Reps {
			h, err := dashboard.New(c, dashboard.Options{})
			if err != nil {
				return err
			}
			before := c.Requests()
			t := time.Now()
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequestWithContext(ctx, http.MethodGet, p, nil))
			times = append(times, ms(time.Since(t)))
			if rec.Code != http.StatusOK {
				return fmt.Errorf("GET %s: %d %s", p, rec.Code, rec.Body.String())
			}
			n := c.Requests().Sub(before)
			row.Requests, row.ByOp, row.Bytes = n.Total, n.ByOp, rec.Body.Len()
		}
		row.MS = results.Summarize(times)
		res.Pages = append(res.Pages, row)
		b.logf(name, "GET %-40s %3d requests, median %6.1f ms, max %6.1f ms", cmp.Or(row.Label, p), row.Requests, row.MS.P50, row.MS.Max)
	}

	// A second viewer within the cache TTL.
	h, err := dashboard.New(c, dashboard.Options{})
	if err != nil {
		return err
	}
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequestWithContext(ctx, http.MethodGet, "/", nil))
	var cachedTimes []float64
	for range res.Reps {
		t := time.Now()
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequestWithContext(ctx, http.MethodGet, "/", nil))
		cachedTimes = append(cachedTimes, ms(time.Since(t)))
	}
	res.CachedMS = results.Median(cachedTimes)
	return results.Write(b.out, results.DashboardFile, res)
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

var nextLink = regexp.MustCompile(`href="\?([^"]+)" id="next-page"`)

// follow walks a paged list n pages deep through its "next page" links and
// returns the URL of that page (or of the last, if there are fewer).
func follow(ctx context.Context, c *leasecron.Client, path string, n int) (string, error) {
	h, err := dashboard.New(c, dashboard.Options{})
	if err != nil {
		return "", err
	}
	cur := path
	for i := 1; i < n; i++ {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequestWithContext(ctx, http.MethodGet, cur, nil))
		m := nextLink.FindStringSubmatch(rec.Body.String())
		if m == nil {
			return cur, nil // fewer pages than n: the last one
		}
		q, err := url.ParseQuery(html.UnescapeString(m[1]))
		if err != nil {
			return "", err
		}
		cur = path + "?" + q.Encode()
	}
	return cur, nil
}

// seedRuns writes n run records: marked queued in batches (as the mover
// does), then one in twenty finished, mostly succeeded, some failed, dead
// or cancelled; the first ones are occurrences of the series. It returns
// how many writes failed (on a loaded machine Azurite can time out as the
// table grows; such a run stays as it was).
func seedRuns(ctx context.Context, rs *runs.Store, n, series int, now time.Time) (int, error) {
	states := []leasecrontype.RunState{leasecrontype.RunSucceeded, leasecrontype.RunSucceeded, leasecrontype.RunSucceeded, leasecrontype.RunFailed,
		leasecrontype.RunSucceeded, leasecrontype.RunDead, leasecrontype.RunSucceeded, leasecrontype.RunCancelled}
	types := []string{"mail", "report", "sync", "noop"}
	ids := make([]string, n)
	marks := make([]runs.Mark, n)
	for i := range n {
		due := now.Add(-time.Duration(n-i) * time.Second)
		ids[i] = fmt.Sprintf("run-%06d", i)
		if i < series*20 {
			ids[i] = fmt.Sprintf("series-%04d@%s", i%series, due.UTC().Format(time.RFC3339))
		}
		marks[i] = runs.Mark{ID: ids[i], Meta: runs.Meta{Type: types[i%len(types)], Due: due}}
		if i < series*20 {
			marks[i].Meta.Seq = int64(i/series + 1) // the mover numbers a series' occurrences
		}
	}
	const chunk = 500
	var missed atomic.Int64
	if err := parallel(ctx, (n+chunk-1)/chunk, 8, func(c int) error {
		part := marks[c*chunk : min((c+1)*chunk, n)]
		for _, ok := range rs.MarkQueued(ctx, part) {
			if !ok {
				missed.Add(1) // bookkeeping the store logged; the page sizes hardly change
			}
		}
		return nil
	}); err != nil {
		return 0, err
	}
	// Every occurrence claimed and finished as a worker does it (which
	// keeps each series' summary row), and one in twenty of the other
	// runs finished, so that every state has its pages.
	occ := min(n, series*20)
	err := parallel(ctx, occ, 16, func(i int) error {
		m := marks[i].Meta
		m.Queued = true
		if _, err := rs.Claim(ctx, ids[i], "bench-worker", 1, time.Now().Add(time.Minute), m); err != nil {
			if ctx.Err() == nil {
				missed.Add(1)
			}
			return nil
		}
		return finishAs(ctx, rs, ids[i], states[i%len(states)], &missed)
	})
	if err != nil {
		return 0, err
	}
	err = parallel(ctx, (n-occ)/20, 16, func(j int) error {
		return finishAs(ctx, rs, ids[occ+20*j], states[j%len(states)], &missed)
	})
	return int(missed.Load()), err
}

// finishAs records the end of run id in state st (failed with an error
// unless it succeeded), counting a write that failed in missed.
func finishAs(ctx context.Context, rs *runs.Store, id string, st leasecrontype.RunState, missed *atomic.Int64) error {
	var herr error
	if st != leasecrontype.RunSucceeded {
		herr = fmt.Errorf("exit code 1")
	}
	if err := rs.Finish(ctx, id, st, herr, ""); err != nil && ctx.Err() == nil {
		missed.Add(1) // a slow Azurite timing out: the run stays as it was
	}
	return nil
}
