package leasecron_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/leasecron/leasecron"
	"github.com/leasecron/leasecron/queue"
	"github.com/leasecron/leasecron/schedule"
	"github.com/leasecron/leasecron/trafficcop"
)

// A worker times every attempt; its counters rows carry the histograms,
// and Client.Latency reads them back as percentiles per type and step.
func TestLatencyThroughAWorker(t *testing.T) {
	t.Parallel()
	st, names := testAccount(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	w, err := leasecron.NewWorker(leasecron.WorkerOptions{
		Storage: st, Names: names, InstanceID: "timed",
		Lease:    trafficcop.Timing{LeaseTiming: trafficcop.LeaseTiming{LeaseDuration: 15 * time.Second}, PollEvery: 500 * time.Millisecond},
		Mover:    schedule.MoverSettings{PollEvery: 200 * time.Millisecond},
		Consumer: queue.ConsumerSettings{PollMax: 200 * time.Millisecond, Concurrency: 10, CountersEvery: 200 * time.Millisecond},
	})
	if err != nil {
		t.Fatal(err)
	}
	w.Handle("slow", func(ctx context.Context, task leasecron.Task) error {
		time.Sleep(120 * time.Millisecond)
		return nil
	})
	w.Handle("fast", func(ctx context.Context, task leasecron.Task) error { return nil })
	done := make(chan struct{})
	go func() { defer close(done); _ = w.Run(ctx) }()
	defer func() { cancel(); <-done }()
	c, err := leasecron.NewClient(leasecron.ClientOptions{Storage: st, Names: names})
	if err != nil {
		t.Fatal(err)
	}
	var items []leasecron.Item
	for i := range 10 {
		items = append(items, leasecron.Item{ID: fmt.Sprint("slow-", i), Type: "slow", Due: time.Now()},
			leasecron.Item{ID: fmt.Sprint("fast-", i), Type: "fast", Due: time.Now()})
	}
	if _, err := c.ScheduleMany(ctx, items, leasecron.ScheduleManyOptions{}); err != nil {
		t.Fatal(err)
	}
	var rep leasecron.LatencyReport
	for {
		// A run is timed when its handler returns and counted once its
		// outcome is recorded: the two can reach the counters a flush apart.
		rep, err = c.Latency(ctx, time.Hour, "slow")
		if err == nil && rep.Total.Run.Count == 10 && rep.Total.Succeeded == 10 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the slow runs never showed: %+v %v", rep.Total, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if p := rep.Total.Run.P50; p <= 0.1 || p > 0.25 {
		t.Errorf("slow run p50 %.3fs, want within its bucket (0.1s, 0.25s]", p)
	}
	if rep.Total.Succeeded != 10 || rep.Total.Wait.Count != 10 || len(rep.Points) != 61 {
		t.Errorf("slow over the hour: %+v, %d points; want 10 succeeded, 10 waits timed, 61 points", rep.Total, len(rep.Points))
	}
	all, err := c.Latency(ctx, time.Hour, "")
	for err == nil && all.Total.Run.Count < 20 && ctx.Err() == nil {
		time.Sleep(200 * time.Millisecond)
		all, err = c.Latency(ctx, time.Hour, "")
	}
	if err != nil || all.Total.Run.Count != 20 || len(all.Types) != 2 || all.Types[0].Type != "fast" || all.Types[1].Run.P50 <= 0.1 {
		t.Errorf("every type: %+v %v", all, err)
	}
	day, err := c.Latency(ctx, 24*time.Hour, "slow")
	if err != nil || day.Total.Run.Count != 10 || day.Step != time.Hour || len(day.Points) != 25 {
		t.Errorf("24 hours (minute rows, nothing rolled up yet): %+v, %d points, %v", day.Total, len(day.Points), err)
	}
	week, err := c.Latency(ctx, 7*24*time.Hour, "slow")
	if err != nil || week.Total.Run.Count != 10 || week.Step != 2*time.Hour {
		t.Errorf("7 days (minute rows, nothing rolled up yet): %+v %v", week.Total, err)
	}
	if _, err := c.Latency(ctx, 2*time.Hour, ""); !errors.Is(err, leasecron.ErrInvalidRunQuery) {
		t.Errorf("a 2h range: %v, want ErrInvalidRunQuery", err)
	}
}
