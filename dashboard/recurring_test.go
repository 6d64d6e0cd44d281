package dashboard_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasecron/leasecron"
	"github.com/leasecron/leasecron/dashboard"
	"github.com/leasecron/leasecron/queue"
	"github.com/leasecron/leasecron/schedule"
	"github.com/leasecron/leasecron/trafficcop"
)

// TestRecurringSummaryThroughAWorker runs a series through an in-process
// worker and checks that /recurring shows its latest occurrences from the
// series' summary row — one point read besides the page of series — and
// that they agree with the run records themselves.
func TestRecurringSummaryThroughAWorker(t *testing.T) {
	t.Parallel()
	st, names := testAccount(t)
	w, err := leasecron.NewWorker(leasecron.WorkerOptions{
		Storage: st, Names: names, InstanceID: "summary",
		Lease:    trafficcop.Timing{LeaseTiming: trafficcop.LeaseTiming{LeaseDuration: 15 * time.Second}, PollEvery: time.Second},
		Mover:    schedule.MoverSettings{PollEvery: 300 * time.Millisecond},
		Consumer: queue.ConsumerSettings{PollMax: 200 * time.Millisecond, Concurrency: 2, MaxAttempts: 1},
	})
	if err != nil {
		t.Fatal(err)
	}
	var n atomic.Int64
	w.Handle("tick", func(ctx context.Context, task leasecron.Task) error {
		if n.Add(1)%3 == 0 {
			return errors.New("every third tick fails")
		}
		return nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	wctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	c, err := leasecron.NewClient(leasecron.ClientOptions{Storage: st, Names: names})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Schedule(ctx, leasecron.Item{ID: "beat", Type: "tick", Due: time.Now(), Recurrence: "@every 1s"}, nil); err != nil {
		t.Fatal(err)
	}
	for n.Load() < 8 {
		if ctx.Err() != nil {
			t.Fatalf("the series ran %d times", n.Load())
		}
		time.Sleep(100 * time.Millisecond)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	records, err := c.Runs(ctx, leasecron.RunQuery{Series: "beat", Limit: 5})
	if err != nil || len(records.Runs) != 5 {
		t.Fatalf("run records of beat: %+v, %v", records, err)
	}

	h, err := dashboard.New(c, dashboard.Options{})
	if err != nil {
		t.Fatal(err)
	}
	before := c.Requests()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/api/recurring", nil))
	body, _ := io.ReadAll(rec.Result().Body)
	// (And the shard map, which a client reads at most every 10 s while
	// there is none.)
	if n := c.Requests().Sub(before); n.Total < 2 || n.Total > 3 || n.ByOp["table get-entity"] != 1 {
		t.Errorf("/api/recurring cost %d requests %v; want the page of series and one point read (and maybe the shard map)", n.Total, n.ByOp)
	}
	var page struct {
		Series []struct {
			ID     string `json:"id"`
			Recent []struct {
				ID        string `json:"id"`
				State     string `json:"state"`
				LastError string `json:"last_error"`
			} `json:"recent_occurrences"`
		} `json:"series"`
	}
	if err := json.Unmarshal(body, &page); err != nil || len(page.Series) != 1 || page.Series[0].ID != "beat" {
		t.Fatalf("/api/recurring: %v\n%s", err, body)
	}
	shown := page.Series[0].Recent
	if len(shown) != len(records.Runs) {
		t.Fatalf("/api/recurring shows %d occurrences, the records hold %d:\n%s", len(shown), len(records.Runs), body)
	}
	dead := 0
	for i, r := range records.Runs {
		// The newest five, by id and state, in the same order.
		if shown[i].ID != r.ID || shown[i].State != string(r.State) {
			t.Errorf("occurrence %d: shown %s %s, recorded %s %s", i, shown[i].ID, shown[i].State, r.ID, r.State)
		}
		if r.State == leasecron.RunDead {
			dead++
			if !strings.Contains(shown[i].LastError, "every third tick fails") {
				t.Errorf("%s: error %q not shown", r.ID, shown[i].LastError)
			}
		}
	}
	if dead == 0 {
		t.Errorf("no dead occurrence among the newest five:\n%s", body)
	}
}
