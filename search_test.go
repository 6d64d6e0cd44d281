package leasecron_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/leasecron/leasecron"
)

func TestParseSearch(t *testing.T) {
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		in   string
		want leasecron.SearchQuery
		bad  string // a word the refusal names
	}{
		{in: "job-1", want: leasecron.SearchQuery{ID: "job-1"}},
		{in: "id:job-*", want: leasecron.SearchQuery{ID: "job-", IDPrefix: true}},
		{in: "id:nightly@2026-11-26T02:00:00Z", want: leasecron.SearchQuery{ID: "nightly@2026-11-26T02:00:00Z"}},
		{in: "type:mail state:dead since:2h", want: leasecron.SearchQuery{Run: leasecron.RunQuery{Type: "mail", State: leasecron.RunDead, Since: now.Add(-2 * time.Hour)}}},
		{in: "series:nightly since:2026-11-01T00:00:00Z", want: leasecron.SearchQuery{Run: leasecron.RunQuery{Series: "nightly", Since: time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)}}},
		{in: "state:scheduled", want: leasecron.SearchQuery{Run: leasecron.RunQuery{State: leasecron.RunScheduled}}},
		{in: "", bad: "empty search"},
		{in: "colour:red", bad: `"colour"`},
		{in: "state:done", bad: `"done"`},
		{in: "type:Mail!", bad: `"type:Mail!"`},
		{in: "since:yesterday", bad: "since:yesterday"},
		{in: "id:a/b", bad: `"id:a/b"`},
		{in: "type:", bad: "no value"},
		{in: "job-1 type:mail", bad: "id: goes alone"},
	} {
		got, err := leasecron.ParseSearch(c.in, now)
		if c.bad != "" {
			if !errors.Is(err, leasecron.ErrInvalidRunQuery) || !strings.Contains(err.Error(), c.bad) {
				t.Errorf("ParseSearch(%q) = %+v, %v; want ErrInvalidRunQuery naming %s", c.in, got, err, c.bad)
			}
			continue
		}
		if err != nil || got.ID != c.want.ID || got.IDPrefix != c.want.IDPrefix || got.Run.Type != c.want.Run.Type ||
			got.Run.State != c.want.Run.State || got.Run.Series != c.want.Run.Series || !got.Run.Since.Equal(c.want.Run.Since) {
			t.Errorf("ParseSearch(%q) = %+v, %v; want %+v", c.in, got, err, c.want)
		}
	}
}

// Search on Azurite: an exact id finds its task, an id prefix the pending
// tasks and the run records that start with it (in at most 5 requests),
// and filters page through the runs.
func TestSearchOnAzurite(t *testing.T) {
	t.Parallel()
	st, names := testAccount(t)
	cl, err := leasecron.NewClient(leasecron.ClientOptions{Storage: st, Names: names})
	if err != nil {
		t.Fatal(err)
	}
	w, err := leasecron.NewWorker(leasecron.WorkerOptions{Storage: st, Names: names, InstanceID: "searcher"})
	if err != nil {
		t.Fatal(err)
	}
	w.Handle("mail", func(context.Context, leasecron.Task) error { return nil })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	for _, id := range []string{"inv-1", "inv-2"} {
		if _, err := cl.Schedule(ctx, leasecron.Item{ID: id, Type: "mail", Due: time.Now()}, nil); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []string{"inv-3", "other"} {
		if _, err := cl.Schedule(ctx, leasecron.Item{ID: id, Type: "mail", Due: time.Now().Add(time.Hour)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []string{"inv-1", "inv-2"} {
		for {
			s, err := cl.Status(ctx, id)
			if err == nil && s.Run != nil && s.Run.State == leasecron.RunSucceeded {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("%s never ran", id)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	cancel()
	<-done

	ctx = context.Background()
	search := func(q string) leasecron.SearchResult {
		t.Helper()
		sq, err := leasecron.ParseSearch(q, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		res, err := cl.Search(ctx, sq)
		if err != nil {
			t.Fatalf("search %q: %v", q, err)
		}
		return res
	}
	ids := func(res leasecron.SearchResult) string {
		var s []string
		for _, r := range res.Runs {
			s = append(s, r.ID+":"+string(r.State))
		}
		return strings.Join(s, ",")
	}
	if res := search("inv-3"); res.Exact == nil || res.Exact.Pending == nil || res.Exact.ID != "inv-3" {
		t.Errorf("exact id: %+v", res)
	}
	before := cl.Requests()
	res := search("id:inv-*")
	cost := cl.Requests().Sub(before)
	if got := ids(res); got != "inv-3:scheduled,inv-2:succeeded,inv-1:succeeded" && got != "inv-3:scheduled,inv-1:succeeded,inv-2:succeeded" {
		t.Errorf("id:inv-* found %s", got)
	}
	t.Logf("id prefix search: %d requests %v", cost.Total, cost.ByOp)
	if cost.Total > 6 {
		t.Errorf("an id prefix search cost %d requests, want at most 6 (5 queries and a point read of the one pending task)", cost.Total)
	}
	for _, r := range res.Runs {
		if r.Type != "mail" {
			t.Errorf("id:inv-* shows %s with type %q, want mail (a pending task's row is read for it)", r.ID, r.Type)
		}
	}
	if got := ids(search("type:mail state:succeeded")); !strings.Contains(got, "inv-1:succeeded") || strings.Contains(got, "scheduled") {
		t.Errorf("type:mail state:succeeded found %s", got)
	}
	if got := ids(search("state:scheduled")); !strings.Contains(got, "inv-3:scheduled") || !strings.Contains(got, "other:scheduled") {
		t.Errorf("state:scheduled found %s", got)
	}
	if _, err := cl.Search(ctx, leasecron.SearchQuery{ID: "nosuch"}); !errors.Is(err, leasecron.ErrNotFound) {
		t.Errorf("an unknown id: %v, want ErrNotFound", err)
	}
}
