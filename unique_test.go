package leasecron_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/leasecron/leasecron"
)

// Unique tasks on Azurite, through a worker that runs them: a key is held
// while its task is pending and for the window after it succeeded (not a
// moment less), by a series for as long as it lasts, and not by a
// cancelled task; a state left out of Unique.States frees the key.
func TestUniqueTasksHoldTheirKeys(t *testing.T) {
	t.Parallel()
	st, names := testAccount(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := leasecron.NewClient(leasecron.ClientOptions{Storage: st, Names: names})
	if err != nil {
		t.Fatal(err)
	}
	const window = 3 * time.Second
	sched := func(key string, u leasecron.Unique, it leasecron.Item) (leasecron.Item, error) {
		t.Helper()
		u.Key = key
		if it.Type == "" {
			it.Type = "u"
		}
		if it.Due.IsZero() {
			it.Due = time.Now()
		}
		return c.Schedule(ctx, it, &leasecron.ScheduleOptions{Unique: &u})
	}
	dupOf := func(what string, it leasecron.Item, err error, holder string) {
		t.Helper()
		var de *leasecron.DuplicateError
		if !errors.Is(err, leasecron.ErrDuplicate) || !errors.As(err, &de) || de.ID != holder || it.ID != holder {
			t.Fatalf("%s: %+v, %v; want a duplicate of %s", what, it, err, holder)
		}
	}
	// Pending (due in an hour): held.
	later, err := sched("later", leasecron.Unique{For: window}, leasecron.Item{Due: time.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	it, err := sched("later", leasecron.Unique{For: window}, leasecron.Item{})
	dupOf("a second task while the first is pending", it, err, later.ID)
	// Cancelled: free.
	if _, err := c.Cancel(ctx, later.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := sched("later", leasecron.Unique{For: window}, leasecron.Item{Due: time.Now().Add(time.Hour)}); err != nil {
		t.Fatalf("after the holder was cancelled: %v", err)
	}
	// A series holds its key for as long as it lasts.
	series, err := sched("series", leasecron.Unique{}, leasecron.Item{ID: "tick", Recurrence: "@every 1h", Due: time.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	it, err = sched("series", leasecron.Unique{}, leasecron.Item{ID: "tock", Recurrence: "@every 1h", Due: time.Now().Add(time.Hour)})
	dupOf("a second series", it, err, series.ID)

	// A batch: plain items as a batch, unique ones each on its own; the
	// second item with a key already taken in the batch is its duplicate.
	inHour := time.Now().Add(time.Hour)
	batch := []leasecron.Item{{ID: "plain", Type: "u", Due: inHour}, {Type: "u", Due: inHour}, {Type: "u", Due: inHour}, {Type: "u", Due: inHour}}
	res, err := c.ScheduleMany(ctx, batch, leasecron.ScheduleManyOptions{Unique: []*leasecron.Unique{nil, {Key: "batch"}, {Key: "batch"}, {Key: "series"}}})
	if err != nil || res[0].Err != nil || res[1].Err != nil {
		t.Fatalf("batch: %v %+v", err, res)
	}
	dupOf("the second of a batch with one key", res[2].Item, res[2].Err, res[1].Item.ID)
	dupOf("a batch item whose key a series holds", res[3].Item, res[3].Err, series.ID)
	if _, err := c.ScheduleMany(ctx, batch, leasecron.ScheduleManyOptions{Unique: []*leasecron.Unique{nil}}); !errors.Is(err, leasecron.ErrInvalidTask) {
		t.Fatalf("a Unique slice shorter than the items: %v", err)
	}
	res, err = c.ScheduleMany(ctx, []leasecron.Item{{ID: "plain-2", Type: "u", Due: inHour}, {Type: "u", Due: inHour}}, leasecron.ScheduleManyOptions{Unique: []*leasecron.Unique{nil, {Key: "bad/key"}}})
	if err == nil || !errors.Is(res[1].Err, leasecron.ErrInvalidTask) || res[0].Err == nil {
		t.Fatalf("a batch with a bad key: %v %+v; want nothing written", err, res)
	}
	if _, err := c.Status(ctx, "plain-2"); !errors.Is(err, leasecron.ErrNotFound) {
		t.Fatalf("plain-2 was written although the batch was refused: %v", err)
	}

	// Run tasks: "now" holds its key for the window after it succeeded;
	// "quick" only while not succeeded.
	now, err := sched("now", leasecron.Unique{For: window}, leasecron.Item{})
	if err != nil {
		t.Fatal(err)
	}
	quick, err := sched("quick", leasecron.Unique{States: []leasecron.RunState{leasecron.RunScheduled, leasecron.RunQueued, leasecron.RunRunning}}, leasecron.Item{})
	if err != nil {
		t.Fatal(err)
	}
	w := quickWorker(t, st, names)
	var mu sync.Mutex
	ran := map[string]int{}
	w.Handle("u", func(_ context.Context, task leasecron.Task) error {
		mu.Lock()
		ran[task.ID]++
		mu.Unlock()
		return nil
	})
	defer runWorker(ctx, t, w)()
	finished := func(id string) time.Time {
		t.Helper()
		for {
			s, err := c.Status(ctx, id)
			if err == nil && s.Run != nil && s.Run.State == leasecron.RunSucceeded {
				return s.Run.Finished
			}
			if ctx.Err() != nil {
				t.Fatalf("%s never succeeded: %+v %v", id, s, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	fin := finished(now.ID)
	finished(quick.ID)
	// "quick" no longer holds its key once it succeeded.
	if _, err := sched("quick", leasecron.Unique{}, leasecron.Item{Due: time.Now().Add(time.Hour)}); err != nil {
		t.Fatalf("after the holder succeeded, with succeeded not counting: %v", err)
	}
	// "now" holds its key until the window after it succeeded has passed,
	// and not a moment less.
	for {
		it, err := sched("now", leasecron.Unique{For: window}, leasecron.Item{Due: time.Now().Add(time.Hour)})
		at := time.Now()
		if err == nil {
			if at.Before(fin.Add(window)) {
				t.Fatalf("a new task took the key at %s, before the window after %s had passed", at.Format(time.StampMilli), fin.Format(time.StampMilli))
			}
			break
		}
		dupOf("within the window", it, err, now.ID)
		if ctx.Err() != nil {
			t.Fatal("the key was never freed")
		}
		time.Sleep(200 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	if ran[now.ID] != 1 || ran[quick.ID] != 1 {
		t.Errorf("ran %v; want each unique task once", ran)
	}
}
