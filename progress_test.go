package leasecron_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/leasecron/leasecron"
	"github.com/leasecron/leasecron/queue"
	"github.com/leasecron/leasecron/schedule"
	"github.com/leasecron/leasecron/trafficcop"
)

// TestProgressThroughTheWorker: a Go handler reports its progress 1,000
// times over 10 s; Status shows a report while it runs and the last one
// after it succeeded, and the worker's table writes while the handler ran
// were at most a few (one per worker.progress_every, 5 s, and the first at
// once), counted by the worker's own request counter.
func TestProgressThroughTheWorker(t *testing.T) {
	t.Parallel()
	st, names := testAccount(t)
	w, err := leasecron.NewWorker(leasecron.WorkerOptions{
		Storage: st, Names: names, InstanceID: "solo",
		Lease:    trafficcop.Timing{LeaseTiming: trafficcop.LeaseTiming{LeaseDuration: 15 * time.Second}, PollEvery: time.Second},
		Mover:    schedule.MoverSettings{PollEvery: 500 * time.Millisecond},
		Consumer: queue.ConsumerSettings{PollMax: 300 * time.Millisecond, CountersEvery: time.Hour},
	})
	if err != nil {
		t.Fatal(err)
	}
	type window struct {
		before, after leasecron.RequestCounts
		took          time.Duration
	}
	counted := make(chan window, 1)
	refused := make(chan error, 1)
	w.Handle("import", func(ctx context.Context, task leasecron.Task) error {
		refused <- leasecron.Progress(ctx, 120, "too far")
		// The mover confirms the run and retires the row the client sent
		// once a pass sees it, writes of its own: wait for them so that
		// the window counts progress writes alone.
		for st, _ := w.MoverStats(); st.Moved < 1; st, _ = w.MoverStats() {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			time.Sleep(20 * time.Millisecond)
		}
		before := w.Requests()
		start := time.Now()
		for i := range 1000 {
			if err := leasecron.Progress(ctx, i/10, fmt.Sprintf("copied %d of 1,000 files", i+1)); err != nil {
				return err
			}
			time.Sleep(time.Until(start.Add(time.Duration(i+1) * 10 * time.Millisecond)))
		}
		err := leasecron.Progress(ctx, 100, "copied 1,000 files")
		counted <- window{before, w.Requests(), time.Since(start)}
		return err
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	c, err := leasecron.NewClient(leasecron.ClientOptions{Storage: st, Names: names})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Schedule(ctx, leasecron.Item{ID: "imp", Type: "import", Due: time.Now()}, nil); err != nil {
		t.Fatal(err)
	}
	var seen leasecron.RunProgress
	for {
		s, err := c.Status(ctx, "imp")
		if err == nil && s.Run != nil && s.Run.State == leasecron.RunRunning && s.Run.Progress.Reported() {
			seen = s.Run.Progress
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("no progress seen while running (last %+v, %v)", s.Run, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if !strings.HasPrefix(seen.Message, "copied ") || seen.Percent > 100 {
		t.Errorf("progress while running: %+v", seen)
	}
	if err := <-refused; !errors.Is(err, leasecron.ErrInvalidProgress) || !strings.Contains(err.Error(), "120") {
		t.Errorf("Progress(120): %v, want ErrInvalidProgress naming 120", err)
	}
	win := <-counted
	var s leasecron.Status
	for {
		if s, err = c.Status(ctx, "imp"); err == nil && s.Run != nil && s.Run.State == leasecron.RunSucceeded {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("never succeeded: %+v, %v", s.Run, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if p := s.Run.Progress; p.Percent != 100 || p.Message != "copied 1,000 files" || p.At.IsZero() {
		t.Errorf("progress after success %+v, want the last report", p)
	}
	d := win.after.Sub(win.before)
	// A progress write is one transaction ("table batch"); nothing else
	// of this idle worker writes one (its counters wait an hour).
	// The first is written at once and each later one at least 5 s after
	// the one before: over 10 s (longer on a loaded machine) that is at
	// most 1 + took/5s, and at least two.
	writes := d.ByOp["table batch"]
	most := 1 + int64(win.took/queue.DefaultProgressEvery)
	t.Logf("while the handler reported 1,001 times over %s the worker made %d requests, %d of them transactions: %v", win.took, d.Total, writes, d.ByOp)
	if writes > most || writes < 2 {
		t.Errorf("%d transactions while the handler reported 1,001 times over %s, want 2 to %d (the first at once, then one per 5 s)", writes, win.took, most)
	}
	cancel()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
}
