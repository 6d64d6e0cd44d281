package main

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/leasecron/leasecron/azurite"
	"github.com/leasecron/leasecron/internal/clock"
	"github.com/leasecron/leasecron/internal/runs"
	"github.com/leasecron/leasecron/internal/storage"
	"github.com/leasecron/leasecron/tools/bench/results"
)

// runHistory is the run-history scenario: a Runs table of b.s.historyRuns
// records (runs.Sample: eight days of mostly succeeded runs with some of
// every other state and a series), written with table transactions; then
// the listings `leasecron runs` and the dashboard make, a lookup by id,
// and one cleaner pass with the default retentions, each counted in
// storage requests. Azurite keeps this table in memory.
func runHistory(ctx context.Context, b *bench) error {
	const name = "history"
	srv, err := azurite.Start(ctx, azurite.Options{InMemory: true})
	if err != nil {
		return fmt.Errorf("start azurite: %w", err)
	}
	defer srv.Stop()
	cnt := storage.NewCounter()
	sc, err := clients(srv, cnt)
	if err != nil {
		return err
	}
	base := time.Now().UTC().Truncate(time.Second)
	s, err := runs.New(sc, runs.Options{Clock: clock.NewFake(base.Add(time.Minute)), Logger: quietLogger(name)})
	if err != nil {
		return err
	}
	n := b.s.historyRuns
	rs := runs.Sample(base, n)
	b.logf(name, "writing %d run records", n)
	t0 := time.Now()
	if w, err := s.Import(ctx, rs); err != nil || w != n {
		return fmt.Errorf("import: %d of %d written: %w", w, n, err)
	}
	res := results.History{Runs: n, SeedSeconds: time.Since(t0).Seconds(), RetentionDays: 7, FailedRetention: 30}
	b.logf(name, "written in %s", time.Since(t0).Round(time.Second))

	is := func(st runs.State) func(runs.Run) bool { return func(r runs.Run) bool { return r.State == st } }
	all := func(runs.Run) bool { return true }
	failed := runs.Newest(rs, 100, is(runs.Failed))
	var cont string
	for _, q := range []struct {
		what string
		q    runs.Query
		want []string
	}{
		{"newest 50 failed (`runs --state failed`)", runs.Query{State: runs.Failed}, failed[:50]},
		{"next 50 failed (`--continue`)", runs.Query{State: runs.Failed}, failed[50:]},
		{"the running ones (`runs --state running --limit 1000`)", runs.Query{State: runs.Running, Limit: 1000}, runs.Newest(rs, 1000, is(runs.Running))},
		{"a series' newest 50 (`runs --series nightly`)", runs.Query{Series: "nightly"}, runs.Newest(rs, 50, func(r runs.Run) bool { return r.Series == "nightly" })},
		{"newest 50 of any state (`runs`)", runs.Query{}, runs.Newest(rs, 50, all)},
		{"newest 50 succeeded (`runs --state succeeded`)", runs.Query{State: runs.Succeeded}, runs.Newest(rs, 50, is(runs.Succeeded))},
		{"newest 50 of one type (`runs --type sync`)", runs.Query{Type: "sync"}, runs.Newest(rs, 50, func(r runs.Run) bool { return r.Type == "sync" })},
	} {
		if q.what == "next 50 failed (`--continue`)" {
			q.q.Continue = cont
		}
		before := cnt.Total()
		p, err := s.Query(ctx, q.q)
		if err != nil {
			return fmt.Errorf("%s: %w", q.what, err)
		}
		cont = p.Continue
		got := make([]string, len(p.Runs))
		for i, r := range p.Runs {
			got[i] = r.ID
		}
		hq := results.HistoryQuery{What: q.what, Rows: len(p.Runs), Requests: cnt.Total() - before, Right: slices.Equal(got, q.want)}
		res.Queries = append(res.Queries, hq)
		b.logf(name, "%s: %d rows, %d requests, right %v", q.what, hq.Rows, hq.Requests, hq.Right)
	}
	before := cnt.Total()
	r, err := s.Get(ctx, failed[0])
	if err != nil {
		return err
	}
	res.Queries = append(res.Queries, results.HistoryQuery{What: "one run by id (`status ID`)", Rows: 1, Requests: cnt.Total() - before, Right: r.ID == failed[0]})

	now := base.Add(time.Minute)
	want := 0
	for _, r := range rs {
		if s.Expired(r, now) {
			want++
		}
	}
	cnt.Reset()
	t0 = time.Now()
	st, err := s.Clean(ctx)
	if err != nil {
		return err
	}
	res.CleanSeconds = time.Since(t0).Seconds()
	res.Expired, res.CleanRequests, res.CleanByOp = st.Expired, cnt.Total(), byOp(cnt)
	if st.Expired != want {
		return fmt.Errorf("the cleaner removed %d records, %d were expired", st.Expired, want)
	}
	b.logf(name, "clean: %d expired records removed with %d requests (%.1f per 1,000) in %s", st.Expired, res.CleanRequests,
		float64(res.CleanRequests)*1000/float64(max(1, st.Expired)), time.Duration(res.CleanSeconds*float64(time.Second)).Round(time.Second))
	return results.Write(b.out, results.HistoryFile, res)
}
