package leasecron

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/leasecron/leasecron/internal/memstore"
	"github.com/leasecron/leasecron/queue"
)

// A unique window longer than run records are kept is refused, by
// Schedule and by ScheduleMany alike: the window counts from the end the
// task's record shows, and once the record is past its retention nothing
// holds the key (a review's find: a 30-day window let a second task in on
// day 8, the default runs.retention being 7 days). Without run records the
// window counts from the schedule and is kept on the guard: no limit but
// MaxUniqueFor.
func TestAUniqueWindowLongerThanRetentionIsRefused(t *testing.T) {
	ctx := context.Background()
	c := memClient(t)
	month := Unique{Key: "user-42", For: 30 * 24 * time.Hour}
	_, err := c.Schedule(ctx, Item{Type: "welcome", Due: time.Now()}, &ScheduleOptions{Unique: &month})
	if !errors.Is(err, ErrInvalidTask) || !strings.Contains(err.Error(), "unique window 720h0m0s") || !strings.Contains(err.Error(), "runs.retention 168h0m0s") {
		t.Fatalf("a 30-day window with a 7-day retention: %v; want ErrInvalidTask naming the window and the retention", err)
	}
	// ScheduleMany checks each unique item before it writes anything: the
	// plain item beside the refused one is not written either.
	res, _ := c.ScheduleMany(ctx, []Item{{ID: "plain", Type: "welcome", Due: time.Now()}, {ID: "keyed", Type: "welcome", Due: time.Now()}},
		ScheduleManyOptions{Unique: []*Unique{nil, &month}})
	if len(res) != 2 || !errors.Is(res[1].Err, ErrInvalidTask) || !strings.Contains(res[1].Err.Error(), "longer than the records of succeeded runs are kept") || res[0].Err == nil {
		t.Fatalf("ScheduleMany of a plain item and a 30-day window: %+v; want the keyed item refused and neither written", res)
	}
	if _, err := c.Status(ctx, "plain"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("the plain item of a refused batch: %v; want it not written", err)
	}
	// Dead runs are kept 30 days: a window counting only them may be as
	// long; a month and a day is not.
	deadOnly := Unique{Key: "user-43", For: 30 * 24 * time.Hour, States: []RunState{RunScheduled, RunQueued, RunRunning, RunDead}}
	if _, err := c.Schedule(ctx, Item{Type: "welcome", Due: time.Now()}, &ScheduleOptions{Unique: &deadOnly}); err != nil {
		t.Fatalf("a 30-day window counting dead runs only: %v", err)
	}
	deadOnly.For += 24 * time.Hour
	if _, err := c.Schedule(ctx, Item{Type: "welcome", Due: time.Now()}, &ScheduleOptions{Unique: &deadOnly}); !errors.Is(err, ErrInvalidTask) || !strings.Contains(err.Error(), "runs.retention_failed 720h0m0s") {
		t.Fatalf("a 31-day window counting dead runs: %v; want it refused naming runs.retention_failed", err)
	}
	// Cancelled runs are kept runs.retention: a window counting them is
	// bounded by it even when it leaves out succeeded.
	cancelledToo := Unique{Key: "user-45", For: 30 * 24 * time.Hour, States: []RunState{RunScheduled, RunQueued, RunRunning, RunDead, RunCancelled}}
	if _, err := c.Schedule(ctx, Item{Type: "welcome", Due: time.Now()}, &ScheduleOptions{Unique: &cancelledToo}); !errors.Is(err, ErrInvalidTask) || !strings.Contains(err.Error(), "records of cancelled runs") {
		t.Fatalf("a 30-day window counting cancelled runs: %v; want it refused naming them", err)
	}
	week := Unique{Key: "user-44", For: 7 * 24 * time.Hour}
	if _, err := c.Schedule(ctx, Item{Type: "welcome", Due: time.Now()}, &ScheduleOptions{Unique: &week}); err != nil {
		t.Fatalf("a window as long as the retention: %v", err)
	}

	ms := memstore.New(memstore.Options{})
	off, err := NewClient(ClientOptions{Storage: Storage{ConnectionString: ms.ConnectionString(), Transport: ms.Transport()}, NoRuns: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := off.Schedule(ctx, Item{Type: "welcome", Due: time.Now()}, &ScheduleOptions{Unique: &month}); err != nil {
		t.Fatalf("a 30-day window without run records: %v", err)
	}
}

// A worker refuses run retentions shorter than its longest retry delay: a
// record cleaned while its task waits for a retry would let the retry run
// a cancelled task, release its --after children as cancelled and free its
// unique key (a review's find, with runs.retention_failed 1m against the
// default 10m retry.backoff_max).
func TestAWorkerRefusesRetentionShorterThanItsRetries(t *testing.T) {
	ms := memstore.New(memstore.Options{})
	st := Storage{ConnectionString: ms.ConnectionString(), Transport: ms.Transport()}
	for _, tc := range []struct {
		name    string
		runs    RunsOptions
		backoff time.Duration
		noRuns  bool
		want    string // "" when accepted
	}{
		{"failed under the default backoff", RunsOptions{RetentionFailed: time.Minute}, 0, false, "RunsOptions.RetentionFailed = 1m0s: want at least Consumer.BackoffMax (10m0s"},
		{"succeeded under the backoff", RunsOptions{Retention: 5 * time.Minute}, 6 * time.Minute, false, "RunsOptions.Retention = 5m0s: want at least Consumer.BackoffMax (6m0s"},
		{"a backoff within them", RunsOptions{Retention: time.Minute, RetentionFailed: time.Minute}, 30 * time.Second, false, ""},
		{"the defaults", RunsOptions{}, 0, false, ""},
		{"no run records", RunsOptions{Retention: time.Minute, RetentionFailed: time.Minute}, 0, true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewWorker(WorkerOptions{Storage: st, InstanceID: "w1", Runs: tc.runs, NoRuns: tc.noRuns,
				Consumer: queue.ConsumerSettings{BackoffMax: tc.backoff}})
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != "" && (!errors.Is(err, ErrInvalidOptions) || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("got %v; want ErrInvalidOptions containing %q", err, tc.want)
			}
		})
	}
}
