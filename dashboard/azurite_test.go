package dashboard_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/leasecron/leasecron"
	"github.com/leasecron/leasecron/azurite/azuritetest"
	"github.com/leasecron/leasecron/blackboard"
	"github.com/leasecron/leasecron/dashboard"
	"github.com/leasecron/leasecron/internal/runs"
)

func TestMain(m *testing.M) { azuritetest.Main(m) }

func testAccount(t *testing.T) (leasecron.Storage, leasecron.Names) {
	t.Helper()
	srv := azuritetest.Shared(t)
	return leasecron.Storage{ConnectionString: srv.ConnectionString()}, leasecron.Names{
		ScheduleTable: azuritetest.Name(t, "s"), RunsTable: azuritetest.Name(t, "r"), BlackboardTable: azuritetest.Name(t, "b"),
		Queue: azuritetest.Name(t, "q"), PoisonQueue: azuritetest.Name(t, "p"), Container: azuritetest.Name(t, "c"),
	}
}

// TestDashboardOnAzurite renders every page over a real account and
// counts the storage requests each costs: the figures the README quotes.
// A second view within the cache TTL costs none.
func TestDashboardOnAzurite(t *testing.T) {
	t.Parallel()
	st, names := testAccount(t)
	c, err := leasecron.NewClient(leasecron.ClientOptions{Storage: st, Names: names, Limits: map[string]int{"mail": 2}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	xss := `<img src=x onerror=alert(1)>`
	for _, it := range []leasecron.Item{
		{ID: "one", Type: "mail", Due: time.Now().Add(time.Hour), Payload: xss},
		{ID: "two", Type: "report", Due: time.Now().Add(2 * time.Hour)},
		{ID: "series", Type: "report", Due: time.Now().Add(time.Hour), Recurrence: "@every 1h"},
	} {
		if _, err := c.Schedule(ctx, it, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.AddBlackboardKey(ctx, blackboard.Entry{Key: "city", Interval: time.Hour, Type: "cities"}, nil); err != nil {
		t.Fatal(err)
	}
	get := func(h http.Handler, path string) (int, string) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
		b, _ := io.ReadAll(rec.Result().Body)
		return rec.Code, string(b)
	}
	// The queues exist in a running fleet's account (workers create them);
	// a first view creates them here, and is not counted.
	warm, _ := dashboard.New(c, dashboard.Options{})
	get(warm, "/")
	for _, c2 := range []struct {
		path, want string
		max        int64
		// windows are the spans of minute rows the page reads, a query
		// per UTC day partition each (see runs.ExtraDayPartitions).
		windows []time.Duration
	}{
		{"/", `id="queue-depth"`, 16, []time.Duration{time.Hour, time.Hour, 24 * time.Hour}}, // … + the day's counters (the per-instance hourly roll-ups, then a query per day partition of the minute rows since), the presence listing, the minute rows of the last hour twice (the latency charts', the throughput chart's: so in the first hour of a UTC day two queries more, which the bound missed: it failed from 00:00 to 01:00), the queues section (the queue listing and a count per work queue, one here; its consumers come from a second presence listing)
		{"/tasks", `data-id="one"`, 3, nil},
		{"/tasks?type=report", `data-id="two"`, 3, nil},
		{"/tasks/one", `id="payload"`, 3, nil},
		{"/tasks/series", `id="task-state"`, 4, nil},
		{"/recurring", `data-id="series"`, 3, nil}, // a series that never ran: no summary row, so its records are queried
		{"/runs", `id="runs"`, 20, nil},
		{"/deadletters", `id="dead-total"`, 3, nil},
		{"/blackboard", `data-key="city"`, 2, nil},
		{"/fleet", `id="slots-table"`, 7, []time.Duration{24 * time.Hour}}, // the counters: the per-instance hourly roll-ups, then the minute rows since (a query per day partition)
		{"/audit", `id="audit-table"`, 1, nil},
	} {
		t.Run(c2.path, func(t *testing.T) {
			h, err := dashboard.New(c, dashboard.Options{})
			if err != nil {
				t.Fatal(err)
			}
			before, began := c.Requests(), time.Now()
			code, body := get(h, c2.path)
			n := c.Requests().Sub(before)
			limit := c2.max + int64(max(runs.ExtraDayPartitions(began, c2.windows...), runs.ExtraDayPartitions(time.Now(), c2.windows...)))
			if code != 200 || !strings.Contains(body, c2.want) {
				t.Fatalf("GET %s: %d, no %s\n%s", c2.path, code, c2.want, body)
			}
			if strings.Contains(body, "<img") {
				t.Errorf("GET %s: the payload reached the page as markup", c2.path)
			}
			t.Logf("GET %-20s %2d storage requests %v", c2.path, n.Total, n.ByOp)
			if n.Total > limit {
				t.Errorf("GET %s cost %d storage requests, want at most %d", c2.path, n.Total, limit)
			}
			before = c.Requests()
			get(h, c2.path)
			if again := c.Requests().Sub(before); again.Total != 0 {
				t.Errorf("GET %s again within the cache TTL cost %d requests, want 0", c2.path, again.Total)
			}
		})
	}
}

// A worker's dashboard is refused without an admin address, or on one
// other machines reach without auth.
func TestForWorkerNeedsASafeAdminAddress(t *testing.T) {
	for _, c := range []struct {
		addr string
		o    dashboard.Options
		want string
	}{
		{"", dashboard.Options{}, "needs the worker's AdminAddr"},
		{":8080", dashboard.Options{}, "not loopback"},
		{"0.0.0.0:8080", dashboard.Options{ReadOnly: true}, "not loopback"},
		{":8080", dashboard.Options{Auth: "secret"}, "basic:USER:PASSWORD"},
	} {
		t.Run(c.addr, func(t *testing.T) {
			_, err := dashboard.ForWorker(c.addr, c.o)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("AdminAddr %q %+v: %v, want an error about %q", c.addr, c.o, err, c.want)
			}
		})
	}
	for _, ok := range []dashboard.Options{{Auth: "bearer:t"}, {ReadOnly: true, AllowAnonymous: true}} {
		if _, err := dashboard.ForWorker(":8080", ok); err != nil {
			t.Errorf("%+v: %v", ok, err)
		}
	}
}
